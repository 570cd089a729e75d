"""GPU timings in one run: the Triton MaxSim kernel, chunk encoding and time to first token.

    python benchmarks/gpu.py --config FOLDER --text FILE [--sizes 20354,100000,1000000]
                             [--lengths 1024,...,128000] [--out benchmarks/results/bench_gpu.json]

Needs CUDA (the GPU machine this project is sometimes lent; CI never runs it). The default model's
weights cannot travel to that machine, so encoding and time to first token run on a random-weight
model of its config and real tokenizer (``FOLDER``: ``config.json`` and the tokenizer files,
:func:`unreal_demo.core.backbone.random_backbone`): speed depends on the shape, not the values. The
shipped head is loaded on it, so the query side (C0 from BM25, the ρ prefix, the α read-out) is the
real one. ``FILE``: plain text (the Paul Graham essays), chunked for encoding and cut for TTFT.

1. MaxSim (Eq. 4) over random fp16 keys ``(M, L_p, d)``: the Triton kernel (plain and normalised, one
   query and batches of 16 and 64) against fp16 einsum + max; GB/s of keys read and the ratio to the device
   copy bandwidth measured in the same run; the kernel's block sizes swept at the largest M ≤ 1M;
   kernel scores checked against the fp32 reference.
2. Chunk encoding (Eq. 1), bf16: ``encode_chunks`` against the raw truncated forward and the
   full-depth forward on the same batches (``benchmarks/encode.py``'s protocol), at two batch sizes;
   the path is timed twice (the second run counts: the first meets every batch shape for the first
   time) and profiled once more with cProfile, whose top entries are printed and kept.
3. TTFT, bf16: full context against UNREAL at each length (``benchmarks/ttft_breakeven.py``'s
   protocol), the measured crossover and Eq. 10's N*.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path

import torch
from encode import measure as measure_encoding
from encode import report as report_encoding
from maxsim import cuda_time
from ttft_breakeven import measure as measure_ttft

from unreal_demo.core.backbone import random_backbone
from unreal_demo.core.encoding import encode_chunks
from unreal_demo.core.head import QueryHead
from unreal_demo.core.maxsim import inverse_norms, maxsim, maxsim_reference
from unreal_demo.core.maxsim_triton import maxsim_scores
from unreal_demo.pipeline import Explorer

HEAD = Path("precomputed/heads/smollm2-135m-mix/head.json")


def copy_bandwidth() -> float:
    """Device-to-device copy, GB/s counting bytes read and written."""
    src = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / cuda_time(lambda: dst.copy_(src)) / 1e9


def random_keys(m: int, lp: int, d: int) -> torch.Tensor:
    """``(M, L_p, d)`` fp16 on the GPU, filled in slices of 1M chunks (no fp32 copy of the whole array)."""
    k = torch.empty(m, lp, d, dtype=torch.float16, device="cuda")
    for s in range(0, m, 1_000_000):
        k[s : s + 1_000_000] = torch.randn(min(1_000_000, m - s), lp, d, device="cuda", dtype=torch.float16)
    return k


def maxsim_rows(sizes: list[int], lp: int, d: int, g: int, copy_gbs: float) -> tuple[list[dict], list[dict]]:
    """Section 1: one row per (M, batch); the block sweep at the largest M ≤ 1M."""
    rows, sweep = [], []
    sweep_at = max((x for x in sizes if x <= 1_000_000), default=None)
    for m in sizes:
        k = random_keys(m, lp, d)
        inv = inverse_norms(k)  # (M, L_p)
        nbytes = k.numel() * 2
        sub = slice(0, min(m, 4096))
        for b in (1, 16, 64):
            q = torch.nn.functional.normalize(torch.randn(b, g, d, device="cuda"), dim=-1)
            err = float((maxsim_scores(q, k[sub]) - maxsim_reference(q, k[sub])).abs().max())
            row = {"chunks": m, "batch": b, "key_bytes": nbytes, "max_abs_err_vs_fp32": err,
                   "triton_s": cuda_time(lambda q=q, k=k: maxsim_scores(q, k)),
                   "triton_normalised_s": cuda_time(lambda q=q, k=k, inv=inv: maxsim_scores(q, k, inv)),
                   "library_s": cuda_time(lambda q=q, k=k, inv=inv: maxsim(q, k, normalize=True, inv_norm=inv))}
            if m <= 1_000_000:  # einsum materialises (B, M, G, L_p) fp16
                qh = q.half()
                row["einsum_fp16_s"] = cuda_time(
                    lambda qh=qh, k=k: torch.einsum("bgd,mpd->bmgp", qh, k).amax(-1).float().sum(-1))
                row["triton_speedup_vs_einsum"] = row["einsum_fp16_s"] / row["triton_s"]
            row["triton_GBps"] = nbytes / row["triton_s"] / 1e9
            row["fraction_of_copy_bandwidth"] = row["triton_GBps"] / copy_gbs
            row["chunks_per_s"] = m * b / row["triton_s"]
            rows.append(row)
            print(f"{m:>9,} chunks, batch {b:>2}: triton {row['triton_s'] * 1e3:8.3f} ms "
                  f"({row['triton_GBps']:7.1f} GB/s, {row['fraction_of_copy_bandwidth']:.2f}x copy bw), normalised "
                  f"{row['triton_normalised_s'] * 1e3:8.3f} ms, einsum "
                  + (f"{row['einsum_fp16_s'] * 1e3:8.3f} ms" if "einsum_fp16_s" in row else "   (skipped)")
                  + f", max |err| {err:.1e}", flush=True)
        if m == sweep_at:
            q = torch.nn.functional.normalize(torch.randn(1, g, d, device="cuda"), dim=-1)
            for bm in (32, 64, 128, 256):
                for bd in (32, 64, 128):
                    t = cuda_time(lambda q=q, k=k, bm=bm, bd=bd: maxsim_scores(q, k, block_m=bm, block_d=bd))
                    sweep.append({"chunks": m, "block_m": bm, "block_d": bd, "s": t, "GBps": nbytes / t / 1e9})
            best = min(sweep, key=lambda r: r["s"])
            print(f"block sweep at {m:,}: best block_m={best['block_m']} block_d={best['block_d']} "
                  f"{best['s'] * 1e3:.3f} ms ({best['GBps']:.1f} GB/s)", flush=True)
        del k, inv
        torch.cuda.empty_cache()
    return rows, sweep


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True, help="folder with config.json and the tokenizer files")
    parser.add_argument("--text", required=True, help="plain text for encoding and TTFT contexts")
    parser.add_argument("--sizes", default="20354,100000,1000000")
    parser.add_argument("--lengths", default="1024,2048,4096,8000,16000,32000,64000,128000")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/bench_gpu.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs CUDA; the CPU benchmarks are maxsim.py, encode.py, ttft_breakeven.py")
    t0 = time.time()
    copy_gbs = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}: device copy {copy_gbs:.0f} GB/s (read + write)", flush=True)
    rows, sweep = maxsim_rows([int(x) for x in args.sizes.split(",")], 7, 576, 4, copy_gbs)
    result = {"command": f"python benchmarks/gpu.py --config FOLDER --text FILE --sizes {args.sizes} "
                         f"--lengths {args.lengths} --reps {args.reps} --n {args.n}",
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_GBps": copy_gbs,
              "maxsim": rows, "maxsim_block_sweep": sweep}
    Path(args.out).write_text(json.dumps(result, indent=2))  # each section is kept as it completes

    backbone = random_backbone(args.config, device="cuda", dtype="bf16")
    ex = Explorer(backbone, QueryHead.load(HEAD), HEAD)
    text = Path(args.text).read_text()
    chunks = [c.text for c in ex.chunk([text])] * 4  # ~0.6M tokens: long enough to time on a GPU
    result["encoding"] = []
    for budget in (8192, 65536):
        enc = measure_encoding(backbone, chunks, ex.head.config.chunk_layer, token_budget=budget, runs=2)
        report_encoding(enc)
        print(f"  path runs: {', '.join(f'{t:.2f} s' for t in enc['path_runs_s'])} (the last counts)")
        result["encoding"].append(enc)
    profile = cProfile.Profile()
    profile.runcall(encode_chunks, backbone, chunks, ex.head.config.chunk_layer, 7, 256, 65536)
    stats = io.StringIO()
    pstats.Stats(profile, stream=stats).sort_stats("tottime").print_stats(12)
    result["encoding_profile"] = stats.getvalue()[-3500:]
    print(result["encoding_profile"])
    Path(args.out).write_text(json.dumps(result, indent=2))

    ex.rank([text[:20000]], "What is this about?", args.n, "unreal")  # compile and warm every kernel once
    result["ttft"] = measure_ttft(ex, text, [int(x) for x in args.lengths.split(",")], args.reps, args.n,
                                  "smollm2-135m-instruct (random weights)")
    result["seconds"] = time.time() - t0
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
