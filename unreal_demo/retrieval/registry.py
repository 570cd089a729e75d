"""The retrieval registry: every method as a :class:`base.Retriever` instance, and the one query path.

:data:`METHODS` is the registry every entry point takes its method names, help and checks from (``ask``, ``rank``,
``index search``, ``eval retrieval``, ``eval qa``, ``bench longcontext``, the tabs); adding a method is one file
with its :class:`base.Retriever` and one line in :data:`METHODS`. :func:`retrieve` is the one query path: it
dispatches to the registered instance, over any chunk store (a pasted document's chunks or a corpus held in memory,
:class:`store.memory.MemoryStore`; a sharded on-disk :class:`store.index.Index`; a :class:`store.qdrant.QdrantStore`).

Example
-------
>>> from unreal_demo.store.memory import MemoryStore
>>> store = MemoryStore(["Paris is in France.", "Bread is baked daily.", "France borders Spain."])
>>> retrieve(store, None, ["Which country is France?"], 2, "bm25").ids
[[0, 2]]
>>> canonical("hybrid")
'hybrid-rrf'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .base import QueryModel, Retrieval, RetrievalError, Retriever, chunk_order
from .bm25 import BM25Retriever
from .dense import DenseRetriever
from .full import FullContext
from .hybrid import HybridFusion, HybridRRF
from .sparse import SparseRetriever
from .unreal import UnrealRetriever, context_of
from .untrained import UntrainedRetriever
from .upr import UPRRerank

__all__ = ["ALIASES", "METHODS", "Retrieval", "RetrievalError", "all_scores", "canonical", "check",
           "context_of", "help_text", "names", "retrieve", "unsupported"]

_UNREAL, _BM25 = UnrealRetriever(), BM25Retriever()
METHODS: dict[str, Retriever] = {r.name: r for r in [
    _UNREAL,
    _BM25,
    DenseRetriever(),
    SparseRetriever(),
    HybridRRF(_UNREAL, _BM25),
    HybridFusion(_UNREAL, _BM25),
    UntrainedRetriever(),
    UPRRerank(_UNREAL),
    FullContext(),
]}
ALIASES = {"hybrid": "hybrid-rrf", "hybrid_rrf": "hybrid-rrf", "hybrid_fused": "hybrid-fusion"}


def canonical(name: str) -> str:
    """The registry name of a method (accepts the old spellings ``hybrid``, ``hybrid_rrf``, ``hybrid_fused``)."""
    return ALIASES.get(name, name)


def names(scope: str, single: bool = False, costly: bool = True) -> list[str]:
    """Method names available in ``scope`` (``document``, ``corpus`` or ``index``), registry order; with ``single``
    only those that rank chunks on their own (no hybrid, no full context); without ``costly``, not those that run
    the whole LLM per chunk (UPR: an evaluation's default methods)."""
    return [m.name for m in METHODS.values() if scope in m.scopes and (not single or (m.ranks and not m.composed))
            and (costly or not m.costly)]


def help_text(scope: str) -> str:
    """One line per method of ``scope``, for ``--help`` and the tabs."""
    return "; ".join(f"{m.name}: {m.help}" for m in METHODS.values() if scope in m.scopes)


def check(methods: Sequence[str], scope: str, extra: Sequence[str] = ()) -> list[str]:
    """Canonical names of ``methods``, each once in the order given; :class:`RetrievalError` naming the allowed ones
    otherwise. ``extra`` are names a caller accepts beside the registry's (an evaluation's bounds: ``none``,
    ``oracle``)."""
    out = list(dict.fromkeys(canonical(m.strip()) for m in methods if m.strip()))
    allowed = [*extra, *names(scope)]
    bad = [m for m in out if m not in allowed]
    if bad or not out:
        raise RetrievalError(f"unknown method {', '.join(bad) or '(none)'} here; use {', '.join(allowed)}")
    return out


def unsupported(store: Any, methods: Sequence[str]) -> dict[str, str]:
    """The methods among ``methods`` that ``store`` cannot serve, each with what the store lacks for it
    (:meth:`store.base.ChunkStore.lacks` of the data the method needs, e.g. the build flag ``--dense``)."""
    out = {}
    for m in methods:
        for role in METHODS[canonical(m)].needs if canonical(m) in METHODS else ():
            if (why := store.lacks(role)) is not None:
                out[m] = why
                break
    return out


@torch.inference_mode()
def retrieve(store, query_model: QueryModel | None, queries: Sequence[str], k: int, method: str,
             fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
    """Top-``k`` chunks per query by ``method`` over ``store``: the one query path of the project.

    Parameters
    ----------
    store : a :class:`store.base.ChunkStore` (:class:`store.memory.MemoryStore`, :class:`store.index.Index`,
        :class:`store.qdrant.QdrantStore`).
    query_model : the frozen LLM and its head (:class:`base.QueryModel`); None for bm25 and dense.
    method : a registry name (or an alias, see :func:`canonical`).
    fusion_weight : w of ``hybrid-fusion``; default the head's own (fitted on the dev split, ``eval heads``).
    vectors : the head's query vectors ``(Q, G, d)`` of these queries over this store, from an earlier
        :func:`retrieve` (its ``query_vectors``), so that unreal and the hybrids encode the queries once.

    Raises
    ------
    RetrievalError
        Unknown method, a method needing the model without one, ``hybrid-fusion`` without a weight.
    """
    method = canonical(method)
    if method not in METHODS:
        raise RetrievalError(f"unknown retrieval method {method!r}; use {', '.join(names('corpus'))}")
    if METHODS[method].model and query_model is None:
        raise RetrievalError(f"{method} needs the model and its head")
    return METHODS[method].search(store, list(queries), k, query_model, fusion_weight, vectors)


def all_scores(store, query_model: QueryModel | None, queries: Sequence[str], method: str,
               fusion_weight: float | None = None) -> tuple[Retrieval, torch.Tensor]:
    """:func:`retrieve` over every chunk, and every chunk's score ``(Q, M)`` in chunk order."""
    found = retrieve(store, query_model, queries, len(store), method, fusion_weight)
    return found, chunk_order(torch.tensor(found.ids), torch.tensor(found.scores), len(store))
