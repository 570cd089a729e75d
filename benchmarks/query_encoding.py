"""Query-side cost (Eqs. 2-3): milliseconds per query of the head's forward for each head setting, in one run.

    python benchmarks/query_encoding.py [--queries 160] [--batch 16] [--threads 2] [--repeats 2]

The query side is one pass of x_ret = [sink, P?, C0 (|C0| passages cut to 64 tokens), question, ρ (R tokens)]
through all L blocks, then α-weighted read-out and G-group pooling. Its cost depends on |C0|, R and P only
(the trained values of ρ, α, P do not change it), so every setting is timed with a fresh head of that
shape on the same held-out New-Wiki questions, their C0 taken by BM25 from the New-Wiki paragraphs (as the
app does). The shipped head is timed too, as a check that a fresh head of its shape costs the same. Prints
ms per query (best of ``--repeats`` passes) and each setting's ratio to the shipped setting; the issue's
target is ≤ 2× the shipped head's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch

from unreal_demo.core.backbone import load_backbone
from unreal_demo.core.cpu import status_line
from unreal_demo.core.head import QueryHead, untrained_head
from unreal_demo.data.sources import load_squad
from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.unreal import contexts, query_vectors
from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL
from unreal_demo.store.memory import MemoryStore

SETTINGS = {  # name → head overrides; the first is the shipped head's shape
    "|C0| = 2, R = 32, no P (shipped)": {},
    "|C0| = 0": {"n_context": 0},
    "|C0| = 5": {"n_context": 5},
    "soft prompt P on": {"use_prompt": True},
    "R = 64": {"n_ret": 64},
    "|C0| = 5, P on": {"n_context": 5, "use_prompt": True},
    "query adapter r = 64": {"adapter_rank": 64},
    "query adapter, full d × d": {"adapter_rank": -1},  # -1: the model's hidden size
}
ADAPTER_HEAD = "precomputed/heads/smollm2-135m-mix-adapter/head"  # the adapter head that ships (not the default)


def ms_per_query(head: QueryHead, backbone, questions: list[str], store: MemoryStore, bm25_ids: torch.Tensor,
                 batch: int, repeats: int) -> float:
    """Best-of-``repeats`` wall milliseconds per query of the project's query path (:func:`query_vectors`,
    C0 from :func:`contexts`), ``batch`` queries at a time."""
    explorer = Explorer(backbone, head, None)  # eval mode, no gradients
    context = contexts(store, bm25_ids, head.config.n_context)
    query_vectors(explorer, questions[:batch], context[:batch], batch)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        query_vectors(explorer, questions, context, batch)
        best = min(best, time.perf_counter() - t0)
    return best / len(questions) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=160)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", default="benchmarks/results/bench_query_encoding.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backbone = load_backbone(args.model)
    passages, questions = load_squad("new_wiki")
    picked = random.Random(0).sample(questions, min(args.queries, len(questions)))
    texts = [q.text for q in picked]
    store = MemoryStore([p.text for p in passages])
    _, bm25_ids = store.bm25_topk(texts, max(s.get("n_context", 0) for s in SETTINGS.values()))  # (Q, 5)
    shipped = QueryHead.load(DEFAULT_HEADS[DEFAULT_MODEL])
    base = {k: getattr(shipped.config, k) for k in ("chunk_layer", "n_pool", "n_ret", "n_groups", "n_context",
                                                      "context_tokens", "use_prompt")}
    rows = [{"setting": "shipped head (trained weights)", "overrides": {},
             "ms_per_query": ms_per_query(shipped, backbone, texts, store, bm25_ids, args.batch, args.repeats)}]
    for name, overrides in SETTINGS.items():
        if overrides.get("adapter_rank") == -1:
            overrides = overrides | {"adapter_rank": backbone.hidden_size}
        head = untrained_head(backbone, **(base | overrides))
        rows.append({"setting": name, "overrides": overrides, "ms_per_query":
                     ms_per_query(head, backbone, texts, store, bm25_ids, args.batch, args.repeats)})
    adapter = QueryHead.load(ADAPTER_HEAD)
    rows.append({"setting": "adapter head r = 64 (trained weights)", "overrides": {"adapter_rank": 64},
                 "ms_per_query": ms_per_query(adapter, backbone, texts, store, bm25_ids, args.batch, args.repeats)})
    ref = rows[1]["ms_per_query"]
    for r in rows:
        r["ms_per_query"] = round(r["ms_per_query"], 1)
        r["ratio_to_shipped"] = round(r["ms_per_query"] / ref, 2)
        print(f"{r['setting']:<36} {r['ms_per_query']:7.1f} ms/query  {r['ratio_to_shipped']:.2f}x")
    result = {"command": f"python benchmarks/query_encoding.py --queries {len(texts)} --batch {args.batch} "
                         f"--threads {args.threads} --repeats {args.repeats}",
              "model": backbone.name, "device": str(backbone.device), "threads": args.threads,
              "queries": len(texts), "batch": args.batch, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "cpu": status_line(), "load_average_1min": os.getloadavg()[0], "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
