"""SQuAD's answer normalisation and the word-aligned "answer occurs in text" test, shared by the answer
metrics (:mod:`evaluation.metrics`) and the distant supervision of natural questions (:mod:`natural`).

Normalisation follows the official ``evaluate-v1.1.py``: lower-case, drop punctuation,
drop the articles a/an/the, collapse whitespace.

Example
-------
>>> normalize_answer("The Eiffel Tower!")
'eiffel tower'
>>> occurs("It opened in 1889, for the fair.", ["1889"]), occurs("In 18890 BC", ["1889"])
(True, False)
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def occurs(text: str, answers: Sequence[str]) -> bool:
    """True if a normalised answer occurs in the normalised text as whole words."""
    padded = f" {normalize_answer(text)} "
    return any((a := normalize_answer(x)) and f" {a} " in padded for x in answers)
