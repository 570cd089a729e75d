"""``python -m experiments NAME [flags]``: run one experiment's ``main``; without a name, list them."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

NOT_EXPERIMENTS = {"common"}  # helpers, not runnable


def experiments() -> dict[str, str]:
    """Command name (the module name with dashes) → module name, for every module with a ``main``."""
    folder = Path(__file__).resolve().parent
    names = [m.name for m in pkgutil.iter_modules([str(folder)]) if not m.name.startswith("_")]
    return {n.replace("_", "-"): n for n in sorted(names) if n not in NOT_EXPERIMENTS}


def main(argv: list[str] | None = None) -> int:
    """Dispatch to ``experiments.NAME.main(rest)``."""
    argv = sys.argv[1:] if argv is None else argv
    known = experiments()
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in known:
        print("usage: python -m experiments NAME [flags]\nexperiments: " + ", ".join(known),
              file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"experiments.{known[argv[0]]}")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
