"""Natural questions (NQ-open, TriviaQA) mapped to passages we hold by distant supervision (DPR's recipe).

Both sets ship as Hugging Face Arrow files without passages (``nq_open``, ``trivia_qa`` in :data:`SOURCES`);
they are read with ``pyarrow``. A question's positives are found in a pool of passages (the caller's: the
lead summaries, the enwiki articles and the SQuAD dev train articles, never New-Wiki or Amazon) by

    rule "dpr":    the best-ranked of BM25's top ``depth`` passages for the question whose text contains an
                   answer alias as whole words (SQuAD normalisation, :func:`answers.occurs`);
    rule "title":  as "dpr", but only a passage whose *title* is an answer alias (a summary about the answer),
                   falling back to nothing — fewer questions, cleaner positives.

A question without a positive is dropped. Train and dev are split by question (a hash of its id).

Example
-------
>>> texts = ["Paris is the capital of France.", "Lyon is a city in France.", "Berlin is in Germany."]
>>> from ..core.selection import BM25
>>> q = NaturalQuestion("q1", "What is the capital of France?", ("Paris",))
>>> distant_positives([q], texts, BM25(texts), depth=2)
[[0]]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from .answers import normalize_answer, occurs
from .sources import DataError, source_path

NATURAL = ("nq_open", "trivia_qa")
RULES = ("dpr", "title")
SHORTEST = 2  # characters of a normalised alias; shorter ones ("a", "5") match almost anywhere


@dataclass(frozen=True)
class NaturalQuestion:
    id: str
    text: str
    answers: tuple[str, ...]


def load_natural(name: str) -> list[NaturalQuestion]:
    """The questions of ``nq_open`` (3,610) or ``trivia_qa`` (7,993) with their answer strings / aliases.

    Raises
    ------
    DataError
        ``name`` is not one of :data:`NATURAL`.
    """
    import pyarrow.ipc

    if name not in NATURAL:
        raise DataError(f"{name!r} is not a natural-question source; use one of {', '.join(NATURAL)}")
    (arrow,) = sorted(source_path(name).glob("*.arrow"))
    with pyarrow.ipc.open_stream(arrow) as reader:
        table = reader.read_all()
    out = []
    for i, row in enumerate(table.select(["question", "answer"]).to_pylist()):
        ans = row["answer"]
        aliases = ans if isinstance(ans, list) else [ans["value"], *ans["aliases"]]
        kept = tuple(a for a in dict.fromkeys(aliases) if len(normalize_answer(a)) >= SHORTEST)
        if kept:
            out.append(NaturalQuestion(f"{name}:{i}", row["question"].strip(), kept))
    return out


def question_split(questions: Sequence[NaturalQuestion], dev_fraction: float = 0.2,
                   ) -> tuple[list[NaturalQuestion], list[NaturalQuestion]]:
    """(train, dev) by a hash of each question's id: deterministic, and stable when questions are added."""
    def is_dev(q: NaturalQuestion) -> bool:
        return int(hashlib.md5(q.id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < dev_fraction

    return [q for q in questions if not is_dev(q)], [q for q in questions if is_dev(q)]


def distant_positives(questions: Sequence[NaturalQuestion], texts: Sequence[str], bm25, depth: int = 100,
                      rule: str = "dpr", titles: Sequence[str] | None = None, per_question: int = 1,
                      ) -> list[list[int]]:
    """Positive passage indices per question (empty: no positive, drop the question).

    Parameters
    ----------
    questions : the natural questions.
    texts : the pool's passage texts; ``bm25`` a :class:`core.selection.BM25` over them.
    depth : how many of BM25's passages for the question are looked at.
    rule : "dpr" (an alias in the text) or "title" (an alias is the passage's title; needs ``titles``).
    per_question : at most this many positives, best BM25 rank first.

    Returns
    -------
    One list per question, best-ranked first.

    Raises
    ------
    DataError
        An unknown rule, or "title" without titles.
    """
    if rule not in RULES or (rule == "title" and titles is None):
        raise DataError(f"distant-supervision rule {rule!r}: use one of {', '.join(RULES)} (title needs titles)")
    ids, _ = bm25.search([q.text for q in questions], k=min(depth, len(texts)))
    out = []
    for q, row in zip(questions, ids.tolist(), strict=True):
        names = {normalize_answer(a) for a in q.answers}
        if rule == "title":
            hits = [i for i in row if normalize_answer(titles[i]) in names and occurs(texts[i], q.answers)]
        else:
            hits = [i for i in row if occurs(texts[i], q.answers)]
        out.append(hits[:per_question])
    return out
