"""Key fidelity of a lower encoding precision against fp32: the check :mod:`unreal_demo.core.cpu` requires
before it encodes in bf16 on a CPU with bf16 units (AMX-BF16 or AVX-512-BF16).

    python benchmarks/encode_fidelity.py [--dtype bf16] [--questions 500] [--passages 800] [--threads 2]
        [--head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json] [--emulation 100]

A seeded sample of held-out New-Wiki questions (seed 0, the draw every eval uses) is asked over the New-Wiki
paragraphs their gold lies in plus distractors (the first ``--passages`` paragraphs; 0: all 1,581). The same
paragraphs are encoded to ℓc in fp32 and in ``--dtype`` (Eq. 1; the ``--dtype`` run is the app's own path:
:meth:`Backbone.encoder`, a copy of blocks 1..ℓc in that dtype, the answering weights fp32), and the same
questions are encoded by the head in each (``QueryHead.encode``). Recorded:

- cosine of every pooled chunk vector ``k_{i,p}`` with its fp32 counterpart (mean, 1st percentile, min), and of
  every query vector;
- top-10 overlap of exact MaxSim (Eq. 4) rankings: the dtype's queries and keys against fp32's;
- R@1 and R@10 of both (gold paragraph among the top 1 / 10), their move in points, and the paired count
  (McNemar: questions only fp32 finds / only the dtype finds, exact two-sided binomial p);
- the same for the dtype's queries scored against fp32 keys (a shipped fp32 index searched from a bf16 CPU);
- on ``--emulation`` questions (and as many of their gold paragraphs), that native ``torch.bfloat16`` and an
  emulation (fp32 matmuls of bf16-rounded weights and inputs, every module's output rounded to bf16) give the
  same keys and query vectors within :data:`EMULATION_COSINE`: the arithmetic is the same whether a CPU has
  bf16 units or not, so a record made on either kind holds for both;
- tokens/s of chunk encoding in each dtype on the first 64 paragraphs, uncached (what it buys on this CPU).

``passed`` is true when R@1 and R@10 move by at most 0.5 point, both with the dtype's own keys and with fp32
keys (issue 41's rule). The row is written to ``precomputed/encode_fidelity.json`` (replacing an earlier row of
the same dtype; a damaged file is replaced), with the command, the CPU line and what it covered.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from unreal_demo.core import backbone as bb
from unreal_demo.core.cpu import FIDELITY_FILE, cpu_info, recorded_fidelity, status_line
from unreal_demo.core.encoding import cached_encode, encode_chunks
from unreal_demo.evaluation.retrieval import corpus_store, held_out, mcnemar_p, rankings
from unreal_demo.pipeline import Explorer

RULE_POINTS = 0.5  # the largest move of R@1 / R@10 (in points) a lower precision may cause
SPEED_SAMPLE = 64  # paragraphs encoded without the cache to time each dtype
EMULATION_COSINE = 0.999  # native and emulated bf16 agree when every vector's cosine is at least this
DEFAULT_HEAD = "precomputed/heads/smollm2-135m-mix-joint-seed1/head.json"


def speed(backbone, c, texts: list[str]) -> float:
    """Chunk-encoding tokens/s (Eq. 1 to ℓc, pooled; no cache) of ``texts`` through ``backbone`` at head config
    ``c``'s ℓc, L_p and chunk length."""
    tokens = sum(min(len(backbone.tokenizer(t)["input_ids"]), c.chunk_tokens) for t in texts)
    t0 = time.perf_counter()
    encode_chunks(backbone, texts, c.chunk_layer, c.n_pool, c.chunk_tokens)
    return tokens / (time.perf_counter() - t0)


def mcnemar(a: list[bool], b: list[bool]) -> dict:
    """Paired count of two hit lists: questions only ``a`` finds, only ``b`` finds, exact two-sided p."""
    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    return {"only_fp32": only_a, "only_low": only_b, "p": mcnemar_p(only_a, only_b)}


def hits(ranked: list[list[int]], gold: list[set[int]], k: int) -> list[bool]:
    return [bool(set(r[:k]) & g) for r, g in zip(ranked, gold, strict=True)]


def cosines(a: torch.Tensor, b: torch.Tensor) -> dict:
    cos = torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).flatten()
    return {"mean": round(float(cos.mean()), 6), "p01": round(float(cos.quantile(0.01)), 6),
            "min": round(float(cos.min()), 6)}


def _round_bf16(t):
    return t.to(torch.bfloat16).float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def emulated_view(backbone, depth: int):
    """An fp32 view of ``backbone`` whose blocks 1..``depth`` emulate bf16: weights rounded to bf16, every
    Linear's input rounded, every module's output rounded (fp32 matmuls of bf16 values, as bf16 units
    compute them: products of bf16 numbers summed in fp32)."""
    view = bb._encoding_view(backbone, depth, torch.float32)  # blocks 1..depth copied, still fp32

    def out_hook(_module, _args, output):
        if isinstance(output, tuple):
            return tuple(_round_bf16(o) for o in output)
        return _round_bf16(output)

    def in_hook(_module, args):
        return tuple(_round_bf16(a) for a in args)

    view.base.get_input_embeddings().register_forward_hook(out_hook)
    for wrapper in list(view.blocks)[:depth]:
        for module in wrapper.block.modules():
            for p in module.parameters(recurse=False):
                p.data = p.data.to(torch.bfloat16).float()
            if isinstance(module, torch.nn.Linear):
                module.register_forward_pre_hook(in_hook)
            module.register_forward_hook(out_hook)
    return view


def measure(dtype: str, questions: int, passages: int, head: str, emulation: int, seed: int = 0) -> dict:
    """The fidelity row of ``dtype`` against fp32 (module docstring)."""
    corpus, qs, gold = held_out(questions, seed, "new_wiki")
    n_gold = len({g for s in gold for g in s})
    if passages:  # every question's gold paragraph and the first paragraphs as distractors
        keep = sorted({g for s in gold for g in s} | set(range(passages)))
        where = {old: new for new, old in enumerate(keep)}
        corpus, gold = [corpus[i] for i in keep], [{where[g] for g in s} for s in gold]
    texts, queries = [p.text for p in corpus], [q.text for q in qs]
    print(f"{len(queries)} questions over {len(texts)} paragraphs ({n_gold} hold a gold answer)", flush=True)
    out = {}
    for name in ("fp32", dtype):
        t0 = time.perf_counter()
        explorer = Explorer.load(head=head, dtype=name, require_head=True)
        c = explorer.head.config
        keys = cached_encode(explorer.backbone, texts, c.chunk_layer, c.n_pool, c.chunk_tokens).float()
        store, memo = corpus_store(texts, explorer), {}
        ranked = rankings(store, explorer, queries, "unreal", depth=10, memo=memo)
        out[name] = {"explorer": explorer, "store": store, "keys": keys, "ranked": ranked, "memo": memo,
                     "queries": torch.cat([memo[s] for s in sorted(memo)]),
                     "tokens_per_s": speed(explorer.backbone, c, texts[:SPEED_SAMPLE]),
                     "seconds": time.perf_counter() - t0}
        print(f"{name}: encoded and ranked in {out[name]['seconds']:.0f} s, "
              f"{out[name]['tokens_per_s']:.0f} tokens/s (uncached sample)", flush=True)
    ref, low = out["fp32"], out[dtype]
    # the dtype's queries against fp32 keys: a shipped fp32 index searched from a CPU encoding in the dtype
    mixed = rankings(ref["store"], ref["explorer"], queries, "unreal", depth=10, memo=low["memo"])
    row_recall, moves, paired = {}, {}, {}
    for label, ranked in (("fp32", ref["ranked"]), (dtype, low["ranked"]), (f"{dtype} queries, fp32 keys", mixed)):
        row_recall[label] = {f"R@{k}": round(sum(hits(ranked, gold, k)) / len(gold), 4) for k in (1, 10)}
        if label != "fp32":
            moves[label] = {f"R@{k}": round(100 * (row_recall[label][f"R@{k}"] - row_recall["fp32"][f"R@{k}"]), 2)
                            for k in (1, 10)}
            paired[label] = {f"R@{k}": mcnemar(hits(ref["ranked"], gold, k), hits(ranked, gold, k))
                             for k in (1, 10)}
    overlap = [len(set(a) & set(b)) / 10 for a, b in zip(ref["ranked"], low["ranked"], strict=True)]
    emulation_row = check_emulation(ref["explorer"], low["explorer"], texts, gold, queries, ref, low, emulation)
    info = cpu_info()
    return {
        "dtype": dtype, "passed": all(abs(v) <= RULE_POINTS for m in moves.values() for v in m.values()),
        "rule": f"|ΔR@1| and |ΔR@10| ≤ {RULE_POINTS} point, with the {dtype} keys and with fp32 keys",
        "cpu": status_line(dtype), "units": info.units, "native_bf16_units": info.bf16_units,
        "model": ref["explorer"].backbone.name, "head": head,
        "covered": f"{len(queries)} held-out New-Wiki questions (seed {seed}) over {len(texts)} New-Wiki "
                   f"paragraphs: the {n_gold} their gold lies in plus the first {passages or 'all'} as distractors",
        "passages": len(texts), "questions": len(queries),
        "how": f"{dtype}: the app's encoding path (a {dtype} copy of blocks 1..ℓc, Backbone.encoder) for chunks "
               "and queries; answering weights fp32",
        "key_cosine": cosines(ref["keys"], low["keys"]), "query_cosine": cosines(ref["queries"], low["queries"]),
        "top10_overlap_mean": round(sum(overlap) / len(overlap), 4),
        "recall": row_recall, "recall_move_points": moves, "paired_mcnemar": paired,
        "emulation": emulation_row,
        "encode_tokens_per_s": {"fp32": round(ref["tokens_per_s"]), dtype: round(low["tokens_per_s"])},
        "seconds": {name: round(v["seconds"]) for name, v in out.items()},
        "load_average_1_5_15": list(os.getloadavg()),
    }


def check_emulation(fp32, native, texts, gold, queries, ref, low, n: int) -> dict:
    """Native bf16 against emulated bf16 on the first ``n`` questions and their gold paragraphs."""
    if not n or native.backbone.encoding_dtype != torch.bfloat16:
        return {}
    c = fp32.head.config
    n = min(n, len(queries))
    paras = sorted({g for s in gold[:n] for g in s})
    sample = [texts[i] for i in paras]
    view = emulated_view(fp32.backbone, c.chunk_layer)
    k_emu = encode_chunks(view, sample, c.chunk_layer, c.n_pool, c.chunk_tokens)
    k_nat = encode_chunks(native.backbone, sample, c.chunk_layer, c.n_pool, c.chunk_tokens)
    k_32 = encode_chunks(fp32.backbone, sample, c.chunk_layer, c.n_pool, c.chunk_tokens)
    q_emu = torch.cat([fp32.head.encode(view, queries[s : min(s + 16, n)],
                                        _contexts(ref, fp32, queries[s : min(s + 16, n)])) for s in range(0, n, 16)])
    q_nat = low["queries"][:n]
    q_32 = ref["queries"][:n]
    keys = cosines(k_emu, k_nat)
    qvec = cosines(q_emu, q_nat)
    return {"questions": n, "paragraphs": len(sample), "tolerance": f"every cosine ≥ {EMULATION_COSINE}",
            "same_within_tolerance": min(keys["min"], qvec["min"]) >= EMULATION_COSINE,
            "key_cosine_native_vs_emulated": keys, "query_cosine_native_vs_emulated": qvec,
            "key_cosine_native_vs_fp32": cosines(k_nat, k_32), "key_cosine_emulated_vs_fp32": cosines(k_emu, k_32),
            "query_cosine_emulated_vs_fp32": cosines(q_emu, q_32)}


def _contexts(ref, explorer, queries):
    """C0 of ``queries`` as the ranking runs chose it (BM25's top |C0| chunks of the store, Eq. 2)."""
    from unreal_demo.retrieval.base import topk
    from unreal_demo.retrieval.unreal import context_of

    c = explorer.head.config
    ids = topk(ref["store"].bm25_scores(queries), max(10, c.n_context))[1]
    return context_of(ref["store"], explorer, queries, ids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--passages", type=int, default=800, help="distractors: the first N paragraphs (0: all)")
    parser.add_argument("--head", default=DEFAULT_HEAD)
    parser.add_argument("--emulation", type=int, default=100, help="questions for the native/emulated check")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(FIDELITY_FILE))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    row = measure(args.dtype, args.questions, args.passages, args.head, args.emulation)
    row["command"] = (f"python benchmarks/encode_fidelity.py --dtype {args.dtype} --questions {args.questions} "
                      f"--passages {args.passages} --head {args.head} --emulation {args.emulation} "
                      f"--threads {args.threads}")
    print(json.dumps(row, indent=2))
    out = Path(args.out)
    try:
        rows = json.loads(out.read_text())["rows"] if recorded_fidelity(out) else []
    except (OSError, ValueError, KeyError, TypeError):
        rows = []
    rows = [r for r in rows if (r["dtype"], r.get("model")) != (args.dtype, row["model"])] + [row]  # one per model
    out.write_text(json.dumps({"rows": rows}, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
