"""Chunk keys of a training run kept compressed in the repository, so a fresh machine resumes at once.

Training encodes its paragraphs once at ℓc (:func:`core.encoding.cached_encode`: 4,912 training and
1,207 dev paragraphs take ~25 min on 2 cores) into the local cache, which a new machine does not
have. A run that writes into ``precomputed/`` therefore also keeps a ``res2`` copy of those keys
(:mod:`core.codec`: ColBERTv2-style residual codes over 1,024 centroids fitted on these keys,
146 B per vector, ~7 MB for the default run) in ``precomputed/encodings/<cache key>.npz``; where the
local cache lacks a set of keys, the decoded copy is used instead (unit vectors, as training
normalises them anyway). The file is named by the same key as the local cache (model, dtype, ℓc,
L_p, chunk length and every text), so it is only ever used for exactly those texts.

Example
-------
>>> shipped_path("ab12").relative_to(PRECOMPUTED).as_posix()
'encodings/ab12.npz'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from ..core.encoding import cache_folder, cached_encode
from ..settings import PRECOMPUTED
from . import codec as codecs

CENTROIDS = 1024


def shipped_path(key: str) -> Path:
    return PRECOMPUTED / "encodings" / f"{key}.npz"


def export(keys: torch.Tensor, path: Path, centroids: int = CENTROIDS) -> Path:
    """Write ``keys`` ``(n, L_p, d)`` as res2 codes with their own fitted codec (atomically)."""
    x = keys.float().numpy()
    fitted = codecs.fit("res2", x.reshape(-1, x.shape[-1]), centroids=centroids)
    arrays = fitted.encode(x)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # *.tmp: git-ignored if a killed run leaves it
    with open(tmp, "wb") as f:
        np.savez(f, **{f"codec_{k}": v for k, v in fitted.state.items()}, **arrays)
    tmp.replace(path)
    return path


def load(path: Path) -> torch.Tensor:
    """Decoded unit keys ``(n, L_p, d)`` from :func:`export`'s file."""
    with np.load(path) as z:
        fitted = codecs.Codec("res2", {k[6:]: z[k] for k in z.files if k.startswith("codec_")})
        return torch.from_numpy(fitted.decode({"cid": z["cid"], "codes": z["codes"]}))


def training_keys(backbone, texts: Sequence[str], layer: int, n_pool: int, max_tokens: int, keep: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """Keys of ``texts``: the local cache where complete, else the repository's copy, else encoded now.

    Parameters
    ----------
    keep
        Write the repository's copy when it is missing (a run whose output is in ``precomputed/``).
    """
    folder = cache_folder(backbone, texts, layer, n_pool, max_tokens)
    shipped = shipped_path(folder.name)
    if shipped.exists() and not cache_complete(folder, len(texts)):
        keys = load(shipped)
        if progress is not None:
            progress(len(texts), len(texts))
        return keys
    keys = cached_encode(backbone, texts, layer, n_pool, max_tokens, progress=progress)
    if keep and not shipped.exists():
        export(keys, shipped)
    return keys


def split_at_shipped(backbone, texts: Sequence[str], bounds: Sequence[int], layer: int, n_pool: int,
                     max_tokens: int) -> int:
    """The largest of ``bounds`` (proper prefix ends, e.g. where each training source ends) whose prefix
    ``texts[:end]`` has a repository copy of its keys; 0 when none has.

    A run that adds a source after the shipped run's sources then loads their keys and encodes only the new one.
    """
    for end in sorted(bounds, reverse=True):
        if 0 < end < len(texts) and shipped_path(cache_folder(backbone, texts[:end], layer, n_pool,
                                                              max_tokens).name).exists():
            return end
    return 0


def cache_complete(folder: Path, n: int, part_size: int = 512) -> bool:
    """Whether the local cache folder holds every part of ``n`` chunks."""
    return all((folder / f"part{i:05d}.safetensors").exists() for i in range(-(-n // part_size)))
