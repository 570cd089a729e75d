"""BM25 over the chunks (``bm25s``, stemmed, English stop words: :class:`core.selection.BM25`); also the source of
UNREAL's context C0 (Eq. 2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .base import QueryModel, Retrieval, Retriever, timed, topk


class BM25Retriever(Retriever):
    """Lexical BM25 over the store's chunk texts; the result keeps every chunk's score (``bm25_scores``)."""

    name, label, help = "bm25", "BM25 (bm25s, stemmed)", "lexical BM25 over the chunks (bm25s)"

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        def ranked() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            every = store.bm25_scores(queries)  # (Q, M)
            return every, *topk(every, k)

        timings: dict[str, float] = {}
        every, scores, ids = timed(timings, "bm25", ranked)
        return Retrieval(ids.tolist(), scores.tolist(), timings, bm25_scores=every)
