"""The token channel (``sparse``, the sibling paper's token matching) done right: centred token states, and a
fusion with the pooled cosine chosen on a dev split so that the fused channel is never below the channel alone.

Commands::

    # 1. dev: raw and centred sparse scores, alone and fused with the pooled cosine (α grid and RRF)
    python -m experiments token-channel fit --dev 300
    # 1b. the same on another backbone, its head's ℓc, and each variant on the seed-0 test draw of 1,000 (paired)
    python -m experiments token-channel fit --dev 300 --test 1000 --model qwen2.5-0.5b \\
        --head precomputed/heads/qwen2.5-0.5b/head.json
    # 1c. out of domain: alone against fused at the backbone's α on the seed-0 draw of 1,000 Amazon questions
    python -m experiments token-channel amazon --test 1000 \\
        --head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json
    # 2. test: the product's eval on the seed-0 draw, before (a worktree of the commit before the change) and after
    python -m unreal_demo eval retrieval --corpus new_wiki --sample 200 --out before.json   # in the worktree
    python -m unreal_demo eval retrieval --corpus new_wiki --sample 200 --methods sparse,bm25 --out after.json
    python -m experiments token-channel compare before.json after.json --commits BEFORE AFTER

Records (:data:`RECORDS`, ``experiments/records/token_channel/``): ``fusion_dev.json`` (the dev fit: R@1 / R@10 /
MRR@10 of each variant, the α chosen), ``fusion_dev_<model>.json`` (1b: the same for another backbone, with the test
draw's rows and the fused channel paired against the channel alone) and ``new_wiki_200.json`` (each method's row
before and after, and :func:`common.paired` of sparse after against sparse before at
k = 1 and 10, with McNemar's p). Reported in docs/RESULTS.md, "How well does it retrieve".

The dev split is New-Wiki questions outside every seed-0 draw the evaluations make (200, 500, 1,000 and 2,000
questions), searched over the same 1,581 paragraphs: the corpus is shared, the questions are not. μ is the mean of
the stored (normalised) token states of that corpus (``MemoryStore.token_mean``); query and stored token states are
centred on it and normalised again (:func:`unreal_demo.retrieval.sparse.centred`).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from unreal_demo.data.sources import load_squad
from unreal_demo.errors import UserError
from unreal_demo.evaluation.results import provenance
from unreal_demo.evaluation.retrieval import corpus_store, gold_ranks, held_out, metrics, sample_questions, top
from unreal_demo.retrieval import sparse
from unreal_demo.settings import DEFAULT_MODEL

from .common import paired, run_main

FOLDER = Path(__file__).resolve().parent / "records" / "token_channel"
RECORDS = ("fusion_dev.json", "new_wiki_200.json", "fusion_dev_qwen2.5-0.5b.json",
           "fusion_dev_smollm2-135m-instruct.json", "amazon_smollm2-135m-instruct.json")
DRAWS = (200, 500, 1000, 2000)  # seed-0 draws of the evaluations: kept out of the dev split
ALPHAS = [i / 20 for i in range(21)]
RRF_K = 60


def dev_questions(n: int, seed: int = 1) -> tuple[list, list]:
    """The New-Wiki paragraphs and ``n`` of its questions outside every seed-0 draw of :data:`DRAWS`."""
    new_wiki, questions = load_squad("new_wiki")
    held = {q.id for d in DRAWS for q in sample_questions(d, 0)[1]}
    rest = [q for q in questions if q.id not in held]
    return new_wiki, random.Random(seed).sample(rest, min(n, len(rest)))


def rrf(*scores: torch.Tensor, k: int = RRF_K) -> torch.Tensor:
    """Reciprocal-rank fusion ``Σ 1 / (k + rank)`` of score matrices ``(Q, M)`` (rank 1 = best).

    >>> rrf(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[1.0, 3.0, 2.0]]), k=0).tolist()
    [[1.3333333730697632, 1.5, 0.8333333730697632]]
    """
    out = torch.zeros_like(scores[0])
    for s in scores:
        ranks = torch.empty_like(s, dtype=torch.long)
        ranks.scatter_(1, s.argsort(1, descending=True), torch.arange(1, s.shape[1] + 1).expand_as(s).contiguous())
        out += 1.0 / (k + ranks.float())
    return out


def row(scores: torch.Tensor, gold: list[set[int]]) -> dict:
    m = metrics(top(scores, 100), gold)
    return {k: m[k] for k in ("R@1", "R@10", "MRR@10")}


def local_scores(store, qt: list[torch.Tensor], mean: torch.Tensor | None) -> torch.Tensor:
    """Sparse scores ``(Q, M)`` of query token states ``qt`` over ``store``, centred on ``mean`` (None: raw)."""
    return torch.cat([sparse.sparse_scores(qt[s : s + sparse.QUERY_BATCH], store.token_parts, mean=mean)
                      for s in range(0, len(qt), sparse.QUERY_BATCH)])


def held_out_rows(store, explorer, n: int, alpha: float, corpus: str = "new_wiki", source: str = "dev") -> dict:
    """The centred channel alone, fused at ``alpha`` (from ``source``: this fit's dev split, or the backbone's
    shipped weight) and, where it differs, at SmolLM2's α on the seed-0 draw of ``n`` ``corpus`` questions (the draw
    ``eval retrieval --corpus CORPUS --sample n`` scores; ``store`` holds that corpus), and fused against alone
    question by question."""
    _, qs, gold = held_out(n, 0, corpus)
    qt = sparse.query_token_states(explorer.backbone, [q.text for q in qs], explorer.head.config.chunk_layer)
    local, pooled = local_scores(store, qt, store.token_mean()), sparse.pooled_scores(qt, store.chunk_means())
    variants = {"alone": local, f"fused, α = {alpha} ({source})": sparse.fuse(local, pooled, alpha)}
    if alpha != sparse.ALPHA:
        variants[f"fused, α = {sparse.ALPHA} (SmolLM2's, which every model used before)"] = \
            sparse.fuse(local, pooled, sparse.ALPHA)
    ranks = {name: gold_ranks(top(v, 100), gold) for name, v in variants.items()}
    return {"questions": len(qs), "rows": {name: row(v, gold) for name, v in variants.items()},
            "paired_vs_alone": {name: {f"R@{k}": paired(r, ranks["alone"], k) for k in (1, 10)}
                                for name, r in ranks.items() if name != "alone"}}


def fit(dev: int, model: str | None = None, head: str | None = None, test: int = 0) -> dict:
    """The dev fit (:data:`RECORDS` ``fusion_dev.json``; ``fusion_dev_<model>.json`` for another backbone) and,
    with ``test``, the test draw's rows (:func:`held_out_rows`)."""
    from unreal_demo.pipeline import Explorer

    t0 = time.time()
    explorer = Explorer.load(model or DEFAULT_MODEL, head=head, require_head=True)
    corpus, qs = dev_questions(dev)
    where = {p.id: i for i, p in enumerate(corpus)}
    gold = [{where[q.passage_id]} for q in qs]
    store = corpus_store([p.text for p in corpus], explorer, keep_tokens=True)
    layer = explorer.head.config.chunk_layer
    qt = sparse.query_token_states(explorer.backbone, [q.text for q in qs], layer)
    pooled = sparse.pooled_scores(qt, store.chunk_means())
    mean = store.token_mean()
    rows, best = {"pooled cosine alone": row(pooled, gold)}, {}
    for name, mu in (("raw", None), ("centred", mean)):
        local = local_scores(store, qt, mu)
        grid = {a: row(sparse.fuse(local, pooled, a), gold) for a in ALPHAS}
        rows[f"{name} alone"] = grid[0.0]
        rows[f"{name} + pooled, α = 0.5 (shipped)"] = grid[0.5]
        rows[f"{name} + pooled, RRF (k = {RRF_K})"] = row(rrf(local, pooled), gold)
        rows[f"{name} α grid"] = {str(a): r for a, r in grid.items()}
        alpha = max(ALPHAS, key=lambda a: (grid[a]["MRR@10"], -a))  # ties: the smaller weight
        best[name] = {"alpha": alpha} | grid[alpha]
        print(name, "alone", grid[0.0], "α=0.5", grid[0.5], "best", best[name], flush=True)
    return {"what": "sparse token matching on a dev split: raw and centred token states, alone and fused with the "
                    "pooled cosine by (1 − α)·sparse + α·pooled over an α grid of 0.05 and by RRF; α chosen by "
                    "MRR@10 (ties to the smaller α)",
            "dev": f"{len(qs)} New-Wiki questions (seed 1) outside the seed-0 draws of {list(DRAWS)}, over the "
                   f"{len(corpus):,} New-Wiki paragraphs",
            "command": f"python -m experiments token-channel fit --dev {dev}"
                       + (f" --test {test} --model {model} --head {head}" if model else ""),
            "head": explorer.head_source, "chunk_layer": layer, "k": sparse.K,
            "rows": rows, "best": best,
            **({"test": held_out_rows(store, explorer, test, best["centred"]["alpha"])} if test else {}),
            "seconds": round(time.time() - t0, 1), "provenance": provenance(explorer)}


def amazon(n: int, model: str | None = None, head: str | None = None) -> dict:
    """:func:`held_out_rows` on the seed-0 draw of ``n`` Amazon questions over the 2,050 reviews (out of domain, no
    dev split there), at the backbone's shipped α (:func:`unreal_demo.retrieval.sparse.alpha_for`)."""
    from unreal_demo.pipeline import Explorer

    t0 = time.time()
    explorer = Explorer.load(model or DEFAULT_MODEL, head=head, require_head=True)
    corpus, _, _ = held_out(n, 0, "amazon")
    store = corpus_store([p.text for p in corpus], explorer, keep_tokens=True)
    alpha = sparse.alpha_for(explorer.backbone.name)
    return {"what": "the centred token channel alone against fused with the pooled cosine, Amazon (out of domain)",
            "command": f"python -m experiments token-channel amazon --test {n}"
                       + (f" --model {model}" if model else "") + (f" --head {head}" if head else ""),
            "head": explorer.head_source, "alpha": alpha,
            "test": held_out_rows(store, explorer, n, alpha, "amazon", "shipped"),
            "seconds": round(time.time() - t0, 1), "provenance": provenance(explorer)}


def compare(before: dict, after: dict, commits: list[str]) -> dict:
    """Each method's row before and after, and sparse after against before question by question."""
    if before["questions"] != after["questions"]:
        raise UserError("the two records hold different questions")
    rows = {r["key"]: {"before": {k: r[k] for k in ("R@1", "R@10", "MRR@10")}} for r in before["table"]}
    for r in after["table"]:
        rows.setdefault(r["key"], {})["after"] = {k: r[k] for k in ("R@1", "R@10", "MRR@10")}
    tests = {m: {f"R@{k}": paired(after["ranks"][m], before["ranks"][m], k) for k in (1, 10)}
             for m in after["ranks"] if m in before["ranks"]}
    return {"what": "eval retrieval --corpus new_wiki --sample 200, before (every corpus method) and after (sparse, "
                    "bm25) the centred token channel; paired: a = after, b = before (a_only: questions only the "
                    "centred channel finds within k), McNemar's exact p",
            "setting": after["setting"], "commits": commits, "rows": rows, "paired_after_vs_before": tests,
            "labels": {"before": [r["method"] for r in before["table"]],
                       "after": [r["method"] for r in after["table"]]}}


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments token-channel fit [--dev N]`` or ``… compare BEFORE AFTER [--commits A B]``."""
    p = argparse.ArgumentParser(prog="python -m experiments token-channel", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("fit", "amazon", "compare"))
    p.add_argument("files", nargs="*", help="compare: the eval retrieval records before and after")
    p.add_argument("--dev", type=int, default=300, help="fit: dev questions")
    p.add_argument("--test", type=int, default=0, help="fit: also score the seed-0 draw of N questions")
    p.add_argument("--model", default=None, help="fit: another backbone (its record is fusion_dev_<model>.json)")
    p.add_argument("--head", default=None, help="fit: that backbone's head")
    p.add_argument("--commits", nargs=2, default=None, help="compare: the commits of the two runs")
    p.add_argument("--out", default=None, help="the record (default: its name in RECORDS under the folder)")

    def handle(args: argparse.Namespace) -> None:
        FOLDER.mkdir(parents=True, exist_ok=True)
        if args.action == "fit":
            result = fit(args.dev, args.model, args.head, args.test)
            name = f"fusion_dev_{args.model}.json" if args.model else RECORDS[0]
        elif args.action == "amazon":
            result = amazon(args.test or 1000, args.model, args.head)
            name = f"amazon_{args.model or DEFAULT_MODEL}.json"
        else:
            if len(args.files) != 2:
                raise UserError("compare takes two eval retrieval records: before and after")
            before, after = (json.loads(Path(f).read_text()) for f in args.files)
            result, name = compare(before, after, args.commits or []), RECORDS[1]
        out = Path(args.out) if args.out else FOLDER / name
        out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out}")

    return run_main(p, handle, argv)
