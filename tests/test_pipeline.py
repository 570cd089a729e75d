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


def test_compare_chunks_and_encodes_the_document_once(explorer, monkeypatch):
    """Compare methods: one chunking, one store lookup and one forward pass over the document for every method, and
    each ranking equal to the method's own rank()."""
    from unreal_demo import pipeline

    calls = {"chunk": 0, "encode": 0, "store": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(pipeline, "chunk_documents", counted("chunk", pipeline.chunk_documents))
    monkeypatch.setattr(pipeline, "encode_chunks", counted("encode", pipeline.encode_chunks))
    monkeypatch.setattr(explorer, "store", counted("store", explorer.store))
    explorer.clear_cache()
    methods, seen = ["unreal", "bm25", "sparse", "hybrid-rrf"], []
    rankings, notes = explorer.compare([DOC], "What does fact 7 say?", 3, methods,
                                       progress=lambda j, m: seen.append((j, m)))
    assert calls == {"chunk": 1, "encode": 1, "store": 1} and not notes
    assert [r.method for r in rankings] == methods and seen == list(enumerate(methods))
    for r in rankings:
        alone = explorer.rank([DOC], "What does fact 7 say?", 3, r.method)
        assert (r.scores, r.selected) == (alone.scores, alone.selected) and r.chunks == alone.chunks
    assert calls["encode"] == 1  # the reruns above found the cached encoding
    with pytest.raises(InputError, match="the question is empty"):
        explorer.compare([DOC], " ", 3, methods)
