"""Time ``ask`` on the ~6,000-token needle haystack for every method, in one run (medians of --reps).

    python benchmarks/ask_haystack.py [--reps 3] [--out benchmarks/results/ask_haystack.json]

Each repetition encodes the document afresh (the encoding cache is cleared). Prints encode, retrieval,
prefill, time to first token and total per method, and UNREAL's first-token time as a ratio of full context's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.registry import METHODS

DOC = Path(__file__).resolve().parents[1] / "assets" / "examples" / "needle_haystack.txt"
QUESTION = "What is the secret ingredient of the best pizza in Oakland?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/ask_haystack.json")
    args = parser.parse_args()
    ex = Explorer.load()
    doc = DOC.read_text()
    ex.ask([doc], QUESTION, 5, "bm25", max_new_tokens=4)  # warm-up (allocator, MiniLM not loaded)
    rows = []
    for method in METHODS:
        runs = []
        for _ in range(args.reps):
            ex.clear_cache()
            runs.append(ex.ask([doc], QUESTION, 5, method, max_new_tokens=32))
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
    Path(args.out).write_text(json.dumps({"command": f"python benchmarks/ask_haystack.py --reps "
                                          f"{args.reps}", "machine": "2 CPU cores, fp32", "head": ex.head_source,
                                          "rows": rows, "unreal_over_full_ttft": unreal / full}, indent=2))


if __name__ == "__main__":
    main()
