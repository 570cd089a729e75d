"""Full context: no selection, every chunk of a document goes to the LLM (the bound the selectors are compared
with; :meth:`pipeline.Explorer.rank` selects every chunk)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .base import QueryModel, Retrieval, RetrievalError, Retriever


class FullContext(Retriever):
    """Every chunk, in document order; it ranks nothing, so it has no :meth:`search`."""

    name, label, help = "full", "full context", "every chunk, no selection"
    scopes, ranks = frozenset({"document"}), False

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        raise RetrievalError("full context selects every chunk; it ranks none (use it where a document is answered)")
