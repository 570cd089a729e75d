"""``python -m unreal_demo rank``: rank a JSONL corpus for JSONL queries."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..retrieval import registry as retrieval
from .common import model_flags


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``rank`` command and its flags."""
    rk = sub.add_parser("rank", help="rank a JSONL corpus for JSONL queries")
    rk.add_argument("--passages", required=True)
    rk.add_argument("--queries", required=True)
    rk.add_argument("--method", choices=retrieval.names("corpus") + list(retrieval.ALIASES), default="unreal",
                    help=retrieval.help_text("corpus"))
    rk.add_argument("--k", type=int, default=10)
    rk.add_argument("--json", action="store_true", help="(output is always JSON)")
    model_flags(rk)
    rk.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """Rank a JSONL corpus for JSONL queries (JSON out)."""
    from ..evaluation.retrieval import rank_jsonl

    if args.k < 1:
        raise InputError("--k must be at least 1")
    print(json.dumps(rank_jsonl(args.passages, args.queries, args.method, args.k, args.model, args.head)))
