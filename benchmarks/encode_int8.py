"""Chunk encoding with int8 weights on an AVX2 CPU: speed and key fidelity against fp32 (issue 41's rule).

    python benchmarks/encode_int8.py [--questions 1000] [--speed-passages 64] [--threads 2]

A CPU without bf16 units (AVX2 only) has one lower precision left for the encoder's matmuls: int8. This run
quantises every ``nn.Linear`` of the decoder blocks dynamically (``torch.ao.quantization.quantize_dynamic``:
int8 weights per output channel, activations quantised per tensor at run time, fbgemm's AVX2 int8 GEMM) in a
copy of the default backbone, encodes all 1,581 New-Wiki paragraphs with it (Eq. 1, no cache), and compares
with the fp32 keys (from the encoding cache):

- cosine of every pooled vector with its fp32 counterpart (mean, 1st percentile, min);
- with the shipped head's fp32 query vectors (C0 from BM25, as a search has it) on 1,000 held-out New-Wiki
  questions: top-10 overlap of exact MaxSim over int8-encoded against fp32 keys, and R@1 / R@10 of both;
- tokens/s of chunk encoding in fp32 and int8 on the first ``--speed-passages`` paragraphs, uncached, same run.

``passed`` is true when R@1 and R@10 both move by at most 0.5 point. Written to ``benchmarks/results/encode_int8.json``
with the CPU line and the share of the cores other processes used during the run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from pathlib import Path

import torch
from encode_fidelity import RULE_POINTS  # sibling benchmark scripts (their folder is on sys.path)
from encode_fidelity import speed as tokens_per_s
from maxsim import busy_ticks, others_cpu_share

from unreal_demo.core.cpu import status_line
from unreal_demo.core.encoding import encode_chunks
from unreal_demo.evaluation.retrieval import corpus_store, held_out, rankings, recall_at_k
from unreal_demo.pipeline import Explorer
from unreal_demo.store.memory import MemoryStore


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--speed-passages", dest="speed", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/encode_int8.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = busy_ticks()
    explorer = Explorer.load(dtype="fp32", require_head=True)
    c, fp32 = explorer.head.config, explorer.backbone
    corpus, qs, gold = held_out(args.questions, 0, "new_wiki")
    texts, queries = [p.text for p in corpus], [q.text for q in qs]
    ref_store = corpus_store(texts, explorer)
    int8 = copy.copy(fp32)
    int8.model = copy.deepcopy(fp32.model)
    torch.ao.quantization.quantize_dynamic(int8.blocks, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    speed = {"fp32": tokens_per_s(fp32, c, texts[: args.speed]), "int8": tokens_per_s(int8, c, texts[: args.speed])}
    print(f"tokens/s fp32 {speed['fp32']:.0f}, int8 {speed['int8']:.0f}", flush=True)
    keys8 = encode_chunks(int8, texts, c.chunk_layer, c.n_pool, c.chunk_tokens)  # (M, L_p, d)
    memo: dict = {}  # the fp32 query vectors, computed once for both key sets
    ranked = {"fp32": rankings(ref_store, explorer, queries, "unreal", depth=10, memo=memo),
              "int8": rankings(MemoryStore(texts, keys8), explorer, queries, "unreal", depth=10, memo=memo)}
    cos = torch.nn.functional.cosine_similarity(ref_store.keys.float(), keys8.float(), dim=-1).flatten()
    overlap = [len(set(a) & set(b)) / 10 for a, b in zip(ranked["fp32"], ranked["int8"], strict=True)]
    recall = {k: {"R@1": recall_at_k(r, gold, 1), "R@10": recall_at_k(r, gold, 10)} for k, r in ranked.items()}
    moves = {m: 100 * (recall["int8"][m] - recall["fp32"][m]) for m in ("R@1", "R@10")}
    result = {
        "command": f"python benchmarks/encode_int8.py --questions {args.questions} --speed-passages {args.speed} "
                   f"--threads {args.threads}",
        "cpu": status_line(), "quantisation": "torch.ao quantize_dynamic qint8, every nn.Linear of the decoder blocks",
        "passages": len(texts), "questions": len(queries), "passed": all(abs(v) <= RULE_POINTS for v in moves.values()),
        "rule": f"|ΔR@1| and |ΔR@10| ≤ {RULE_POINTS} point", "cosine_mean": float(cos.mean()),
        "cosine_p01": float(cos.quantile(0.01)), "cosine_min": float(cos.min()),
        "top10_overlap_mean": sum(overlap) / len(overlap), "recall": recall, "recall_move_points": moves,
        "encode_tokens_per_s": speed, "speedup": speed["int8"] / speed["fp32"],
        "other_processes_cpu_share": others_cpu_share(start), "load_average_after": list(os.getloadavg())}
    print(json.dumps({k: v for k, v in result.items() if k != "command"}, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
