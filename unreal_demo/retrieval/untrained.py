"""The no-training baseline: cosine of the query's mean token state at ℓc with each chunk's mean pooled state
(the backbone's own states, no head)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.encoding import query_states
from ..core.maxsim import normalize_chunks
from .base import QueryModel, Retrieval, Retriever, timed, topk
from .unreal import check_model


class UntrainedRetriever(Retriever):
    """Mean query state ``(Q, d)`` against mean-pooled chunk states, cosine."""

    name, label = "untrained", "untrained backbone (mean state at ℓc, cosine)"
    help = "no training: mean-pooled states, cosine"
    model, needs, scopes = True, ("keys",), frozenset({"corpus"})

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        check_model(store, query_model, self.name)
        timings: dict[str, float] = {}
        layer = query_model.head.config.chunk_layer
        means = timed(timings, "query_encoding", lambda: torch.stack(
            [h.mean(0) for h in query_states(query_model.backbone, queries, layer)]))  # (Q, d)

        def scan() -> tuple[torch.Tensor, torch.Tensor]:
            passages = normalize_chunks(store.chunk_means()[:, None])[:, 0]  # (M, d)
            return topk(torch.nn.functional.normalize(means, dim=-1) @ passages.T, k)

        scores, ids = timed(timings, "scan", scan)
        return Retrieval(ids.tolist(), scores.tolist(), timings)
