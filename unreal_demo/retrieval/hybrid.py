"""The two hybrids, each composing :class:`unreal.UnrealRetriever` with :class:`bm25.BM25Retriever`: reciprocal-rank
fusion of the two top-100 lists (Cormack et al., k = 60), and score fusion w·z(UNREAL) + (1−w)·z(BM25)
(:func:`core.selection.score_fusion`, w fitted on the dev split)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.selection import reciprocal_rank_fusion, score_fusion
from .base import QueryModel, Retrieval, RetrievalError, Retriever, chunk_order, topk
from .bm25 import BM25Retriever
from .unreal import UnrealRetriever

RRF_DEPTH = 100  # each list's depth in reciprocal-rank fusion


class Hybrid(Retriever):
    """A hybrid: UNREAL (the LLM's head over the chunks' keys) composed with BM25."""

    model, needs, composed, trained = True, ("keys",), True, True

    def __init__(self, unreal: UnrealRetriever, bm25: BM25Retriever) -> None:
        self.unreal, self.bm25 = unreal, bm25


class HybridRRF(Hybrid):
    """Reciprocal-rank fusion of the UNREAL and the BM25 top-:data:`RRF_DEPTH`."""

    name, label = "hybrid-rrf", "UNREAL + BM25, RRF (k=60)"
    help = "reciprocal-rank fusion of the UNREAL and BM25 top-100"

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        timings: dict[str, float] = {}
        depth = max(k, RRF_DEPTH)
        _, u_ids, q, b_ids, b_scores = self.unreal.top(store, query_model, queries, depth, timings, vectors=vectors)
        fused = [reciprocal_rank_fusion([u, b])[:k] for u, b in zip(u_ids.tolist(), b_ids.tolist(), strict=True)]
        return Retrieval([[i for i, _ in r] for r in fused], [[s for _, s in r] for r in fused], timings, q,
                         bm25_scores=b_scores)


class HybridFusion(Hybrid):
    """Score fusion of every chunk's standardised UNREAL and BM25 scores at the head's fitted weight w."""

    name, label = "hybrid-fusion", "UNREAL + BM25, score fusion"
    help = "w·z(UNREAL) + (1−w)·z(BM25), w fitted on the dev split"
    scopes = frozenset({"corpus", "index"})

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        timings: dict[str, float] = {}
        scores, ids, q, _, b_scores = self.unreal.top(store, query_model, queries, len(store), timings, vectors=vectors)
        weight = query_model.head.config.fusion_weight if fusion_weight is None else fusion_weight
        if weight is None:
            raise RetrievalError("hybrid-fusion needs a fusion weight fitted on the dev split; this head has none "
                                 "(fit it with `python -m unreal_demo eval heads --head HEAD.json --save-fusion`)")
        fused = score_fusion(chunk_order(ids, scores, len(store)), b_scores, weight)  # (Q, M): BM25 scored once
        f_scores, f_ids = topk(fused, k)
        return Retrieval(f_ids.tolist(), f_scores.tolist(), timings, q, weight, bm25_scores=b_scores)
