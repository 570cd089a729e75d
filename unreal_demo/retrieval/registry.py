"""The retrieval registry: every method as a :class:`base.Retriever` instance, and the one query path.

:data:`METHODS` is the registry every entry point takes its method names, help and checks from (``ask``, ``rank``,
``index search``, ``eval retrieval``, ``eval qa``, ``bench longcontext``, the tabs); adding a method is one file
with its :class:`base.Retriever` and one line in :data:`METHODS`. :func:`retrieve` is the one query path: it
dispatches to the registered instance, over any chunk store (a pasted document's chunks or a corpus held in memory,
:class:`MemoryStore`; a sharded on-disk :class:`store.index.Index`; a :class:`store.qdrant.QdrantStore`).

Example
-------
>>> store = MemoryStore(["Paris is in France.", "Bread is baked daily.", "France borders Spain."])
>>> retrieve(store, None, ["Which country is France?"], 2, "bm25").ids
[[0, 2]]
>>> canonical("hybrid")
'hybrid-rrf'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.maxsim import maxsim, normalize_chunks
from ..core.selection import BM25
from .base import Retrieval, RetrievalError, Retriever, chunk_order, topk
from .bm25 import BM25Retriever
from .dense import DenseRetriever
from .full import FullContext
from .hybrid import HybridFusion, HybridRRF
from .sparse import SparseRetriever
from .unreal import UnrealRetriever, context_of
from .untrained import UntrainedRetriever

__all__ = ["ALIASES", "METHODS", "MemoryStore", "Retrieval", "RetrievalError", "all_scores", "canonical", "check",
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
    FullContext(),
]}
ALIASES = {"hybrid": "hybrid-rrf", "hybrid_rrf": "hybrid-rrf", "hybrid_fused": "hybrid-fusion"}


def canonical(name: str) -> str:
    """The registry name of a method (accepts the old spellings ``hybrid``, ``hybrid_rrf``, ``hybrid_fused``)."""
    return ALIASES.get(name, name)


def names(scope: str, single: bool = False) -> list[str]:
    """Method names available in ``scope`` (``document``, ``corpus`` or ``index``), registry order; with ``single``
    only those that rank chunks on their own (no hybrid, no full context)."""
    return [m.name for m in METHODS.values() if scope in m.scopes and (not single or (m.ranks and not m.composed))]


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


class MemoryStore:
    """Chunks held in memory: a pasted document, a corpus, a long context.

    Parameters
    ----------
    texts : the chunks.
    keys : raw pooled chunk states ``(M, L_p, d)`` at ℓc (None: BM25 and dense only).
    tokens : per-part ``(token states (ΣT_i, d), lengths (m,))`` for the sparse method.

    See :meth:`lazy` for a store that encodes its chunks on first use.
    """

    def __init__(self, texts: Sequence[str], keys: torch.Tensor | None = None, tokens: list | None = None) -> None:
        self.texts = list(texts)
        self._keys: torch.Tensor | None = keys
        self._tokens: list | None = tokens
        self._encode: Callable[[], None] | None = None
        self._lock = threading.Lock()  # held while the keys are computed: concurrent requests encode once
        self._normed: torch.Tensor | None = None
        self._dense: torch.Tensor | None = None
        self._bm25: BM25 | None = None
        self._kept = {"keys": keys is not None, "token_states": tokens is not None}

    @classmethod
    def lazy(cls, texts: Sequence[str], encode: Callable[[list | None], torch.Tensor],
             keep_tokens: bool = True) -> MemoryStore:
        """A store whose keys come from one call ``encode(token_parts)`` on first use (UNREAL, sparse).

        ``token_parts`` is a list that ``encode`` fills with ``(token states (ΣT_i, d), lengths (m,))`` per
        part of the same forward pass, or None when ``keep_tokens`` is false (sparse is then unavailable).
        BM25 and dense never call it.
        """
        store = cls(texts)
        parts: list | None = [] if keep_tokens else None

        def run() -> None:
            store._keys, store._tokens = encode(parts), parts

        store._encode = run
        store._kept = {"keys": True, "token_states": keep_tokens}
        return store

    def _encoded(self) -> None:
        with self._lock:
            if self._encode is not None:
                self._encode()
                self._encode = None

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def bm25(self) -> BM25:
        if self._bm25 is None:
            self._bm25 = BM25(self.texts)
        return self._bm25

    @property
    def keys(self) -> torch.Tensor:
        """Raw pooled chunk states ``(M, L_p, d)``."""
        self._encoded()
        if self._keys is None:
            raise RetrievalError("this store holds no chunk encodings (UNREAL needs the model)")
        return self._keys

    def bm25_scores(self, queries: Sequence[str]) -> torch.Tensor:
        """BM25 score of every chunk, ``(Q, M)``."""
        return self.bm25.scores(queries)

    def bm25_topk(self, queries: Sequence[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return topk(self.bm25_scores(queries), k)

    def scoring_keys(self, normalize: bool) -> torch.Tensor:
        """The keys MaxSim scores against: L2-normalised (computed once) for a head with ``normalize``."""
        if normalize and self._normed is None:
            self._normed = normalize_chunks(self.keys)
        return self._normed if normalize else self.keys

    def maxsim_topk(self, q: torch.Tensor, k: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        return topk(maxsim(q, self.scoring_keys(normalize).to(q.device)).cpu(), k)

    def dense_topk(self, qv: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        from ..core import minilm as dense

        if self._dense is None:
            self._dense = dense.embed(self.texts)
        return topk(qv @ self._dense.T, k)

    @property
    def token_parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The chunks' token states ``(tokens (N_p, d), lengths (m_p,))`` per part (encoded on first use).

        Raises
        ------
        RetrievalError
            If this store does not keep token states.
        """
        self._encoded()
        if self._tokens is None:
            raise RetrievalError("sparse needs the chunks' token states, which this store does not keep")
        return self._tokens

    def chunk_means(self) -> torch.Tensor:
        """Each chunk's mean pooled state ``(M, d)`` (sparse's pooled cosine, the untrained baseline)."""
        return self.keys.mean(1)

    def check_backbone(self, backbone, layer: int) -> None:
        """Nothing to check: the chunks were encoded by the explorer that searches them."""

    def lacks(self, role: str) -> str | None:
        """What this store lacks for ``role`` (``keys``, ``dense``, ``token_states``), or None when it serves it."""
        if not self._kept.get(role, True):
            return {"keys": "chunk encodings (a store made with the model)",
                    "token_states": "token states (a store made with keep_tokens)"}[role]
        return None


@torch.inference_mode()
def retrieve(store, explorer, queries: Sequence[str], k: int, method: str,
             fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
    """Top-``k`` chunks per query by ``method`` over ``store``: the one query path of the project.

    Parameters
    ----------
    store : a :class:`MemoryStore` or an :class:`index.Index`.
    explorer : the backbone and head (:class:`pipeline.Explorer`); None for bm25 and dense.
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
    if METHODS[method].model and explorer is None:
        raise RetrievalError(f"{method} needs the model and its head")
    return METHODS[method].search(store, list(queries), k, explorer, fusion_weight, vectors)


def all_scores(store, explorer, queries: Sequence[str], method: str,
               fusion_weight: float | None = None) -> tuple[Retrieval, torch.Tensor]:
    """:func:`retrieve` over every chunk, and every chunk's score ``(Q, M)`` in chunk order."""
    found = retrieve(store, explorer, queries, len(store), method, fusion_weight)
    return found, chunk_order(torch.tensor(found.ids), torch.tensor(found.scores), len(store))
