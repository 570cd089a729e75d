"""Time ``ask`` on the ~6,000-token needle haystack for every method, in one run (medians of --reps).

    python benchmarks/ask_haystack.py [--reps 3] [--model M] [--dtypes fp32,bf16]
        [--out benchmarks/results/ask_haystack.json]

The two offline backbones side by side, one repetition each, one after the other on the same machine:
``--reps 1 --out benchmarks/results/ask_haystack_smollm2_reps1.json`` and ``--reps 1 --model qwen2.5-0.5b --out
benchmarks/results/ask_haystack_qwen2.5-0.5b.json``. Each record holds the process's peak resident memory.

Each repetition encodes the document afresh (the encoding cache is cleared). Prints encode, retrieval,
prefill, time to first token and total per method, and UNREAL's first-token time as a ratio of full context's.
With several ``--dtypes`` (encoding dtypes; answers are generated in fp32 whatever the encoding dtype), UNREAL's
ask is also timed per dtype, the dtypes alternating within each repetition (a busy machine slows both alike),
and each dtype's encode, query-encoding and first-token times are printed as a ratio of the first dtype's, with
whether the answer is the same. The record holds the CPU line with the dtype that encoded.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
from pathlib import Path

from unreal_demo.core.cpu import status_line
from unreal_demo.core.generation import ANSWER_RULE, AnswerRule
from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.registry import names
from unreal_demo.settings import DEFAULT_MODEL

DOC = Path(__file__).resolve().parents[1] / "assets" / "examples" / "needle_haystack.txt"
QUESTION = "What is the secret ingredient of the best pizza in Oakland?"
WARM_UP = AnswerRule(budget=4, first_sentence=False)  # a few tokens: the allocator and the first shapes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the backbone (its shipped head); not with --dtypes")
    parser.add_argument("--dtypes", default="", help="encoding dtypes to compare on UNREAL, the first the baseline")
    parser.add_argument("--out", default="benchmarks/results/ask_haystack.json")
    args = parser.parse_args()
    if args.dtypes:
        return by_dtype(args.dtypes.split(","), args.reps, args.out)
    ex = Explorer.load(args.model)
    doc = DOC.read_text()
    ex.ask([doc], QUESTION, 5, "bm25", rule=WARM_UP)  # warm-up (allocator, MiniLM not loaded)
    rows = []
    for method in names("document"):  # every method a pasted document offers
        runs = []
        for _ in range(args.reps):
            ex.clear_cache()
            runs.append(ex.ask([doc], QUESTION, 5, method, rule=ANSWER_RULE))
        timings = {k: round(statistics.median(r["timings"].get(k, 0.0) for r in runs), 3)
                   for k in ("chunk", "encode", "retrieval", "prefill", "first_token", "total")}
        last = runs[-1]
        rows.append({"method": method, "chunks": len(last["chunks"]), "document_tokens":
                     sum(c["tokens"] for c in last["chunks"]), "prompt_tokens": last["prompt_tokens"],
                     "selected": last["selected"], "answer": last["answer"],
                     "needle_selected": any("paprika" in doc[c["start"]:c["end"]]
                                            for c in last["chunks"] if c["id"] in last["selected"]), **timings})
        print(f"{method:>7}: first token {timings['first_token']:.2f} s (encode {timings['encode']:.2f}, "
              f"retrieval {timings['retrieval']:.2f}, prefill {timings['prefill']:.2f}); answer {last['answer']!r}",
              flush=True)
    full = next(r for r in rows if r["method"] == "full")["first_token"]
    unreal = next(r for r in rows if r["method"] == "unreal")["first_token"]
    print(f"UNREAL / full context, time to first token: {unreal / full:.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux → GiB
    print(f"peak resident memory {peak:.2f} GiB")
    Path(args.out).write_text(json.dumps({"command": f"python benchmarks/ask_haystack.py --reps {args.reps} --model "
                                          f"{args.model} --out {args.out}", "machine": "2 CPU cores",
                                          "model": args.model, "head": ex.head_source,
                                          "cpu": status_line(ex.backbone.encoding_name),
                                          "answer_dtype": str(ex.backbone.dtype).removeprefix("torch."),
                                          "peak_rss_gib": round(peak, 2),
                                          "rows": rows, "unreal_over_full_ttft": unreal / full}, indent=2))


def by_dtype(dtypes: list[str], reps: int, out: str) -> None:
    """UNREAL's ask on the haystack per encoding dtype, the dtypes alternating within each repetition."""
    explorers = {d: Explorer.load(dtype=d) for d in dtypes}
    doc = DOC.read_text()
    for ex in explorers.values():
        ex.ask([doc], QUESTION, 5, "unreal", rule=WARM_UP)  # warm-up (the encoding view, first shapes)
    runs: dict[str, list[dict]] = {d: [] for d in dtypes}
    for _ in range(reps):
        for d, ex in explorers.items():
            ex.clear_cache()
            runs[d].append(ex.ask([doc], QUESTION, 5, "unreal", rule=ANSWER_RULE))
    keys = ("encode", "retrieval", "prefill", "first_token", "total")  # retrieval: the query's vectors and the scan
    rows = {}
    for d in dtypes:
        med = {k: round(statistics.median(r["timings"].get(k, 0.0) for r in runs[d]), 3) for k in keys}
        last = runs[d][-1]
        rows[d] = {"encode_dtype": explorers[d].backbone.encoding_name,
                   "answer_dtype": str(explorers[d].backbone.dtype).removeprefix("torch."),
                   "cpu": status_line(explorers[d].backbone.encoding_name), "selected": last["selected"],
                   "answer": last["answer"], **med}
    first = rows[dtypes[0]]
    for d in dtypes:
        r = rows[d]
        r["speedup_over_" + dtypes[0]] = {k: round(first[k] / r[k], 2) if r[k] else None
                                          for k in ("encode", "retrieval", "first_token")}
        r["same_answer_as_" + dtypes[0]] = r["answer"] == first["answer"]
        print(f"{d:>5}: first token {r['first_token']:.2f} s (encode {r['encode']:.2f}, retrieval (query vectors and "
              f"scan) {r['retrieval']:.2f}, prefill {r['prefill']:.2f}); speed-up over {dtypes[0]}: "
              f"{r['speedup_over_' + dtypes[0]]}; same answer: {r['same_answer_as_' + dtypes[0]]}", flush=True)
    print(rows[dtypes[-1]]["cpu"])
    Path(out).write_text(json.dumps({"command": f"python benchmarks/ask_haystack.py --reps {reps} --dtypes "
                                     f"{','.join(dtypes)}", "machine": "2 CPU cores, shared", "question": QUESTION,
                                     "head": explorers[dtypes[0]].head_source, "by_dtype": rows},
                                    indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
