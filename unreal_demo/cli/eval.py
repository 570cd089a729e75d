"""``python -m unreal_demo eval``: held-out evaluations: retrieval, intrinsic, qa."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..retrieval import registry as retrieval
from .common import ints, model_flags, servable


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``eval`` command and its flags."""
    ev = sub.add_parser("eval", help="held-out evaluation on SQuAD-Shifts New-Wiki")
    ev.add_argument("what", choices=["retrieval", "intrinsic", "heads", "qa"],
                    help="heads: the heads of --head (a comma list of head files, or run folders for their last "
                         "checkpoint) on a sweep's dev split, to choose the one that ships")
    ev.add_argument("--sample", type=int, default=500, help="number of held-out questions")
    ev.add_argument("--methods", default=None, help=f"retrieval: {','.join(retrieval.names('corpus'))} "
                    f"(--corpus index: {','.join(retrieval.names('index'))}); qa: none,oracle,"
                    f"{','.join(retrieval.names('index'))} (default all but upr, which runs the LLM on 10 chunks a "
                    "question)")
    ev.add_argument("--k", default="5", help="qa: chunks retrieved per question, a comma list (1,3,5,10)")
    ev.add_argument("--index", default=None, help="qa, retrieval --corpus index: index folder (default: the "
                    "full offline index)")
    ev.add_argument("--out", default=None, help="write the JSON result here")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--corpus", choices=["full", "new_wiki", "amazon", "index"], default="full",
                    help="retrieval: New-Wiki + 10,033 summaries (full), the New-Wiki paragraphs alone, Amazon's "
                         "questions over its 2,050 reviews (out of domain), or the chunks of a built index "
                         "(--index, default the full offline index)")
    ev.add_argument("--sweep", default="mix-l25", help="heads: whose dev split scores the heads: mix-l25 (around "
                    "the long run) or squad-l20 (the first sweep, SQuAD dev)")
    ev.add_argument("--save-fusion", action="store_true", help="heads: write each head's dev-fitted score-fusion "
                    "weight into its JSON (what hybrid-fusion uses)")
    ev.add_argument("--json", action="store_true")
    model_flags(ev, dtype=True)
    ev.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """Run the evaluation named by ``what``."""
    ks = ints(args.k, "--k")
    if args.sample < 1:
        raise InputError("--sample must be at least 1")
    if args.what == "heads":
        from ..evaluation.ablation import compare_heads

        result = compare_heads(args.head.split(",") if args.head else [], args.sample, args.sweep, args.seed, args.out,
                               args.save_fusion)
        print(json.dumps(result) if args.json else result["markdown"] + f"\nchosen: {result['chosen']}")
        return
    if args.what == "intrinsic":
        from ..evaluation.intrinsic import run_intrinsic_eval
        from ..pipeline import Explorer

        explorer = Explorer.load(args.model, head=args.head, dtype=args.dtype)
        result = run_intrinsic_eval(explorer, args.sample, args.seed, args.out)
        print(json.dumps(result) if args.json else json.dumps(result["references"]))
        return
    if args.what == "qa":
        from tqdm import tqdm

        from ..evaluation.qa import BOUNDS, run_qa_eval
        from ..pipeline import Explorer
        from ..store import index
        from ..store.qdrant import open_store

        every = [*BOUNDS, *retrieval.names("index", costly=False)]
        methods = retrieval.check(args.methods.split(",") if args.methods else every, "index", BOUNDS)
        trained = any(retrieval.METHODS[m].trained for m in methods if m in retrieval.METHODS)
        # the bounds, BM25 and dense need no head: any model answers them (a second backbone before its head)
        explorer = Explorer.load(args.model, head=args.head, require_head=trained, dtype=args.dtype)
        ix = open_store(args.index or index.default_index(explorer))
        methods = servable(ix, explorer, methods, bool(args.methods))
        bar = tqdm(unit="question")
        result = run_qa_eval(explorer, ix, args.sample, methods, ks, args.seed,
                             args.out, progress=lambda m, d, t: (bar.set_description(f"qa {m}"),
                                                                 setattr(bar, "total", t), bar.update(d - bar.n)))
        bar.close()
        print(json.dumps(result) if args.json else result["markdown"])
        return
    if args.corpus == "index":
        from ..evaluation.retrieval import run_index_retrieval_eval
        from ..pipeline import Explorer
        from ..store import index
        from ..store.qdrant import open_store

        every = retrieval.names("index", costly=False)
        methods = retrieval.check(args.methods.split(",") if args.methods else every, "index")
        trained = any(retrieval.METHODS[m].trained for m in methods if m in retrieval.METHODS)
        # the bounds, BM25 and dense need no head: any model answers them (a second backbone before its head)
        explorer = Explorer.load(args.model, head=args.head, require_head=trained, dtype=args.dtype)
        ix = open_store(args.index or index.default_index(explorer))
        methods = servable(ix, explorer, methods, bool(args.methods))
        result = run_index_retrieval_eval(explorer, ix, args.sample, methods, args.seed, args.out)
        print(json.dumps(result) if args.json else result["markdown"])
        return
    from ..evaluation.retrieval import run_retrieval_eval

    every = retrieval.names("corpus", costly=False)
    methods = retrieval.check(args.methods.split(",") if args.methods else every, "corpus")
    result = run_retrieval_eval(args.sample, methods, head=args.head, model=args.model,
                                out=args.out, seed=args.seed, corpus_name=args.corpus, dtype=args.dtype)
    if args.json:
        print(json.dumps(result))
    else:
        print(result["markdown"])
