"""The whole pipeline on a tiny random Llama: chunk → encode → query → MaxSim → select → answer."""

from __future__ import annotations

import pytest

from unreal_demo.core.generation import AnswerRule
from unreal_demo.core.head import untrained_head
from unreal_demo.pipeline import Explorer, FullContext, IndexStoreError, InputError

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


def test_every_answer_path_streams_through_stream_passages(explorer, monkeypatch):
    """ask_stream, answer_stream, answer and full_context all answer through stream_passages: the prompt's length
    first, then the answer with its timings; ask() is ask_stream's last step."""
    seen = []
    original = explorer.stream_passages

    def recording(passages, question, rule, source):
        seen.append((len(passages), source))
        return original(passages, question, rule, source)

    monkeypatch.setattr(explorer, "stream_passages", recording)
    steps = list(explorer.ask_stream([DOC], "What does fact 7 say?", 2, "bm25", AnswerRule(3, first_sentence=False)))
    ranking = steps[0].ranking
    assert steps[0].prompt_tokens == 0 and steps[1].prompt_tokens > 0 and steps[1].text == ""
    assert steps[-1].done and set(steps[-1].timings) >= {"chunk", "retrieval", "prefill", "first_token", "total"}
    assert ranking.passages == [ranking.chunks[i].text for i in ranking.selected]
    reply = explorer.answer(ranking, "What does fact 7 say?", AnswerRule(3, first_sentence=False))
    assert reply.done and reply.text == steps[-1].text and reply.prompt_tokens == steps[1].prompt_tokens
    full = explorer.full_context(ranking, "What does fact 7 say?", timed=True)
    assert full.fits and full.prompt_tokens > reply.prompt_tokens and full.first_token >= full.prefill > 0
    assert explorer.full_context(ranking, "What does fact 7 say?") == FullContext(full.prompt_tokens, True,
                                                                                 full.window)
    assert seen == [(2, "bm25"), (2, "bm25"), (len(ranking.chunks), "full")]


def _corpus(tmp_path, n=10):
    import json

    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "title": f"Town {i}", "text": f"Town {i} has {i * 11} mills."})
                            + "\n" for i in range(n)))
    return path


def test_build_index_resumes_with_the_settings_it_was_started_with(explorer, tmp_path):
    """index build and the tab's Build or load index: one call; a killed build resumes with its own settings
    (as_started) or refuses other ones; progress first says the corpus is read (with an estimate), then counts."""
    import json

    corpus, out, reports = str(_corpus(tmp_path)), tmp_path / "ix", []
    first = explorer.build_index(out, [corpus], shard_size=4, token_states=True, dense=False,
                                 progress=reports.append)
    assert (first.folder, first.chunks, first.passages) == (out, 10, 10) and first.seconds > 0
    assert first.manifest["chunk_layer"] == explorer.head.config.chunk_layer and first.manifest["token_states"]
    assert reports[0].total == 0 and reports[0].estimate > 0 and (reports[-1].done, reports[-1].total) == (10, 10)
    (out / "shard_00001.json").unlink()  # killed before shard 1 was recorded and the manifest merged
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(manifest | {"shards": []}))
    with pytest.raises(IndexStoreError, match="other settings"):
        explorer.build_index(out, [corpus])  # the defaults: shard size 1024, dense vectors
    reports.clear()
    again = explorer.build_index(out, [corpus], as_started=True, progress=reports.append)
    assert (reports[-1].done, reports[-1].total) == (4, 4)  # shard 1 alone
    assert {k: again.manifest[k] for k in ("shard_size", "token_states", "dense")} == {
        "shard_size": 4, "token_states": True, "dense": False}
    assert len(again.manifest["shards"]) == 3


def test_stores_build_a_missing_corpus_index_once_then_open_it(explorer, tmp_path, monkeypatch):
    """Stores.load builds the corpus's own index in the cache when none opens, then opens it; a public app's
    Stores refuses any folder (CLOSED)."""
    import torch

    from unreal_demo import pipeline, settings
    from unreal_demo.core import minilm
    from unreal_demo.data.sources import load_corpus

    monkeypatch.setenv(settings.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(minilm, "embed", lambda texts: torch.nn.functional.normalize(torch.ones(len(texts), 3), dim=-1))
    passages = load_corpus([str(_corpus(tmp_path, 6))])
    monkeypatch.setattr(pipeline, "load_corpus", lambda names: passages if names == ["new_wiki"] else pytest.fail())
    stores = pipeline.Stores(pipeline.Loading.of(explorer), open_any=False)
    with pytest.raises(IndexStoreError):
        stores.open("new_wiki")  # nothing built yet
    got = stores.load("new_wiki")
    assert got.built is not None and got.built.chunks == len(got.store) == 6 and got.built.manifest["dense"]
    assert (got.info.kind, got.info.chunks, got.info.passages, got.info.shipped) == ("index", 6, 6, False)
    again = stores.load("new_wiki")
    assert again.built is None and again.store is got.store and explorer.index_ready("new_wiki")
    with pytest.raises(IndexStoreError, match="searches its own indexes only"):
        stores.load("new_wiki", str(got.built.folder))
