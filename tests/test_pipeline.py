"""The whole pipeline on a tiny random Llama: chunk → encode → query → MaxSim → select → answer."""

from __future__ import annotations

import pytest

from unreal_demo.core.generation import AnswerRule
from unreal_demo.core.head import untrained_head
from unreal_demo.pipeline import Explorer, InputError

DOC = " ".join(f"Fact number {i} says the value is {i * 7}." for i in range(120))


@pytest.fixture(scope="module")
def explorer(tiny):
    return Explorer(tiny, untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3), None)


class TestAsk:
    @pytest.mark.parametrize("method", ["unreal", "bm25", "dense", "sparse", "full"])
    def test_contract(self, explorer, method):
        r = explorer.ask([DOC, "A second document. It is short."], "What does fact 7 say?", n=3,
                         method=method, rule=AnswerRule(4, first_sentence=False))
        chunks = r["chunks"]
        for d, doc in enumerate([DOC, "A second document. It is short."]):
            assert "".join(doc[c["start"] : c["end"]] for c in chunks if c["doc"] == d) == doc
        assert set(chunks[0]) == {"id", "doc", "start", "end", "tokens", "score"}
        assert r["selected"] == sorted(r["selected"])
        assert len(r["selected"]) == (len(chunks) if method == "full" else 3)
        assert set(r["timings"]) >= {"prefill", "first_token", "total"}
        assert isinstance(r["answer"], str) and r["head"] == "untrained"

    def test_unreal_scores_are_maxsim_and_select_the_top(self, explorer):
        ranking = explorer.rank([DOC], "fact 3?", n=4, method="unreal")
        top = sorted(range(len(ranking.scores)), key=lambda i: -ranking.scores[i])[:4]
        assert ranking.selected == sorted(top)
        assert any("UNTRAINED" in n for n in ranking.notices)
        assert len(ranking.group_sims) >= 3 and len(next(iter(ranking.group_sims.values()))) == 4  # G rows

    def test_bm25_finds_the_exact_fact(self, explorer):
        doc = "Cats sleep a lot. Dogs bark loudly at night. " * 40 + "The zebra code is 4417. " + "Birds sing. " * 40
        ranking = explorer.rank([doc], "What is the zebra code?", n=1, method="bm25")
        assert "4417" in ranking.chunks[ranking.selected[0]].text

    def test_an_n_over_the_chunks_selects_them_all_and_says_so(self, explorer):
        ranking = explorer.rank(["One sentence only."], "q?", n=50, method="bm25")
        assert ranking.selected == [0] and ranking.notices == [
            "n = 50, but the text has only 1 chunk: all of them are selected"]


class TestBadInput:
    @pytest.mark.parametrize("docs,question,match", [
        ([""], "q?", "document is empty"),
        (["   \n\t "], "q?", "document is empty"),
        (["text"], "  ", "question is empty"),
    ])
    def test_refused(self, explorer, docs, question, match):
        with pytest.raises(InputError, match=match):
            explorer.rank(docs, question)

    @pytest.mark.parametrize("n", [0, -3, 2.5, 100_000, "five", True])
    def test_n_must_be_a_whole_number_in_range(self, explorer, monkeypatch, n):
        monkeypatch.setattr(explorer, "chunk", lambda docs: pytest.fail("chunked with a refused n"))
        with pytest.raises(InputError, match=r"^n must be a whole number from 1 to 1,000 \(got "):
            explorer.rank(["Some text."], "q?", n=n, method="bm25")

    @pytest.mark.parametrize("docs,question,match", [
        (["\x7fELF\x02\x01\x01\x00\x00 pasted from a binary"], "q?", "the document: looks binary"),
        (["Fine text.", "caf\ufffd"], "q?", "document 2: holds characters that were not valid text"),
        (["Fine text."], "what is \x00\x01?", "the question: looks binary"),
    ])
    def test_binary_or_damaged_pasted_text_is_refused_before_work(self, explorer, monkeypatch, docs, question,
                                                                   match):
        monkeypatch.setattr(explorer, "chunk", lambda docs: pytest.fail("chunked a refused document"))
        with pytest.raises(InputError, match=match):
            explorer.rank(docs, question)

    def test_too_long_refused_before_work(self, explorer, monkeypatch):
        monkeypatch.setattr(explorer, "chunk", lambda docs: pytest.fail("chunked a refused document"))
        with pytest.raises(InputError, match="limit is 2,000,000"):
            explorer.rank(["x" * 2_000_001], "q?")

    def test_unknown_method(self, explorer):
        with pytest.raises(InputError, match="unknown method"):
            explorer.rank(["text."], "q?", method="magic")

    def test_prompt_over_the_window(self, explorer):
        ranking = explorer.rank([DOC * 12], "q?", method="full")
        with pytest.raises(InputError, match="model window"):
            next(explorer.stream(ranking, "q?"))


def test_sparse_and_dense_find_the_planted_fact(explorer):
    doc = "Cats sleep a lot. Dogs bark loudly at night. " * 40 + "The zebra code is 4417. " + "Birds sing. " * 40
    ranking = explorer.rank([doc], "What is the zebra code?", n=1, method="dense")
    assert "4417" in ranking.chunks[ranking.selected[0]].text  # MiniLM is a real retriever
    sparse = explorer.rank([doc], "What is the zebra code?", n=2, method="sparse")
    assert len(sparse.scores) == len(sparse.chunks) and len(sparse.selected) == 2
