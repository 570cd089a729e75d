"""BM25 over the chunks (``bm25s``, stemmed, English stop words: :class:`core.selection.BM25`); also the source of
UNREAL's context C0 (Eq. 2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .base import Retrieval, Retriever, timed


class BM25Retriever(Retriever):
    """Lexical BM25 over the store's chunk texts."""

    name, label, help = "bm25", "BM25 (bm25s, stemmed)", "lexical BM25 over the chunks (bm25s)"

    def top(self, store: Any, queries: Sequence[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """BM25 scores and chunk ids ``(Q, k)``, best first."""
        return store.bm25_topk(queries, k)

    def search(self, store: Any, queries: Sequence[str], k: int, explorer: Any = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        timings: dict[str, float] = {}
        scores, ids = timed(timings, "bm25", lambda: self.top(store, queries, k))
        return Retrieval(ids.tolist(), scores.tolist(), timings)
