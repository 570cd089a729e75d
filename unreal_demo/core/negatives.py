"""Hard negatives for Eq. 6's candidate set B(x): BM25's, and those mined with the head being trained.

B(x) is the union of the oracle and hard-negative chunks of every query in the microbatch. Two kinds:

* **BM25 negatives** (:func:`hard_negatives`), fixed per passage: BM25 queried with the oracle's own text.
* **Head-mined negatives** (:func:`mine_negatives`), per question: the passages the current head scores
  highest for the question (Eq. 5, exact MaxSim over the question's own source pool), refreshed every few
  thousand visits for the questions about to be visited, so the loss pushes on the head's own mistakes.

Both drop the oracle and its near-duplicates (word Jaccard ≥ ``near_dup``): a reworded copy of the answer
paragraph is not a negative.

Example
-------
>>> near_duplicate({"a", "b", "c"}, {"a", "b", "d"}, 0.5)   # Jaccard 2/4
True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .maxsim import maxsim_reference
from .selection import BM25


def words(text: str) -> set[str]:
    """The lower-cased whitespace tokens of ``text`` (for the near-duplicate test)."""
    return set(text.lower().split())


def near_duplicate(mine: set[str], other: set[str], near_dup: float) -> bool:
    """Whether two passages' word sets overlap by Jaccard ≥ ``near_dup``."""
    return len(mine & other) / max(1, len(mine | other)) >= near_dup


def _keep(ranked: Sequence[int], oracle: int, texts: Sequence[str], count: int, near_dup: float) -> list[int]:
    """The first ``count`` of ``ranked`` that are neither ``oracle`` nor a near-duplicate of it."""
    mine, keep = words(texts[oracle]), []
    for j in ranked:
        if j == oracle or near_duplicate(mine, words(texts[j]), near_dup):
            continue
        keep.append(j)
        if len(keep) == count:
            break
    return keep


def hard_negatives(texts: Sequence[str], bm25: BM25, count: int, near_dup: float) -> list[list[int]]:
    """Per passage of ``texts`` (the corpus ``bm25`` indexes): BM25's ranks for its own text, minus itself and
    its near-duplicates, first ``count``."""
    ids, _ = bm25.search(list(texts), k=min(len(texts), count * 2 + 5))
    return [_keep(row.tolist(), i, texts, count, near_dup) for i, row in enumerate(ids)]


@torch.no_grad()
def mine_negatives(head, backbone, data: dict, picks: Sequence[int], count: int, near_dup: float,
                   batch: int = 16) -> dict[int, list[int]]:
    """Head-mined negatives of the questions ``picks``: the ``count`` passages of each question's own pool
    that the head ranks highest, the oracle and its near-duplicates left out.

    Parameters
    ----------
    head, backbone : the query head being trained (put back in training mode afterwards) and its LLM.
    data : as for :func:`training.fit`: ``questions``, ``contexts``, ``oracle``, normalised ``keys``
        ``(P, L_p, d)``, and ``texts`` (passage texts) and ``pools`` (a pool id per passage: negatives
        come from the oracle's pool only).
    picks : indices into ``data["questions"]``.

    Returns
    -------
    ``{question index: [passage index, …]}``, best-scored first.
    """
    keys, pools = data["keys"].to(backbone.device), torch.tensor(data["pools"])  # (P, L_p, d) (no copy if there), (P,)
    head.eval()
    out: dict[int, list[int]] = {}
    for s in range(0, len(picks), batch):
        ids = list(picks[s : s + batch])
        q = head(backbone, [data["questions"][i].text for i in ids], [data["contexts"][i] for i in ids])
        scores = maxsim_reference(q, keys).float().cpu()  # (b, P)
        for row, i in zip(scores, ids, strict=True):
            oracle = data["oracle"][i]
            row[pools != pools[oracle]] = float("-inf")
            top = [j for j in row.topk(min(len(row), count * 2 + 5)).indices.tolist() if row[j] > float("-inf")]
            out[i] = _keep(top, oracle, data["texts"], count, near_dup)
    head.train()
    return out
