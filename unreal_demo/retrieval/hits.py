"""One query against a corpus index or a Qdrant store, as the ``index search`` command and the Wikipedia tab show
it: each hit with its passage, title and text, and for the methods with query vectors the G × L_p similarities of
Eq. 4 that the evidence view shades the pooled spans by."""

from __future__ import annotations

from typing import Any

from ..core.maxsim import normalize_chunks
from .base import QueryModel, topk
from .evidence import group_similarities
from .registry import canonical, retrieve


def _hits(chunks: list[dict], ids: list[int], scores: list[float]) -> list[dict]:
    """Rank (from 1), chunk id, passage id, title, score and text of each hit, best first."""
    return [{"rank": r + 1, "id": i, "passage": chunks[i]["passage"], "title": chunks[i]["title"],
             "score": round(float(s), 6), "text": chunks[i]["text"]}
            for r, (i, s) in enumerate(zip(ids, scores, strict=True))]


def search(index: Any, query_model: QueryModel, query: str, k: int = 10, method: str = "unreal",
           bm25_k: int = 0) -> dict:
    """Top-``k`` chunks of an index or Qdrant store for one query (:func:`registry.retrieve`): rank, chunk id,
    passage id, title, score and text per hit, with timings split into BM25, query encoding and scan.

    For the methods that use the head's query vectors (unreal, the hybrids) each hit also carries
    ``group_sims``: the ``G × L_p`` similarities ⟨q_g, k_{i,p}⟩ of Eq. 4 (summing each row's maximum over g
    gives the chunk's MaxSim score), which the evidence view shades its pooled spans by.

    With ``bm25_k``, ``bm25_hits`` holds BM25's own top-``bm25_k`` for the same query (to show beside the method):
    from the BM25 scores the method computed (bm25, unreal's C0, the hybrids), so BM25 runs once per search;
    scored here only for a method that reads none (dense, sparse).
    """
    method = canonical(method)
    found = retrieve(index, query_model, [query], k, method)
    ids, scores, timings = found.ids, found.scores, found.timings
    chunks = index.chunks
    hits = _hits(chunks, ids[0], scores[0])
    if found.query_vectors is not None and hits:
        keys = index.chunk_vectors([h["id"] for h in hits])  # (k, L_p, d)
        if query_model.head.config.normalize:
            keys = normalize_chunks(keys)
        sims = group_similarities(found.query_vectors[0], keys)  # (k, G, L_p)
        for h, s in zip(hits, sims, strict=True):
            h["group_sims"] = [[round(v, 5) for v in row] for row in s.tolist()]
    out = {"query": query, "method": method, "timings": {k_: round(v, 5) for k_, v in timings.items()},
           "hits": hits}
    if bm25_k:
        every = found.bm25_scores if found.bm25_scores is not None else index.bm25_scores([query])  # (1, M)
        b_scores, b_ids = topk(every, bm25_k)
        out["bm25_hits"] = _hits(chunks, b_ids[0].tolist(), b_scores[0].tolist())
    return out
