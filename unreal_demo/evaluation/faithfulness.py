"""Is an answer stated in the evidence it was given? The check shown beside every answer.

Each sentence of the answer is looked up in the evidence sentence by sentence: it is **supported** only when one
evidence sentence, or two adjacent sentences of one passage, contain all of its content words together (names,
numbers and the relation words alike; stop words out; compared by Snowball stem as BM25 compares them, numbers as
written), and the check quotes that sentence. Words scattered over several sentences or passages support nothing.
Two adjacent sentences count only where one of them holds every relation word and number of the claim and the
other adds a name (the one its "he" or "it" stands for). Otherwise the sentence is **not found in the evidence**,
with the content words that the closest evidence sentence
lacks. The answer is supported only when every one of its sentences is. Given the question, the claim is the
answer to it: the quoted evidence must hold the question's content words too (bar the words that shape a question,
"kind", "many" …), so that "Theodore Roosevelt Jr." answering "Who was the first president …?" needs a sentence
that has "first" and "president" with the name; and a sentence that only restates the question supports nothing.

The check reads words, not meaning: a supported sentence is one the evidence states, which a small model can
still have copied in answer to another question; a sentence not found may be a paraphrase that is true.

Sentences are split at ``.``, ``!``, ``?`` or ``…`` followed by a space, but not after an initial ("John F.
Kennedy"), a dotted abbreviation ("U.S.", "e.g.") or a title ("Dr.", "St.").

The passages' runs of words that the answer copies (two or more words in a row) are returned as character spans,
so a view can mark them.

Example
-------
>>> s = answer_support("Tesla arrived in New York in 1892.", ["Tesla arrived in New York City in June 1884."])
>>> s.supported, s.sentences[0].verdict, s.sentences[0].missing
(False, 'not found in the evidence', ('1892',))
>>> evidence = ["He won. John F. Kennedy was the 35th U.S. president."]
>>> s = answer_support("John F. Kennedy was the 35th president.", evidence)
>>> s.supported, s.sentences[0].evidence
(True, 'John F. Kennedy was the 35th U.S. president.')
>>> s.copied
[(0, 8, 36)]
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bm25s.stopwords import STOPWORDS_EN

from ..core.selection import STEMMER

_WORD = re.compile(r"(?u)\b\w+\b")
_BREAK = re.compile(r"[.!?…]+[\"'”’)\]]*\s+")
# words after which a period ends no sentence: titles and abbreviations (compared in lower case, without the period)
_ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof st jr sr rev gen col lt sgt capt cpt maj cmdr adm gov sen rep pres hon fr mt ft
    inc ltd co corp bros dept univ est approx ca cf vs etc al fig no nos vol vols pp ed eds
    jan feb mar apr jun jul aug sep sept oct nov dec""".split())
# BM25's 33 stop words and the other English function words: pronouns, auxiliaries, prepositions, determiners
_STOP = frozenset(STOPWORDS_EN) | frozenset("""
    i me my mine we us our ours you your yours he him his she her hers its they them theirs who whom whose which what
    when where why how am been being were has have had having do does did done can could shall should may might must
    would from up down out over under about above below after before during through between against among again
    further once here all any both each few more most other some own same so than too very just only also nor yes
    those whether while until because although though upon onto off via per
    typically usually often generally actually approximately roughly nearly almost""".split())
SUPPORTED, NOT_FOUND = "supported", "not found in the evidence"
QUESTION_SHARE = 1.0  # of the question's content words that the quoted evidence must hold, when it is given
# words that shape a question rather than state what it is about ("What kind of …", "How many …")
_ASKING = frozenset("kind kinds type types sort sorts many much happen happened happens called name named".split())


def split_sentences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the sentences of ``text`` (stripped), never split after an initial,
    a dotted abbreviation or a title.

    >>> t = "John F. Kennedy was born in the U.S. in 1917. He died in 1963."
    >>> [t[s:e] for s, e in split_sentences(t)]
    ['John F. Kennedy was born in the U.S. in 1917.', 'He died in 1963.']
    """
    spans, start = [], 0
    for m in _BREAK.finditer(text):
        before = text[start:m.start() + 1]
        last = re.search(r"(\S+)$", before.rstrip(".!?…\"'”’)]"))
        token = last.group(1) if last else ""
        rest = text[m.end():m.end() + 1]
        if text[m.start()] == "." and (
                re.fullmatch(r"[A-Z]", token)  # an initial: "John F. Kennedy"
                or re.fullmatch(r"(?:\w\.)+\w", token)  # a dotted abbreviation: "U.S.", "e.g."
                or token.lower() in _ABBREVIATIONS
                or rest[:1].islower()):  # no new sentence starts in lower case
            continue
        spans.append((start, m.end()))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for s, e in spans:
        piece = text[s:e]
        s2 = s + len(piece) - len(piece.lstrip())
        e2 = e - (len(piece) - len(piece.rstrip()))
        if e2 > s2:
            out.append((s2, e2))
    return out


@dataclass(frozen=True)
class SentenceSupport:
    """One answer sentence and its check.

    Attributes
    ----------
    sentence : the answer sentence.
    found, missing : its content words (lower case) that the quoted (or, when none is quoted, the closest) evidence
        sentence has, and those it lacks; a supported sentence misses none.
    evidence : the evidence sentence (or two adjacent ones) that states it, quoted; ``None`` when not found.
    passage : the index of the passage the evidence sentence (or the closest one) comes from, ``None`` if none.
    span : ``(start, end)`` of that evidence in its passage, ``None`` if none.
    reason : why it is not found (empty when supported).
    """

    sentence: str
    found: tuple[str, ...]
    missing: tuple[str, ...]
    evidence: str | None = None
    passage: int | None = None
    span: tuple[int, int] | None = None
    reason: str = ""

    @property
    def supported(self) -> bool:
        """Whether one evidence sentence (or two adjacent ones) holds all of its content words."""
        return self.evidence is not None

    @property
    def verdict(self) -> str:
        """``"supported"`` or ``"not found in the evidence"``: nothing in between."""
        return SUPPORTED if self.supported else NOT_FOUND


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
    def supported(self) -> bool:
        """True only when the answer has sentences and every one is supported by a quoted evidence sentence."""
        return bool(self.sentences) and all(s.supported for s in self.sentences)

    @property
    def verdict(self) -> str:
        """``"supported"`` or ``"not found in the evidence"`` for the whole answer."""
        return SUPPORTED if self.supported else NOT_FOUND

    def to_dict(self) -> dict:
        """The JSON-ready check (``ask --json``'s ``check``)."""
        return {"supported": self.supported, "verdict": self.verdict,
                "sentences": [{"sentence": s.sentence, "verdict": s.verdict, "evidence": s.evidence,
                               "passage": s.passage, "missing": list(s.missing), "reason": s.reason}
                              for s in self.sentences]}


def content(text: str) -> dict[str, str]:
    """The content words of ``text`` (lower case, stop words and single letters out), each with the key it is
    compared by: its Snowball stem, or a number as written."""
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


def _windows(passages: Sequence[str]) -> list[tuple[int, int, int, frozenset[str], tuple[frozenset[str], ...]]]:
    """``(passage, start, end, keys, parts)`` for every evidence sentence and every two adjacent sentences of a
    passage (single sentences first, so that the shorter quote wins); ``parts`` are the sentences' own keys."""
    singles, pairs = [], []
    for j, p in enumerate(passages):
        spans = split_sentences(p)
        keys = [frozenset(content(p[s:e]).values()) for s, e in spans]
        singles += [(j, s, e, k, (k,)) for (s, e), k in zip(spans, keys, strict=True)]
        pairs += [(j, spans[i][0], spans[i + 1][1], keys[i] | keys[i + 1], (keys[i], keys[i + 1]))
                  for i in range(len(spans) - 1)]
    return singles + pairs


def _names(sentence: str, passages: Sequence[str]) -> set[str]:
    """The keys of the names in ``sentence``: its capitalised words (the first word only where the passages
    write it capitalised every time they have it)."""
    words = _WORD.findall(sentence)
    out = set()
    for i, w in enumerate(words):
        if not w[:1].isupper() or w.lower() in _STOP:
            continue
        if i == 0 and any(re.search(rf"(?<!\w){re.escape(w.lower())}(?!\w)", p) for p in passages):
            continue
        out |= set(content(w).values())
    return out


def _holds(keys: set[str], relation: set[str], window) -> bool:
    """Whether ``window`` states a sentence with content ``keys``: all of them in it, and its relation words and
    numbers (``relation``: the keys that are no names) all in one of its sentences, so that a second sentence
    adds only a name (the one its "he" or "it" stands for)."""
    return keys <= window[3] and any(relation <= part for part in window[4])


def answer_support(answer: str, passages: Sequence[str], question: str | None = None) -> Support:
    """Check each sentence of ``answer`` against the ``passages`` it was answered from.

    Parameters
    ----------
    answer
        The generated answer.
    passages
        The evidence the model was given (the selected chunks, or the top hits), in any order.
    question
        The question, if known. A sentence is then supported only by an evidence sentence (or two adjacent) that
        also holds :data:`QUESTION_SHARE` (all) of the question's content words, since a true sentence about
        something else answers nothing; and a sentence with no content word beyond the question's (it only
        restates it) is not supported.

    Returns
    -------
    Support
        Per sentence, the evidence sentence quoted for it, or why none is (the content words the closest one
        lacks); ``Support.supported`` is true only when every sentence has one. And the passages' spans the answer
        copies.
    """
    windows = _windows(passages)
    asked = {k for w, k in content(question).items() if w not in _ASKING} if question else set()
    need = math.ceil(QUESTION_SHARE * len(asked) - 1e-9)
    text = answer.strip()
    sentences = []
    for s, e in split_sentences(text):
        sentence = text[s:e]
        words = content(sentence)
        keys = set(words.values())
        if not keys:
            sentences.append(SentenceSupport(sentence, (), (), reason="it has no content words to look up"))
            continue
        if asked and keys <= asked:
            sentences.append(SentenceSupport(sentence, tuple(words), (), reason="it only restates the question"))
            continue
        relation = keys - _names(sentence, passages)
        holding = [w for w in windows if _holds(keys, relation, w)]
        if holding:
            best = max(holding, key=lambda w: len(asked & w[3]))  # the first of the best: single sentences first
            j, a, b, have, _ = best
            if len(asked & have) >= need:
                sentences.append(SentenceSupport(sentence, tuple(words), (), passages[j][a:b], j, (a, b)))
            else:
                lacks = ", ".join(sorted(x for x, k in content(question or "").items() if k in asked - have))
                sentences.append(SentenceSupport(
                    sentence, tuple(words), (), None, j, (a, b),
                    f"the evidence sentence with its words is not about the question (it lacks: {lacks})"))
            continue
        j, a, b, have, _ = max(windows, key=lambda w: len(keys & w[3])) if windows else (None, 0, 0, frozenset(), ())
        found = tuple(x for x, k in words.items() if k in have)
        missing = tuple(x for x, k in words.items() if k not in have)
        where = ("no evidence sentence holds " + ("all of its words" if found else "any of its words")
                 if missing else "its words are spread over two sentences that do not state it together")
        sentences.append(SentenceSupport(sentence, found, missing, None, j if found else None,
                                         (a, b) if found else None,
                                         f"{where}: the closest lacks {', '.join(missing)}" if missing and found
                                         else where))
    n_words = len(_WORD.findall(answer))
    copied = [(i, s, e) for i, p in enumerate(passages) for s, e in _copied_spans(answer, p, min(2, n_words))] \
        if n_words else []
    return Support(sentences, copied)
