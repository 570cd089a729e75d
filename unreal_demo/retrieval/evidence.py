"""Why a chunk was picked: the parts of its text each method matched.

- **UNREAL** (Eqs. 1 and 4): a chunk's key is L_p vectors, each the mean of one contiguous run of its
  tokens (:func:`core.encoding.group_weights`). :func:`segment_spans` maps those runs back to character
  spans, and :func:`unreal_segments` gives each span the best ⟨q_g, k_{i,p}⟩ over the query groups g and
  the group that reached it; Eq. 4 sums, over g, the best of these per group. :func:`group_similarities`
  computes those ``G × L_p`` similarities, and :func:`scored_segments` scores a chunk's spans by them.
- **BM25**: :func:`bm25_terms` marks the words whose stem is one of the question's terms, tokenised as
  :class:`core.selection.BM25` tokenises (words of two or more characters, English stop words out,
  Snowball stems).
- **Sparse** token matching: :func:`sparse_matches` gives, per chunk, the stored tokens each question token
  retrieved (:func:`retrieval.sparse.retrieved_tokens`) and the question's tokens as text; :func:`token_spans`
  maps a chunk's stored token states to characters, so :func:`matched_token_spans` can mark them.
- Dense retrieval scores one vector per chunk: it does not localise evidence, so it gets no spans.

The front ends only present these (``ui/evidence.py`` writes them as HTML).

Example
-------
>>> bm25_terms("Who founded the city?", "The city was founded in 1820; cities grow.")
[(4, 8, 'citi'), (13, 20, 'found'), (30, 36, 'citi')]
>>> segments = unreal_segments([(0, 5), (5, 9)], [[0.2, 0.9], [0.7, 0.1]])
>>> [(s.start, s.end, s.group, round(s.score, 1)) for s in segments]
[(0, 5, 1, 0.7), (5, 9, 0, 0.9)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from bm25s.stopwords import STOPWORDS_EN

from ..core.selection import STEMMER
from .sparse import retrieved_tokens

_WORD = re.compile(r"(?u)\b\w\w+\b")  # bm25s's default token pattern


@dataclass(frozen=True)
class Segment:
    """One pooled span of a chunk: characters ``[start, end)``, its best score, and the query group (0-based)."""

    start: int
    end: int
    score: float
    group: int


def segment_spans(tokenizer, text: str, n_pool: int, max_tokens: int) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the ``n_pool`` token runs Eq. 1 averages, in order.

    Token ``t`` of ``T`` (the first ``max_tokens`` tokens, as :func:`core.encoding.tokenize_chunks` keeps)
    belongs to run ``t · L_p // T``; a text shorter than L_p tokens repeats tokens (as
    :func:`core.encoding.group_weights` does), so some runs share a span. Spans cover the text's
    encoded prefix without gaps (whitespace between tokens goes to the run that follows it).

    Raises
    ------
    ValueError
        For a tokenizer without character offsets (a "slow" tokenizer).
    """
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"][:max_tokens]
    n = len(offsets)
    if n == 0:
        return [(0, len(text))] * n_pool
    ends = [offsets[min(n - 1, ((g + 1) * n - 1) // n_pool)][1] for g in range(n_pool)]  # last token of run g
    starts = [0] + ends[:-1]
    return [(min(s, e), e) for s, e in zip(starts, ends, strict=True)]


def token_spans(tokenizer, text: str, max_tokens: int) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the tokens whose states a chunk stores (its first ``max_tokens``,
    as :func:`core.encoding.tokenize_chunks` keeps them), in order."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [(int(s), int(e)) for s, e in enc["offset_mapping"][:max_tokens]]


def unreal_segments(spans: Sequence[tuple[int, int]], group_sims: Sequence[Sequence[float]]) -> list[Segment]:
    """Each pooled span with ``max_g ⟨q_g, k_{i,p}⟩`` and the group reaching it.

    Parameters
    ----------
    spans : the L_p character spans of the chunk (:func:`segment_spans`).
    group_sims : ``G × L_p`` similarities of the query groups to the chunk's pooled vectors.
    """
    out = []
    for p, (start, end) in enumerate(spans):
        column = [row[p] for row in group_sims]
        g = max(range(len(column)), key=column.__getitem__)
        out.append(Segment(start, end, float(column[g]), g))
    return out


def _stems(text: str) -> list[tuple[int, int, str]]:
    words = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(text)]
    kept = [(s, e, w) for s, e, w in words if w not in STOPWORDS_EN]
    stems = STEMMER.stemWords([w for *_, w in kept])
    return [(s, e, stem) for (s, e, _), stem in zip(kept, stems, strict=True)]


def bm25_terms(question: str, text: str) -> list[tuple[int, int, str]]:
    """Character spans of the words of ``text`` that BM25 matched against ``question``, with their stem."""
    wanted = {stem for *_, stem in _stems(question)}
    return [(s, e, stem) for s, e, stem in _stems(text) if stem in wanted]


def scored_segments(tokenizer, text: str, n_pool: int, max_tokens: int,
                    group_sims: Sequence[Sequence[float]]) -> list[Segment]:
    """The pooled spans of one chunk (:func:`segment_spans`) scored by its ``G × L_p`` similarities
    (:func:`unreal_segments`)."""
    return unreal_segments(segment_spans(tokenizer, text, n_pool, max_tokens), group_sims)


def group_similarities(q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """⟨q_g, k_{i,p}⟩ ``(k, G, L_p)`` of the query vectors ``(G, d)`` with chunks' scoring keys ``(k, L_p, d)``
    (L2-normalised for a head with ``normalize``): summing each ``(G, L_p)`` row's maximum over p, over g, gives the
    chunk's MaxSim score (Eq. 4)."""
    return torch.einsum("gd,kpd->kgp", q.float(), keys.float())


def sparse_matches(tokenizer, question: str, states: torch.Tensor,
                   token_parts: Sequence[tuple[torch.Tensor, torch.Tensor]], mean: torch.Tensor | None = None
                   ) -> tuple[dict[int, list[tuple[int, float, int]]], list[str]]:
    """What sparse token matching counted for one question: chunk id → ``[(token position, cosine, question
    token), …]`` (:func:`retrieval.sparse.retrieved_tokens`), and the question's tokens as text.

    Parameters
    ----------
    states : the question's normalised token states ``(T_q, d)`` (the sparse search's own, ``token_states``).
    token_parts : the store's token states per part.
    mean : the store's token mean μ (``store.token_mean()``), on which the search centred both sides.
    """
    ids = tokenizer(question, add_special_tokens=False)["input_ids"][: len(states)]
    return retrieved_tokens(states, token_parts, mean=mean), [tokenizer.decode([t]) for t in ids]


def matched_token_spans(tokenizer, text: str, max_tokens: int,
                        matched: Sequence[tuple[int, float, int]]) -> list[tuple[int, int, float, int]]:
    """Character spans ``(start, end, cosine, question token)`` of the tokens of a chunk that sparse counted
    (``matched``: one chunk's entry of :func:`sparse_matches`)."""
    if not matched:
        return []
    spans = token_spans(tokenizer, text, max_tokens)
    return [(*spans[pos], score, t) for pos, score, t in matched if pos < len(spans)]
