"""The dense single-vector baseline: cosine of all-MiniLM-L6-v2 embeddings (:mod:`core.minilm`) of the query and
each chunk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .base import QueryModel, Retrieval, Retriever, timed


class DenseRetriever(Retriever):
    """MiniLM query embedding against the store's chunk embeddings (dot product of unit vectors)."""

    name, label, help = "dense", "dense MiniLM-L6-v2", "cosine of all-MiniLM-L6-v2 embeddings"
    needs = ("dense",)

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        from ..core.minilm import embed

        timings: dict[str, float] = {}
        qv = timed(timings, "query_encoding", lambda: embed(list(queries)))  # (Q, 384)
        scores, ids = timed(timings, "scan", lambda: store.dense_topk(qv, k))
        return Retrieval(ids.tolist(), scores.tolist(), timings)
