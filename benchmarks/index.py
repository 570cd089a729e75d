"""The built Wikipedia index: build throughput against the raw forward, size on disk, search latency.

    python benchmarks/index.py [--index DIR] [--queries 200] [--sample 300] [--threads 2]

Measured in one run, on one machine:

1. build path vs limit: ``--sample`` chunks drawn from the index (seeded) go through the index's
   encoding path (tokenise → bucketed batches → blocks 1..ℓc → pooling + token states → fp16 ``.npy``
   writes, plus the MiniLM embedding when the index has one) and through the raw truncated forward
   on the same padded batches; the whole build's throughput from its manifest is printed beside;
2. size on disk per part (pooled keys, token states, dense vectors, BM25, texts);
3. search latency after query encoding, per query (median, p95) over ``--queries`` New-Wiki questions:
   UNREAL's streamed exact MaxSim top-10 over fp16 shards, and over the same keys int8-quantised
   (top-10 agreement with fp16), dense, BM25 and sparse; the MaxSim scan's key bytes per second
   as a fraction of the measured copy bandwidth.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from encode import raw_forward  # a sibling benchmark script (its folder is on sys.path)

from unreal_demo.core.codec import quantize_int8
from unreal_demo.core.encoding import encode_chunks, padded_batch, token_batches, tokenize_chunks
from unreal_demo.core.maxsim import maxsim
from unreal_demo.data.sources import load_squad
from unreal_demo.pipeline import Explorer
from unreal_demo.store.index import Index, default_folder


def percentiles(seconds: list[float]) -> dict:
    ms = sorted(s * 1e3 for s in seconds)
    return {"median_ms": round(statistics.median(ms), 2), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2),
            "queries": len(ms)}


def timed_each(fn, items) -> list[float]:
    out = []
    for x in items:
        t0 = time.perf_counter()
        fn(x)
        out.append(time.perf_counter() - t0)
    return out


def build_path(explorer: Explorer, ix: Index, sample: int) -> dict:
    """Tokens/s of the index's encoding path and of the raw truncated forward on the same chunks."""
    from unreal_demo.core.minilm import embed

    m = ix.manifest
    texts = [c["text"] for c in random.Random(0).sample(ix.chunks, min(sample, len(ix)))]
    rows = tokenize_chunks(explorer.backbone, texts, 512)
    n_tokens = sum(len(r) for r in rows)
    batches = [padded_batch(explorer.backbone, [rows[i] for i in b]) for b in token_batches([len(r) for r in rows],
                                                                                           8192)]
    encode_chunks(explorer.backbone, texts[:16], m["chunk_layer"], m["n_pool"])  # warm-up
    if m["dense"]:
        embed(texts[:16])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        toks: list[torch.Tensor] = []
        keys = encode_chunks(explorer.backbone, texts, m["chunk_layer"], m["n_pool"], tokens_out=toks)
        np.save(Path(tmp) / "k.npy", keys.half().numpy())
        np.save(Path(tmp) / "t.npy", torch.cat(toks).numpy())
        encode_s = time.perf_counter() - t0
        dense_s = 0.0
        if m["dense"]:
            t1 = time.perf_counter()
            np.save(Path(tmp) / "d.npy", embed(texts).half().numpy())
            dense_s = time.perf_counter() - t1
    raw_s = raw_forward(explorer.backbone, batches, m["chunk_layer"])
    return {"chunks": len(texts), "tokens": n_tokens, "path_tokens_per_s": round(n_tokens / (encode_s + dense_s), 1),
            "path_chunks_per_s": round(len(texts) / (encode_s + dense_s), 2),
            "encode_only_tokens_per_s": round(n_tokens / encode_s, 1), "dense_seconds": round(dense_s, 2),
            "raw_truncated_forward_tokens_per_s": round(n_tokens / raw_s, 1),
            "path_over_raw": round(raw_s / (encode_s + dense_s), 3), "encode_only_over_raw": round(raw_s / encode_s, 3)}


def disk(ix: Index) -> dict:
    sizes: dict[str, int] = {}
    for path in ix.folder.rglob("*"):
        if path.is_file():
            role = ("bm25" if path.parent.name == "bm25" else path.name.split("_")[0].split(".")[0])
            sizes[role] = sizes.get(role, 0) + path.stat().st_size
    return {k: round(v / 2**20, 1) for k, v in sorted(sizes.items())} | {"total_MiB": round(sum(sizes.values()) / 2**20,
                                                                                              1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", default=None, help="index folder (default: the full offline index)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sample", type=int, default=300, help="chunks for the build-path measurement")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/bench_index.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    explorer = Explorer.load()
    c = explorer.head.config
    ix = Index(args.index or default_folder(explorer, "all"))
    ix.check_backbone(explorer.backbone, c.chunk_layer)
    m = ix.manifest
    queries = [q.text for q in random.Random(1).sample(load_squad("new_wiki")[1], args.queries)]
    result: dict = {"command": f"python benchmarks/index.py --queries {args.queries} --sample "
                               f"{args.sample} --threads {args.threads}",
                    "index": str(ix.folder), "chunks": m["chunks"], "passages": m["passages"], "tokens": m["tokens"],
                    "threads": args.threads, "build_manifest": m.get("build"), "disk_MiB": disk(ix)}
    result["build_path"] = build_path(explorer, ix, args.sample)

    # query vectors first: the latency below is the search after query encoding
    _, b_ids = ix.bm25_topk(queries, c.n_context)
    ctx = [[ix.chunks[i]["text"] for i in row] for row in b_ids.tolist()]
    t0 = time.perf_counter()
    with torch.inference_mode():
        q = torch.cat([explorer.head(explorer.backbone, queries[s : s + 16], ctx[s : s + 16]).cpu()
                       for s in range(0, len(queries), 16)])  # (Q, G, d)
    result["unreal_query_encoding_ms_per_query"] = round((time.perf_counter() - t0) / len(queries) * 1e3, 1)
    ix.maxsim_topk(q[:1], 10)  # warm the page cache
    lat = {"unreal_fp16": percentiles(timed_each(lambda x: ix.maxsim_topk(x[None], 10), q))}
    fp16_top = ix.maxsim_topk(q, 10)[1]
    quantized = [quantize_int8(sh["keys"].astype(np.float32)) for sh in ix.shards]
    int8 = [(torch.from_numpy(k), torch.from_numpy(s)) for k, s in quantized]

    def int8_topk(x: torch.Tensor) -> torch.Tensor:
        scores = torch.cat([maxsim(x, k, 256, c.normalize, s) for k, s in int8], 1)
        return scores.topk(10, dim=1).indices

    lat["unreal_int8"] = percentiles(timed_each(lambda x: int8_topk(x[None]), q))
    agree = int8_topk(q)
    lat["unreal_int8"]["top10_overlap_with_fp16"] = round(statistics.fmean(
        len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(agree, fp16_top, strict=True)), 4)
    lat["bm25"] = percentiles(timed_each(lambda x: ix.bm25_topk([x], 10), queries))
    if m["dense"]:
        from unreal_demo.core.minilm import embed

        qv = embed(queries)
        lat["dense"] = percentiles(timed_each(lambda x: ix.dense_topk(x[None], 10), qv))
    if m["token_states"]:
        from unreal_demo.retrieval.sparse import SparseRetriever, alpha_for, query_token_states

        qt = query_token_states(explorer.backbone, queries[:20], c.chunk_layer)
        alpha = alpha_for(explorer.backbone.name)
        lat["sparse"] = percentiles(timed_each(lambda x: SparseRetriever().top(ix, [x], 10, alpha), qt))
    result["latency_after_query_encoding"] = lat
    key_bytes = sum(sh["keys"].nbytes for sh in ix.shards)
    src = torch.empty(2**27)  # 512 MB
    dst = torch.empty_like(src)
    copies = []
    for _ in range(3):
        t0 = time.perf_counter()
        dst.copy_(src)
        copies.append(time.perf_counter() - t0)
    copy_gbs = 2 * src.numel() * 4 / min(copies) / 1e9  # read + write
    scan_gbs = key_bytes / (lat["unreal_fp16"]["median_ms"] / 1e3) / 1e9
    result["scan"] = {"key_MB": round(key_bytes / 1e6, 1), "scan_GBps": round(scan_gbs, 2),
                      "copy_GBps": round(copy_gbs, 1), "fraction_of_copy_bandwidth": round(scan_gbs / copy_gbs, 3)}
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
