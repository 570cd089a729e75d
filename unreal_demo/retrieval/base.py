"""What a retrieval method is: a :class:`Retriever` (a name, a label, a line of help, what it needs) whose
:meth:`Retriever.search` ranks the chunks of any chunk store for a batch of queries and returns a
:class:`Retrieval` (top-k ids and scores, timings, and the evidence it computed: the head's query vectors, the
fusion weight). Modelled on PyLate's ``indexes/`` and ``rank/``: a small abstract base, one file per method.

Example
-------
>>> class Shortest(Retriever):
...     name, label, help = "shortest", "shortest chunk", "the shortest chunks first"
...     def search(self, store, queries, k, query_model=None, fusion_weight=None, vectors=None):
...         order = sorted(range(len(store)), key=lambda i: len(store.texts[i]))[:k]
...         return Retrieval([order] * len(queries), [[-len(store.texts[i]) for i in order]] * len(queries))
>>> Shortest().scopes == {"document", "corpus", "index"}
True
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from ..errors import InputError
from ..store.base import topk

if TYPE_CHECKING:
    from ..core.backbone import Backbone
    from ..core.head import QueryHead

__all__ = ["ALL_SCOPES", "QueryModel", "Retrieval", "RetrievalError", "Retriever", "chunk_order", "timed", "topk"]

T = TypeVar("T")
ALL_SCOPES = frozenset({"document", "corpus", "index"})


class QueryModel(Protocol):
    """What the methods with ``model`` read on the query side, and nothing more: the frozen LLM and its query head
    (a :class:`pipeline.Explorer` holds both; so may any object)."""

    backbone: Backbone
    head: QueryHead


class RetrievalError(InputError):
    """An unknown method, or a method the store or scope cannot serve."""


@dataclass
class Retrieval:
    """Top-k chunk ids and scores per query (best first), timings in seconds, and what the method computed on the
    way: UNREAL's query vectors, every chunk's BM25 score, the fusion weight, sparse's question token states."""

    ids: list[list[int]]
    scores: list[list[float]]
    timings: dict[str, float] = field(default_factory=dict)
    query_vectors: torch.Tensor | None = None  # (Q, G, d) for unreal and the hybrids
    fusion_weight: float | None = None
    token_states: list[torch.Tensor] | None = None  # sparse: each query's normalised token states (T_q, d)
    bm25_scores: torch.Tensor | None = None  # (Q, M) every chunk's BM25 score: bm25, unreal (C0) and the hybrids


class Retriever(ABC):
    """A retrieval method.

    Attributes
    ----------
    name : its name everywhere (CLI, tabs, results).
    label : its name in tables and plots.
    help : one line for ``--help`` and the tabs.
    model : whether it needs the LLM and its head on the query side.
    needs : the store data it reads beyond texts and BM25: ``"keys"`` (pooled states at ℓc), ``"dense"`` (MiniLM
        vectors), ``"token_states"`` (every chunk token's state at ℓc).
    scopes : where it is offered: ``document`` (a pasted text), ``corpus`` (an evaluation corpus in memory),
        ``index`` (an on-disk index or a Qdrant store).
    ranks : whether it ranks chunks (full context selects every chunk).
    composed : whether it composes other retrievers (the hybrids).
    trained : whether its ranking depends on the trained head's weights (ρ, α, the adapter), so that another head
        gives other results; the untrained and sparse methods read only the backbone at ℓc.
    costly : whether it runs the whole LLM per question and chunk (UPR), so that no evaluation runs it by default.
    """

    name: str
    label: str
    help: str
    model: bool = False
    needs: tuple[str, ...] = ()
    scopes: frozenset[str] = ALL_SCOPES
    ranks: bool = True
    composed: bool = False
    trained: bool = False
    costly: bool = False

    @abstractmethod
    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        """Top-``k`` chunks of ``store`` (a :class:`store.base.ChunkStore`) per query.

        Parameters
        ----------
        query_model : the frozen LLM and its head (:class:`QueryModel`); None for the methods without ``model``.
        fusion_weight : w of a score fusion (``hybrid-fusion``); default the head's own.
        vectors : the head's query vectors ``(Q, G, d)`` of these queries over this store, from an earlier search
            (its ``query_vectors``), so that unreal and the hybrids encode the queries once.
        """


def timed(timings: dict[str, float], name: str, fn: Callable[[], T]) -> T:
    """``fn()``, its seconds added to ``timings[name]``."""
    t0 = time.perf_counter()
    out = fn()
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
    return out


def chunk_order(ids: torch.Tensor, scores: torch.Tensor, size: int) -> torch.Tensor:
    """Scores ``(Q, size)`` in chunk order from best-first ids and scores (absent chunks: 0)."""
    return torch.zeros(ids.shape[0], size).scatter_(1, ids, scores.float())
