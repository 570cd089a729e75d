"""``python -m unreal_demo bench``: long-context benchmark: UNREAL vs BM25 selection vs full context."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..retrieval import registry as retrieval
from .common import model_flags


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``bench`` command and its flags."""
    bn = sub.add_parser("bench", help="long-context benchmark: UNREAL vs BM25 selection vs full context")
    bn.add_argument("what", choices=["longcontext"])
    bn.add_argument("--sample", type=int, default=20, help="number of New-Wiki questions")
    bn.add_argument("--lengths", default="2K,4K,8K,16K,32K,128K,1M", help="context lengths in tokens (2K = 2,000)")
    bn.add_argument("--n", default="1,2,3,5,8,10,15,20,30", help="numbers of selected chunks")
    bn.add_argument("--methods", default=None,
                    help=retrieval.help_text("document") + "; none, oracle: the question alone, the gold paragraph "
                    "alone (bounds); default unreal,bm25,full (unreal,bm25 with --evidence-only)")
    bn.add_argument("--distractors", choices=["pool", "same-topic"], default="pool",
                    help="pool: distractors from the shared pool; same-topic: the gold's own article's other "
                         "paragraphs and BM25's nearest pool passages next to it, then the pool")
    bn.add_argument("--seed", type=int, default=0)
    bn.add_argument("--shard", default=None, metavar="K/N",
                    help="run only the K-th of every N questions: N processes (one per core) share the answer "
                         "cache; one run without --shard then writes the whole result from it")
    bn.add_argument("--evidence-only", action="store_true",
                    help="measure selection alone (evidence recall@n of each method), nothing answered: minutes "
                         "instead of hours; full, none and oracle, which only answer, are refused")
    bn.add_argument("--out", default=None, help="write the JSON result here")
    bn.add_argument("--json", action="store_true")
    model_flags(bn, dtype=True)
    bn.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """Run the long-context benchmark."""
    from tqdm import tqdm

    from ..evaluation.longcontext.contexts import parse_lengths
    from ..evaluation.longcontext.run import parse_shard, refuse_answering, run_benchmark
    from ..evaluation.qa import BOUNDS
    from ..pipeline import Explorer

    try:
        lengths, ns = parse_lengths(args.lengths), [int(x) for x in args.n.split(",")]
    except ValueError as exc:
        raise InputError(f"--lengths/--n: {exc}") from None
    chosen = args.methods or ("unreal,bm25" if args.evidence_only else "unreal,bm25,full")
    methods = retrieval.check(chosen.split(","), "document", BOUNDS)
    refuse_answering(methods, not args.evidence_only)
    if bad := [n for n in ns if n < 1]:
        raise InputError(f"--n must be at least 1: {bad}")
    if args.sample < 1:
        raise InputError("--sample must be at least 1")
    shard = parse_shard(args.shard, args.out)
    explorer = Explorer.load(args.model, head=args.head, dtype=args.dtype)
    with tqdm(total=1000, bar_format="{desc}{percentage:3.0f}% |{bar}| [{elapsed}<{remaining}]") as bar:
        result = run_benchmark(explorer, args.sample, lengths, ns, methods, args.seed, args.out, args.distractors,
                               progress=lambda f, text: (bar.set_description(text),
                                                         bar.update(round(1000 * f) - bar.n)), shard=shard,
                               answer=not args.evidence_only)
    print(json.dumps(result) if args.json else result["markdown"])
