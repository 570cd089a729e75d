"""``python -m unreal_demo ask``: select evidence from documents and answer a question."""

from __future__ import annotations

import argparse
import json
import sys

from ..core.generation import ANSWER_RULE, AnswerRule, complete
from ..retrieval import registry as retrieval
from .common import model_flags


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``ask`` command and its flags."""
    ask = sub.add_parser("ask", help="select evidence from documents and answer a question")
    ask.add_argument("--doc", action="append", required=True, help="a .txt/.md document (repeatable)")
    ask.add_argument("--question", required=True)
    ask.add_argument("--n", default="5", help="chunks to select (a whole number from 1)")  # checked by check_n
    ask.add_argument("--method", choices=retrieval.names("document"), default="unreal",
                     help=retrieval.help_text("document"))
    ask.add_argument("--max-new-tokens", type=int, default=ANSWER_RULE.budget, help="answer budget in tokens")
    ask.add_argument("--whole-answer", action="store_true", help="decode to the budget instead of stopping at "
                     "the end of the first sentence (the evaluated rule)")
    ask.add_argument("--device", default=None)
    ask.add_argument("--dtype", default=None, help="fp32 | bf16 | fp16")
    ask.add_argument("--trust-remote-code", action="store_true")
    ask.add_argument("--json", action="store_true")
    model_flags(ask)
    ask.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """Select evidence and answer (``--json``: the whole result)."""
    from ..data.textio import read_document
    from ..evaluation.faithfulness import answer_support
    from ..pipeline import Explorer, check_inputs, check_n

    docs = [read_document(p) for p in args.doc]
    check_inputs(docs, args.question)  # before the model loads
    n = check_n(args.n, "--n")
    explorer = Explorer.load(args.model, head=args.head, device=args.device, dtype=args.dtype,
                             trust_remote_code=args.trust_remote_code)
    rule = AnswerRule(args.max_new_tokens, first_sentence=not args.whole_answer)
    result = explorer.ask(docs, args.question, n, args.method, rule, checked=True)  # checked above, once
    passages = [docs[c["doc"]][c["start"]:c["end"]] for c in (result["chunks"][i] for i in result["selected"])]
    support = answer_support(result["answer"], passages, args.question)
    result["check"] = support.to_dict()  # evaluation.faithfulness: supported, with the quoted evidence sentence
    if args.json:
        print(json.dumps(result))
        return
    for notice in result["notices"]:
        print(f"note: {notice}", file=sys.stderr)
    print(f"selected chunks (document order): {result['selected']}")
    print(f"answer ({result['model']}; {rule.limit}): {result['answer']}")
    for s in support.sentences:
        print(f"check: {s.verdict}: “{s.sentence}”" + (f" — the evidence says “{s.evidence}”" if s.supported else
                                                        f" ({s.reason})" if s.reason else ""))
    if result["answer_stop"] == "budget" and not complete(result["answer"]):
        print(f"note: the answer reached the {rule.budget}-token limit before its sentence ended", file=sys.stderr)
    print("timings (s): " + ", ".join(f"{k} {v:.3f}" for k, v in result["timings"].items()))
