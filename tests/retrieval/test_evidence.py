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


class TestSparseEvidence:
    def test_retrieved_tokens_equal_a_brute_force_top_k(self):
        from unreal_demo.retrieval.sparse import retrieved_tokens

        gen = torch.Generator().manual_seed(0)
        lengths = [torch.tensor([3, 5]), torch.tensor([4])]  # chunks 0, 1 in part 0; chunk 2 in part 1
        parts = [(torch.nn.functional.normalize(torch.randn(int(n.sum()), 8, generator=gen), dim=-1).half(), n)
                 for n in lengths]
        query = torch.nn.functional.normalize(torch.randn(3, 8, generator=gen), dim=-1)
        got = retrieved_tokens(query, parts, k=4)
        every = torch.cat([t for t, _ in parts]).float()  # (12, d)
        owner = [0] * 3 + [1] * 5 + [2] * 4
        first = [0, 3, 8]
        want: dict[tuple[int, int], tuple[float, int]] = {}
        for t in range(3):
            sims = query[t] @ every.T
            top = torch.topk(sims, 4).indices.tolist()
            for c in {owner[g] for g in top}:  # per chunk, the best of the token's top-k: what sparse counts
                g = max((g for g in top if owner[g] == c), key=lambda g: float(sims[g]))
                at = (c, g - first[c])
                if at not in want or sims[g] > want[at][0]:
                    want[at] = (float(sims[g]), t)
        flat = {(c, p): (s, t) for c, row in got.items() for p, s, t in row}
        assert flat.keys() == want.keys()
        for at, (s, t) in want.items():
            assert flat[at][0] == pytest.approx(s, abs=1e-5) and flat[at][1] == t

    def test_token_spans_align_with_the_stored_token_states(self, tiny):
        from unreal_demo.core.encoding import encode_chunks
        from unreal_demo.retrieval.evidence import token_spans

        texts = [TEXT, "Short one.", TEXT * 4]
        stored: list[torch.Tensor] = []
        encode_chunks(tiny, texts, 3, 7, 32, tokens_out=stored)
        for text, states in zip(texts, stored, strict=True):
            spans = token_spans(tiny.tokenizer, text, 32)
            assert len(spans) == states.shape[0]
            assert all(0 <= s <= e <= len(text) for s, e in spans)

    def test_marks_may_overlap_and_stay_well_formed(self):
        from unreal_demo.ui.evidence import _marked

        out = _marked("founding fathers", [(0, 8, "found")], 0, 16, [(4, 12, "tip")])
        assert out == ("<u title='BM25 term “found”'>foun</u><span class='unreal-tok' title='tip'>"
                       "<u title='BM25 term “found”'>ding</u></span><span class='unreal-tok' title='tip'> fat</span>"
                       "hers")

    def test_a_sparse_ranking_marks_the_tokens_in_its_cards(self, tiny):
        from unreal_demo.core.head import untrained_head
        from unreal_demo.pipeline import Explorer
        from unreal_demo.ui.evidence import evidence_html, sparse_marks

        explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3), None)
        doc = "The zebra code is 4417. " + "Cats sleep a lot. Dogs bark at night. " * 40
        ranking = explorer.rank([doc], "What is the zebra code?", n=2, method="sparse")
        assert ranking.matched_tokens and ranking.query_tokens
        marks = [m for i in ranking.selected for m in sparse_marks(explorer, ranking, i)]
        assert marks and all("counted for question token" in tip for *_, tip in marks)
        assert "unreal-tok" in evidence_html(explorer, ranking, "What is the zebra code?")
        assert not explorer.rank([doc], "What is the zebra code?", n=2, method="bm25").matched_tokens

    def test_the_sparse_evidence_reuses_the_searchs_question_states(self, tiny, monkeypatch):
        """rank(method="sparse") encodes the question once: the evidence reads the search's own token states."""
        from unreal_demo.core.head import untrained_head
        from unreal_demo.pipeline import Explorer
        from unreal_demo.retrieval import sparse

        explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3), None)
        calls, real = [], sparse.query_states
        monkeypatch.setattr(sparse, "query_states", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
        ranking = explorer.rank(["The zebra code is 4417. " + "Cats sleep a lot. " * 30], "zebra code?", n=2,
                                method="sparse")
        assert calls == [["zebra code?"]] and ranking.matched_tokens and len(ranking.query_tokens) >= 2


def test_group_similarities_sum_to_the_maxsim_score():
    from unreal_demo.core.maxsim import maxsim_reference
    from unreal_demo.retrieval.evidence import group_similarities

    gen = torch.Generator().manual_seed(0)
    q, keys = torch.randn(3, 8, generator=gen), torch.randn(5, 4, 8, generator=gen)  # (G, d), (k, L_p, d)
    sims = group_similarities(q, keys)  # (k, G, L_p)
    assert sims.shape == (5, 3, 4)
    torch.testing.assert_close(sims.amax(-1).sum(-1), maxsim_reference(q[None], keys)[0])

