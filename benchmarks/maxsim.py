"""MaxSim scan speed on this machine, in one run: every CPU path and peer on the same keys, against today's path.

    python benchmarks/maxsim.py [--sizes 10000,100000,1000000] [--threads 2] [--quick] [--index FOLDER]

Synthetic fp16 chunk vectors (M, L_p, d) and one query of G vectors (Eq. 4). For each index size, each path's
best-of-3 time for all M scores and the top-10, its ratio to today's path (the torch scan of
``core.maxsim.maxsim``: fp16 → fp32 per block, one GEMM per block, intra-op threads) timed in the same run,
chunks/s and chunks/s per thread, GB/s of key bytes read and the fraction of this machine's copy bandwidth,
GMAC/s and the fraction of its measured fp32 matmul peak, and whether its top-10 equals that of
``maxsim_reference`` (fp32 einsum) for 8 other queries:

- ``torch`` — today's path at its best block (128 / 256 / 1024 / 8192 chunks; the row's ``blocked_*`` fields, as
  before, with the einsum and the per-chunk Python loop extrapolated from 2,000 chunks);
- ``torch threads`` — the same blocks spread over worker threads (intra-op threads 1);
- ``numkong`` — numkong's dot kernels over the fp16 keys as stored, the query rounded to fp16, worker threads
  over blocks (``path="numkong"``); ``ours`` adds what :meth:`Index.maxsim_topk` adds to it: top-(10 + 32),
  fp32 re-scoring of those candidates and the exactness check;
- ``numba`` — the compiled kernel of ``core/maxsim_numba.py`` over the keys as stored (each fp16 key converted
  in registers and multiplied with four query vectors at once, fp32 sums, no re-scoring needed), worker threads
  over blocks (``path="numba"``, the default where numba is installed), on 2 threads and 1; ``numba int8 keys``
  — the same kernel over the int8 codec of the keys (per-vector scale; exact over those keys, so its top-10 is
  that of the int8 keys, compared here with the fp16 reference);
- peers: ``einsum`` (one fp32 einsum, ≤ 200K chunks), ``simsimd`` (``cdist`` dot over fp16, its threads),
  ``maxsim-cpu`` (fp32 keys, rayon threads; ≤ 100K chunks: it needs an fp32 copy), ``torch fp32 keys`` and
  ``torch bf16 keys`` (another copy of the keys; ≤ 100K), ``int8 _int_mm`` (int8 keys and query, torch's int8
  GEMM; 10K only) and ``qdrant-edge`` (Qdrant Edge's exact multi-vector MaxSim, fp16 storage; 10K only).

With ``--index`` (default: the shipped index when present) it also times ``Index.maxsim_topk`` on that index
(compressed keys decoded once) through each path for queries made of its own keys, with their top-10 equality.
Every result records the CPU line of :func:`unreal_demo.core.cpu.status_line`, the flags, the load average at the
start and the share of the cores other processes used during the run (``machine_busy`` when that share is over 10%:
the timings are not valid).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from unreal_demo.core.codec import quantize_int8
from unreal_demo.core.cpu import cpu_info, numba_available, numkong_available, status_line
from unreal_demo.core.maxsim import inverse_norms, maxsim, maxsim_reference, normalize_chunks, scan_error_bound
from unreal_demo.settings import PRECOMPUTED
from unreal_demo.store.index import RESCORE, Index

TOP = 10
BLOCKS = (128, 256, 1024, 8192)
SHIPPED = PRECOMPUTED / "index" / "smollm2-135m-instruct-l25-all"


def best_of(fn: Callable[[], object], reps: int = 3) -> float:
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


def machine(threads: int) -> dict:
    """This machine's limits measured now: copy bandwidth (a 512 MB copy) and fp32 matmul GFLOP/s."""
    src = torch.ones(128 * 1024 * 1024, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() * 4 / best_of(lambda: dst.copy_(src)) / 1e9  # read + write
    a = torch.randn(2048, 2048)
    matmul = 2 * 2048**3 / best_of(lambda: a @ a) / 1e9
    info = cpu_info()
    return {"cpu": status_line(), "cpu_model": info.model, "units": info.units,
            "flags": sorted(f for f in info.flags if f.startswith(("avx", "amx", "fma", "f16c"))),
            "threads": threads, "load_average_1_5_15": list(os.getloadavg()), "copy_GBps": copy,
            "matmul_fp32_GFLOPs": matmul}


def busy_ticks() -> tuple[float, float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process, wall time), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system, time.perf_counter()


def others_cpu_share(start: tuple[float, float, float]) -> float:
    """Fraction of all cores that other processes kept busy since ``start`` (0 on an otherwise idle machine)."""
    end = busy_ticks()
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1])) / ((end[2] - start[2]) * os.cpu_count())


def with_threads(n: int, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with ``n`` torch intra-op threads (restored afterwards)."""
    def run():
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)

    return run


Run = tuple[Callable[[torch.Tensor], Callable[[], object]], int, int]  # (queries → run, bytes read, threads)


def ours(q: torch.Tensor, k: torch.Tensor, threads: int, max_norm: float) -> torch.Tensor:
    """What ``Index.maxsim_topk`` does on the numkong path for one array: scan, top-(10 + 32), fp32
    re-scoring of those candidates, the exactness check; returns the top-10 ids ``(B, 10)``."""
    scan = maxsim(q, k, path="numkong", threads=threads)  # (B, M)
    cand_s, cand = scan.topk(TOP + RESCORE, dim=1)
    exact = torch.stack([maxsim_reference(q[b : b + 1], k[cand[b]].float())[0] for b in range(len(q))])
    exact, order = exact.sort(dim=1, descending=True)
    assert bool((cand_s[:, -1] + scan_error_bound(q, max_norm, "numkong", k.dtype) < exact[:, TOP - 1]).all())
    return cand.gather(1, order)[:, :TOP]


def paths(k: torch.Tensor, threads: int) -> dict[str, Run]:
    """Every path and peer measured on keys ``k``: name → (queries → run, key bytes read, threads used)."""
    m, p, d = k.shape
    max_norm = float(1 / inverse_norms(k).min())
    fp16 = k.numel() * 2
    out: dict[str, Run] = {
        f"torch threads (block {bl})": (lambda q, bl=bl: with_threads(1, lambda: maxsim(q, k, bl, threads=threads)),
                                        fp16, threads) for bl in (128, 1024)}
    out["numkong"] = (lambda q: lambda: maxsim(q, k, path="numkong", threads=threads), fp16, threads)
    out["numkong 1 thread"] = (lambda q: lambda: maxsim(q, k, path="numkong"), fp16, 1)
    out["ours (numkong + re-scoring)"] = (lambda q: lambda: ours(q, k, threads, max_norm), fp16, threads)
    if numba_available():
        out["numba (ours, fp16 keys as stored)"] = (lambda q: lambda: maxsim(q, k, path="numba", threads=threads),
                                                    fp16, threads)
        out["numba 1 thread"] = (lambda q: lambda: maxsim(q, k, path="numba"), fp16, 1)
        ki, ks = int8_keys(k)
        out["numba int8 keys (exact over the int8 codec)"] = (
            lambda q: lambda: maxsim(q, ki, scale=ks, path="numba", threads=threads), ki.numel() + ks.numel() * 2,
            threads)
    try:
        import simsimd

        flat = k.numpy().reshape(-1, d)
        out["simsimd cdist f16"] = (lambda q: lambda: np.asarray(simsimd.cdist(
            q.reshape(-1, d).half().numpy(), flat, metric="dot", threads=threads)).reshape(len(q), -1, m, p)
            .max(-1).sum(1), fp16, threads)
    except ImportError:
        print("simsimd not installed: left out")
    if m <= 200_000:
        out["einsum (maxsim_reference)"] = (lambda q: lambda: maxsim_reference(q, k), fp16, threads)
    if m <= 100_000:
        kf, kb = k.float(), k.bfloat16()
        out["torch fp32 keys"] = (lambda q: lambda: maxsim(q, kf, 128), 2 * fp16, threads)
        out["torch bf16 keys"] = (lambda q: lambda: bf16_scan(q, kb), fp16, threads)
        try:
            import maxsim_cpu

            os.environ["RAYON_NUM_THREADS"] = str(threads)
            kn = kf.numpy()
            out["maxsim-cpu (fp32 keys)"] = (lambda q: lambda: np.stack([maxsim_cpu.maxsim_scores(x, kn)
                                                                          for x in q.numpy()]), 2 * fp16, threads)
        except ImportError:
            print("maxsim-cpu not installed: left out")
        if numkong_available():
            out["numkong int8 keys (int8 query) 1 thread"] = int8_scan(k, "numkong") + (1,)
    if m <= 10_000:
        out["int8 _int_mm (int8 query)"] = int8_scan(k, "torch") + (threads,)
        try:
            out["qdrant-edge exact (fp16)"] = qdrant_edge(k) + (1,)
        except ImportError:
            print("qdrant-edge-py not installed: left out")
    return out


def int8_keys(k: torch.Tensor, step: int = 50_000) -> tuple[torch.Tensor, torch.Tensor]:
    """The index's int8 codec of fp16 keys ``(M, L_p, d)`` (per-vector scale), quantised a slice at a time."""
    ki, ks = torch.empty(k.shape, dtype=torch.int8), torch.empty(k.shape[:2], dtype=torch.float16)
    for s in range(0, len(k), step):
        a, b = quantize_int8(k[s : s + step].float().numpy())
        ki[s : s + step], ks[s : s + step] = torch.from_numpy(a), torch.from_numpy(b)
    return ki, ks


def bf16_scan(q: torch.Tensor, kb: torch.Tensor, block: int = 256) -> torch.Tensor:
    """bf16 keys and query, one bf16 GEMM per block."""
    b, g, d = q.shape
    qb = q.reshape(b * g, d).bfloat16()
    out = torch.empty(b, len(kb))
    for s in range(0, len(kb), block):
        sim = (qb @ kb[s : s + block].reshape(-1, d).T).float().view(b, g, -1, kb.shape[1])
        out[:, s : s + block] = sim.amax(-1).sum(1)
    return out


def int8_scan(k: torch.Tensor, engine: str, block: int = 1024) -> tuple[Callable[[torch.Tensor],
                                                                            Callable[[], object]], int]:
    """int8 keys (the index's int8 codec) and an int8 query (per-vector scale): ``torch._int_mm`` (``engine``
    "torch") or numkong's int8 dots (``"numkong"``) per block, int32 sums rescaled in fp32."""
    ki, ks = int8_keys(k)
    m, p, d = k.shape
    flat = ki.numpy().reshape(-1, d)
    nk = importlib.import_module("numkong") if engine == "numkong" else None

    def make(q: torch.Tensor) -> Callable[[], torch.Tensor]:
        b, g, _ = q.shape
        qs = q.reshape(b * g, d).abs().amax(-1, keepdim=True) / 127
        qi = torch.zeros(max(32, b * g), d, dtype=torch.int8)  # _int_mm wants more than 16 rows
        qi[: b * g] = torch.round(q.reshape(b * g, d) / qs).to(torch.int8)
        qi_t = qi.T.contiguous()
        packed = nk.dots_pack(qi[: b * g].numpy()) if nk is not None else None

        def dots(s: int, e: int) -> torch.Tensor:  # (m_b·L_p, B·G) int32
            if nk is not None:
                return torch.from_numpy(np.asarray(nk.dots_packed(flat[s * p : e * p], packed)))
            return torch._int_mm(ki[s:e].reshape(-1, d), qi_t)[:, : b * g]

        def run() -> torch.Tensor:
            out = torch.empty(b, m)
            for s in range(0, m, block):
                e = min(m, s + block)
                sim = dots(s, e).float().view(-1, p, b, g) * ks[s:e].float()[:, :, None, None] * qs.view(b, g)
                out[:, s:e] = sim.amax(1).sum(-1).T
            return out

        return run

    return make, ki.numel() + ks.numel() * 2


def qdrant_edge(k: torch.Tensor) -> tuple[Callable[[torch.Tensor], Callable[[], object]], int]:
    """Qdrant Edge's exact multi-vector search (MaxSim comparator, dot, fp16 storage): top-10 ids."""
    import tempfile

    import qdrant_edge as qe

    folder = tempfile.mkdtemp(prefix="bench_qdrant_")
    params = qe.EdgeVectorParams(k.shape[2], qe.Distance.Dot, datatype=qe.VectorStorageDatatype.Float16,
                                 multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim))
    shard = qe.EdgeShard.create(folder, qe.EdgeConfig(vectors={"k": params}))
    for s in range(0, len(k), 1000):
        shard.update(qe.UpdateOperation.upsert_points(
            [qe.Point(s + i, {"k": v.tolist()}, {}) for i, v in enumerate(k[s : s + 1000].float())]))

    def make(q: torch.Tensor) -> Callable[[], np.ndarray]:
        requests = [qe.QueryRequest(limit=TOP, query=qe.Query.Nearest(x.tolist(), using="k"),
                                    params=qe.SearchParams(exact=True), with_payload=False) for x in q]
        return lambda: np.array([[p.id for p in row] for row in shard.query_batch(qe.QueryBatchRequest(requests))])

    return make, k.numel() * 2


def top10(result: object) -> torch.Tensor:
    """Top-10 ids ``(B, 10)`` of a path's result: its scores ``(B, M)``, or ids already."""
    result = torch.as_tensor(np.asarray(result))
    return result.long() if result.shape[-1] == TOP else result.float().topk(TOP, dim=-1).indices


def size_row(m: int, args: argparse.Namespace, limits: dict) -> dict:
    """Every path on ``m`` random fp16 chunks: timings for one query, top-10 equality for 8 others."""
    k = torch.empty(m, args.lp, args.d, dtype=torch.float16)
    for s in range(0, m, 100_000):  # filled in slices: no fp32 copy of a 1M-chunk array
        k[s : s + 100_000] = torch.randn(min(100_000, m - s), args.lp, args.d)
    gen = torch.Generator().manual_seed(m)
    q = torch.nn.functional.normalize(torch.randn(1, args.g, args.d, generator=gen), dim=-1)
    checks = torch.nn.functional.normalize(torch.randn(8, args.g, args.d, generator=gen), dim=-1)
    ref = torch.cat([maxsim_reference(checks, k[s : s + 50_000]) for s in range(0, m, 50_000)], 1).topk(TOP).indices
    macs, nbytes = m * args.lp * args.d * args.g, k.numel() * 2
    by_block = {bl: best_of(lambda bl=bl: maxsim(q, k, bl)) for bl in BLOCKS}
    block = min(by_block, key=by_block.get)
    today = by_block[block]
    todo = {f"torch (today, block {block})": (lambda x: lambda: maxsim(x, k, block), nbytes, args.threads)}
    sub = k[: min(m, 2000)]
    loop = best_of(lambda: [sum(float((q[0, g] @ sub[i].float().T).max()) for g in range(args.g))
                            for i in range(len(sub))], reps=1) * m / len(sub)
    row = {"chunks": m, "bytes": nbytes, "MACs": macs, "blocked_s": today, "best_block": block,
           "blocked_s_by_block": by_block, "loop_s_extrapolated": loop, "blocked_chunks_per_s": m / today,
           "blocked_GBps": nbytes / today / 1e9, "speedup_vs_loop": loop / today,
           "fraction_of_copy_bandwidth": nbytes / today / 1e9 / limits["copy_GBps"], "paths": {}}
    for name, (make, read, threads) in (todo | paths(k, args.threads)).items():
        seconds = today if name.startswith("torch (today") else best_of(make(q))
        same = bool(torch.equal(top10(make(checks)()), ref))
        r = row["paths"][name] = {
            "seconds": seconds, "ratio_to_today": today / seconds, "threads": threads, "chunks_per_s": m / seconds,
            "chunks_per_s_per_thread": m / seconds / threads, "GBps": read / seconds / 1e9,
            "fraction_of_copy_bandwidth": read / seconds / 1e9 / limits["copy_GBps"], "GMACps": macs / seconds / 1e9,
            "fraction_of_matmul_peak": 2 * macs / seconds / 1e9 / limits["matmul_fp32_GFLOPs"],
            "top10_equals_reference": same}
        print(f"{m:>8} {name:40s} {seconds * 1e3:9.1f} ms  x{r['ratio_to_today']:5.2f}  {r['GBps']:5.2f} GB/s "
              f"({r['fraction_of_copy_bandwidth']:.2f} copy)  {r['GMACps']:5.1f} GMAC/s "
              f"({r['fraction_of_matmul_peak']:.2f} matmul)  top-10 = reference: {same}", flush=True)
    einsum = row["paths"].get("einsum (maxsim_reference)", {}).get("seconds", float("nan"))
    row |= {"einsum_s": einsum, "speedup_vs_einsum": einsum / today}
    if torch.cuda.is_available():
        row |= gpu_row(q, k)
    return row


def index_row(folder: Path, queries: int = 20) -> dict:
    """``Index.maxsim_topk`` on a built index through each path: queries made of its own keys (a chunk's pooled
    vectors, noised), per-query seconds, top-10 equality with the fp32 reference over every chunk."""
    ix = Index(folder)
    gen = torch.Generator().manual_seed(0)
    picks = torch.randint(len(ix), (queries,), generator=gen).tolist()
    base = ix.chunk_vectors(picks)[:, :4]  # (Q, G = 4, d)
    q = torch.nn.functional.normalize(base + 0.5 * base.std() * torch.randn(base.shape, generator=gen), dim=-1)
    ix.maxsim_topk(q[:1], TOP, path="torch")  # decodes and keeps the keys, computes 1/‖k‖
    keys = normalize_chunks(ix.chunk_vectors(range(len(ix))))
    ref = maxsim_reference(q, keys).topk(TOP).indices
    row = {"index": folder.name, "codec": ix.manifest["dtype"], "chunks": len(ix), "queries": queries, "paths": {}}
    for path in ("torch", "numkong", "numba"):
        seconds = [best_of(lambda i=i, path=path: ix.maxsim_topk(q[i : i + 1], TOP, path=path)) for i in range(queries)]
        same = torch.equal(ix.maxsim_topk(q, TOP, path=path)[1], ref)
        row["paths"][path] = {"median_s": statistics.median(seconds), "top10_equals_reference": same}
        print(f"index {folder.name} ({len(ix)} chunks, {row['codec']} decoded) {path:8s} "
              f"{statistics.median(seconds) * 1e3:7.1f} ms per query, top-10 = reference: {same}", flush=True)
    row["speedup_numkong_over_torch"] = row["paths"]["torch"]["median_s"] / row["paths"]["numkong"]["median_s"]
    row["speedup_numba_over_numkong"] = row["paths"]["numkong"]["median_s"] / row["paths"]["numba"]["median_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--quick", action="store_true", help="10K and 100K chunks only")
    parser.add_argument("--d", type=int, default=576)
    parser.add_argument("--lp", type=int, default=7)
    parser.add_argument("--g", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--index", default=str(SHIPPED) if SHIPPED.exists() else None)
    parser.add_argument("--out", default="benchmarks/results/bench_maxsim.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = busy_ticks()
    limits = machine(args.threads)
    print(f"{limits['cpu']} | flags {' '.join(limits['flags'])} | load {limits['load_average_1_5_15'][0]:.2f} | "
          f"copy {limits['copy_GBps']:.1f} GB/s | fp32 matmul {limits['matmul_fp32_GFLOPs']:.0f} GFLOP/s", flush=True)
    sizes = [10000, 100000] if args.quick else [int(x) for x in args.sizes.split(",")]
    rows = [size_row(m, args, limits) for m in sizes]
    result = {"command": f"python benchmarks/maxsim.py --sizes {','.join(map(str, sizes))} --threads {args.threads}",
              "copy_GBps": limits["copy_GBps"], "machine": limits, "rows": rows}
    if args.index:
        result["index"] = index_row(Path(args.index))
    others = others_cpu_share(start)
    result |= {"load_average_after": list(os.getloadavg()), "other_processes_cpu_share": others}
    load = limits["load_average_1_5_15"][0]
    if others > 0.1:  # measured over the run itself; the load average at the start lags by a minute
        result["machine_busy"] = (f"load {load:.2f} at the start, other processes used {others:.0%} of the cores "
                                  "during the run: timings not valid")
        print(result["machine_busy"])
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
