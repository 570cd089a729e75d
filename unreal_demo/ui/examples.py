"""The example documents and questions of ``assets/examples`` (one-click rows for the tabs)."""

from __future__ import annotations

import json

from ..settings import ASSETS

EXAMPLES = ASSETS / "examples"


def load_examples() -> list[list]:
    """``[text, question, n, method]`` rows for ``gr.Examples`` from ``assets/examples``."""
    spec = json.loads((EXAMPLES / "examples.json").read_text())
    return [[(EXAMPLES / e["file"]).read_text(), e["question"], 5, "unreal"] for e in spec]
