"""MaxSim scan speed on this machine, in one run: blocked scan vs einsum vs a naive loop, and memcpy.

    python benchmarks/maxsim.py [--sizes 10000,100000,1000000] [--blocks 256,1024,8192] [--quick]

Synthetic fp16 chunk vectors (M, L_p, d) and G query vectors. For each index size: the blocked CPU
scan at several block sizes (the fp16 → fp32 conversion of a small block stays in cache), one
einsum + max over the whole array, and a naive per-chunk loop (extrapolated from 2,000 chunks).
Prints chunks/s, effective GB/s of key bytes read, and the ratio to the machine's measured copy
bandwidth (a 512 MB tensor copy). On a CUDA machine it also times the Triton kernel against fp16
einsum. ``--quick`` runs 10K and 100K chunks only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from unreal_demo.core.maxsim import maxsim, maxsim_reference


def best_of(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cuda_time(fn, reps: int = 10) -> float:
    """Median seconds of ``fn`` over ``reps`` runs after one warm-up, timed with CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def gpu_row(q: torch.Tensor, k: torch.Tensor) -> dict:
    """Triton kernel vs fp16 einsum + max on the GPU (``benchmarks/gpu.py`` has the fuller GPU run)."""
    from unreal_demo.core.maxsim_triton import maxsim_scores

    qg, kg = q.cuda(), k.cuda()
    kernel = cuda_time(lambda: maxsim_scores(qg, kg))
    einsum = cuda_time(lambda: torch.einsum("bgd,mpd->bmgp", qg.half(), kg).amax(-1).sum(-1))
    return {"gpu": torch.cuda.get_device_name(), "triton_s": kernel, "gpu_einsum_fp16_s": einsum,
            "triton_GBps": k.numel() * 2 / kernel / 1e9, "triton_speedup_vs_einsum": einsum / kernel}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--blocks", default="256,1024,8192")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--d", type=int, default=576)
    parser.add_argument("--lp", type=int, default=7)
    parser.add_argument("--g", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="precomputed/bench_maxsim.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    src = torch.ones(128 * 1024 * 1024, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() * 4 / best_of(lambda: dst.copy_(src)) / 1e9  # read + write
    print(f"memcpy: {copy_gbs:.1f} GB/s (read + write)")
    rows = []
    q = torch.nn.functional.normalize(torch.randn(1, args.g, args.d), dim=-1)
    sizes = [10000, 100000] if args.quick else [int(x) for x in args.sizes.split(",")]
    blocks = [int(x) for x in args.blocks.split(",")]
    for m in sizes:
        k = torch.empty(m, args.lp, args.d, dtype=torch.float16)
        for s in range(0, m, 100_000):  # filled in slices: no fp32 copy of a 1M-chunk array
            k[s : s + 100_000] = torch.randn(min(100_000, m - s), args.lp, args.d)
        nbytes = k.numel() * 2
        per_block = {bl: best_of(lambda k=k, bl=bl: maxsim(q, k, block=bl)) for bl in blocks}
        best_block = min(per_block, key=per_block.get)
        blocked = per_block[best_block]
        # the reference materialises an fp32 copy of every key: only where that fits in memory
        einsum = best_of(lambda k=k: maxsim_reference(q, k)) if m <= 200_000 else float("nan")
        sub = k[: min(m, 2000)]
        loop = best_of(lambda sub=sub: [sum(float((q[0, g] @ sub[i].float().T).max()) for g in range(args.g))
                                        for i in range(len(sub))], reps=1) * m / len(sub)
        assert torch.allclose(maxsim(q, k[:1000]), maxsim_reference(q, k[:1000]), atol=1e-3)
        row = {"chunks": m, "bytes": nbytes, "blocked_s": blocked, "best_block": best_block,
               "blocked_s_by_block": per_block, "einsum_s": einsum, "loop_s_extrapolated": loop,
               "blocked_chunks_per_s": m / blocked, "blocked_GBps": nbytes / blocked / 1e9,
               "fraction_of_copy_bandwidth": nbytes / blocked / 1e9 / copy_gbs,
               "speedup_vs_einsum": einsum / blocked, "speedup_vs_loop": loop / blocked}
        rows.append(row)
        if torch.cuda.is_available():
            row |= gpu_row(q, k)
        print(f"{m:>8} chunks: blocked (block {best_block}) {blocked * 1e3:8.1f} ms "
              f"({row['blocked_GBps']:.2f} GB/s, "
              f"{row['fraction_of_copy_bandwidth']:.2f}x copy bw), einsum {einsum * 1e3:8.1f} ms "
              f"({row['speedup_vs_einsum']:.2f}x), loop ~{loop:.1f} s ({row['speedup_vs_loop']:.0f}x)", flush=True)
    command = (f"python benchmarks/maxsim.py --sizes {','.join(map(str, sizes))} "
               f"--blocks {args.blocks} --threads {args.threads}")
    Path(args.out).write_text(json.dumps({"command": command, "copy_GBps": copy_gbs, "rows": rows}, indent=2))

if __name__ == "__main__":
    main()
