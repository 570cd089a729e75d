"""Settings every entry point shares: where the repository's files are, the shipped heads, the input limit,
and how a path is shown to a user (never the producing machine's). The chunk size is
:data:`core.chunking.CHUNK_TOKENS`; every other default comes from the loaded head.

>>> display_path(REPO / "precomputed" / "qa.json")
'precomputed/qa.json'
"""

from __future__ import annotations

from pathlib import Path

from .core.backbone import DEFAULT_MODEL, cache_dir

REPO = Path(__file__).resolve().parent.parent
PRECOMPUTED = REPO / "precomputed"
ASSETS = REPO / "assets"
# The long run (40,000 question visits over SQuAD dev, NYT and Reddit), chosen over the first ℓc = 25 head
# (precomputed/heads/smollm2-135m, 4,000 visits of SQuAD dev) on the dev split: precomputed/head_choice.json.
DEFAULT_HEADS = {DEFAULT_MODEL: PRECOMPUTED / "heads" / "smollm2-135m-mix" / "head"}
MAX_CHARS = 2_000_000  # the most text one request may bring (a pasted or uploaded document)
MAX_N = 1_000  # the most chunks one request may ask to select (≈ 141K tokens, past every supported model's window)


def in_precomputed(path: str | Path | None) -> bool:
    """Whether ``path`` lies in the repository's ``precomputed/`` (a shipped result, head or run)."""
    return path is not None and Path(path).resolve().is_relative_to(PRECOMPUTED)


def display_path(path: str | Path) -> str:
    """``path`` relative to the repository, or as ``<cache>/…`` inside the cache folder, else as given
    when relative, else its last two parts; so no result or screen shows the machine's folders."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    p = p.resolve()
    for root, label in ((REPO, ""), (cache_dir().resolve(), "<cache>/")):
        if p.is_relative_to(root):
            return label + p.relative_to(root).as_posix()
    return ".../" + "/".join(p.parts[-2:])
