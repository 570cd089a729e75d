"""Command line: ``python -m unreal_demo ask|train|eval|flops|index|bench|data|rank ...``.

One module per command, its flags (``add``) beside its handler (``run``): ask, train, eval, flops, index (with
qdrant, its actions on a Qdrant store), bench, data, rank; common holds the flags and printing they share. Every
error exits non-zero with one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from . import ask, bench, data, flops, index, rank, train
from . import eval as evaluate

__all__ = ["ask", "bench", "common", "data", "eval", "flops", "index", "qdrant", "rank", "train"]
COMMANDS = (ask, train, evaluate, flops, index, bench, data, rank)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser under one ``python -m unreal_demo``."""
    parser = argparse.ArgumentParser(prog="python -m unreal_demo", description="UNREAL Explorer")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; a :class:`errors.UserError` exits 2 and an interrupt 130, each with one line on stderr."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0
