"""Key codecs on the same index, in one run: size, agreement with fp16, held-out recall, scan latency, load time.

    python benchmarks/codecs.py [--index DIR] [--questions 1000] [--latency 200] [--centroids 4096]

Writes ``benchmarks/results/bench_codecs.json`` (the full offline index); with ``--index`` the New-Wiki index and
``--out benchmarks/results/bench_codecs_new_wiki.json``, the New-Wiki corpus alone.

Every codec (fp16, int8, sq4, pq2, rpq2, rpq3, res3, res2, res1) is made from the same built fp16 index by
``index.compress_index`` (no chunk re-encoded). The same UNREAL query vectors (C0 from BM25 over
the same chunks) are scanned exactly over each codec's decoded vectors. Recall: the held-out
New-Wiki questions of ``eval retrieval --corpus index`` (a hit: any chunk of the gold paragraph).
Latency: one query at a time, after query encoding, median and p95. Load: a fresh process opens
the index and answers one BM25-context UNREAL search (shard checksums, BM25, decoding included).
Every compressed index keeps its MiniLM vectors by ``--dense-codec`` (default pq2, as shipped); the
dense baseline's recall over them is reported beside the keys' (fp16 row: the fp16 vectors).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from index import disk, percentiles, timed_each  # sibling benchmark script

from unreal_demo.core.codec import CODECS, DENSE_CODECS, LOSSY
from unreal_demo.core.minilm import embed
from unreal_demo.evaluation.results import write_result
from unreal_demo.evaluation.retrieval import metrics, sample_questions
from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.unreal import contexts, query_vectors
from unreal_demo.store.index import Index, compress_index, default_folder

LOAD = """
import sys, time
t0 = time.perf_counter()
from unreal_demo.store.index import Index
ix = Index(sys.argv[1])
_, ids = ix.bm25_topk(["Who described the Mare Suebicum?"], 2)
import torch
q = torch.nn.functional.normalize(torch.randn(1, 4, ix.manifest["hidden_size"]), dim=-1)
ix.maxsim_topk(q, 10)
print(time.perf_counter() - t0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default=None, help="a built fp16 index (default: the full offline index)")
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--latency", type=int, default=200, help="queries timed one at a time")
    parser.add_argument("--centroids", type=int, default=4096)
    parser.add_argument("--dense-codec", choices=DENSE_CODECS, default="pq2")
    parser.add_argument("--keep", default=None, help="keep the compressed indexes under this folder")
    parser.add_argument("--out", default="benchmarks/results/bench_codecs.json")
    args = parser.parse_args()
    explorer = Explorer.load()
    c = explorer.head.config
    base = Index(args.index or default_folder(explorer, "all"))
    base.check_backbone(explorer.backbone, c.chunk_layer)
    _, qs = sample_questions(args.questions, 0)
    by_passage: dict[str, set[int]] = {}
    for i, ch in enumerate(base.chunks):
        by_passage.setdefault(ch["passage"], set()).add(i)
    gold = [by_passage.get(q.passage_id, set()) for q in qs]
    texts = [q.text for q in qs]
    t0 = time.perf_counter()
    _, b_ids = base.bm25_topk(texts, c.n_context)
    q = query_vectors(explorer, texts, contexts(base, b_ids, c.n_context))  # (Q, G, d)
    encode_ms = (time.perf_counter() - t0) / len(texts) * 1e3
    qd = embed(texts)  # (Q, 384) MiniLM query vectors
    work = Path(args.keep or tempfile.mkdtemp(prefix="codecs-"))
    rows, fp16_top = [], None
    for name in CODECS:
        t1 = time.perf_counter()
        folder = base.folder if name == "fp16" else work / name
        if name != "fp16" and not (folder / "manifest.json").exists():
            compress_index(base.folder, folder, name, args.centroids, dense_codec=args.dense_codec)
        ix = Index(folder)
        compress_s = time.perf_counter() - t1
        _, top = ix.maxsim_topk(q, 20, normalize=c.normalize)  # decodes every shard once (kept)
        fp16_top = top if fp16_top is None else fp16_top
        overlap = statistics.fmean(len(set(a[:10].tolist()) & set(b[:10].tolist())) / 10
                                   for a, b in zip(top, fp16_top, strict=True))
        lat = percentiles(timed_each(lambda x, ix=ix: ix.maxsim_topk(x[None], 10, normalize=c.normalize),
                                     q[: args.latency]))
        stored = ("codes", "cid") if name in LOSSY else ("keys", "scale")  # a lossy shard's "keys" is its decoding
        key_bytes = sum(a.nbytes for sh in ix.shards for role, a in sh.items() if role in stored)
        if (folder / "codec.npz").exists():
            key_bytes += (folder / "codec.npz").stat().st_size
        load = [float(subprocess.run([sys.executable, "-c", LOAD, str(folder)], capture_output=True, text=True,
                                     check=True).stdout) for _ in range(2)]
        m = metrics(top.tolist(), gold)
        md = metrics(ix.dense_topk(qd, 10)[1].tolist(), gold)
        rows.append({"codec": name, "bytes_per_chunk": round(key_bytes / len(ix), 1),
                     "key_MB": round(key_bytes / 1e6, 2), "disk_MiB": disk(ix)["total_MiB"], "disk": disk(ix),
                     "top10_overlap_fp16": round(overlap, 4),
                     "R@1": m["R@1"], "R@10": m["R@10"], "MRR@10": m["MRR@10"], "R@1 95% CI": m["R@1 95% CI"],
                     "dense": ix.manifest.get("dense_dtype") or "fp16", "dense R@1": md["R@1"],
                     "dense R@10": md["R@10"], "scan_median_ms": lat["median_ms"], "scan_p95_ms": lat["p95_ms"],
                     "load_s": round(min(load), 2), "compress_s": round(compress_s, 1)})
        print(json.dumps(rows[-1]), flush=True)
    centroids = Index(work / "res2").manifest["compressed"]["centroids"]  # capped at vectors / 8
    lines = ["| codec | B/chunk | keys MB | disk MiB | top-10 overlap | R@1 | R@10 | MRR@10 | scan median / p95 ms "
             "| load s | dense vectors: R@1 / R@10 |", "|---" * 11 + "|"]
    lines += [f"| {r['codec']} | {r['bytes_per_chunk']:,.0f} | {r['key_MB']} | {r['disk_MiB']} | "
              f"{r['top10_overlap_fp16']:.3f} | {r['R@1']:.3f} | {r['R@10']:.3f} | {r['MRR@10']:.3f} | "
              f"{r['scan_median_ms']} / {r['scan_p95_ms']} | {r['load_s']} | "
              f"{r['dense']}: {r['dense R@1']:.3f} / {r['dense R@10']:.3f} |" for r in rows]
    result = {"setting": f"{len(qs)} held-out New-Wiki questions (seed 0) against the {len(base):,}-chunk index; "
                         f"UNREAL head {explorer.head_source}; res and rpq codecs over {centroids} k-means centroids; "
                         f"latency over {min(args.latency, len(qs))} single-query scans after query encoding "
                         f"({encode_ms:.0f} ms per query, batches of 16)",
              "query_encoding_ms_per_query": round(encode_ms, 1), "rows": rows, "markdown": "\n".join(lines)}
    print(result["markdown"])
    write_result(result, args.out, explorer)
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
