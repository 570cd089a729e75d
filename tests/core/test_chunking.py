"""Chunking: exact cover, document boundaries, sentence alignment, token targets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from unreal_demo.core.chunking import chunk_documents, sentence_spans, tokenizer_counters


def whitespace_counters():
    """An independent reference tokenizer: one token per whitespace-separated word (offsets exact)."""
    import re

    def count(texts):
        return [len(t.split()) for t in texts]

    def offsets(text):
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]

    return count, offsets


TEXT = st.text(alphabet=st.sampled_from(list("abc de.!?\n\t é")), max_size=400)


class TestSentenceSpans:
    def test_cover(self):
        text = "One. Two!  Three"
        spans = sentence_spans(text)
        assert "".join(text[s:e] for s, e in spans) == text
        assert [text[s:e] for s, e in spans] == ["One. ", "Two!  ", "Three"]

    def test_blank_line_splits(self):
        assert len(sentence_spans("a heading\n\nbody text")) == 2

    @given(TEXT)
    def test_exact_cover_property(self, text):
        spans = sentence_spans(text)
        assert "".join(text[s:e] for s, e in spans) == text
        assert all(e > s for s, e in spans)


class TestChunkDocuments:
    @settings(max_examples=200, deadline=None)
    @given(st.lists(TEXT, min_size=1, max_size=4), st.integers(min_value=8, max_value=40))
    def test_exact_cover_and_boundaries(self, docs, target):
        count, offsets = whitespace_counters()
        chunks = chunk_documents(docs, count, offsets, target)
        for d, doc in enumerate(docs):
            mine = [c for c in chunks if c.doc == d]
            assert "".join(c.text for c in mine) == doc  # exact cover, character for character
            assert all(doc[c.start : c.end] == c.text for c in mine)
            assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))
        assert [c.id for c in chunks] == list(range(len(chunks)))
        assert [c.doc for c in chunks] == sorted(c.doc for c in chunks)  # never crosses documents

    def test_no_punctuation_long_text_is_cut_near_target(self):
        count, offsets = whitespace_counters()
        doc = " ".join(f"w{i}" for i in range(1000))
        chunks = chunk_documents([doc], count, offsets, 50)
        assert "".join(c.text for c in chunks) == doc
        assert max(c.tokens for c in chunks) <= round(1.17 * 50) + 1
        assert len(chunks) >= 15
        assert all(not c.text.startswith(" ") for c in chunks[1:])  # cut at word boundaries

    def test_one_huge_sentence_among_short_ones(self):
        count, offsets = whitespace_counters()
        doc = "Short one. " + " ".join(["x"] * 300) + ". Tail sentence."
        chunks = chunk_documents([doc], count, offsets, 40)
        assert "".join(c.text for c in chunks) == doc
        assert max(c.tokens for c in chunks) <= 47

    def test_tiny_documents(self):
        count, offsets = whitespace_counters()
        chunks = chunk_documents(["Hi.", "", "Yes"], count, offsets, 141)
        assert [(c.doc, c.text) for c in chunks] == [(0, "Hi."), (2, "Yes")]

    def test_sentence_aligned_and_token_counts(self, tiny):
        count, offsets = tokenizer_counters(tiny.tokenizer)
        doc = " ".join(f"Sentence number {i} is here." for i in range(200))
        chunks = chunk_documents([doc], count, offsets, 60)
        assert all(c.text.rstrip().endswith(".") for c in chunks)
        assert [c.tokens for c in chunks] == count([c.text for c in chunks])
        mean = sum(c.tokens for c in chunks[:-1]) / (len(chunks) - 1)
        assert 0.9 * 60 <= mean <= 1.17 * 60
