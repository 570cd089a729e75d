"""Same numbers before and after a refactor: the product commands' ``--json`` outputs, compared field by field.

Run it in a worktree of each commit (``git worktree add /tmp/before COMMIT``), then compare::

    python -m experiments refactor-check run --out /tmp/before.json     # in each tree, the same venv
    python -m experiments refactor-check compare /tmp/before.json /tmp/after.json

``run`` answers :data:`ASK` (the needle example), searches the shipped index for each of :data:`QUERIES` with every
index method (``--k 10``) and runs ``eval retrieval --sample 200 --corpus new_wiki`` (every corpus method); timings
and provenance are left out. ``compare`` reports the first difference: texts and ids exactly, scores within 1e-6.

Records (:data:`RECORDS`): ``refactor_before_after.json`` (the retrieval-core refactor),
``refactor_39_before_after.json`` (issue 39's layout) and ``refactor_56_before_after.json`` (issue 56: experiments/
out of the library, the cli/ package, pipeline.py split into pipeline.py + serving.py, retrieval given a
QueryModel; 333d879 against the commit after it, the package imported from each worktree). Each record says what it
compared.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

from unreal_demo.cli import main as product
from unreal_demo.errors import UserError
from unreal_demo.retrieval import registry

from .common import run_main

RECORDS = ("refactor_before_after.json", "refactor_39_before_after.json", "refactor_56_before_after.json")
ASK = ["ask", "--doc", "assets/examples/needle_haystack.txt", "--question",
       "What is the secret ingredient of the best pizza in Oakland?", "--n", "5", "--method", "unreal", "--json"]
QUERIES = ("Who was the first president of the United States?", "What is photosynthesis?",
           "When did the Eiffel Tower open?", "Who described the Mare Suebicum?")
EVAL = ["eval", "retrieval", "--sample", "200", "--corpus", "new_wiki", "--json"]
UNTIMED = ("timings", "provenance", "seconds")  # left out of a comparison


def commands() -> list[list[str]]:
    """Every command :func:`run` runs, as arguments of ``python -m unreal_demo``."""
    searches = [["index", "search", "--query", q, "--method", m, "--k", "10", "--json"]
                for q in QUERIES for m in registry.names("index", costly=False)]
    return [ASK, *searches, EVAL]


def stripped(value):
    """``value`` without its timings and provenance, at any depth.

    >>> stripped({"hits": [1], "timings": {"total": 1.0}, "x": [{"provenance": {}, "y": 2}]})
    {'hits': [1], 'x': [{'y': 2}]}
    """
    if isinstance(value, dict):
        return {k: stripped(v) for k, v in value.items() if k not in UNTIMED}
    if isinstance(value, list):
        return [stripped(v) for v in value]
    return value


def difference(a, b, where: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ (numbers within 1e-6), or None.

    >>> difference({"s": [1.0, 2.0]}, {"s": [1.0, 2.0000001]}) is None
    True
    >>> difference({"ids": [1, 2]}, {"ids": [1, 3]})
    'ids[1]: 2 != 3'
    """
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where or '.'}: keys {sorted(a.keys() ^ b.keys())}"
        return next((d for k in a if (d := difference(a[k], b[k], f"{where}.{k}" if where else k))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} != {len(b)} items"
        return next((d for i, (x, y) in enumerate(zip(a, b, strict=True)) if (d := difference(x, y, f"{where}[{i}]"))),
                    None)
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return None if abs(a - b) <= 1e-6 else f"{where}: {a} != {b}"
    return None if a == b else f"{where}: {a!r} != {b!r}"


def run(out: Path) -> None:
    """Run :func:`commands` and write their outputs (stripped) to ``out``."""
    outputs = []
    for args in commands():
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            if product(args):
                raise UserError(f"python -m unreal_demo {' '.join(args)} failed")
        outputs.append({"command": args, "output": stripped(json.loads(buffer.getvalue()))})
    out.write_text(json.dumps(outputs, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments refactor-check run --out FILE`` or ``… compare BEFORE AFTER``."""
    p = argparse.ArgumentParser(prog="python -m experiments refactor-check", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("run", "compare"))
    p.add_argument("files", nargs="*", help="compare: the two outputs of run")
    p.add_argument("--out", default=None, help="run: where to write the outputs")

    def handle(args: argparse.Namespace) -> None:
        if args.action == "run":
            if not args.out:
                raise UserError("run needs --out FILE")
            run(Path(args.out))
            return
        if len(args.files) != 2:
            raise UserError("compare takes two files: the outputs of run before and after")
        before, after = (json.loads(Path(f).read_text()) for f in args.files)
        found = difference(before, after)
        print("identical (texts and ids exactly, scores within 1e-6)" if found is None else f"differs at {found}")
        if found is not None:
            raise UserError(f"the outputs differ at {found}")

    return run_main(p, handle, argv)
