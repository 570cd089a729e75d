"""The example documents and questions of ``assets/examples`` (the example buttons of the tabs)."""

from __future__ import annotations

import json

from ..settings import ASSETS

EXAMPLES = ASSETS / "examples"


def load_examples() -> list[dict]:
    """``{label, text, question, answer, note, n, method}`` per example of ``assets/examples/examples.json`` (the
    first is the worked example the Long document tab opens on); ``answer`` is the answer the example should get
    with the default model and head (a slow test checks that it does), ``note`` says so in words."""
    spec = json.loads((EXAMPLES / "examples.json").read_text())
    return [{"label": e.get("label", e["file"]), "text": (EXAMPLES / e["file"]).read_text(), "question": e["question"],
             "answer": e["answer"], "note": f"“{e['question']}” should be answered “{e['answer']}”",
             "n": e.get("n", 5), "method": e.get("method", "unreal")} for e in spec]
