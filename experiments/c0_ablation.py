"""C0 at query time: the same trained head reading its C0 from BM25, nothing, its own first pass, dense MiniLM, the
gold chunk, or BM25's top 5 (:data:`C0_SOURCES`), on NQ dev and the first 100 New-Wiki test questions::

    python -m experiments c0-ablation --head precomputed/heads/smollm2-135m-mix-adapter/head.json \\
        --out experiments/records/c0_ablation/c0_ablation.json

Record: ``c0_ablation.json``. Reported in docs/RESULTS.md, "What was tried and not adopted" (history:
experiments/HISTORY.md, "Query adapter and natural questions"). Not adopted: BM25's top |C0| (the paper's, shipped)
is the best C0 a search has; only the gold chunk does better.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from unreal_demo.core.cpu import status_line
from unreal_demo.core.joint_training import TextSet
from unreal_demo.core.minilm import embed
from unreal_demo.core.state_training import cache_layer_groups, recall_from_scores, scores
from unreal_demo.settings import cache_dir
from unreal_demo.training.judged import open_sets
from unreal_demo.training.sets import bm25_within, pool_of, positions

from .common import dense_vectors, run_main

RECORDS = ("c0_ablation.json",)

C0_SOURCES = ("BM25 top-|C0| (the paper's; shipped)", "none (|C0| = 0)", "the head's own first pass, top-|C0|",
              "dense MiniLM top-|C0| (a second model)", "gold chunk + BM25 top-1 (upper bound)", "BM25 top-5")


def c0_ablation(head, backbone, index, sets: list[TextSet], usable: list[torch.Tensor], folder,
                log=print) -> list[dict]:
    """R@1 / R@10 of ``head`` on each set with C0 taken from each of :data:`C0_SOURCES` at query time (same
    trained weights; ``usable[i]`` marks set i's candidate chunks). Query states are cached per source."""
    chunks = index.chunks
    keys = pool_of(index)[0]
    rows = []
    for s, mask in zip(sets, usable, strict=True):
        keys_s = keys[mask]
        remap = positions(mask)
        positives = [[int(remap[i]) for i in p if remap[i] >= 0] for p in s.positives]
        local = [i for i in range(len(chunks)) if mask[i]]
        bm_top = bm25_within(index, s.texts, mask).topk(5, dim=1).indices.tolist()
        n = head.config.n_context

        def texts(rows_: list[list[int]], k: int) -> list[list[str]]:
            return [[chunks[j]["text"] for j in r[:k]] for r in rows_]

        none = head.reshaped(n_context=0)
        g0 = cache_layer_groups(none, backbone, s.texts, [[] for _ in s.texts], folder)
        first = scores(none, g0, keys_s).topk(n, dim=1).indices.tolist()
        dn = embed(s.texts) @ dense_vectors(index).T
        dn[:, ~mask] = float("-inf")
        contexts = {
            C0_SOURCES[0]: (head, texts(bm_top, n)),
            C0_SOURCES[2]: (head, texts([[local[j] for j in r] for r in first], n)),
            C0_SOURCES[3]: (head, texts(dn.topk(n, dim=1).indices.tolist(), n)),
            C0_SOURCES[4]: (head, [[chunks[p[0]]["text"], *[chunks[j]["text"] for j in r if j not in p][:n - 1]]
                                   for p, r in zip(s.positives, bm_top, strict=True)]),
            C0_SOURCES[5]: (head.reshaped(n_context=5), texts(bm_top, 5)),
        }
        results = {C0_SOURCES[1]: recall_from_scores(scores(none, g0, keys_s), positives)}
        for name, (h, ctx) in contexts.items():
            g = cache_layer_groups(h, backbone, s.texts, ctx, folder)
            results[name] = recall_from_scores(scores(h, g, keys_s), positives)
            log(s.name, name, results[name])
        rows += [{"set": s.name, "questions": len(s.texts), "C0": name} | results[name] for name in C0_SOURCES]
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments c0-ablation --head H [--out FILE]``."""
    p = argparse.ArgumentParser(prog="python -m experiments c0-ablation", description=__doc__.split("\n")[0])
    p.add_argument("--head", required=True, help="the trained head")
    p.add_argument("--test", type=int, default=100, help="New-Wiki test questions (the first of the sample)")
    p.add_argument("--out", default=None, help="write the result JSON here")

    def handle(args: argparse.Namespace) -> None:
        explorer, head, index, (_, devs, test) = open_sets(args.head, None, "cleaner", "dpr")
        usable = pool_of(index)[1]
        nq = next(d for d in devs if d.name == "nq")
        first = TextSet("new_wiki", test.texts[: args.test], test.contexts[: args.test], test.positives[: args.test])
        rows = c0_ablation(head, explorer.backbone, index, [nq, first],
                           [usable, torch.ones(len(index.chunks), dtype=torch.bool)], cache_dir() / "query_states")
        result = {"command": f"c0_ablation(head, backbone, index, [NQ dev ({len(nq.texts)}), New-Wiki test (first "
                             f"{args.test})], ...), head {args.head}", "cpu": status_line(), "rows": rows}
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        print(json.dumps(rows, ensure_ascii=False))

    return run_main(p, handle, argv)
