"""Our exact MaxSim scan against Qdrant Edge, exact and HNSW, side by side in one run on the shipped index.

    python benchmarks/qdrant.py [--sample 1000] [--ef 64,256] [--threads 2] [--index FOLDER] [--datatype float32]

The first ``--sample`` of the 1,000 seeded New-Wiki questions (``sample_questions(1000, 0)`` of
``evaluation/retrieval.py``, the draw ``eval retrieval --corpus index`` scores) against the shipped 20,354-chunk index
(rpq3 codes) with the shipped head. The head's query vectors are computed once per question (C0 = BM25's top |C0|
chunks of the index, batches of 16 in a fixed order) and kept in ``<cache>/bench_qdrant/``, so every backend
searches the same vectors and a rerun encodes nothing. The index is exported twice with ``index export``'s code
(:func:`unreal_demo.store.qdrant.export_index`) into ``<cache>/qdrant/`` (reused when present): once as is, once
with ``hnsw=True`` (Qdrant Edge's multi-vector HNSW graph, Qdrant's default HNSW settings). Backends:

- ``ours exact``: :meth:`Index.maxsim_topk` over the decoded keys (the CPU's scan path, ``core.cpu.status_line``);
- ``Qdrant Edge exact``: :meth:`QdrantStore.maxsim_topk` with ``SearchParams(exact=True)`` on the plain export;
- ``Qdrant Edge HNSW ef=N``: the same with ``SearchParams(hnsw_ef=N)`` on the HNSW export, one row per ``--ef``.

Each backend runs in a fresh process (its store files read once beforehand, so they are in the page cache) and
reports: open time (the constructor: for Qdrant the shard load and the read of every payload), load time (the
first search: our decoding of the codes, Qdrant's first touch of its files), per-query search latency after that
(median and p95; one query at a time, query vectors given) and the cores it kept busy meanwhile (the process's
CPU time over the wall time: our scan uses ``--threads``, Qdrant Edge its own search threads), top-10 overlap with
our exact scan (and the share of queries with the same ten in the same order, and the largest score difference
where the ids agree), R@1 / R@10
(a hit: any chunk of the question's gold paragraph, as ``eval retrieval --corpus index`` counts it, with Wilson 95%
intervals), disk size of the store (bytes of its files and blocks allocated) and resident memory: the growth of
the process's RSS (``VmRSS`` of ``/proc/self/status``, split into anonymous and file-backed pages) from before the
open to after the last search, and the peak (``VmHWM``). File-backed pages are the store's files mapped from the
page cache (Qdrant Edge memory-maps its storage); the OS can drop them.

The result (``--out``, default ``benchmarks/results/bench_qdrant.json``) records the CPU line of
:func:`unreal_demo.core.cpu.status_line`, the threads, the load average at the start and the share of the cores
other processes used during the run (``machine_busy`` when that share is over 10%: the timings are not
valid).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch
from maxsim import SHIPPED, busy_ticks  # a sibling benchmark script (its folder is on sys.path)

from unreal_demo.core.cpu import status_line
from unreal_demo.evaluation.results import head_digest
from unreal_demo.evaluation.retrieval import mrr_at_k, recall_at_k, sample_questions, wilson
from unreal_demo.settings import cache_dir, display_path
from unreal_demo.store.index import Index

TOP = 10
QUESTIONS = 1000  # the seeded draw eval retrieval --corpus index scores; --sample takes its first N
BATCH = 16  # questions per query-encoding batch, in the draw's order (so a vector does not depend on --sample)


def cpu_ticks() -> tuple[float, float, float]:
    """(busy CPU seconds of the machine, CPU seconds of this process and of its finished children, wall time)."""
    machine, _, wall = busy_ticks()
    t = os.times()
    return machine, t.user + t.system + t.children_user + t.children_system, wall


def others_cpu_share(start: tuple[float, float, float]) -> float:
    """Fraction of all cores that processes other than this one and its backends kept busy since ``start``."""
    end = cpu_ticks()
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1])) / ((end[2] - start[2]) * os.cpu_count())


def query_vectors(explorer, ix: Index, questions: list) -> torch.Tensor:
    """The head's query vectors ``(Q, G, d)`` of ``questions`` (the first Q of the draw) over ``ix``, each encoded
    once and kept in ``<cache>/bench_qdrant/`` under the head, model and index they were computed with."""
    from unreal_demo.retrieval.unreal import context_of
    from unreal_demo.retrieval.unreal import query_vectors as encode

    b = explorer.backbone
    key = hashlib.sha256(json.dumps([b.name, b.revision, explorer.head_source, head_digest(explorer.head_path),
                                     (ix.folder / "manifest.json").read_text()]).encode()).hexdigest()[:16]
    path = cache_dir() / "bench_qdrant" / f"query_vectors_{key}.pt"
    kept = torch.load(path) if path.exists() else {"ids": [], "vectors": []}
    ids = [q.id for q in questions]
    n = min(len(kept["ids"]), len(ids))
    if kept["ids"][:n] != ids[:n]:
        raise SystemExit(f"{path} holds vectors of other questions: delete it")
    todo = range(len(kept["ids"]), min(-(-len(ids) // BATCH) * BATCH, QUESTIONS), BATCH)
    if todo:
        draw = sample_questions(QUESTIONS, 0)[1]
        t0 = time.perf_counter()
        for s in todo:
            texts = [q.text for q in draw[s : s + BATCH]]
            c0 = context_of(ix, explorer, texts, ix.bm25_topk(texts, explorer.head.config.n_context)[1])
            kept["vectors"].append(encode(explorer, texts, c0, BATCH))
            kept["ids"] += [q.id for q in draw[s : s + BATCH]]
            print(f"query vectors {len(kept['ids'])}/{len(ids)} ({time.perf_counter() - t0:.0f} s)", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(kept, path)
    return torch.cat(kept["vectors"])[: len(ids)]


def exported(ix: Index, folder: Path, datatype: str, hnsw: bool) -> dict:
    """``ix`` exported to Qdrant Edge in ``folder`` (resumed or reused when there), with the time the export took
    when it ran (kept in ``folder``'s sidecar, so a reused store still reports it) and the shard's counts."""
    import qdrant_edge as qe
    from tqdm import tqdm

    from unreal_demo.store.qdrant import export_index

    sidecar = folder.with_name(folder.name + ".export.json")
    spec = f"qdrant-edge:{folder}"
    if not sidecar.exists():  # delete the sidecar (or the folder with it) to time the export again
        resumed, load, t0 = (folder / "unreal.json").exists(), os.getloadavg()[0], time.perf_counter()
        with tqdm(desc=f"index export {folder.name}", unit="chunk") as bar:
            export_index(ix, spec, datatype, lambda d, t: (setattr(bar, "total", t), bar.update(d - bar.n)),
                         hnsw=hnsw)
        sidecar.write_text(json.dumps({"export_s": round(time.perf_counter() - t0, 1), "resumed": resumed,
                                       "datatype": datatype, "hnsw": hnsw, "cpu": status_line(),
                                       "load_average_1_at_export": round(load, 2),
                                       "date": time.strftime("%Y-%m-%d")}))
    shard = qe.EdgeShard.load(str(folder / "shard"))
    info = shard.info()
    shard.close()
    return {"store": spec.replace(str(folder), display_path(folder)), "spec": spec,
            "indexed_vectors": info.indexed_vectors_count, "segments": info.segments_count,
            "points": info.points_count} | json.loads(sidecar.read_text())


def disk(folder: Path) -> dict:
    """Bytes of the files under ``folder`` and bytes of disk blocks allocated to them, in MiB."""
    files = [p.stat() for p in folder.rglob("*") if p.is_file()]
    return {"disk_MiB": round(sum(s.st_size for s in files) / 2**20, 1),
            "disk_allocated_MiB": round(sum(s.st_blocks * 512 for s in files) / 2**20, 1)}


def read_once(folder: Path) -> None:
    """Read every file under ``folder`` (into the page cache), 16 MiB at a time."""
    for p in folder.rglob("*"):
        if p.is_file():
            with p.open("rb") as f:
                while f.read(16 << 20):
                    pass


def memory() -> dict[str, int]:
    """This process's VmRSS, RssAnon, RssFile and VmHWM in bytes (``/proc/self/status``)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[name] = int(value.split()[0]) * 1024
    return out


def measure(where: str, ef: int | None, vectors: str, threads: int, normalize: bool) -> dict:
    """One backend in this (fresh) process: open, load (the first search), every query's top-10 and its time.

    Parameters
    ----------
    where : an index folder (our exact scan) or a ``qdrant-edge:`` store string.
    ef : HNSW beam width (Qdrant; None for exact search).
    vectors : a ``.pt`` file of the query vectors ``(Q, G, d)``.
    threads : torch intra-op threads (our scan's worker threads; Qdrant Edge keeps its own search threads).
    normalize : the head's ``normalize`` (Eq. 4 over L2-normalised keys).
    """
    import qdrant_edge  # noqa: F401  (imported before the baseline: its import is not the store's memory)

    from unreal_demo.store.qdrant import QdrantStore, is_spec

    torch.set_num_threads(threads)
    q = torch.load(vectors)
    before = memory()
    t0 = time.perf_counter()
    store = QdrantStore(where, ef) if is_spec(where) else Index(where, verify=False)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    store.maxsim_topk(q[:1], TOP, normalize=normalize)
    load_s = time.perf_counter() - t0
    seconds, ids, scores = [], [], []
    cpu0, wall0 = os.times(), time.perf_counter()
    for i in range(len(q)):
        t0 = time.perf_counter()
        s, p = store.maxsim_topk(q[i : i + 1], TOP, normalize=normalize)
        seconds.append(time.perf_counter() - t0)
        pos = p[0].tolist()  # positions: chunk ids of an index; point ids (= chunk ids of an export) via ids
        ids.append([int(store.ids[j]) for j in pos] if is_spec(where) else pos)
        scores.append(s[0].tolist())
    cpu1, wall1 = os.times(), time.perf_counter()
    after = memory()
    if is_spec(where):
        store.close()
    ms = sorted(x * 1e3 for x in seconds)
    return {"open_s": round(open_s, 3), "load_s": round(load_s, 3), "median_ms": round(statistics.median(ms), 2),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2), "mean_ms": round(statistics.fmean(ms), 2),
            "cores_used": round((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0), 2),
            "rss_delta_MiB": round((after["VmRSS"] - before["VmRSS"]) / 2**20, 1),
            "rss_anon_delta_MiB": round((after["RssAnon"] - before["RssAnon"]) / 2**20, 1),
            "rss_file_delta_MiB": round((after["RssFile"] - before["RssFile"]) / 2**20, 1),
            "peak_rss_MiB": round(after["VmHWM"] / 2**20, 1), "ids": ids, "scores": scores}


def compare(row: dict, ours: dict, gold: list[set[int]]) -> dict:
    """Top-10 agreement with our exact scan, R@1 / R@10 and MRR@10 of one backend's rankings."""
    pairs = list(zip(row["ids"], ours["ids"], strict=True))
    diffs = [abs(a - b) for ra, sa, rb, sb in zip(row["ids"], row["scores"], ours["ids"], ours["scores"], strict=True)
             for i, a, j, b in zip(ra, sa, rb, sb, strict=True) if i == j]
    out = {"top10_overlap": round(statistics.fmean(len(set(a) & set(b)) / TOP for a, b in pairs), 4),
           "same_top10_in_order": round(statistics.fmean(a == b for a, b in pairs), 4),
           "max_score_diff_same_id": max(diffs, default=None)}
    for k in (1, 10):
        r = recall_at_k(row["ids"], gold, k)
        out[f"R@{k}"], out[f"R@{k} 95% CI"] = round(r, 4), wilson(r, len(gold))
    return out | {"MRR@10": round(mrr_at_k(row["ids"], gold, TOP), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sample", type=int, default=QUESTIONS, help=f"the first N of the {QUESTIONS} questions")
    parser.add_argument("--ef", default="64,256", help="HNSW beam widths, comma-separated (one row each)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of our scan")
    parser.add_argument("--index", default=str(SHIPPED), help="index folder (default: the shipped one)")
    parser.add_argument("--datatype", default="float32", choices=("float32", "float16"),
                        help="how Qdrant stores the keys")
    parser.add_argument("--stores", default=None, help="folder of the Qdrant exports (default: <cache>/qdrant)")
    parser.add_argument("--out", default="benchmarks/results/bench_qdrant.json")
    args = parser.parse_args()
    if not 0 < args.sample <= QUESTIONS:
        raise SystemExit(f"--sample must be 1..{QUESTIONS}")
    efs = [int(x) for x in args.ef.split(",") if x.strip()]
    torch.set_num_threads(args.threads)
    start, load = cpu_ticks(), list(os.getloadavg())
    print(f"{status_line()} | load {load[0]:.2f} | {args.sample} questions", flush=True)

    from unreal_demo.pipeline import Explorer

    explorer = Explorer.load()
    ix = Index(args.index)
    ix.check_backbone(explorer.backbone, explorer.head.config.chunk_layer)
    questions = sample_questions(QUESTIONS, 0)[1][: args.sample]
    by_passage: dict[str, set[int]] = {}  # a hit: any chunk of the gold paragraph (run_index_retrieval_eval's rule)
    for i, c in enumerate(ix.chunks):
        by_passage.setdefault(c["passage"], set()).add(i)
    gold = [by_passage.get(q.passage_id, set()) for q in questions]
    t0 = time.perf_counter()
    q = query_vectors(explorer, ix, questions)
    encode_s = time.perf_counter() - t0

    stores = Path(args.stores) if args.stores else cache_dir() / "qdrant"
    base = f"{ix.folder.name}-{args.datatype}"
    exports = {"exact": exported(ix, stores / f"{base}-exact", args.datatype, hnsw=False),
               "hnsw": exported(ix, stores / f"{base}-hnsw", args.datatype, hnsw=True)}
    chunks, codec = len(ix), ix.manifest["dtype"]
    del ix  # the parent's copy (export decoded its codes); each backend opens its own
    backends = {f"ours exact ({codec} decoded)": (args.index, None, Path(args.index)),
                f"Qdrant Edge exact ({args.datatype})": (exports["exact"]["spec"], None, stores / f"{base}-exact")}
    backends |= {f"Qdrant Edge HNSW ef={ef} ({args.datatype})": (exports["hnsw"]["spec"], ef, stores / f"{base}-hnsw")
                 for ef in efs}
    vectors = cache_dir() / "bench_qdrant" / f"run_{os.getpid()}.pt"
    torch.save(q, vectors)
    rows: dict[str, dict] = {}
    try:
        for name, (where, ef, folder) in backends.items():
            read_once(folder)
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                rows[name] = pool.submit(measure, where, ef, str(vectors), args.threads,
                                         explorer.head.config.normalize).result() | disk(folder)
            print(f"{name}: {rows[name]['median_ms']} ms median", flush=True)
    finally:
        vectors.unlink()
    ours = next(iter(rows.values()))
    table = []
    for name, row in rows.items():
        table.append({"backend": name} | compare(row, ours, gold) | {k: v for k, v in row.items()
                                                                    if k not in ("ids", "scores")})
    others = others_cpu_share(start)
    result = {"command": f"python benchmarks/qdrant.py --sample {args.sample} --ef {','.join(map(str, efs))} "
                         f"--threads {args.threads} --datatype {args.datatype}"
                         + ("" if Path(args.index) == SHIPPED else f" --index {display_path(args.index)}"),
              "setting": f"the first {len(questions)} of {QUESTIONS} seeded SQuAD-Shifts New-Wiki questions (seed 0) "
                         f"against the {chunks:,}-chunk index {display_path(args.index)} ({codec}); head "
                         f"{explorer.head_source}; top-{TOP}",
              "cpu": status_line(), "threads": args.threads, "load_average_1_5_15": load,
              "query_encoding_s": round(encode_s, 1), "exports": {k: {x: y for x, y in v.items() if x != "spec"}
                                                                  for k, v in exports.items()},
              "memory": "RSS growth of a fresh process per backend from before the open to after the last search "
                        "(VmRSS, RssAnon and RssFile of /proc/self/status; file pages are mapped store files), "
                        "and its peak VmHWM",
              "table": table}
    result |= {"load_average_after": list(os.getloadavg()), "other_processes_cpu_share": round(others, 3)}
    if others > 0.1:  # measured over the run itself; the load average at the start lags by a minute
        result["machine_busy"] = (f"load {load[0]:.2f} at the start, other processes used {others:.0%} of the cores "
                                  "during the run: timings not valid")
    print(markdown(table))
    if "machine_busy" in result:
        print(result["machine_busy"])
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False))


def markdown(table: list[dict]) -> str:
    """The result table in Markdown."""
    cols = ["backend", "top10_overlap", "same_top10_in_order", "R@1", "R@10", "median_ms", "p95_ms", "cores_used",
            "open_s", "load_s", "disk_MiB", "rss_delta_MiB", "rss_anon_delta_MiB", "rss_file_delta_MiB"]
    head = ["backend", "top-10 overlap", "same order", "R@1", "R@10", "median ms", "p95 ms", "cores", "open s",
            "load s", "disk MiB", "RSS Δ MiB", "anon Δ", "file Δ"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in table]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
