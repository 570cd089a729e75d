"""A LOFT-style long-context benchmark built from real offline text (paper Section 4, Appendix B.2).

Each question of SQuAD-Shifts New-Wiki (never trained on) gets one context per length:
its gold paragraph, placed at a relative depth drawn once per question, among distractor
documents taken in order from one fixed shuffled pool of real text (Wikipedia lead
summaries, Paul Graham essays and a Project Gutenberg novel, split into passages). Every
New-Wiki paragraph is removed from the pool. Because every context at every length is a
prefix of the same pool, only the amount of surrounding text changes with the length, and
distractor chunks are shared by every question (one encoding serves them all). The last
distractor is cut so that the context hits its length (in the model's tokens) within one
chunk. Lengths are written 2K = 2,000 tokens, so "8K" plus the prompt fits an 8,192 window.

Two settings of distractors (``distractors``): ``"pool"`` (above), and ``"same-topic"``, in which each
question also has hard distractors placed around its gold paragraph, the closest next to it: the
other paragraphs of the gold's own New-Wiki article and BM25's nearest pool passages to the question,
interleaved in BM25 order. As many as fit the length come first; the pool prefix fills the rest, and a
hard passage the prefix already holds stays where it is (never twice in one context).

Example
-------
>>> parse_lengths("2K,8K,1M")
[2000, 8000, 1000000]
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...core.chunking import chunk_documents, sentence_spans
from ...errors import InputError
from ...settings import CHUNK_TOKENS
from ..metrics import normalize_answer


def parse_lengths(text: str) -> list[int]:
    """``"2K,8K,1M"`` → ``[2000, 8000, 1000000]`` (plain integers are taken as tokens).

    Raises
    ------
    ValueError
        For an unreadable or non-positive length.
    """
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", part)
        if not m:
            raise InputError(f"cannot read length {part!r}; use e.g. 2K,8K,128K,1M")
        value = float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2).lower()]
        if value < 1:
            raise ValueError(f"length {part!r} must be positive")
        out.append(int(value))
    return out


def label(length: int) -> str:
    """2000 → "2K", 1000000 → "1M"."""
    return f"{length // 1_000_000}M" if length % 1_000_000 == 0 else f"{length / 1000:g}K"


def split_passages(text: str, words: int = 150) -> list[str]:
    """Cut a long text into sentence-aligned passages of about ``words`` words."""
    out, current, count = [], [], 0
    for s, e in sentence_spans(text):
        sentence = " ".join(text[s:e].split())
        current.append(sentence)
        count += len(sentence.split())
        if count >= words:
            out.append(" ".join(current))
            current, count = [], 0
    if current:
        out.append(" ".join(current))
    return out


def _shingles(text: str, width: int = 12) -> set[int]:
    words = normalize_answer(text).split()
    return {hash(" ".join(words[i : i + width])) for i in range(max(1, len(words) - width + 1))}


def build_pool(texts: Sequence[str], exclude: Sequence[str], seed: int) -> list[str]:
    """The shuffled distractor pool: ``texts`` minus any text sharing a run of 12 words with an excluded one."""
    banned = set().union(*(_shingles(t) for t in exclude if t.strip()))
    keep = [t for t in texts if normalize_answer(t) and not (_shingles(t) & banned)]
    random.Random(seed).shuffle(keep)
    return keep


@dataclass(frozen=True)
class Item:
    """One benchmark question: its text, gold answers, gold paragraph, and relative depth in [0, 1]."""

    id: str
    question: str
    answers: tuple[str, ...]
    gold: str
    depth: float
    hard: tuple[str, ...] = ()  # same-topic distractors, closest first (empty: the pool setting)


@dataclass
class Context:
    """A context of one item at one length: documents in order, the gold one's index, token count."""

    docs: list[str]
    gold_doc: int
    tokens: int
    n_pool: int  # whole pool passages used (the next one, cut, is ``docs``' extra tail, if any)
    tail: str  # the cut pool passage ("" if none)
    block: tuple[int, int] = (0, 0)  # docs[block[0]:block[1]]: the gold paragraph and its hard distractors


class Builder:
    """Deterministic contexts for every item at every length (see the module docstring).

    Parameters
    ----------
    items : the questions, with their gold paragraphs and depths.
    pool : the shuffled distractor passages (:func:`build_pool`).
    count_tokens, offsets : the model tokenizer's counters (:func:`chunking.tokenizer_counters`).
    """

    def __init__(self, items: Sequence[Item], pool: Sequence[str], count_tokens: Callable,
                 offsets: Callable) -> None:
        self.items, self.pool = list(items), list(pool)
        self.count, self.offsets = count_tokens, offsets
        self._pool_tokens: list[int] = []
        self._chunks: dict[str, list[str]] = {}

    def pool_tokens(self, upto: int) -> list[int]:
        """Token counts of the pool's passages, counted lazily until their sum reaches ``upto``."""
        while sum(self._pool_tokens) < upto and len(self._pool_tokens) < len(self.pool):
            start = len(self._pool_tokens)
            self._pool_tokens += self.count(self.pool[start : start + 256])
        return self._pool_tokens

    def _prefix(self, budget: int) -> tuple[int, int]:
        """Whole pool passages that fit ``budget`` tokens, and their tokens."""
        counts = self.pool_tokens(budget)
        used, total = 0, 0
        while used < len(counts) and total + counts[used] <= budget:
            total += counts[used]
            used += 1
        return used, total

    def context(self, item: Item, length: int) -> Context:
        """The documents of ``item``'s context at ``length`` tokens, gold placed at ``item.depth``."""
        gold_tokens = self.count([item.gold])[0]
        budget = max(0, length - gold_tokens)
        hard, spent = [], 0
        for doc, n in zip(item.hard, self.count(list(item.hard)) if item.hard else [], strict=True):
            if spent + n > budget:
                break
            hard, spent = hard + [doc], spent + n
        position = self.positions
        while True:  # a hard passage already in the pool prefix stays there; the freed tokens go to the prefix
            used, total = self._prefix(budget - spent)
            keep = [h for h in hard if position.get(h, used) >= used]
            if len(keep) == len(hard):
                break
            hard = keep
            spent = sum(self.count(hard)) if hard else 0
        docs, tail = list(self.pool[:used]), ""
        left = budget - spent - total
        if used < len(self.pool) and left >= 16 and self.pool[used] not in hard:  # cut the next passage to fill
            cut = self.offsets(self.pool[used])[left - 1][1]
            tail = self.pool[used][:cut]
            docs.append(tail)
        at = round(item.depth * len(docs))
        block = hard[1::2][::-1] + [item.gold] + hard[0::2]  # the closest distractors next to the gold
        docs[at:at] = block
        return Context(docs, at + len(hard[1::2]), gold_tokens + spent + total + (self.count([tail])[0] if tail else 0),
                       used, tail, (at, at + len(block)))

    @functools.cached_property
    def positions(self) -> dict[str, int]:
        """The first index of each pool passage."""
        return {t: i for i, t in reversed(list(enumerate(self.pool)))}

    def chunks_of(self, doc: str) -> list[str]:
        """Sentence-aligned chunks of one document (memoised: pool passages recur in every context)."""
        if doc not in self._chunks:
            self._chunks[doc] = [c.text for c in chunk_documents([doc], self.count, self.offsets, CHUNK_TOKENS)]
        return self._chunks[doc]

    def chunked(self, ctx: Context) -> tuple[list[str], list[int]]:
        """Chunk texts of a context in document order, and the index of each chunk's document."""
        texts, doc_of = [], []
        for d, doc in enumerate(ctx.docs):
            pieces = self.chunks_of(doc)
            texts += pieces
            doc_of += [d] * len(pieces)
        return texts, doc_of


def gold_chunks(texts: Sequence[str], doc_of: Sequence[int], gold_doc: int, answers: Sequence[str]) -> set[int]:
    """Chunks of the gold document that contain a gold answer (all of its chunks if none does)."""
    mine = [i for i, d in enumerate(doc_of) if d == gold_doc]
    norm = [normalize_answer(a) for a in answers if normalize_answer(a)]
    hit = {i for i in mine if any(a in normalize_answer(texts[i]) for a in norm)}
    return hit or set(mine)


DISTRACTORS = {"pool": "distractors from the shared pool only",
               "same-topic": "the gold's own article's other paragraphs and BM25's nearest pool passages next to "
                             "it, then the pool"}


def hard_distractors(question: str, article: Sequence[str], pool_bm25, pool: Sequence[str], k: int = 8) -> tuple:
    """Same-topic distractors of one question, closest first: the other paragraphs of its article (BM25 order
    among themselves) interleaved with BM25's ``k`` nearest pool passages."""
    from ...core.selection import BM25

    own = []
    if article:
        scores = BM25(list(article)).scores([question])[0]
        own = [article[i] for i in scores.argsort(descending=True).tolist()]
    near = [pool[i] for i in pool_bm25.scores([question])[0].topk(min(k, len(pool))).indices.tolist()]
    out = [d for pair in itertools.zip_longest(own, near) for d in pair if d is not None]
    return tuple(dict.fromkeys(out))


@functools.lru_cache(maxsize=4)
def offline_builder(tokenizer, sample: int, seed: int = 0, distractors: str = "pool") -> Builder:
    """The benchmark on the offline data: ``sample`` New-Wiki questions (seeded), depths, and the pool;
    with ``distractors="same-topic"`` each question also gets its hard distractors (:func:`hard_distractors`).

    Memoised (with its chunk cache), so the app's live runs pay for the pool once.

    Raises
    ------
    InputError
        For an unknown distractor setting.
    """
    from ...core.chunking import tokenizer_counters
    from ...core.selection import BM25
    from ...data.sources import load_essays, load_novel, load_squad, load_summaries

    if distractors not in DISTRACTORS:
        raise InputError(f"unknown distractor setting {distractors!r}; use {' or '.join(DISTRACTORS)}")
    paragraphs, questions = load_squad("new_wiki")
    text_of = {p.id: p.text for p in paragraphs}
    rng = random.Random(seed)
    chosen = rng.sample(questions, min(sample, len(questions)))
    raw = [p.text for p in load_summaries()]
    for long_text in [e.text for e in load_essays()] + [load_novel().text]:
        raw += split_passages(long_text)
    pool = build_pool(raw, [p.text for p in paragraphs], seed)
    depths = [rng.random() for _ in chosen]
    hard: list[tuple] = [()] * len(chosen)
    if distractors == "same-topic":
        by_title: dict[str, list[str]] = {}
        for p in paragraphs:
            by_title.setdefault(p.title, []).append(p.text)
        pool_bm25 = BM25(pool)
        hard = [hard_distractors(q.text, [t for t in by_title[q.title] if t != text_of[q.passage_id]], pool_bm25,
                                 pool) for q in chosen]
    items = [Item(q.id, q.text, q.answers, text_of[q.passage_id], d, h)
             for q, d, h in zip(chosen, depths, hard, strict=True)]
    return Builder(items, pool, *tokenizer_counters(tokenizer))
