"""The whole pipeline on a tiny random Llama: chunk → encode → query → MaxSim → select → answer."""

from __future__ import annotations

import pytest

from unreal_demo import serving
from unreal_demo.core.generation import AnswerRule
from unreal_demo.core.head import untrained_head
from unreal_demo.errors import InputError
from unreal_demo.pipeline import Explorer, FullContext
from unreal_demo.store.index import IndexStoreError

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
    """ask_stream, answer_stream, answer and full_context all answer through stream_passages, given the prompt's
    token ids they counted first: the prompt's length first, then the answer with its timings; ask() is ask_stream's
    last step."""
    seen = []
    original = explorer.stream_passages

    def recording(passages, question, rule, source, ids=None):
        seen.append((len(passages), source, ids is not None))
        return original(passages, question, rule, source, ids)

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
    assert seen == [(2, "bm25", True), (2, "bm25", True), (len(ranking.chunks), "full", True)]


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


def _stores(explorer, tmp_path, monkeypatch, n=6):
    """A loader for Stores whose cache is in ``tmp_path``: MiniLM stubbed, new_wiki and squad_dev read as a JSONL
    corpus of ``n`` passages."""
    import torch

    from unreal_demo import pipeline, settings
    from unreal_demo.core import minilm
    from unreal_demo.data.sources import load_corpus

    monkeypatch.setenv(settings.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(minilm, "embed", lambda texts: torch.nn.functional.normalize(torch.ones(len(texts), 3), dim=-1))
    passages = load_corpus([str(_corpus(tmp_path, n))])
    monkeypatch.setattr(pipeline, "load_corpus",
                        lambda names: passages if names in (["new_wiki"], ["squad_dev"]) else pytest.fail())
    return serving.Loading.of(explorer)


def test_stores_build_a_missing_corpus_index_once_then_open_it(explorer, tmp_path, monkeypatch):
    """Stores.load builds the corpus's own index in the cache when none opens, then opens it; a public app's
    Stores builds nothing (one line saying how to build the index), opens the index once built, and refuses any
    folder (CLOSED)."""

    loader = _stores(explorer, tmp_path, monkeypatch)
    closed = serving.Stores(loader, open_any=False)
    with pytest.raises(IndexStoreError, match=r"builds none for visitors: build it on your own machine with "
                                              r"`python -m unreal_demo index build --corpus new_wiki --out DIR`"
                       ) as refused:
        closed.load("new_wiki")
    assert len(str(refused.value).splitlines()) == 1 and not explorer.index_ready("new_wiki")
    stores = serving.Stores(loader, open_any=True)
    with pytest.raises(IndexStoreError):
        stores.open("new_wiki")  # nothing built yet
    got = stores.load("new_wiki")
    assert got.built is not None and got.built.chunks == len(got.store) == 6 and got.built.manifest["dense"]
    assert (got.info.kind, got.info.chunks, got.info.passages, got.info.shipped) == ("index", 6, 6, False)
    again = stores.load("new_wiki")
    assert again.built is None and again.store is got.store and explorer.index_ready("new_wiki")
    shown = closed.load("new_wiki")  # built: a public app opens it
    assert shown.built is None and len(shown.store) == 6
    with pytest.raises(IndexStoreError, match="searches its own indexes only"):
        closed.load("new_wiki", str(got.built.folder))


@pytest.mark.parametrize("corpus", ["/etc/x.jsonl", "../../x", "", None])
def test_stores_open_and_build_only_the_built_in_corpora(explorer, monkeypatch, corpus):
    """A corpus name is checked below the UI: anything but CORPORA (a path, a file) is one line, before any work."""
    from unreal_demo.data.sources import BUILT_IN

    assert list(serving.CORPORA) == [*BUILT_IN, "all"]
    monkeypatch.setattr(explorer, "build_index", lambda *a, **k: pytest.fail("built"))
    stores = serving.Stores(serving.Loading.of(explorer), open_any=True)
    for call in (stores.open, stores.load):
        with pytest.raises(InputError, match=r"^unknown corpus .*: the indexes are of new_wiki, squad_dev, summaries, "
                                             r"enwiki, all$"):
            call(corpus)
    with pytest.raises(InputError, match="unknown corpus"):
        stores.open(corpus, "some/folder")  # whatever the folder


def test_a_build_holds_up_no_other_store_and_runs_once(explorer, tmp_path, monkeypatch):
    """While one load builds a corpus's index, a cached store and a folder not yet opened open and search at once,
    a search of that corpus says it is being built, and a second load of it waits and gets the same index (one
    build)."""
    import threading
    import time

    from unreal_demo.data.sources import load_corpus
    from unreal_demo.store import index as ix

    loader = _stores(explorer, tmp_path, monkeypatch)
    ix.build_index(tmp_path / "other", explorer.backbone, load_corpus([str(_corpus(tmp_path, 4))]),
                   explorer.head.config.chunk_layer, explorer.head.config.n_pool, dense=False)
    stores = serving.Stores(loader, open_any=True)
    ready = stores.load("squad_dev")
    started, release, builds, build = threading.Event(), threading.Event(), [], explorer.build_index

    def slow(*args, **kwargs):
        builds.append(args[1])
        started.set()
        assert release.wait(30)
        return build(*args, **kwargs)

    monkeypatch.setattr(explorer, "build_index", slow)
    got = {}
    loads = [threading.Thread(target=lambda i=i: got.__setitem__(i, stores.load("new_wiki"))) for i in range(2)]
    loads[0].start()
    assert started.wait(30)
    loads[1].start()
    t0 = time.perf_counter()
    assert stores.open("squad_dev").store is ready.store
    other = stores.open("new_wiki", str(tmp_path / "other"))  # opened while the build runs
    assert explorer.search(other.store, "mills", 2, "bm25")["hits"]
    with pytest.raises(IndexStoreError, match="^the index of new_wiki is being built: search it once the build is "
                                              "done$"):
        stores.open("new_wiki")
    waited = time.perf_counter() - t0
    release.set()
    for thread in loads:
        thread.join(60)
    assert waited < 10 and builds == [["new_wiki"]]
    assert got[0].store is got[1].store and len(got[0].store) == 6
    assert sorted(g.built is None for g in got.values()) == [False, True]


def test_stores_key_by_folder_and_drop_the_least_recently_used(explorer, tmp_path, monkeypatch):
    """Two spellings of one folder open it once (an index, a Qdrant Edge store); past ``size`` the least recently
    used store is dropped (an Edge store closed, with its views) and opens afresh when asked again; a method the
    store cannot serve is one line from Explorer.search."""
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed")
    from unreal_demo.data.sources import load_corpus
    from unreal_demo.store import index as ix
    from unreal_demo.store import qdrant

    passages = load_corpus([str(_corpus(tmp_path))])
    for name in ("a", "b"):
        ix.build_index(tmp_path / name, explorer.backbone, passages, explorer.head.config.chunk_layer,
                       explorer.head.config.n_pool, dense=False)
    qdrant.export_index(ix.Index(tmp_path / "a"), f"qdrant-edge:{tmp_path / 'edge'}")
    monkeypatch.chdir(tmp_path)
    stores = serving.Stores(serving.Loading.of(explorer), open_any=True, size=2)
    a = stores.open("all", str(tmp_path / "a"))
    assert stores.open("all", "a/").store is a.store and stores.open("all", "./b/../a").store is a.store
    with pytest.raises(InputError, match="^dense cannot search this store: it needs --dense$"):
        explorer.search(a.store, "mills", 3, "dense")
    edge = stores.open("all", "qdrant-edge:edge")
    view = stores.open("all", f"qdrant-edge:{tmp_path / 'edge'}", qdrant.Where(title_prefix="Town 1"))
    assert stores.open("all", "qdrant-edge:./edge/").store is edge.store  # one shard, and every view of it
    assert len(view.store) == 1 and view.store is not edge.store
    assert stores.open("all", "a").store is not a.store  # dropped when the view came in: opened afresh
    stores.open("all", "b")  # two indexes kept: the Edge store dropped, closed, its view with it
    again = stores.open("all", "qdrant-edge:edge")  # opens: the shard was released
    assert again.store is not edge.store and len(again.store) == 10


def test_stores_default_to_the_app_setting(explorer, monkeypatch):
    """Stores (and so the Wikipedia tab) read settings.open_stores when not told: closed on a public app; a bad
    $UNREAL_OPEN_STORES is one line."""
    from unreal_demo import settings

    for name in (settings.STORES_ENV, settings.SPACE_ENV, "GRADIO_SERVER_NAME"):
        monkeypatch.delenv(name, raising=False)
    loader = serving.Loading.of(explorer)
    assert serving.Stores(loader).open_any
    monkeypatch.setenv(settings.SPACE_ENV, "someone/unreal")
    assert not serving.Stores(loader).open_any
    monkeypatch.setenv(settings.STORES_ENV, "maybe")
    with pytest.raises(InputError, match=r"^\$UNREAL_OPEN_STORES is 0 or 1, not 'maybe'$"):
        serving.Stores(loader)


def test_build_index_refuses_as_started_with_a_lossy_codec(explorer, tmp_path, monkeypatch):
    """A lossy build runs in OUT.fp16-build, whose manifest does not say the codec: as_started is refused in one
    line, before the corpus is read."""
    from unreal_demo import pipeline

    monkeypatch.setattr(pipeline, "load_corpus", lambda names: pytest.fail("read"))
    with pytest.raises(InputError, match=r"^as_started resumes an fp16 or int8 build; a rpq3 build is encoded in "
                                         r"ix\.fp16-build, then compressed") as refused:
        explorer.build_index(tmp_path / "ix", ["new_wiki"], codec="rpq3", as_started=True)
    assert len(str(refused.value).splitlines()) == 1


def test_an_answer_tokenizes_its_prompt_once(explorer, monkeypatch):
    """answer_stream reports the prompt's length and stream_passages answers from the same ids: one tokenization per
    answer (and per timed full context)."""
    from unreal_demo import pipeline

    calls, tokenize = [], pipeline.prompt_ids
    monkeypatch.setattr(pipeline, "prompt_ids", lambda *a, **k: calls.append(1) or tokenize(*a, **k))
    rule = AnswerRule(2, first_sentence=False)
    steps = list(explorer.answer_stream(["Fact one is 7.", "Fact two is 14."], "What is fact two?", rule))
    assert len(calls) == 1 and steps[0].prompt_tokens == steps[-1].prompt_tokens > 0 and steps[-1].done
    calls.clear()
    ranking = explorer.rank([DOC], "What does fact 7 say?", 2, "bm25")
    full = explorer.full_context(ranking, "What does fact 7 say?", timed=True)
    assert len(calls) == 1 and full.first_token is not None
    calls.clear()
    assert list(explorer.stream_passages(ranking.passages, "What does fact 7 say?", rule)) and len(calls) == 1
