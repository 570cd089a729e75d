"""Chunk-encoding throughput against its limits, measured in one run on the same tokens.

    python benchmarks/encode.py [--passages 1000] [--quick] [--threads 2] [--model ID] [--dtypes fp32,bf16]

Three timings over the same offline Wikipedia passages (lead summaries, cut to 256 tokens):

1. the full encoding path: tokenise → length-bucketed batches → blocks 1..ℓc (hook stop) → L_p pooling →
   write an fp16 safetensors part (``encoding.encode_chunks`` + ``save_file``);
2. the raw forward of the truncated model (``model.model.layers[:ℓc]``, no hooks, no pooling, no writing)
   on exactly the batches of 1., already tokenised and padded: the limit for 1.;
3. the untruncated model (all L blocks) on the same batches.

Prints tokens/s of each, the ratio 1/2 (target ≥ 0.9) and the speed-up 2/3 against L/ℓc. With several
``--dtypes`` the three are measured per encoding dtype in the same run, each path's speed-up over the first
recorded; every result records the CPU line of :func:`unreal_demo.core.cpu.status_line` and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from unreal_demo.core.backbone import load_backbone
from unreal_demo.core.cpu import cpu_info, status_line
from unreal_demo.core.encoding import encode_chunks, padded_batch, token_batches, tokenize_chunks
from unreal_demo.data.sources import load_summaries
from unreal_demo.settings import DEFAULT_MODEL


@torch.inference_mode()
def raw_forward(backbone, batches: list[tuple[torch.Tensor, torch.Tensor]], n_blocks: int) -> float:
    """Seconds for the decoder with only its first ``n_blocks`` blocks over pre-padded batches."""
    base = backbone.base
    layers = base.layers
    base.layers = torch.nn.ModuleList(list(layers)[:n_blocks])
    try:
        t0 = time.perf_counter()
        for ids, mask in batches:
            base(input_ids=ids, attention_mask=mask, use_cache=False)
        if ids.is_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0
    finally:
        base.layers = layers


def measure(backbone, texts: list[str], layer: int, max_tokens: int = 256, token_budget: int = 8192,
            runs: int = 1) -> dict:
    """Tokens/s of the encoding path, the raw truncated forward and the full-depth forward on the same
    padded batches (module docstring, 1–3). With ``runs`` > 1 the path is timed that many times and the
    last run counts: on a GPU the first meets every batch shape for the first time (library heuristics
    per shape), which the raw forward after it would not."""
    rows = tokenize_chunks(backbone, texts, max_tokens)
    n_tokens = sum(len(r) for r in rows)
    batches = [padded_batch(backbone, [rows[i] for i in b])
               for b in token_batches([len(r) for r in rows], token_budget)]
    encode_chunks(backbone, texts[:16], layer, 7, max_tokens, token_budget)  # warm-up
    path_runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            t0 = time.perf_counter()
            keys = encode_chunks(backbone, texts, layer, 7, max_tokens, token_budget)
            save_file({"k": keys.half()}, str(Path(tmp) / "part.safetensors"))
            path_runs.append(time.perf_counter() - t0)
    path_s = path_runs[-1]
    trunc_s = raw_forward(backbone, batches, layer)
    full_s = raw_forward(backbone, batches, backbone.n_layers)
    return {
        "model": backbone.name, "device": str(backbone.device), "dtype": str(backbone.dtype),
        "passages": len(texts), "tokens": n_tokens, "path_runs_s": path_runs, "token_budget": token_budget,
        "chunk_layer": layer,
        "n_layers": backbone.n_layers, "path_tokens_per_s": n_tokens / path_s,
        "truncated_forward_tokens_per_s": n_tokens / trunc_s, "full_forward_tokens_per_s": n_tokens / full_s,
        "path_over_truncated": trunc_s / path_s, "truncated_speedup_over_full": full_s / trunc_s,
        "ideal_speedup_L_over_lc": backbone.n_layers / layer,
    }


def report(result: dict) -> None:
    print(f"{result['passages']} passages, {result['tokens']:,} tokens, ℓc = {result['chunk_layer']} of "
          f"{result['n_layers']} blocks, {result['device']} {result['dtype']}, batches of ≤ "
          f"{result['token_budget']:,} padded tokens")
    print(f"encoding path      {result['path_tokens_per_s']:8.0f} tokens/s")
    print(f"raw truncated fwd  {result['truncated_forward_tokens_per_s']:8.0f} tokens/s   "
          f"path / raw = {result['path_over_truncated']:.3f} (target ≥ 0.9)")
    print(f"untruncated fwd    {result['full_forward_tokens_per_s']:8.0f} tokens/s   "
          f"truncated speed-up {result['truncated_speedup_over_full']:.2f}x (L/ℓc = "
          f"{result['ideal_speedup_L_over_lc']:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="150 passages (about a minute on 2 cores)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--chunk-layer", type=int, default=25)
    parser.add_argument("--dtypes", default="fp32", help="comma-separated, the first is the baseline (fp32,bf16)")
    parser.add_argument("--out", default="benchmarks/results/bench_encode.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    count = 150 if args.quick else args.passages
    texts = [p.text for p in load_summaries()[:count]]
    dtypes = args.dtypes.split(",")
    runs = {}
    for dtype in dtypes:
        runs[dtype] = measure(load_backbone(args.model, dtype=dtype), texts, args.chunk_layer)
        runs[dtype]["path_speedup_over_" + dtypes[0]] = (runs[dtype]["path_tokens_per_s"]
                                                         / runs[dtypes[0]]["path_tokens_per_s"])
        report(runs[dtype])
    result = runs[dtypes[0]] | {"by_dtype": runs} if len(dtypes) > 1 else runs[dtypes[0]]
    result["command"] = (f"python benchmarks/encode.py --passages {count} --threads {args.threads} "
                         f"--dtypes {args.dtypes}")
    result |= {"threads": args.threads, "cpu": status_line(), "units": cpu_info().units,
               "load_average_1_5_15": list(os.getloadavg())}
    print(result["cpu"])
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
