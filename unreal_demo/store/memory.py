"""Chunks held in memory (a pasted document, an evaluation corpus, a long context) as a :class:`base.ChunkStore`:
their texts, BM25 over them, pooled keys ``(M, L_p, d)`` at ℓc (Eq. 1), token states and MiniLM vectors, each
computed on first use, and the exact MaxSim scan (Eq. 4) over every chunk.

Example
-------
>>> store = MemoryStore(["Paris is in France.", "Bread is baked daily.", "France borders Spain."])
>>> store.bm25_topk(["Which country is France?"], 2)[1].tolist()
[[0, 2]]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from ..core.maxsim import maxsim, normalize_chunks
from ..core.selection import BM25
from .base import StoreError, TextStore, token_mean, topk


class MemoryStore(TextStore):
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
        self._token_mean: torch.Tensor | None = None
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
    def keys(self) -> torch.Tensor:
        """Raw pooled chunk states ``(M, L_p, d)``.

        Raises
        ------
        StoreError
            If this store holds no chunk encodings.
        """
        self._encoded()
        if self._keys is None:
            raise StoreError("this store holds no chunk encodings (UNREAL needs the model)")
        return self._keys

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
        StoreError
            If this store does not keep token states.
        """
        self._encoded()
        if self._tokens is None:
            raise StoreError("sparse needs the chunks' token states, which this store does not keep")
        return self._tokens

    def token_mean(self) -> torch.Tensor:
        """μ ``(d,)``: the mean of this store's own token states (sparse centres query and stored tokens on it),
        computed once (:func:`base.token_mean`)."""
        if self._token_mean is None:
            self._token_mean = token_mean(self.token_parts)
        return self._token_mean

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
