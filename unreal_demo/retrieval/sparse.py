"""Sparse token matching — the training-free baseline of the sibling paper (Beyond the Final Embedding).

Every query token retrieves its top-k (k = 64) most similar stored token states
across all chunks: the cosine of the L2-normalised residual states at ℓc after both are centred on the
stored tokens' mean μ (``store.token_mean()``: one vector per store, an index records it in its manifest), so
that query and stored tokens share one space instead of every cosine sitting near the common direction. Per chunk and
query token, the best retrieved match counts; a chunk that the token did not
retrieve gets the floor, the lowest score the token retrieved ("missing-score
estimation"). The sparse score is the mean over query tokens, fused with the
whole-chunk (mean-pooled) cosine: s = (1 − α)·sparse + α·pooled, α fitted per backbone on a dev split (300
New-Wiki questions outside every seed-0 evaluation draw; docs/RESULTS.md gives the command). SmolLM2: α = 0.4
(centred alone R@1 / R@10 0.670 / 0.880, fused 0.680 / 0.890; the paper's α = 0.5 on raw states pulled the channel
down, 0.640 / 0.863 → 0.573 / 0.813, and rank fusion (RRF) with the weak pooled cosine fell to 0.363 / 0.743).
Qwen2.5-0.5B: α = 0, the channel alone (0.507 / 0.783; α = 0.4 gives 0.430 / 0.667, and on the 1,000 held-out
New-Wiki questions 0.403 / 0.620 against 0.470 / 0.746 alone). A model never fitted gets the channel alone, so the
fused channel is never below it (docs/RESULTS.md, "A second backbone").

Example
-------
>>> q = [torch.tensor([[1.0, 0.0]])]                         # one query, one token
>>> store = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]).half()
>>> sparse_scores(q, [(store, torch.tensor([1, 2]))], k=2)   # chunk 0: token 0; chunk 1: tokens 1, 2
tensor([[1.0000, 0.6001]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.backbone import Backbone
from ..core.encoding import query_states
from ..settings import DEFAULT_MODEL, SECOND_MODEL
from .base import QueryModel, Retrieval, Retriever, timed, topk
from .unreal import check_model

K = 64  # stored tokens each query token retrieves
ALPHA = 0.4  # the default model's weight of the pooled (whole-chunk) cosine in the fusion, fitted on dev
ALPHAS = {DEFAULT_MODEL: ALPHA, SECOND_MODEL: 0.0}  # per backbone, fitted on dev (the module docstring)
QUERY_BATCH = 128  # queries scored at a time (memory stays bounded)


def query_token_states(backbone: Backbone, queries: Sequence[str], layer: int) -> list[torch.Tensor]:
    """L2-normalised states ``(T_q, d)`` of each query's tokens at ``layer`` (sink left out)."""
    return [torch.nn.functional.normalize(h, dim=-1) for h in query_states(backbone, queries, layer)]


def centred(states: torch.Tensor, mean: torch.Tensor | None) -> torch.Tensor:
    """Token states ``(N, d)`` centred on ``mean`` and L2-normalised again (float32); unchanged without one.

    >>> centred(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0.5, 0.5])).mul(100).round().tolist()
    [[71.0, -71.0], [-71.0, 71.0]]
    """
    if mean is None:
        return states.float()
    return torch.nn.functional.normalize(states.float() - mean.float(), dim=-1)


def _owners(token_parts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    lengths = torch.cat([lengths for _, lengths in token_parts])
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)  # (N,) chunk of each stored token


@torch.inference_mode()
def sparse_scores(
    queries: Sequence[torch.Tensor],
    token_parts: Sequence[tuple[torch.Tensor, torch.Tensor]],
    k: int = K,
    block: int = 16384,
    mean: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sparse token-matching scores ``(Q, M)`` (without the pooled fusion).

    Parameters
    ----------
    queries : per query, its normalised token states ``(T_q, d)``.
    token_parts : ``(tokens (N_p, d), lengths (m_p,))`` per stored part, chunks in order.
    k : stored tokens retrieved per query token (exact search).
    block : stored tokens per matmul.
    mean : μ, the stored tokens' mean: query and stored tokens are centred on it (:func:`centred`); None
        matches the raw normalised states.
    """
    owner = _owners(token_parts)
    n_chunks = int(owner.max()) + 1 if len(owner) else 0
    best_v, best_i = _top_tokens(centred(torch.cat(list(queries)), mean), token_parts, min(k, len(owner)), block,
                                 mean)
    out, start = torch.empty(len(queries), n_chunks), 0
    for j, qt in enumerate(queries):
        v, i = best_v[start : start + len(qt)], best_i[start : start + len(qt)]  # (T_q, k)
        start += len(qt)
        floor = v[:, -1:].expand(-1, n_chunks).clone()  # (T_q, M): lowest retrieved score per token
        per_chunk = floor.scatter_reduce(1, owner[i], v, reduce="amax")
        out[j] = per_chunk.mean(0)
    return out


def _top_tokens(qall: torch.Tensor, token_parts: Sequence[tuple[torch.Tensor, torch.Tensor]], k: int,
                block: int = 16384, mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most similar stored tokens of each query token ``(ΣT_q, d)`` (already centred when ``mean`` is
    given): cosines and global indices, each ``(ΣT_q, k)``, streamed part by part (the store is never
    concatenated; each block of stored tokens is centred on ``mean`` as it is read)."""
    best_v = torch.full((qall.shape[0], k), -float("inf"))
    best_i = torch.zeros((qall.shape[0], k), dtype=torch.long)
    base = 0
    for store, _ in token_parts:
        for s in range(0, store.shape[0], block):
            sims = qall @ centred(store[s : s + block], mean).T  # (ΣT_q, b)
            v = torch.cat([best_v, sims], 1)
            i = torch.cat([best_i, torch.arange(base + s, base + s + sims.shape[1]).expand(qall.shape[0], -1)], 1)
            best_v, pick = torch.topk(v, k, dim=1)
            best_i = i.gather(1, pick)
        base += store.shape[0]
    return best_v, best_i


@torch.inference_mode()
def retrieved_tokens(query: torch.Tensor, token_parts: Sequence[tuple[torch.Tensor, torch.Tensor]],
                     k: int = K, mean: torch.Tensor | None = None) -> dict[int, list[tuple[int, float, int]]]:
    """The evidence the sparse score counts: per question token and chunk, the best stored token it retrieved.

    Parameters
    ----------
    query : the query's normalised token states ``(T_q, d)``.
    token_parts : as for :func:`sparse_scores`.
    k : stored tokens retrieved per query token.
    mean : μ, as for :func:`sparse_scores` (the cosines are then the centred ones).

    Returns
    -------
    dict
        chunk id → ``[(token position in the chunk, cosine, query token), …]`` in position order: for each
        question token, the one token of each chunk that :func:`sparse_scores` counts for it (its best
        among the token's top-k); a stored token counted by several question tokens keeps its best match.

    Examples
    --------
    >>> store = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]).half()
    >>> hits = retrieved_tokens(torch.tensor([[1.0, 0.0]]), [(store, torch.tensor([1, 2]))], k=2)
    >>> {c: [(p, round(s, 1), t) for p, s, t in row] for c, row in hits.items()}
    {0: [(0, 1.0, 0)], 1: [(1, 0.6, 0)]}
    """
    owner = _owners(token_parts)
    if not len(owner):
        return {}
    lengths = torch.cat([lengths for _, lengths in token_parts])
    first = torch.cumsum(lengths, 0) - lengths  # (M,) global index of each chunk's first token
    v, i = _top_tokens(centred(query, mean), token_parts, min(k, len(owner)), mean=mean)
    best: dict[tuple[int, int], tuple[float, int]] = {}
    for t in range(v.shape[0]):
        counted: dict[int, tuple[float, int]] = {}  # chunk -> (score, global token): what the score counts
        for score, g in zip(v[t].tolist(), i[t].tolist(), strict=True):
            c = int(owner[g])
            if c not in counted or score > counted[c][0]:
                counted[c] = (score, g)
        for c, (score, g) in counted.items():
            at = (c, g - int(first[c]))
            if at not in best or score > best[at][0]:
                best[at] = (score, t)
    out: dict[int, list[tuple[int, float, int]]] = {}
    for (c, pos), (score, t) in sorted(best.items()):
        out.setdefault(c, []).append((pos, score, t))
    return out


def pooled_scores(queries: Sequence[torch.Tensor], chunk_means: torch.Tensor) -> torch.Tensor:
    """Whole-chunk cosine ``(Q, M)``: mean query token state against mean chunk state."""
    q = torch.nn.functional.normalize(torch.stack([t.mean(0) for t in queries]), dim=-1)
    return q @ torch.nn.functional.normalize(chunk_means.float(), dim=-1).T


def alpha_for(model: str) -> float:
    """α of ``model``'s fusion: fitted on its dev split (:data:`ALPHAS`), else 0 (the channel alone).

    >>> alpha_for("smollm2-135m-instruct"), alpha_for("qwen2.5-0.5b"), alpha_for("some/other-model")
    (0.4, 0.0, 0.0)
    """
    return ALPHAS.get(model, 0.0)


def fuse(sparse: torch.Tensor, pooled: torch.Tensor, alpha: float = ALPHA) -> torch.Tensor:
    """Local–global fusion ``(1 − α)·sparse + α·pooled``."""
    return (1 - alpha) * sparse + alpha * pooled


class SparseRetriever(Retriever):
    """Sparse token matching over the store's token states, fused with the pooled cosine (the module docstring)."""

    name, label = "sparse", f"sparse token matching (k={K}, centred, α fitted on dev per model)"
    help = "the sibling paper's token matching at block ℓc"
    model, needs = True, ("keys", "token_states")

    def top(self, store: Any, query_tokens: Sequence[torch.Tensor], k: int,
            alpha: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and chunk ids ``(Q, k)``, best first, of queries given as normalised token states: the channel
        fused with the pooled cosine at ``alpha`` (0: the channel alone)."""
        parts, mean = store.token_parts, store.token_mean()
        local = torch.cat([sparse_scores(query_tokens[s : s + QUERY_BATCH], parts, mean=mean)
                           for s in range(0, len(query_tokens), QUERY_BATCH)])  # (Q, M)
        if not alpha:
            return topk(local, k)
        return topk(fuse(local, pooled_scores(query_tokens, store.chunk_means()), alpha), k)

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        check_model(store, query_model, self.name)
        timings: dict[str, float] = {}
        qt = timed(timings, "query_encoding",
                   lambda: query_token_states(query_model.backbone, queries, query_model.head.config.chunk_layer))
        alpha = alpha_for(query_model.backbone.name)
        scores, ids = timed(timings, "scan", lambda: self.top(store, qt, k, alpha))
        return Retrieval(ids.tolist(), scores.tolist(), timings, token_states=qt)
