"""Keys centred on the index's mean vector, decided on a fresh dev set no grid run has seen.

The adapter grid (:mod:`experiments.adapter_grid`) found centring within the dev sets' noise (dev mean R@1 0.376 against
0.369 for the shipped head) but the largest New-Wiki test gain of any row (R@10 0.850 → 0.882), which is a
reason to ask a fresh dev set, not to pick on the test set. This check draws new dev questions — TriviaQA
questions of the dev split (by question hash) outside the grid's dev sample, SQuAD v1.1 questions of the dev
articles outside its dev sample; NQ-open has none left (all 198 dev questions with a positive are in the
grid) — caches their query states with the shipped head (C0 as the grid has it), and scores the shipped head
and every finished grid variant of the same |C0| on raw and on centred keys, over the same usable chunks.

    python -m experiments centring-check --head precomputed/heads/smollm2-135m-mix/head.json \
        --out experiments/records/centring_check/centring_check.json

Record: ``centring_check.json``. Reported in docs/RESULTS.md, "What was tried and not adopted" (history:
experiments/HISTORY.md, "Query adapter and natural questions"). Not adopted: it pushes answers out of the top 10.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict

from unreal_demo.core.cpu import status_line
from unreal_demo.core.joint_training import TextSet
from unreal_demo.core.state_training import StateSet, recall
from unreal_demo.data.natural import distant_positives, load_natural, question_split
from unreal_demo.data.sources import article_split
from unreal_demo.evaluation.results import write_result
from unreal_demo.pipeline import Explorer
from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL, cache_dir, display_path
from unreal_demo.store.index import Index, shipped_folder
from unreal_demo.training.sets import (
    NATURAL_SETS,
    bm25_contexts,
    cache_sets,
    cached_sets,
    chunks_by_passage,
    local,
    pool_of,
    usable_pool,
)

from .common import bm25_recall, centred_keys, dense_recall, grid_heads, run_main, variants_folder

RECORDS = ("centring_check.json",)
FRESH_CAP = {"tqa": 400, "squad": 300}  # fresh dev questions per set (seeded sample of those left)
SEED = 1  # the grid's sets were drawn with seed 0


def fresh_sets(index, n_context: int, used: list[TextSet]) -> list[TextSet]:
    """Dev-side questions of TriviaQA and SQuAD that are not in ``used`` (the grid's dev sets), with C0 and
    positives built exactly as :func:`unreal_demo.training.sets.build_sets` builds them."""
    pool, texts, bm25 = usable_pool(index)
    seen = {t for s in used for t in s.texts}
    rng = random.Random(SEED)

    def c0(queries: list[str]) -> list[list[str]]:
        return bm25_contexts(bm25, texts, queries, n_context)

    qs = [q for q in question_split(load_natural(NATURAL_SETS["tqa"]))[1] if q.text not in seen]
    pos = distant_positives(qs, texts, bm25, depth=100, rule="dpr")
    kept = [(q, [pool[j] for j in p]) for q, p in zip(qs, pos, strict=True) if p]
    kept = rng.sample(kept, min(FRESH_CAP["tqa"], len(kept)))
    out = [TextSet("tqa", [q.text for q, _ in kept], c0([q.text for q, _ in kept]), [p for _, p in kept])]
    by_passage = chunks_by_passage(index.chunks)
    squad = [q for q in article_split("squad_dev")[1][1] if q.text not in seen and q.passage_id in by_passage]
    squad = rng.sample(squad, min(FRESH_CAP["squad"], len(squad)))
    qtexts = [q.text for q in squad]
    out.append(TextSet("squad", qtexts, c0(qtexts), [by_passage[q.passage_id] for q in squad]))
    return out


def run(head_path: str, out: str | None = None) -> dict:
    """The check end to end (see the module docstring); the result is written to ``out``."""
    explorer = Explorer.load(head=head_path, require_head=True)
    head = explorer.head
    index = Index(shipped_folder(explorer))
    n = head.config.n_context
    _, devs, _ = cached_sets(index, n, cache_dir() / "adapter_sets")
    path = cache_dir() / "adapter_sets" / f"fresh-c{n}-{SEED}-{FRESH_CAP['tqa']}-{FRESH_CAP['squad']}.json"
    if path.exists():
        fresh = [TextSet(**s) for s in json.loads(path.read_text())]
    else:
        fresh = fresh_sets(index, n, devs)
        path.write_text(json.dumps([asdict(s) for s in fresh]))
    states = cache_sets(head, explorer.backbone, fresh, cache_dir() / "query_states")
    keys, usable, _ = pool_of(index)
    centred = centred_keys(index)[0]
    sets: list[StateSet] = local(states, usable)

    def row(label: str, model, centre: bool) -> dict:
        k = (centred if centre else keys)[usable]
        r = {"variant": label, "keys": "centred" if centre else "raw", "parameters": model.n_params()}
        for s in sets:
            r |= {f"fresh {s.name} {m}": v for m, v in recall(model, s, k).items()}
        r["fresh mean R@1"] = round(sum(r[f"fresh {s.name} R@1"] for s in sets) / len(sets), 4)
        r["fresh mean R@10"] = round(sum(r[f"fresh {s.name} R@10"] for s in sets) / len(sets), 4)
        print(r)
        return r

    rows = [row("shipped head (no adapter)", head, False), row("shipped head (no adapter)", head, True)]
    for label, model, centre in grid_heads(variants_folder(), n):
        rows.append(row(label, model, centre))
    reference = []
    for name, fn in {"BM25": bm25_recall, "dense MiniLM": dense_recall}.items():
        r = {"variant": name}
        for s in fresh:
            r |= {f"fresh {s.name} {m}": v for m, v in fn(index, s, usable).items()}
        reference.append(r)
    result = {"head": display_path(head_path), "n_context": n, "seed": SEED,
              "sets": {s.name: len(s.texts) for s in fresh}, "rows": rows, "reference": reference,
              "cpu": status_line()}
    return write_result(result, out, explorer)


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments centring-check [--head H] [--out FILE]``."""
    p = argparse.ArgumentParser(prog="python -m experiments centring-check", description=__doc__.split("\n")[0])
    p.add_argument("--head", default=str(DEFAULT_HEADS[DEFAULT_MODEL].with_suffix(".json")), help="the head to check")
    p.add_argument("--out", default=None, help="write the result JSON here")

    def handle(args: argparse.Namespace) -> None:
        result = run(args.head, args.out)
        for row in result["rows"] + result["reference"]:
            print(f"{row['variant']} ({row.get('keys', '')}): "
                  + ", ".join(f"{k} {v}" for k, v in row.items() if "R@" in k))

    return run_main(p, handle, argv)
