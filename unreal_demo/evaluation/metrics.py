"""SQuAD v1.1 answer metrics: normalised exact match, token F1, and "answer contained".

Normalisation follows the official ``evaluate-v1.1.py``: lower-case, drop punctuation,
drop the articles a/an/the, collapse whitespace. Each score is the maximum over the
gold answers.

Example
-------
>>> exact_match("The Eiffel Tower!", ["eiffel tower"])
1.0
>>> round(f1("in the year 1889", ["1889"]), 3)
0.5
>>> contained("It opened in 1889, for the fair.", ["1889"])
1.0
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..data.answers import normalize_answer, occurs

__all__ = ["contained", "exact_match", "f1", "normalize_answer"]


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def _f1(prediction: str, answer: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(answer).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, answers: Sequence[str]) -> float:
    """Token-overlap F1 of the normalised prediction, best over the gold answers."""
    return max((_f1(prediction, a) for a in answers), default=0.0)


def contained(prediction: str, answers: Sequence[str]) -> float:
    """1.0 if a normalised gold answer occurs inside the normalised prediction (word-aligned)."""
    return float(occurs(prediction, answers))
