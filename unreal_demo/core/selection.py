"""Eq. 5 — selection: S(x) = top-n chunks by score, re-assembled in original document order.

Beside UNREAL's MaxSim scores, the selectors the app compares against live here:
BM25 (``bm25s``, stemmed, English stop words; also the source of UNREAL's
context C0), reciprocal-rank fusion, and a weighted score fusion.

Example
-------
>>> select_top_n(torch.tensor([0.1, 0.9, 0.5, 0.7]), 2)
[1, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
import torch

STEMMER = Stemmer.Stemmer("english")


def select_top_n(scores: torch.Tensor | np.ndarray, n: int) -> list[int]:
    """Indices of the ``n`` best scores, in document (index) order; ``n`` is clamped to 1..M."""
    scores = torch.as_tensor(scores)
    n = max(1, min(int(n), scores.numel()))
    return sorted(torch.topk(scores, n).indices.tolist())


def bm25s_tokens(queries: Sequence[str]) -> list[list[str]]:
    """Each query as the stemmed, stop-word-free token strings BM25 scores with."""
    return bm25s.tokenize(list(queries), stopwords="en", stemmer=STEMMER, show_progress=False, return_ids=False)


class BM25:
    """A ``bm25s`` index over a list of texts (stemmed, English stop words).

    Parameters
    ----------
    texts : the passages or chunks to index (at least one).
    """

    def __init__(self, texts: Sequence[str]) -> None:
        if not texts:
            raise ValueError("BM25 needs at least one text")
        self.size = len(texts)
        self.retriever = bm25s.BM25()
        self.retriever.index(self._tokenize(texts), show_progress=False)

    @classmethod
    def load(cls, folder: str | Path, size: int) -> BM25:
        """The index :meth:`save` wrote to ``folder``, over ``size`` texts (nothing is tokenised again)."""
        out = cls.__new__(cls)
        out.size, out.retriever = size, bm25s.BM25.load(str(folder))
        return out

    def save(self, folder: str | Path) -> None:
        """Write the ``bm25s`` index to ``folder`` (read back by :meth:`load`)."""
        self.retriever.save(str(folder))

    @staticmethod
    def _tokenize(texts: Sequence[str]):
        return bm25s.tokenize(list(texts), stopwords="en", stemmer=STEMMER, show_progress=False)

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` document indices and scores per query, best first: two ``(Q, k)`` arrays."""
        k = max(1, min(k, self.size))
        ids, scores = self.retriever.retrieve(self._tokenize(queries), k=k, show_progress=False,
                                              n_threads=1)
        return ids, scores

    def scores(self, queries: Sequence[str]) -> torch.Tensor:
        """BM25 score of every indexed text for each query, ``(Q, M)`` (see :func:`score_rows`)."""
        return score_rows(self.retriever, queries, self.size)


def score_rows(retriever: bm25s.BM25, queries: Sequence[str], size: int) -> torch.Tensor:
    """BM25 score of each of ``size`` indexed texts for each query, ``(Q, M)`` float32; a query of only
    stop words or punctuation matches nothing (a row of zeros)."""
    return torch.stack([torch.as_tensor(retriever.get_scores(tokens), dtype=torch.float32) if tokens
                        else torch.zeros(size) for tokens in bm25s_tokens(queries)])


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    """Items of any ranking with their RRF score Σ_r 1 / (k + rank_r(i)) (rank from 1), best first."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for position, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + position)
    return sorted(fused.items(), key=lambda kv: -kv[1])


def zscore(x: torch.Tensor) -> torch.Tensor:
    """Standardise scores over the last axis (for score fusion of different scales)."""
    x = x.float()
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True).clamp(min=1e-6)


def score_fusion(unreal: torch.Tensor, bm25: torch.Tensor, weight: float) -> torch.Tensor:
    """``weight · z(UNREAL) + (1 − weight) · z(BM25)`` over the same candidates."""
    return weight * zscore(unreal) + (1.0 - weight) * zscore(bm25)
