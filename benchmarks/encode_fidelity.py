"""Key fidelity of a lower encoding precision against fp32: the check :mod:`unreal_demo.core.cpu` requires
before it encodes in bf16 on a CPU with bf16 units (AMX-BF16 or AVX-512-BF16).

    python benchmarks/encode_fidelity.py [--dtype bf16] [--questions 1000] [--passages 0] [--threads 2]

The same New-Wiki paragraphs (all 1,581 by default) are encoded to ℓc by the backbone in fp32 and in ``--dtype``
(Eq. 1, cached per dtype), and the same held-out New-Wiki questions are encoded by the shipped head on each
backbone. Recorded per dtype:

- cosine of every pooled chunk vector ``k_{i,p}`` with its fp32 counterpart (mean, 1st percentile, min);
- top-10 overlap of exact MaxSim (Eq. 4) rankings: the dtype's queries and keys against fp32's;
- R@1 and R@10 of both (gold paragraph among the top 1 / 10), and their difference in points;
- tokens/s of chunk encoding in each dtype on the first 64 paragraphs, uncached (what it buys on this CPU).

``passed`` is true when R@1 and R@10 both move by at most 0.5 point (issue 41's rule). The row is written to
``precomputed/encode_fidelity.json`` (replacing an earlier row of the same dtype), with the CPU line; on a CPU
without bf16 units the measurement still runs (bf16 emulated: slow) but says so.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from unreal_demo.core.cpu import FIDELITY_FILE, cpu_info, status_line
from unreal_demo.core.encoding import cached_encode, encode_chunks
from unreal_demo.evaluation.retrieval import corpus_store, held_out, rankings, recall_at_k
from unreal_demo.pipeline import Explorer

RULE_POINTS = 0.5  # the largest move of R@1 / R@10 (in points) a lower precision may cause
SPEED_SAMPLE = 64  # paragraphs encoded without the cache to time each dtype


def speed(backbone, c, texts: list[str]) -> float:
    """Chunk-encoding tokens/s (Eq. 1 to ℓc, pooled; no cache) of ``texts`` through ``backbone`` at head config
    ``c``'s ℓc, L_p and chunk length."""
    tokens = sum(min(len(backbone.tokenizer(t)["input_ids"]), c.chunk_tokens) for t in texts)
    t0 = time.perf_counter()
    encode_chunks(backbone, texts, c.chunk_layer, c.n_pool, c.chunk_tokens)
    return tokens / (time.perf_counter() - t0)


def measure(dtype: str, questions: int, passages: int, seed: int = 0) -> dict:
    """The fidelity row of ``dtype`` against fp32 (module docstring)."""
    corpus, qs, gold = held_out(questions, seed, "new_wiki")
    if passages:  # a quick run: the first paragraphs and every question's gold paragraph
        keep = sorted({g for s in gold for g in s} | set(range(passages)))
        where = {old: new for new, old in enumerate(keep)}
        corpus, gold = [corpus[i] for i in keep], [{where[g] for g in s} for s in gold]
    texts, queries = [p.text for p in corpus], [q.text for q in qs]
    out = {}
    for name in ("fp32", dtype):
        explorer = Explorer.load(dtype=name, require_head=True)
        c = explorer.head.config
        keys = cached_encode(explorer.backbone, texts, c.chunk_layer, c.n_pool, c.chunk_tokens).float()
        ranked = rankings(corpus_store(texts, explorer), explorer, queries, "unreal", depth=10)
        out[name] = {"keys": keys, "ranked": ranked, "tokens_per_s": speed(explorer.backbone, c, texts[:SPEED_SAMPLE]),
                     "R@1": recall_at_k(ranked, gold, 1), "R@10": recall_at_k(ranked, gold, 10)}
    ref, low = out["fp32"], out[dtype]
    cos = torch.nn.functional.cosine_similarity(ref["keys"], low["keys"], dim=-1).flatten()  # (M·L_p,)
    overlap = [len(set(a) & set(b)) / 10 for a, b in zip(ref["ranked"], low["ranked"], strict=True)]
    moves = {m: 100 * (low[m] - ref[m]) for m in ("R@1", "R@10")}
    info = cpu_info()
    return {
        "dtype": dtype, "passed": all(abs(v) <= RULE_POINTS for v in moves.values()),
        "rule": f"|ΔR@1| and |ΔR@10| ≤ {RULE_POINTS} point", "cpu": status_line(), "units": info.units,
        "native_bf16_units": info.bf16_units, "passages": len(texts), "questions": len(queries),
        "cosine_mean": float(cos.mean()), "cosine_p01": float(cos.quantile(0.01)), "cosine_min": float(cos.min()),
        "top10_overlap_mean": sum(overlap) / len(overlap), "fp32": {m: ref[m] for m in ("R@1", "R@10")},
        dtype: {m: low[m] for m in ("R@1", "R@10")}, "recall_move_points": moves,
        "encode_tokens_per_s": {"fp32": ref["tokens_per_s"], dtype: low["tokens_per_s"]},
        "load_average_1_5_15": list(os.getloadavg()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--passages", type=int, default=0, help="a subset of the paragraphs (0: all 1,581)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(FIDELITY_FILE))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    row = measure(args.dtype, args.questions, args.passages)
    row["command"] = (f"python benchmarks/encode_fidelity.py --dtype {args.dtype} --questions {args.questions} "
                      f"--passages {args.passages} --threads {args.threads}")
    print(json.dumps(row, indent=2))
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    rows = [r for r in rows if r["dtype"] != args.dtype] + [row]
    out.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
