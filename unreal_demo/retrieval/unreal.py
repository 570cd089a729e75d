"""UNREAL's query side over any chunk store: C0 = the top-|C0| BM25 chunks (Eq. 2), the head's G query vectors
(Eqs. 2–3), exact MaxSim over every chunk by the store's streamed scan (Eq. 4), top-k."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .base import QueryModel, Retrieval, RetrievalError, Retriever, timed, topk


def contexts(store: Any, bm25_ids: torch.Tensor, n: int) -> list[list[str]]:
    """C0 of each query: the texts of its top-``n`` BM25 chunks (Eq. 2)."""
    texts = store.texts
    return [[texts[i] for i in row[:n]] for row in bm25_ids.tolist()]


@torch.inference_mode()
def query_vectors(query_model: QueryModel, queries: Sequence[str], context: Sequence[Sequence[str]],
                  batch: int = 16) -> torch.Tensor:
    """The head's G query vectors per query ``(Q, G, d)``, batches of ``batch``."""
    head, backbone = query_model.head, query_model.backbone
    return torch.cat([head.encode(backbone, queries[s : s + batch], context[s : s + batch]).cpu()
                      for s in range(0, len(queries), batch)])


def context_of(store: Any, query_model: QueryModel, queries: Sequence[str], bm25_ids: torch.Tensor) -> list[list[str]]:
    """C0 of each query from the head's ``context_source``: BM25's top |C0| chunks (the paper's), or the head's own
    top |C0| from a first pass without C0 (two passes of one model, no second retriever)."""
    c = query_model.head.config
    if not c.n_context or c.context_source == "bm25":
        return contexts(store, bm25_ids, c.n_context)
    first = query_vectors(query_model, queries, [[] for _ in queries])  # (Q, G, d)
    _, ids = store.maxsim_topk(first, c.n_context, normalize=c.normalize)
    return contexts(store, ids, c.n_context)


def check_model(store: Any, query_model: QueryModel | None, name: str) -> None:
    """:class:`RetrievalError` without a model; the store's own error when it was built for another model or ℓc."""
    if query_model is None:
        raise RetrievalError(f"{name} needs the model and its head")
    store.check_backbone(query_model.backbone, query_model.head.config.chunk_layer)


class UnrealRetriever(Retriever):
    """Exact MaxSim (Eq. 4) of the trained head's query vectors over every chunk."""

    name, label = "unreal", "UNREAL (trained head)"
    help = "exact MaxSim of the head's query vectors over every chunk (Eq. 4)"
    model, needs, trained = True, ("keys",), True

    def top(self, store: Any, query_model: QueryModel | None, queries: Sequence[str], depth: int,
            timings: dict[str, float], bm25_depth: int | None = None, vectors: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """MaxSim scores and ids ``(Q, depth)`` best first, the query vectors ``(Q, G, d)``, BM25's ids
        ``(Q, max(bm25_depth, |C0|))`` (the source of C0, and the hybrids' second ranking) and every chunk's BM25
        score ``(Q, M)`` (scored once, for C0, the hybrids and whoever shows BM25 beside)."""
        check_model(store, query_model, self.name)
        c = query_model.head.config

        def bm25() -> tuple[torch.Tensor, torch.Tensor]:
            every = store.bm25_scores(queries)  # (Q, M)
            return every, topk(every, max(bm25_depth or depth, c.n_context))[1]

        b_scores, b_ids = timed(timings, "bm25", bm25)
        q = vectors if vectors is not None else timed(
            timings, "query_encoding",
            lambda: query_vectors(query_model, queries, context_of(store, query_model, queries, b_ids)))
        timings.setdefault("query_encoding", 0.0)
        scores, ids = timed(timings, "scan", lambda: store.maxsim_topk(q, depth, normalize=c.normalize))
        return scores, ids, q, b_ids, b_scores

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        timings: dict[str, float] = {}
        scores, ids, q, _, b_scores = self.top(store, query_model, queries, k, timings, vectors=vectors)
        return Retrieval(ids.tolist(), scores.tolist(), timings, q, bm25_scores=b_scores)
