"""The one retrieval core: every method, over every chunk store, through one query path.

:data:`METHODS` is the registry every entry point takes its method names and help from
(``ask``, ``rank``, ``index search``, ``eval retrieval``, ``eval qa``, ``bench longcontext``, the
tabs). :func:`retrieve` is the only place the UNREAL query side runs: C0 = the top-|C0| BM25
chunks of the store (Eq. 2), the head's G query vectors (Eqs. 2–3), exact MaxSim over every
chunk (Eq. 4), top-k. A *store* is a pasted document's chunks or a corpus held in memory
(:class:`MemoryStore`) or a sharded on-disk index (:class:`index.Index`); both answer the same
``bm25_scores / bm25_topk / maxsim_topk / dense_topk / sparse_topk`` calls.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..core.maxsim import maxsim, normalize_chunks
from ..core.selection import BM25, reciprocal_rank_fusion, zscore
from ..errors import InputError


@dataclass(frozen=True)
class Method:
    """A retrieval method: its name everywhere, a label for tables, a line of help, what it needs."""

    name: str
    label: str
    help: str
    model: bool  # needs the LLM on the query side
    scopes: frozenset[str] = frozenset({"document", "corpus", "index"})


METHODS: dict[str, Method] = {m.name: m for m in [
    Method("unreal", "UNREAL (trained head)", "exact MaxSim of the head's query vectors over every chunk (Eq. 4)",
           True),
    Method("bm25", "BM25 (bm25s, stemmed)", "lexical BM25 over the chunks (bm25s)", False),
    Method("dense", "dense MiniLM-L6-v2", "cosine of all-MiniLM-L6-v2 embeddings", False),
    Method("sparse", "sparse token matching (k=64, α=0.5)", "the sibling paper's token matching at block ℓc",
           True),
    Method("hybrid-rrf", "UNREAL + BM25, RRF (k=60)", "reciprocal-rank fusion of the UNREAL and BM25 top-100",
           True),
    Method("hybrid-fusion", "UNREAL + BM25, score fusion", "w·z(UNREAL) + (1−w)·z(BM25), w fitted on the dev split",
           True, frozenset({"corpus", "index"})),
    Method("untrained", "untrained backbone (mean state at ℓc, cosine)", "no training: mean-pooled states, cosine",
           True, frozenset({"corpus"})),
    Method("full", "full context", "every chunk, no selection", False, frozenset({"document"})),
]}
ALIASES = {"hybrid": "hybrid-rrf", "hybrid_rrf": "hybrid-rrf", "hybrid_fused": "hybrid-fusion"}
RRF_DEPTH = 100


class RetrievalError(InputError):
    """An unknown method, or a method the store or scope cannot serve."""


def canonical(name: str) -> str:
    """The registry name of a method (accepts the old spellings ``hybrid``, ``hybrid_rrf``, ``hybrid_fused``)."""
    return ALIASES.get(name, name)


def names(scope: str) -> list[str]:
    """Method names available in ``scope`` (``document``, ``corpus`` or ``index``), registry order."""
    return [m.name for m in METHODS.values() if scope in m.scopes]


def help_text(scope: str) -> str:
    """One line per method of ``scope``, for ``--help`` and the tabs."""
    return "; ".join(f"{m.name}: {m.help}" for m in METHODS.values() if scope in m.scopes)


def check(methods: Sequence[str], scope: str) -> list[str]:
    """Canonical names of ``methods``; :class:`RetrievalError` naming the allowed ones otherwise."""
    out = [canonical(m.strip()) for m in methods if m.strip()]
    bad = [m for m in out if m not in METHODS or scope not in METHODS[m].scopes]
    if bad or not out:
        raise RetrievalError(f"unknown method {', '.join(bad) or '(none)'} here; use {', '.join(names(scope))}")
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
        return _topk(self.bm25_scores(queries), k)

    def scoring_keys(self, normalize: bool) -> torch.Tensor:
        """The keys MaxSim scores against: L2-normalised (computed once) for a head with ``normalize``."""
        if normalize and self._normed is None:
            self._normed = normalize_chunks(self.keys)
        return self._normed if normalize else self.keys

    def maxsim_topk(self, q: torch.Tensor, k: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        return _topk(maxsim(q, self.scoring_keys(normalize).to(q.device)).cpu(), k)

    def dense_topk(self, qv: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        from ..core import minilm as dense

        if self._dense is None:
            self._dense = dense.embed(self.texts)
        return _topk(qv @ self._dense.T, k)

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

    def sparse_topk(self, query_tokens: Sequence[torch.Tensor], k: int,
                    alpha: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
        from . import sparse

        local = torch.cat([sparse.sparse_scores(query_tokens[s : s + 128], self.token_parts)
                           for s in range(0, len(query_tokens), 128)])
        return _topk(sparse.fuse(local, sparse.pooled_scores(query_tokens, self.keys.mean(1)), alpha), k)

    def untrained_topk(self, means: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosine of mean query states ``(Q, d)`` with mean-pooled chunk states."""
        passages = normalize_chunks(self.keys.mean(1, keepdim=True))[:, 0]  # (M, d)
        return _topk(torch.nn.functional.normalize(means, dim=-1) @ passages.T, k)


def _topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and ids ``(Q, k)`` best first."""
    return torch.topk(scores, min(k, scores.shape[1]), dim=1)


def _chunk_order(ids: torch.Tensor, scores: torch.Tensor, size: int) -> torch.Tensor:
    """Scores ``(Q, size)`` in chunk order from best-first ids and scores (absent chunks: 0)."""
    return torch.zeros(ids.shape[0], size).scatter_(1, ids, scores.float())


@dataclass
class Retrieval:
    """Top-k chunk ids and scores per query (best first), timings in seconds, and UNREAL's query vectors."""

    ids: list[list[int]]
    scores: list[list[float]]
    timings: dict[str, float] = field(default_factory=dict)
    query_vectors: torch.Tensor | None = None  # (Q, G, d) for unreal and the hybrids
    fusion_weight: float | None = None


def contexts(store, bm25_ids: torch.Tensor, n: int) -> list[list[str]]:
    """C0 of each query: the texts of its top-``n`` BM25 chunks (Eq. 2)."""
    texts = store.texts
    return [[texts[i] for i in row[:n]] for row in bm25_ids.tolist()]


@torch.inference_mode()
def query_vectors(explorer, queries: Sequence[str], context: Sequence[Sequence[str]], batch: int = 16) -> torch.Tensor:
    """The head's G query vectors per query ``(Q, G, d)``, batches of ``batch``."""
    return torch.cat([explorer.head(explorer.backbone, queries[s : s + batch], context[s : s + batch]).cpu()
                      for s in range(0, len(queries), batch)])


def context_of(store, explorer, queries: Sequence[str], bm25_ids: torch.Tensor) -> list[list[str]]:
    """C0 of each query from the head's ``context_source``: BM25's top |C0| chunks (the paper's), or the head's own
    top |C0| from a first pass without C0 (two passes of one model, no second retriever)."""
    c = explorer.head.config
    if not c.n_context or c.context_source == "bm25":
        return contexts(store, bm25_ids, c.n_context)
    first = query_vectors(explorer, queries, [[] for _ in queries])  # (Q, G, d)
    _, ids = store.maxsim_topk(first, c.n_context, normalize=c.normalize)
    return contexts(store, ids, c.n_context)


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
    if method not in METHODS or method == "full":
        raise RetrievalError(f"unknown retrieval method {method!r}; use {', '.join(names('corpus'))}")
    if METHODS[method].model and explorer is None:
        raise RetrievalError(f"{method} needs the model and its head")
    queries, timings = list(queries), {}
    c = explorer.head.config if explorer is not None else None
    depth = max(k, RRF_DEPTH) if method == "hybrid-rrf" else len(store) if method == "hybrid-fusion" else k
    t0 = time.perf_counter()
    b_scores, b_ids = store.bm25_topk(queries, max(depth, c.n_context if c else 0))
    timings["bm25"] = time.perf_counter() - t0
    if method == "bm25":
        return Retrieval(b_ids[:, :k].tolist(), b_scores[:, :k].tolist(), timings)
    t1, q = time.perf_counter(), None
    if hasattr(store, "check_backbone") and method != "dense":
        store.check_backbone(explorer.backbone, c.chunk_layer)
    if method == "dense":
        from ..core.minilm import embed

        qv = embed(queries)
        timings["query_encoding"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        scores, ids = store.dense_topk(qv, k)
    elif method == "sparse":
        from .sparse import query_token_states

        qt = query_token_states(explorer.backbone, queries, c.chunk_layer)
        timings["query_encoding"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        scores, ids = store.sparse_topk(qt, k)
    elif method == "untrained":
        from ..core.encoding import query_states

        means = torch.stack([h.mean(0) for h in query_states(explorer.backbone, queries, c.chunk_layer)])
        timings["query_encoding"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        scores, ids = store.untrained_topk(means, k)
    else:
        q = vectors if vectors is not None else query_vectors(explorer, queries, context_of(store, explorer, queries,
                                                                                           b_ids))
        timings["query_encoding"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        scores, ids = store.maxsim_topk(q, depth, normalize=c.normalize)
    timings["scan"] = time.perf_counter() - t2
    if method == "hybrid-rrf":
        fused = [reciprocal_rank_fusion([u, b])[:k] for u, b in zip(ids.tolist(), b_ids.tolist(), strict=True)]
        return Retrieval([[i for i, _ in r] for r in fused], [[s for _, s in r] for r in fused], timings, q)
    if method == "hybrid-fusion":
        fusion_weight = c.fusion_weight if fusion_weight is None else fusion_weight
        if fusion_weight is None:
            raise RetrievalError("hybrid-fusion needs a fusion weight fitted on the dev split; this head has none "
                                 "(fit it with `python -m unreal_demo eval heads --head HEAD.json --save-fusion`)")
        full_u = _chunk_order(ids, scores, len(store))  # (Q, M)
        fused = fusion_weight * zscore(full_u) + (1 - fusion_weight) * zscore(store.bm25_scores(queries))
        f_scores, f_ids = _topk(fused, k)
        return Retrieval(f_ids.tolist(), f_scores.tolist(), timings, q, fusion_weight)
    return Retrieval(ids.tolist(), scores.tolist(), timings, q)


def all_scores(store, explorer, queries: Sequence[str], method: str,
               fusion_weight: float | None = None) -> tuple[Retrieval, torch.Tensor]:
    """:func:`retrieve` over every chunk, and every chunk's score ``(Q, M)`` in chunk order."""
    found = retrieve(store, explorer, queries, len(store), method, fusion_weight)
    return found, _chunk_order(torch.tensor(found.ids), torch.tensor(found.scores), len(store))
