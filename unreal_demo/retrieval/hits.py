"""One query against a corpus index or a Qdrant store, as the ``index search`` command and the Wikipedia tab show
it: each hit with its passage, title and text, and for the methods with query vectors the G × L_p similarities of
Eq. 4 that the evidence view shades the pooled spans by."""

from __future__ import annotations

from typing import Any

from ..core.maxsim import normalize_chunks
from .evidence import group_similarities
from .registry import canonical, retrieve


def search(index: Any, explorer, query: str, k: int = 10, method: str = "unreal") -> dict:
    """Top-``k`` chunks of an index or Qdrant store for one query (:func:`registry.retrieve`): rank, chunk id,
    passage id, title, score and text per hit, with timings split into BM25, query encoding and scan.

    For the methods that use the head's query vectors (unreal, the hybrids) each hit also carries
    ``group_sims``: the ``G × L_p`` similarities ⟨q_g, k_{i,p}⟩ of Eq. 4 (summing each row's maximum over g
    gives the chunk's MaxSim score), which the evidence view shades its pooled spans by.
    """
    method = canonical(method)
    found = retrieve(index, explorer, [query], k, method)
    ids, scores, timings = found.ids, found.scores, found.timings
    chunks = index.chunks
    hits = [{"rank": r + 1, "id": i, "passage": chunks[i]["passage"], "title": chunks[i]["title"],
             "score": round(float(s), 6), "text": chunks[i]["text"]}
            for r, (i, s) in enumerate(zip(ids[0], scores[0], strict=True))]
    if found.query_vectors is not None and hits:
        keys = index.chunk_vectors([h["id"] for h in hits])  # (k, L_p, d)
        if explorer.head.config.normalize:
            keys = normalize_chunks(keys)
        sims = group_similarities(found.query_vectors[0], keys)  # (k, G, L_p)
        for h, s in zip(hits, sims, strict=True):
            h["group_sims"] = [[round(v, 5) for v in row] for row in s.tolist()]
    return {"query": query, "method": method, "timings": {k_: round(v, 5) for k_, v in timings.items()},
            "hits": hits}
