"""Evidence spans: the pooled runs of Eq. 1 mapped back to characters, and BM25's matched terms."""

from __future__ import annotations

import re

import pytest
import torch

from unreal_demo.core.encoding import group_weights
from unreal_demo.retrieval.evidence import bm25_terms, segment_spans, unreal_segments

TEXT = "Paris is the capital of France. Berlin is the capital of Germany. Rome is in Italy."


class TestSegmentSpans:
    @pytest.mark.parametrize(("n_pool", "max_tokens"), [(7, 256), (3, 256), (4, 9), (2, 5)])
    def test_each_span_holds_exactly_the_tokens_eq1_averages(self, tiny, n_pool, max_tokens):
        offsets = tiny.tokenizer(TEXT, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        offsets = offsets[:max_tokens]
        spans = segment_spans(tiny.tokenizer, TEXT, n_pool, max_tokens)
        w = group_weights(torch.tensor([len(offsets)]), n_pool, len(offsets))[0]  # (L_p, T): the oracle
        assert len(spans) == n_pool
        for g, (start, end) in enumerate(spans):
            members = w[g].nonzero().flatten().tolist()
            inside = [t for t, (s, e) in enumerate(offsets) if start <= s and e <= end and e > s]
            assert inside == members, g
        assert spans[0][0] == 0 and spans[-1][1] == offsets[-1][1]
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))  # no gaps

    def test_shorter_than_l_p_repeats_a_token(self, tiny):
        spans = segment_spans(tiny.tokenizer, "Rome", 7, 256)
        assert len(spans) == 7 and all(e <= 4 for _, e in spans)


def test_unreal_segments_take_the_best_group_per_span():
    sims = [[0.1, 0.5, -0.2], [0.3, 0.4, 0.9]]  # G = 2, L_p = 3
    got = unreal_segments([(0, 3), (3, 6), (6, 9)], sims)
    assert [(s.group, s.score) for s in got] == [(1, 0.3), (0, 0.5), (1, 0.9)]


def test_bm25_terms_are_the_stems_bm25s_matches():
    import bm25s

    from unreal_demo.core.selection import STEMMER

    question, text = "Which capitals did Germany's rulers build?", TEXT + " Capitalism built Berlin."
    got = bm25_terms(question, text)
    q_terms = set(bm25s.tokenize([question], stopwords="en", stemmer=STEMMER, return_ids=False,
                                 show_progress=False)[0])
    assert {stem for *_, stem in got} == q_terms & set(bm25s.tokenize([text], stopwords="en", stemmer=STEMMER,
                                                                     return_ids=False, show_progress=False)[0])
    assert all(re.fullmatch(r"\w+", text[s:e]) for s, e, _ in got)
    assert [text[s:e] for s, e, _ in got] == ["capital", "capital", "Germany", "Capitalism"]  # "built" ≠ "build"
