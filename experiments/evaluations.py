"""Held-out evaluations kept as records but not shown by the app: product commands (``eval``, ``bench``) run with
a head that does not ship as the default, or selection-only runs the tabs do not read.

    python -m experiments evaluations            # each record and the command that made it
    python -m experiments evaluations --run qa_alpha.json   # run that command again, into this record

Records (:data:`RECORDS`): ``qa_alpha.json`` (``eval qa`` with the α head), ``longcontext_1m_evidence.json``
(``bench longcontext --evidence-only`` at 8K and 1M with the first joint head), ``qa_same_topic_evidence.json``
(the same-topic QA questions' evidence selected by the default head). Reported in docs/RESULTS.md, "Downstream QA
from the index", "Long context as retrieval" and "The same QA table on same-topic contexts".
"""

from __future__ import annotations

import argparse
import json
import shlex

from unreal_demo.cli import main as product
from unreal_demo.errors import UserError

from .common import RECORDS as FOLDER
from .common import record, run_main

RECORDS = ("qa_alpha.json", "longcontext_1m_evidence.json", "qa_same_topic_evidence.json")


def recorded_command(name: str) -> list[str]:
    """The product command that made the record ``name`` (its provenance), as arguments of ``python -m unreal_demo``
    with ``--out`` pointing at the record.

    >>> recorded_command("qa_alpha.json")[:3]
    ['eval', 'qa', '--sample']
    """
    data = json.loads((FOLDER / "evaluations" / name).read_text())
    args = shlex.split(data["provenance"]["command"])[3:]  # after "python -m unreal_demo"
    out = args.index("--out")
    return [*args[:out + 1], record("evaluations", name), *args[out + 2:]]


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments evaluations [--run NAME]``."""
    p = argparse.ArgumentParser(prog="python -m experiments evaluations", description=__doc__.split("\n")[0])
    p.add_argument("--run", choices=RECORDS, default=None, help="run the command of this record again")

    def handle(args: argparse.Namespace) -> None:
        if args.run is None:
            for name in RECORDS:
                print(f"{name}: python -m unreal_demo {shlex.join(recorded_command(name))}")
            return
        if product(recorded_command(args.run)):
            raise UserError(f"the command of {args.run} failed")

    return run_main(p, handle, argv)
