"""MaxSim scan speed on this machine, in one run: blocked scan vs einsum vs a naive loop, and memcpy.

    PYTHONPATH=. python benchmarks/maxsim.py [--sizes 10000,100000] [--d 576] [--lp 7] [--g 4] [--threads 2]

Synthetic fp16 chunk vectors (M, L_p, d) and G query vectors. Prints chunks/s, effective GB/s of
key bytes read, and the ratio to the machine's measured copy bandwidth (a 512 MB tensor copy).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from unreal_demo.maxsim import maxsim, maxsim_reference


def best_of(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
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
    for m in [int(x) for x in args.sizes.split(",")]:
        k = torch.randn(m, args.lp, args.d).half()
        nbytes = k.numel() * 2
        blocked = best_of(lambda k=k: maxsim(q, k))
        einsum = best_of(lambda k=k: maxsim_reference(q, k))
        sub = k[: min(m, 2000)]
        loop = best_of(lambda sub=sub: [sum(float((q[0, g] @ sub[i].float().T).max()) for g in range(args.g))
                                        for i in range(len(sub))], reps=1) * m / len(sub)
        assert torch.allclose(maxsim(q, k[:1000]), maxsim_reference(q, k[:1000]), atol=1e-3)
        row = {"chunks": m, "bytes": nbytes, "blocked_s": blocked, "einsum_s": einsum, "loop_s_extrapolated": loop,
               "blocked_chunks_per_s": m / blocked, "blocked_GBps": nbytes / blocked / 1e9,
               "fraction_of_copy_bandwidth": nbytes / blocked / 1e9 / copy_gbs,
               "speedup_vs_einsum": einsum / blocked, "speedup_vs_loop": loop / blocked}
        rows.append(row)
        print(f"{m:>8} chunks: blocked {blocked * 1e3:8.1f} ms ({row['blocked_GBps']:.2f} GB/s, "
              f"{row['fraction_of_copy_bandwidth']:.2f}x copy bw), einsum {einsum * 1e3:8.1f} ms "
              f"({row['speedup_vs_einsum']:.2f}x), loop ~{loop:.1f} s ({row['speedup_vs_loop']:.0f}x)", flush=True)
    Path(args.out).write_text(json.dumps({"command": "PYTHONPATH=. python benchmarks/maxsim.py --sizes "
                                          f"{args.sizes} --threads {args.threads}", "copy_GBps": copy_gbs,
                                          "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
