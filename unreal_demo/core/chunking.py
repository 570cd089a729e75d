"""Chunking — the c_1..c_M of Eq. 1: sentence-aligned, measured in the model's own tokens.

Each document is cut at sentence ends (and blank lines) into spans that cover it
exactly; sentences are packed greedily so a chunk closes once it reaches
``0.95 · target`` tokens and never grows past ``1.17 · target`` (the paper's
chunks: mean ~141, mostly 123–165 tokens). A sentence longer than that is cut at
word boundaries; text without punctuation is cut the same way. Chunks never
cross a document boundary, and the chunk texts of a document, concatenated, give
back the document character for character.

Example
-------
>>> spans = sentence_spans("One. Two!  Three")
>>> spans
[(0, 5), (5, 11), (11, 16)]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..settings import CHUNK_TOKENS

_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])[\"'”’)\]]*\s+|\n\s*\n\s*")


@dataclass(frozen=True)
class Chunk:
    """One chunk: its index, document, character span ``[start, end)``, token count and text."""

    id: int
    doc: int
    start: int
    end: int
    tokens: int
    text: str

    def to_dict(self) -> dict:
        return {"id": self.id, "doc": self.doc, "start": self.start, "end": self.end, "tokens": self.tokens}


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of sentences (each keeps its trailing whitespace); an exact cover of ``text``."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() > start:
            spans.append((start, m.end()))
            start = m.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _split_long(text: str, start: int, end: int, offsets: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """Cut ``text[start:end]`` into pieces of at most ``size`` tokens, at whitespace where possible."""
    pieces, cur = [], start
    for k in range(size, len(offsets), size):
        cut = start + offsets[k][0]
        space = text.rfind(" ", cur + 1, cut + 1)
        cut = space + 1 if space > cur else cut
        if cur < cut < end:
            pieces.append((cur, cut))
            cur = cut
    pieces.append((cur, end))
    return pieces


def chunk_documents(
    docs: Sequence[str],
    count_tokens: Callable[[list[str]], list[int]],
    offsets: Callable[[str], list[tuple[int, int]]],
    target: int = CHUNK_TOKENS,
) -> list[Chunk]:
    """Split documents into sentence-aligned chunks of about ``target`` tokens.

    Parameters
    ----------
    docs : the documents; chunks never cross from one to the next.
    count_tokens : token count of each text in a list (the model's tokenizer).
    offsets : token character offsets of one text (to cut over-long sentences).
    target : the wanted mean chunk length in tokens.

    Returns
    -------
    list of :class:`Chunk`, numbered in document order.
    """
    if target < 8:
        raise ValueError(f"target chunk length must be at least 8 tokens, got {target}")
    lo, hi = round(0.95 * target), round(1.17 * target)
    chunks: list[Chunk] = []
    for d, text in enumerate(docs):
        spans = sentence_spans(text)
        counts = count_tokens([text[s:e] for s, e in spans]) if spans else []
        units: list[tuple[int, int, int]] = []  # (start, end, tokens)
        for (s, e), n in zip(spans, counts, strict=True):
            if n <= hi:
                units.append((s, e, n))
                continue
            pieces = _split_long(text, s, e, offsets(text[s:e]), target)
            units += [(a, b, m) for (a, b), m in zip(pieces, count_tokens([text[a:b] for a, b in pieces]),
                                                      strict=True)]
        groups: list[list[int]] = []  # [start, end, tokens]
        for s, e, n in units:
            if groups and groups[-1][2] < lo and groups[-1][2] + n <= hi:
                groups[-1][1], groups[-1][2] = e, groups[-1][2] + n
            else:
                groups.append([s, e, n])
        if len(groups) > 1 and groups[-1][2] < lo // 3 and groups[-2][2] + groups[-1][2] <= hi + lo // 3:
            tail = groups.pop()  # a tiny last piece joins its neighbour
            groups[-1][1], groups[-1][2] = tail[1], groups[-1][2] + tail[2]
        texts = [text[s:e] for s, e, _ in groups]
        for (s, e, _), n in zip(groups, count_tokens(texts) if texts else [], strict=True):
            chunks.append(Chunk(len(chunks), d, s, e, n, text[s:e]))
    return chunks


def tokenizer_counters(tokenizer) -> tuple[Callable, Callable]:
    """``count_tokens`` and ``offsets`` callables for :func:`chunk_documents` from a HF tokenizer."""

    def count(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []

    def offsets(text: str) -> list[tuple[int, int]]:
        return [tuple(o) for o in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
                ["offset_mapping"]]

    return count, offsets
