"""What several commands share: the model flags, comma lists of whole numbers, printed hits, servable methods."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import InputError, UserError
from ..retrieval import registry as retrieval
from ..settings import DEFAULT_MODEL, OFFLINE_MODELS, display_path


def model_flags(p: argparse.ArgumentParser, dtype: bool = False) -> None:
    """``--model`` and ``--head`` (and ``--dtype``) on a command."""
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"an offline model ({' or '.join(OFFLINE_MODELS)}), a Hugging Face id, or a folder")
    p.add_argument("--head", default=None, help="head path (NAME.json/.safetensors); default: shipped head")
    if dtype:
        p.add_argument("--dtype", default=None, help="fp32 | bf16 | fp16 (default: $UNREAL_DTYPE, else bf16 on "
                       "CUDA, else the CPU's choice: fp32 unless it has AMX/AVX-512-BF16 and bf16 passed "
                       "benchmarks/encode_fidelity.py); cached encodings and answers are kept per dtype")


def servable(ix, explorer, methods: list[str], explicit: bool) -> list[str]:
    """``methods`` the index (and the head) can serve, checked before any work: a method asked for by name
    that cannot be served is an error; one from the default list is left out with a note."""
    from ..evaluation.retrieval import fusion_weight

    try:
        fusion_weight(explorer, methods)
    except UserError as why:
        if explicit:
            raise InputError(str(why)) from None
        print(f"note: {why}; hybrid-fusion left out", file=sys.stderr)
        methods = [m for m in methods if m != "hybrid-fusion"]
    missing = retrieval.unsupported(ix, methods)
    if not missing:
        return methods
    flags = " ".join(sorted(set(missing.values())))
    if explicit:
        raise InputError(f"{display_path(ix.folder)} cannot serve {', '.join(missing)}: rebuild it with "
                         f"`index build {flags}` or leave it out")
    print(f"note: {display_path(ix.folder)} has no data for {', '.join(missing)} (built without {flags}); "
          "left out", file=sys.stderr)
    return [m for m in methods if m not in missing]


def ints(text: str, flag: str) -> list[int]:
    """A comma list of whole numbers ≥ 1 (``--k 1,3,5,10``), or a clear message."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"{flag} takes whole numbers separated by commas, e.g. 1,3,5,10 (got {text!r})") from None
    if min(values) < 1:
        raise InputError(f"{flag} must be at least 1 (got {text})")
    return values


def print_hits(result: dict, as_json: bool) -> None:
    """A search's hits, one line each, and its timings (or the whole result as JSON)."""
    if as_json:
        print(json.dumps(result))
        return
    for h in result["hits"]:
        print(f"{h['rank']:>3}  {h['score']:8.4f}  {h['title'][:40]:<40}  {' '.join(h['text'].split()[:14])}")
    print("timings (s): " + ", ".join(f"{k} {v:.4f}" for k, v in result["timings"].items()))


def print_rows(rows: list[dict]) -> None:
    """Each result row on one line: its label and its recall columns."""
    for row in rows:
        print(f"{row['variant']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if "R@" in k))
