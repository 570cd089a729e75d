"""Is an answer supported by the evidence it was given? A lexical check, shown beside every answer.

For each sentence of the answer, its content words (stop words out, compared by Snowball stem as BM25 compares
them; numbers compared as written) are looked up in the selected passages; an answer none of whose content words
occur there is flagged as unsupported. The passages' runs of words that the answer copies (two or more words in a
row) are returned as character spans, so a view can mark them. A word found is no proof that the answer is right
(it may join true words into a false claim); a word missing, a name or a year above all, is a reason to doubt it.

Example
-------
>>> s = answer_support("Tesla arrived in New York in 1892.", ["Tesla arrived in New York City in June 1884."])
>>> [(x.found, x.missing) for x in s.sentences]
[(('tesla', 'arrived', 'new', 'york'), ('1892',))]
>>> s.copied
[(0, 0, 25)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bm25s.stopwords import STOPWORDS_EN

from ..core.selection import STEMMER

_WORD = re.compile(r"(?u)\b\w+\b")
_SENTENCE = re.compile(r"(?<=[.!?…])\s+")
# BM25's 33 stop words and the other English function words: pronouns, auxiliaries, prepositions, determiners
_STOP = frozenset(STOPWORDS_EN) | frozenset("""
    i me my mine we us our ours you your yours he him his she her hers its they them theirs who whom whose which what
    when where why how am been being were has have had having do does did done can could shall should may might must
    would from up down out over under about above below after before during through between against among again
    further once here all any both each few more most other some own same so than too very just only also nor yes
    those whether while until because although though upon onto off via per""".split())


@dataclass(frozen=True)
class SentenceSupport:
    """One answer sentence: its content words (lower case) found in the evidence, and those missing from it."""

    sentence: str
    found: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def verdict(self) -> str:
        """``"supported"`` (every content word occurs), ``"partly"``, ``"unsupported"`` (none) or ``"no words"``."""
        if not self.found and not self.missing:
            return "no words"
        return "supported" if not self.missing else "partly" if self.found else "unsupported"


@dataclass(frozen=True)
class Support:
    """The check of a whole answer.

    Attributes
    ----------
    sentences : one :class:`SentenceSupport` per sentence of the answer, in order.
    copied : ``(passage, start, end)`` character spans of the passages that the answer copies (runs of two or
        more of its words in a row, or the whole answer where it is one word), in passage and text order.
    """

    sentences: list[SentenceSupport]
    copied: list[tuple[int, int, int]]

    @property
    def unsupported(self) -> bool:
        """Whether the answer has content words and none of them occurs in the evidence."""
        return any(s.missing for s in self.sentences) and not any(s.found for s in self.sentences)


def _content(text: str) -> dict[str, str]:
    """The content words of ``text`` (lower case, stop words out), each with the key it is compared by: its
    Snowball stem, or a number as written."""
    words = [w.lower() for w in _WORD.findall(text)]
    words = [w for w in words if w not in _STOP and (len(w) > 1 or w.isdigit())]
    return {w: w if w.isdigit() else s for w, s in zip(words, STEMMER.stemWords(words), strict=True)}


def _copied_spans(answer: str, passage: str, min_words: int) -> list[tuple[int, int]]:
    """Character spans of ``passage`` covered by runs of ``min_words`` or more words that ``answer`` has in a row
    (a run of stop words alone, such as "of the", is no copy)."""
    said = [w.lower() for w in _WORD.findall(answer)]
    grams = {g for i in range(len(said) - min_words + 1)
             if not set(g := tuple(said[i:i + min_words])) <= _STOP}
    words = list(_WORD.finditer(passage))
    low = [m.group().lower() for m in words]
    covered = [False] * len(words)
    for i in range(len(words) - min_words + 1):
        if tuple(low[i:i + min_words]) in grams:
            covered[i:i + min_words] = [True] * min_words
    spans: list[tuple[int, int]] = []
    for i, m in enumerate(words):
        if not covered[i]:
            continue
        if spans and covered[i - 1]:
            spans[-1] = (spans[-1][0], m.end())
        else:
            spans.append((m.start(), m.end()))
    return spans


def answer_support(answer: str, passages: Sequence[str]) -> Support:
    """Check each sentence of ``answer`` against the ``passages`` it was answered from.

    Parameters
    ----------
    answer
        The generated answer.
    passages
        The evidence the model was given (the selected chunks, or the top hits), in any order.

    Returns
    -------
    Support
        Per sentence, the content words found in the passages and those missing; and the passages' spans the
        answer copies. ``Support.unsupported`` flags an answer none of whose content words occur in them.
    """
    present = {key for p in passages for key in _content(p).values()}
    sentences = []
    for sentence in (s for s in _SENTENCE.split(answer.strip()) if s):
        words = _content(sentence)
        sentences.append(SentenceSupport(sentence, tuple(w for w, key in words.items() if key in present),
                                         tuple(w for w, key in words.items() if key not in present)))
    n_words = len(_WORD.findall(answer))
    copied = [(i, s, e) for i, p in enumerate(passages) for s, e in _copied_spans(answer, p, min(2, n_words))] \
        if n_words else []
    return Support(sentences, copied)
