"""Results that carry their provenance: every file in ``precomputed/`` says how it was made.

:func:`provenance` records the exact command line, the head (repository-relative path and
content digest), the model id and revision, the date and the schema version;
:func:`write_result` adds it to a result and writes the JSON. :func:`head_mismatch` tells the
UI when a result came from another head than the loaded one.

>>> command(["/x/unreal_demo/__main__.py", "eval", "qa", "--sample", "20"])
'python -m unreal_demo eval qa --sample 20'
>>> command(["/x/unreal_demo/__main__.py", "index", "search", "--index", "/data/ix"])
'python -m unreal_demo index search --index .../data/ix'
"""

from __future__ import annotations

import datetime
import hashlib
import json
import shlex
import sys
from pathlib import Path

from ..settings import display_path

SCHEMA = 2


def command(argv: list[str] | None = None) -> str:
    """The command line that is running, as a user would type it from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    script = Path(argv[0])
    head = "python -m unreal_demo" if script.name == "__main__.py" and script.parent.name == "unreal_demo" else (
        "unreal" if script.name == "unreal" else f"python {display_path(script)}")
    args = [display_path(a) if a.startswith("/") else a for a in argv[1:]]  # no folder of this machine
    return " ".join([head, *map(shlex.quote, args)])


def head_digest(head_path: Path | None) -> str | None:
    """First 16 hex digits of the SHA-256 of the head's weights (``NAME.safetensors``), or None."""
    if head_path is None:
        return None
    weights = Path(head_path).with_suffix(".safetensors")
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:16] if weights.exists() else None


def provenance(explorer=None, argv: list[str] | None = None, prompt: str | None = None) -> dict:
    """How a result was made: command, head path and digest, model, revision and dtype, answering prompt (default
    :data:`core.generation.DEFAULT_PROMPT`) and answer rule, date, schema."""
    from ..core.generation import ANSWER_RULE, DEFAULT_PROMPT

    record = {"schema": SCHEMA, "command": command(argv),
              "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if explorer is not None:
        record |= {"model": explorer.backbone.name, "revision": explorer.backbone.revision,
                   "dtype": str(explorer.backbone.dtype).removeprefix("torch."),
                   "head": explorer.head_source, "head_digest": head_digest(explorer.head_path),
                   "prompt": prompt or DEFAULT_PROMPT, "answer_rule": ANSWER_RULE.name}
    return record


def made_by(result: dict) -> str:
    """The command that made a result: its provenance's, else the top-level one of older files."""
    return result.get("provenance", {}).get("command") or result.get("command", "")


def write_result(result: dict, out: str | Path | None, explorer=None, prompt: str | None = None) -> dict:
    """``result`` with its :func:`provenance`; written as JSON to ``out`` when given."""
    result = result | {"provenance": provenance(explorer, prompt=prompt)}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2, ensure_ascii=False))
    return result


def head_mismatch(result: dict, explorer) -> str | None:
    """A warning when ``result`` was made with another head than the loaded one, else None."""
    made = result.get("provenance", {})
    if "head_digest" not in made:
        return "this result records no head digest (made before provenance was kept): its head is unknown"
    if made["head_digest"] != head_digest(explorer.head_path):
        return (f"this result was made with head {made.get('head')} ({made['head_digest']}), not the loaded "
                f"head {explorer.head_source}")
    from ..core.generation import ANSWER_RULE, DEFAULT_PROMPT, PROMPTS

    if made.get("prompt") in PROMPTS and made["prompt"] != DEFAULT_PROMPT:
        return (f"this result's answers came from the {made['prompt']!r} prompt; the app now answers with "
                f"{DEFAULT_PROMPT!r} (chosen on SQuAD dev, precomputed/prompt_choice.json)")
    if made.get("answer_rule", ANSWER_RULE.name) != ANSWER_RULE.name:
        return (f"this result's answers were cut at {made['answer_rule']}; the app now answers with "
                f"{ANSWER_RULE.name} (chosen on SQuAD dev, precomputed/prompt_choice.json)")
    return None
