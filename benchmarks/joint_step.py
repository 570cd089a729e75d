"""One joint fine-tune step (ρ, α and the adapter through the frozen LLM) with and without the cached prefix KV.

    python benchmarks/joint_step.py [--batch 16] [--repeats 3] [--threads 2]

16 training questions of the adapter experiment (``training/sets.cached_sets``: NQ-open with its BM25 C0
over the shipped index), the adapter head (``precomputed/heads/smollm2-135m-mix-adapter``): best-of-``repeats``
time of the step's query side (forward + backward to ρ, α and the adapter) from the text, of computing the prefix
KV once (:meth:`QueryHead.prefix_cache`, float16), and of the step from the cached prefix; their ratio, the
largest difference of the query vectors between the two paths, and the CPU line. The MaxSim and InfoNCE part of a
step is the same on both paths and is not timed. Writes ``benchmarks/results/bench_joint_step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from maxsim import best_of  # a sibling benchmark script (its folder is on sys.path)

from unreal_demo.core.cpu import status_line
from unreal_demo.pipeline import Explorer
from unreal_demo.settings import PRECOMPUTED, cache_dir
from unreal_demo.store.index import Index, shipped_folder
from unreal_demo.training.sets import cached_sets

HEAD = PRECOMPUTED / "heads" / "smollm2-135m-mix-adapter" / "head.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/bench_joint_step.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    explorer = Explorer.load(head=str(HEAD), require_head=True)
    head, backbone = explorer.head.train(), explorer.backbone
    head.requires_grad_(True)  # ρ, α and the adapter, as the joint fine-tune trains them
    trains, _, _ = cached_sets(Index(shipped_folder(explorer)), head.config.n_context, cache_dir() / "adapter_sets")
    texts, contexts = trains[0].texts[: args.batch], trains[0].contexts[: args.batch]
    load = os.getloadavg()[0]

    def step(prefix=None) -> torch.Tensor:
        head.zero_grad()
        q = head(backbone, texts, contexts, prefix)  # (B, G, d)
        q.sum().backward()  # any scalar of q: the backward pass reaches ρ, α and the adapter alike
        return q.detach()

    kv = head.prefix_cache(backbone, texts, contexts)
    text_s, prefix_s, cached_s = (best_of(step, args.repeats),
                                  best_of(lambda: head.prefix_cache(backbone, texts, contexts), args.repeats),
                                  best_of(lambda: step(kv), args.repeats))
    diff = (step() - step(kv)).abs().max().item()
    result = {"command": f"python benchmarks/joint_step.py --batch {args.batch} --repeats {args.repeats} "
                         f"--threads {args.threads}",
              "cpu": status_line(), "load_average_1_at_start": round(load, 2), "batch": args.batch,
              "step_from_text_s": round(text_s, 3), "prefix_kv_once_s": round(prefix_s, 3),
              "step_from_cached_prefix_s": round(cached_s, 3), "speedup": round(text_s / cached_s, 2),
              "max_query_vector_difference": diff,
              "prefix_kv_MB_per_question": round(sum(t.numel() * t.element_size() for t in kv) / len(kv) / 1e6, 2)}
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
