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
    head = f"python -m {script.parent.name}" if script.name == "__main__.py" else (
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
    """How a result was made: command, head path and digest, model, revision, dtype (the answering weights') and
    the dtype that encoded chunks and queries (``encoded_in``: bf16 on a CPU whose choice it is), answering prompt
    (default :data:`core.generation.DEFAULT_PROMPT`) and answer rule, date, schema."""
    from ..core.generation import ANSWER_RULE, DEFAULT_PROMPT

    record = {"schema": SCHEMA, "command": command(argv),
              "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if explorer is not None:
        record |= {"model": explorer.backbone.name, "revision": explorer.backbone.revision,
                   "dtype": str(explorer.backbone.dtype).removeprefix("torch."),
                   "encoded_in": explorer.backbone.encoding_name,
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
                f"{DEFAULT_PROMPT!r} (chosen on SQuAD dev: docs/RESULTS.md, 'The answering prompt and answer rule')")
    if made.get("answer_rule", ANSWER_RULE.name) != ANSWER_RULE.name:
        return (f"this result's answers were cut at {made['answer_rule']}; the app now answers with "
                f"{ANSWER_RULE.name} (chosen on SQuAD dev: docs/RESULTS.md, 'The answering prompt and answer rule')")
    return None


def head_free() -> frozenset[str]:
    """The retrieval methods whose rows no trained head changes (:attr:`retrieval.base.Retriever.trained` false)."""
    from ..retrieval.registry import METHODS

    return frozenset(name for name, method in METHODS.items() if not method.trained)


def model_free() -> frozenset[str]:
    """The head-free methods that read no LLM either (BM25, dense): their rows hold for every backbone."""
    from ..retrieval.registry import METHODS

    return frozenset(name for name, method in METHODS.items() if not method.trained and not method.model)


def question_set(result: dict) -> str:
    """A retrieval result's setting without its head: the questions and corpus it was scored on."""
    return result.get("setting", "").split("; head ")[0]


def for_head(results: list[dict], digest: str | None) -> tuple[list[dict], list[dict]]:
    """One retrieval evaluation as the loaded head sees it: its own rows from the result made with it, and the rows
    no head changes (:func:`head_free`) from a result on the same questions (:func:`question_set`) that has them —
    from a result made on another backbone, only the rows that read no LLM (:func:`model_free`: a token-matching
    row of another model's states is not this model's).

    Parameters
    ----------
    results
        ``eval retrieval`` results of one corpus (each with ``setting``, ``table`` rows keyed by ``key`` and
        ``provenance.head_digest``), the fullest first.
    digest
        The loaded head's :func:`head_digest`.

    Returns
    -------
    (rows, sources)
        The table's rows in the fullest result's order, and the results they came from (the head's own first). When
        no result was made with the loaded head: the fullest result's rows and that result alone (the caller warns
        with :func:`head_mismatch`).

    >>> base = {"setting": "q; head a", "table": [{"key": "unreal", "R@1": 0.6}, {"key": "bm25", "R@1": 0.7}],
    ...         "provenance": {"head_digest": "a"}}
    >>> own = {"setting": "q; head b", "table": [{"key": "unreal", "R@1": 0.65}], "provenance": {"head_digest": "b"}}
    >>> rows, sources = for_head([base, own], "b")
    >>> [(r["key"], r["R@1"]) for r in rows], sources == [own, base]
    ([('unreal', 0.65), ('bm25', 0.7)], True)
    >>> other = {"setting": "q; head c", "table": [{"key": "sparse", "R@1": 0.4}, {"key": "dense", "R@1": 0.6}],
    ...          "provenance": {"head_digest": "c", "model": "m2"}}
    >>> own["provenance"]["model"] = "m1"
    >>> [r["key"] for r in for_head([other, own], "b")[0]]
    ['dense', 'unreal']
    """
    if not results:
        return [], []
    mine = [r for r in results if digest is not None and r.get("provenance", {}).get("head_digest") == digest]
    if not mine:
        return list(results[0]["table"]), [results[0]]
    own, free, anywhere = mine[0], head_free(), model_free()
    model = own.get("provenance", {}).get("model")
    rows, sources = list(own["table"]), [own]
    for result in results:
        if result is own or question_set(result) != question_set(own):
            continue  # other questions: its baselines are not comparable
        same_model = result.get("provenance", {}).get("model") == model
        have = {r.get("key") for r in rows}
        extra = [r for r in result["table"] if r.get("key") not in have
                 and r.get("key") in (free if same_model else anywhere)]
        if extra:
            rows += extra
            sources.append(result)
    order = [r.get("key") for r in results[0]["table"]]
    rows.sort(key=lambda r: order.index(r.get("key")) if r.get("key") in order else len(order))
    return rows, sources
