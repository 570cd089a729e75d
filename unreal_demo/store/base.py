"""What every chunk store offers the retrievers (:mod:`retrieval`): a :class:`ChunkStore`.

A store holds data and scans it; it knows no method names. :class:`memory.MemoryStore` (a document or a corpus in
memory), :class:`index.Index` (the sharded on-disk index) and :class:`qdrant.QdrantStore` implement it.
A retriever asks :meth:`ChunkStore.lacks` for the data it needs (``keys``, ``dense``, ``token_states``) before it
reads it; reading data a store does not keep raises the store's own :class:`errors.UserError` (:class:`StoreError`,
:class:`index.IndexStoreError`). Every store scores BM25 one way, through :class:`TextStore` (one BM25 type,
:class:`core.selection.BM25`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch

from ..core.selection import BM25
from ..errors import UserError


class StoreError(UserError, ValueError):
    """Data a store does not keep was read (chunk encodings without the model, token states not kept)."""


def backbone_mismatch(made: dict, backbone, layer: int, what: str) -> str | None:
    """Why the keys of a store whose manifest is ``made`` (its ``model``, ``revision`` and ``chunk_layer``) do not
    fit ``backbone`` at ℓc = ``layer``, naming the store ``what`` (``index``, ``store``); None when they fit."""
    if (made["model"], made["revision"], made["chunk_layer"]) == (backbone.name, backbone.revision, layer):
        return None
    return (f"{what} built with {made['model']} ({made['revision']}) at ℓc={made['chunk_layer']}; "
            f"the loaded model is {backbone.name} ({backbone.revision}) with ℓc={layer}")


def topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and ids ``(Q, k)`` best first of scores ``(Q, M)`` in chunk order (``k`` clamped to M)."""
    return torch.topk(scores, min(k, scores.shape[1]), dim=1)


def token_mean(token_parts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """μ: the mean ``(d,)`` float32 of every stored (normalised) token state, summed in float64 part by part.

    >>> token_mean([(torch.tensor([[1.0, 0.0], [0.0, 1.0]]).half(), torch.tensor([2]))]).tolist()
    [0.5, 0.5]
    """
    total = sum(tokens.double().sum(0) for tokens, _ in token_parts)
    count = sum(int(tokens.shape[0]) for tokens, _ in token_parts)
    if not count:
        raise ValueError("no stored token states to average")
    return (total / count).float()


@runtime_checkable
class ChunkStore(Protocol):
    """Chunks, their data, and the one streamed exact scan (MaxSim, Eq. 4)."""

    texts: list[str]

    def __len__(self) -> int:
        """The number of chunks M."""

    def lacks(self, role: str) -> str | None:
        """What the store lacks for ``role`` (``keys``, ``dense``, ``token_states``), e.g. a build flag; None when
        it keeps that data."""

    def check_backbone(self, backbone, layer: int) -> None:
        """Raise unless the store's keys come from this model and ℓc."""

    @property
    def bm25(self) -> BM25:
        """BM25 over the chunk texts (:class:`core.selection.BM25`, the one BM25 type of every store)."""

    def bm25_scores(self, queries: Sequence[str]) -> torch.Tensor:
        """BM25 score of every chunk ``(Q, M)`` (:class:`core.selection.BM25` over the chunk texts)."""

    def bm25_topk(self, queries: Sequence[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """BM25 scores and chunk ids ``(Q, k)``, best first."""

    def maxsim_topk(self, q: torch.Tensor, k: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact MaxSim (Eq. 4) of query vectors ``(Q, G, d)`` over every chunk, streamed; scores and ids ``(Q, k)``."""

    def dense_topk(self, qv: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dot product of unit MiniLM query vectors ``(Q, 384)`` with the chunks' stored ones; top-k."""

    @property
    def token_parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every chunk's normalised token states at ℓc ``(tokens (N_p, d), lengths (m_p,))`` per part."""

    def token_mean(self) -> torch.Tensor:
        """μ ``(d,)``: the mean of the stored token states, on which sparse centres query and stored tokens."""

    def chunk_means(self) -> torch.Tensor:
        """Each chunk's mean pooled state ``(M, d)``."""


class TextStore:
    """What a store derives from its chunk texts alone: :class:`core.selection.BM25` over them (built in memory on
    first use; a store that keeps one on disk overrides :attr:`bm25`), every chunk's BM25 score and the BM25 top-k.
    The chunk stores inherit it, so BM25 is scored one way over any of them."""

    texts: list[str]
    _bm25: BM25 | None = None

    @property
    def bm25(self) -> BM25:
        if self._bm25 is None:
            self._bm25 = BM25(self.texts)
        return self._bm25

    def bm25_scores(self, queries: Sequence[str]) -> torch.Tensor:
        """BM25 score of every chunk, ``(Q, M)``."""
        return self.bm25.scores(queries)

    def bm25_topk(self, queries: Sequence[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """BM25 scores and chunk ids ``(Q, k)``, best first."""
        return topk(self.bm25_scores(queries), k)
