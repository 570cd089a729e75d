"""The Gradio app through ``gradio_client``: the ``ask`` endpoint on a tiny model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from unreal_demo.core.cpu import status_line

gradio_client = pytest.importorskip("gradio_client")

from unreal_demo.core.head import untrained_head  # noqa: E402
from unreal_demo.pipeline import Explorer  # noqa: E402
from unreal_demo.ui.app import build_demo  # noqa: E402

DOC = "Cats sleep a lot. Dogs bark at night. " * 30 + "The zebra code is 4417. " + "Birds sing in spring. " * 30


@pytest.fixture(scope="module")
def explorer(tiny):
    return Explorer(tiny, untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3), None)


@pytest.fixture(scope="module")
def client(explorer):
    demo = build_demo(explorer, open_stores=True)  # the Wikipedia tab opens any store (as on a laptop)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        yield gradio_client.Client(demo.local_url, verbose=False)
    finally:
        demo.close()


def test_ask_endpoint(client):
    answer, check, _bars, _heat, evidence, chosen, timings, _notice, files = client.predict(
        DOC, "What is the zebra code?", 1, "bm25", False, api_name="/ask")
    assert isinstance(answer, str)
    assert "Written by <code>tiny-llama</code>" in check and "one sentence, at most 48 tokens" in check
    assert len(chosen["data"]) == 1 and "4417" in chosen["data"][0][-1]
    assert [row[0] for row in timings["data"]] == ["bm25", "full context"]
    assert "<u title='BM25 term “zebra”'>zebra</u>" in evidence  # the matched query term, underlined
    downloaded = {Path(f).name: Path(f) for f in files}
    assert set(downloaded) == {"ask.json", "ask_chunks.csv", "ask_selected.csv", "ask_timings.csv"}
    record = json.loads(downloaded["ask.json"].read_text())
    assert record["answer"] == answer and record["method"] == "bm25"
    picked = [c for c in record["chunks"] if c["selected"]]
    assert len(picked) == 1 and picked[0]["rank"] == 1 and "4417" in DOC[picked[0]["start"]:picked[0]["end"]]
    rows = pd.read_csv(downloaded["ask_chunks.csv"])
    assert len(rows) == len(record["chunks"]) and rows["score"].max() == pytest.approx(picked[0]["score"])


@pytest.mark.parametrize("said,shown,stop", [
    ("The zebra code is 4417.", "supported</span> “The zebra code is 4417.”: the evidence says <q", "sentence"),
    ("Abraham Lincoln.", "not found in the evidence</span> “Abraham Lincoln.”", "eos"),
    ("The zebra code is 4417 and the", "reached the limit of 48 tokens before its sentence ended", "budget"),
])
def test_every_answer_comes_with_its_model_and_its_check(client, explorer, monkeypatch, said, shown, stop):
    from unreal_demo.core.generation import Generation

    said_once = [Generation(said, 5, 9, {"prefill": 0.1}, stop)]
    monkeypatch.setattr(explorer, "stream_passages", lambda *a, **k: iter(said_once))
    answer, check, _bars, _heat, evidence, *_, files = client.predict(DOC, "What is the zebra code?", 1, "bm25",
                                                                       False, api_name="/ask")
    assert answer == said and shown in check and "tiny-llama" in check
    copies = re.findall(r"<mark class='unreal-copy' title='copied by the answer'>(.*?)</mark>", evidence)
    marked = "".join(re.sub(r"<[^>]+>", "", m) for m in copies)
    assert marked == ("The zebra code is 4417" if "zebra" in said else "")  # the words the answer copies
    record = json.loads(next(Path(f) for f in files if f.endswith("ask.json")).read_text())
    assert record["answer_stop"] == stop and record["answer_check"][0]["sentence"] == said
    assert record["check"]["supported"] == ("4417" in said) and "What the check does" in check
    assert "✓" not in check and "◐" not in check


def test_ask_endpoint_unreal(client):
    _answer, _check, _bars, _heat, evidence, chosen, _timings, notice, _files = client.predict(
        DOC, "zebra?", 3, "unreal", False, api_name="/ask")
    assert len(chosen["data"]) == 3
    assert "UNTRAINED" in notice
    assert evidence.count("class='unreal-card'") == 3 and evidence.count("class='unreal-seg'") >= 3
    assert "group " in evidence and "⟨q_g, k_p⟩ = " in evidence  # the hover text of each pooled span


def test_tab_time_to_first_token_is_the_librarys(client, explorer, monkeypatch):
    """The timing table shows the orchestrator's time to first token (set once, at the first token), below
    the total, not the time of the last streamed token."""
    steps = []
    original = explorer.ask_stream

    def recording(*args, **kwargs):
        for step in original(*args, **kwargs):
            steps.append(step)
            yield step

    monkeypatch.setattr(explorer, "ask_stream", recording)
    *_, timings, _notice, _files = client.predict(DOC, "What is the zebra code?", 2, "unreal", False,
                                                 api_name="/ask")
    last = steps[-1].timings
    shown = timings["data"][0][timings["headers"].index("time to first token s")]
    assert shown == round(last["first_token"], 3)
    assert last["first_token"] < last["total"]
    streamed = [s.timings["first_token"] for s in steps[1:] if "first_token" in s.timings]
    assert len(set(streamed)) == 1  # set once, never moved by later tokens


@pytest.mark.parametrize("doc,question,n,match", [
    ("", "q?", 3, "document is empty"), (DOC, " ", 3, "question is empty"),
    ("\x7fELF\x02\x01\x01\x00\x00\x00 pasted binary", "q?", 3, "the document: looks binary or damaged"),
    (DOC, "what is \x03\x04?", 3, "the question: looks binary or damaged"),
    (DOC, "q?", 2.5, r"n must be a whole number from 1 to 30 \(got 2.5\)"),  # the slider's range
    (DOC, "q?", 0, "Value 0 is less than minimum value 1"),  # the slider's own range check
    (DOC, "q?", 100_000, "Value 100000 is greater than maximum value 30"),
])
def test_bad_input_is_a_clear_error(client, doc, question, n, match):
    with pytest.raises(Exception, match=match):
        client.predict(doc, question, n, "bm25", False, api_name="/ask")


def test_a_refused_upload_keeps_the_text(tmp_path):
    from unreal_demo.ui.tabs.long_document import read_upload

    (tmp_path / "latin1.txt").write_bytes("“quoted”".encode("cp1252").decode("latin-1").encode())
    (tmp_path / "fine.txt").write_text("Fine text.")
    with pytest.warns(UserWarning, match="latin1.txt: looks binary or damaged"):
        assert read_upload(str(tmp_path / "latin1.txt"), "kept") == "kept"
    assert read_upload(str(tmp_path / "fine.txt"), "kept") == "Fine text."


def test_intrinsic_endpoint(client):
    _heat, _chunks, info, top = client.predict("Paris is the capital of France. " * 3 + "The fox jumps. " * 3,
                                               "capital of France?", "separate", "qk_post", -1, 2,
                                               api_name="/intrinsic")
    assert "best rank" in info and top.startswith("**layer 2** ranks chunk")


def test_eight_concurrent_requests_get_their_own_answers(client):
    """Eight users with different documents at once: each gets exactly what it gets alone (greedy)."""
    docs = [f"Item {i} is stored in room {100 + i}. " * 20 + "Filler sentence here. " * 30 for i in range(8)]
    alone = [client.predict(d, f"Where is item {i}?", 2, "unreal", False, api_name="/ask")
             for i, d in enumerate(docs[:2])]
    jobs = [client.submit(d, f"Where is item {i}?", 2, "unreal", False, api_name="/ask") for i, d in enumerate(docs)]
    results = [j.result(timeout=120) for j in jobs]
    for i in range(2):
        assert results[i][0] == alone[i][0] and results[i][5] == alone[i][5]
    assert all(len(r[5]["data"]) == 2 for r in results)


def test_search_without_an_index_says_so(client):
    with pytest.raises(Exception, match="no index for new_wiki yet"):
        client.predict("who?", 5, "unreal", "new_wiki", api_name="/search")


def test_wikipedia_tab_searches_an_exported_qdrant_edge_store(client, explorer, tmp_path):
    """The tab opens a tiny index exported to Qdrant Edge by its store string, ranks as the index folder does,
    restricts a search by source or title prefix, and answers a method the store does not serve in one line."""
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed")
    from unreal_demo.data.sources import Passage
    from unreal_demo.retrieval.hits import search
    from unreal_demo.store import index as ix
    from unreal_demo.store import qdrant

    passages = [Passage(f"p{i}", f"{'Zinc' if i % 2 else 'Iron'} {i}", f"Passage {i}: the widget{i:02d} weighs {i * 3} "
                        "kilograms.", "summaries" if i % 3 else "new_wiki") for i in range(24)]
    ix.build_index(tmp_path / "ix", explorer.backbone, passages, layer=3, n_pool=explorer.head.config.n_pool,
                   shard_size=8)
    folder = ix.Index(tmp_path / "ix")
    spec = f"qdrant-edge:{tmp_path / 'edge'}"
    qdrant.export_index(folder, spec)
    query = "How much does widget07 weigh?"

    def ask(method: str, source: str = "", title: str = "", where: str = spec):
        _chart, table, bm25, status, *_ = client.predict(query, 5, method, "new_wiki", where, source, title,
                                                         api_name="/search")
        return [dict(zip(table["headers"], row, strict=True)) for row in table["data"]], bm25, status

    for method in ("bm25", "unreal"):
        rows, _, status = ask(method)
        assert status.startswith("Qdrant Edge store") and "24 passages" in status and "exact MaxSim" in status
        ours = search(folder, explorer, query, 5, method)["hits"]  # the index folder through the library
        assert [r["title"] for r in rows] == [h["title"] for h in ours]
        assert [r["score"] for r in rows] == pytest.approx([h["score"] for h in ours], abs=1e-4)
        if method == "bm25":
            assert rows[0]["passage"].startswith("Passage 7:")
    rows, bm25, status = ask("unreal", source="summaries", title="Zinc")
    assert "only chunks with source = 'summaries', title starting with 'Zinc'" in status
    held = {p.title for p in passages if p.source == "summaries" and p.title.startswith("Zinc")}
    assert rows and {r["title"] for r in rows} <= held and {r[1] for r in bm25["data"]} <= held
    with pytest.raises(Exception, match=r"sparse cannot search this store: it needs --token-states \(not kept in a "
                                        "Qdrant store"):
        ask("sparse")
    with pytest.raises(Exception, match="filters apply to a Qdrant store"):
        ask("bm25", source="summaries", where=str(tmp_path / "ix"))
    assert ask("bm25", where=str(tmp_path / "ix"))[2].startswith("index ")  # an index folder, by its path
    with pytest.raises(Exception, match="no Qdrant store at"):
        ask("bm25", where=f"qdrant-edge:{tmp_path / 'none'}")


def test_a_public_app_opens_no_visitors_store(explorer, tmp_path, monkeypatch):
    """With ``open_stores`` off (a Space, --share) the Wikipedia tab refuses a folder, a store or a filter in one
    line, and still searches its corpus's own index; the setting reads $UNREAL_OPEN_STORES, then $SPACE_ID."""
    from unreal_demo import settings
    from unreal_demo.data.sources import Passage
    from unreal_demo.serving import CLOSED
    from unreal_demo.store import index as ix

    for name in (settings.STORES_ENV, settings.SPACE_ENV, "GRADIO_SERVER_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert settings.open_stores() and settings.open_stores(host="localhost") and settings.open_stores(host="::1")
    assert not settings.open_stores(share=True) and not settings.open_stores(host="0.0.0.0")
    monkeypatch.setenv(settings.SPACE_ENV, "someone/unreal")
    assert not settings.open_stores()
    monkeypatch.setenv(settings.STORES_ENV, "1")
    assert settings.open_stores(share=True)
    monkeypatch.setenv(settings.STORES_ENV, "0")
    monkeypatch.delenv(settings.SPACE_ENV)
    assert not settings.open_stores()
    monkeypatch.setenv(settings.STORES_ENV, "maybe")
    with pytest.raises(ValueError, match="UNREAL_OPEN_STORES is 0 or 1"):
        settings.open_stores()

    monkeypatch.setenv(settings.CACHE_ENV, str(tmp_path / "cache"))  # the corpus's own index: built in the cache
    passages = [Passage(f"p{i}", f"Title {i}", f"Passage {i}: the widget{i:02d} weighs {i * 3} kilograms.",
                        "new_wiki") for i in range(12)]
    ix.build_index(ix.default_folder(explorer, "new_wiki"), explorer.backbone, passages, layer=3,
                   n_pool=explorer.head.config.n_pool, shard_size=8)
    ix.build_index(tmp_path / "ix", explorer.backbone, passages, layer=3, n_pool=explorer.head.config.n_pool)
    demo = build_demo(explorer, open_stores=False)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        client = gradio_client.Client(demo.local_url, verbose=False)
        for where, source in ((str(tmp_path / "ix"), ""), ("qdrant:http://127.0.0.1:1/x", ""), ("", "summaries")):
            with pytest.raises(Exception, match="searches its own indexes only") as refused:
                client.predict("How much does widget07 weigh?", 5, "bm25", "new_wiki", where, source, "",
                               api_name="/search")
            assert str(refused.value).strip() == CLOSED  # one line, no traceback
        _chart, table, _bm25, status, *_ = client.predict("How much does widget07 weigh?", 5, "bm25", "new_wiki",
                                                          api_name="/search")
        assert status.startswith("index ") and table["data"][0][-1].startswith("Passage 7:")
    finally:
        demo.close()


def test_topn_live_run_needs_an_n(client):
    with pytest.raises(Exception, match="pick at least one n"):
        client.predict("2K", [], 1, "f1", api_name="/topn")


def test_a_cancelled_request_leaves_the_app_serving(client, explorer, monkeypatch):
    import threading
    import time

    big = " ".join(f"Sentence {i} tells about item {i % 97} in room {i % 13}." for i in range(6_000))
    started, finished, rank = threading.Event(), threading.Event(), explorer.rank

    def tracked(docs, *args, **kwargs):  # lets the test wait for the abandoned worker thread
        is_big = docs[0] == big
        started.set() if is_big else None
        try:
            return rank(docs, *args, **kwargs)
        finally:
            finished.set() if is_big else None

    monkeypatch.setattr(explorer, "rank", tracked)
    job = client.submit(big, "Where is item 5?", 3, "unreal", True, api_name="/ask")
    assert started.wait(60)
    job.cancel()
    answer, _check, _bars, _heat, _evidence, chosen, *_ = client.predict(DOC, "What is the zebra code?", 1, "bm25",
                                                                        False, api_name="/ask")
    assert isinstance(answer, str) and "4417" in chosen["data"][0][-1]
    assert finished.wait(120)  # the cancelled request's thread ends on its own
    time.sleep(0.5)


def test_compare_scores_every_method_on_the_same_chunks(client, explorer, monkeypatch):
    """Compare mode: one row per chunk any method selected, each method's rank of it equal to its own run,
    one answer per method, the document encoded once for all of them."""
    from unreal_demo.core import minilm as dense

    monkeypatch.setattr(dense, "embed", lambda texts: torch.nn.functional.normalize(  # MiniLM stand-in
        torch.tensor([[t.count("zebra"), t.count("Cats"), 1.0] for t in texts]), dim=-1))
    calls = []
    original = explorer.store

    def counting(chunks, watch=None):
        calls.append(len(chunks))
        return original(chunks, watch)

    monkeypatch.setattr(explorer, "store", counting)
    doc = DOC + " A distinct tail sentence for this test."
    _plot, table, answers, files, answer, check, _bars, _heat, evidence, chosen, *_ = client.predict(
        doc, "What is the zebra code?", 2, True, api_name="/compare")
    assert answer == "" and "Compare methods answers in the table" in check  # no earlier run's answer left
    assert chosen["data"] and all("zebra" in r[-1] or r[-1] in doc for r in chosen["data"])  # this text's chunks
    headers = table["headers"]
    assert headers[:2] == ["chunk", "selected by"] and headers[-1] == "text"
    assert [r[0] for r in answers["data"]] == ["unreal", "bm25", "dense", "sparse"]
    assert answers["headers"][2] == "evidence check" and all(r[2] for r in answers["data"])
    alone = {m: explorer.rank([doc], "What is the zebra code?", 2, m) for m in ("unreal", "bm25", "dense", "sparse")}
    for row in table["data"]:
        cell = dict(zip(headers, row, strict=True))
        for m, ranking in alone.items():
            assert (m in cell["selected by"].split(", ")) == (cell["chunk"] in ranking.selected)
    assert {c for r in alone.values() for c in r.selected} == {row[0] for row in table["data"]}
    assert len(set(calls)) == 1  # one store (one encoding) for every method and the reruns above
    assert "class='unreal-card'" in evidence
    assert {Path(f).name for f in files} == {"compare.json", "compare_chunks.csv", "compare_selected.csv",
                                             "compare_answers.csv"}


def test_the_page_serves_while_the_model_loads(tiny):
    """The app is built and served from a Loading that is not done; API calls wait for the model."""
    import threading

    from unreal_demo.serving import Loading

    gate = threading.Event()
    loader = Loading("tiny-llama")

    def slow_load(**_):
        gate.wait(30)
        return Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=2), None)

    original = Explorer.build
    Explorer.build = staticmethod(slow_load)
    try:
        loader.start()
        assert not loader.done and loader.status().startswith("loading tiny-llama")
        with pytest.raises(Exception, match="still loading"):
            loader.get(timeout=0.01)
        demo = build_demo(loader)
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
        try:
            c = gradio_client.Client(demo.local_url, verbose=False)
            job = c.submit(DOC, "What is the zebra code?", 1, "bm25", False, api_name="/ask")
            gate.set()
            assert "4417" in job.result(timeout=60)[5]["data"][0][-1]
            assert loader.status().startswith("tiny-llama on cpu") and "ready in" in loader.status()
            # the CPU and the scan / encoding paths chosen for this model (a bf16 record of another model does
            # not make the tiny model encode in bf16)
            assert status_line(loader.get().backbone.encoding_name) in loader.status()
        finally:
            demo.close()
    finally:
        Explorer.build = original
        gate.set()


def test_a_failed_load_is_reported_not_raised_at_build():
    from unreal_demo.serving import Loading

    loader = Loading("/no/such/model/folder").start()
    with pytest.raises(Exception, match="cannot load model"):
        loader.get(timeout=60)
    assert loader.status().startswith("could not load /no/such/model/folder")
    build_demo(loader)  # the page still builds (it shows the error)
    demo = build_demo(loader, open_stores=True)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:  # a search says why in one line (the model is needed to open the corpus's index)
        with pytest.raises(Exception, match="cannot load model") as failed:
            gradio_client.Client(demo.local_url, verbose=False).predict("who?", 5, "bm25", "new_wiki",
                                                                       api_name="/search")
        assert len(str(failed.value).strip().splitlines()) == 1
    finally:
        demo.close()


def test_bad_stores_setting_is_one_line_and_the_tab_defaults_to_it(explorer, monkeypatch):
    """build_demo and the Wikipedia tab read settings.open_stores when not told: a bad $UNREAL_OPEN_STORES is one
    line (a UserError); on a public app the tab's store and filter boxes are hidden."""
    import gradio as gr

    from unreal_demo import settings
    from unreal_demo.errors import UserError
    from unreal_demo.serving import Loading
    from unreal_demo.ui.tabs import wikipedia

    for name in (settings.STORES_ENV, settings.SPACE_ENV, "GRADIO_SERVER_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(settings.STORES_ENV, "maybe")
    with pytest.raises(UserError, match=r"^\$UNREAL_OPEN_STORES is 0 or 1, not 'maybe'$"):
        build_demo(explorer)
    monkeypatch.delenv(settings.STORES_ENV)
    monkeypatch.setenv(settings.SPACE_ENV, "someone/unreal")
    with gr.Blocks() as demo:
        wikipedia.build_tab(Loading.of(explorer))
    box = next(b for b in demo.blocks.values() if getattr(b, "label", None) == "index folder or Qdrant store")
    rows = []
    while (box := box.parent) is not None:  # the row that holds it (inside Gradio's form), hidden
        rows.append(box.visible)
    assert False in rows


def test_intrinsic_chunk_id_must_be_a_number(client):
    with pytest.raises(Exception, match=r"the answer chunk id must be a whole number \(-1: BM25's top chunk; got "
                                        "None\\)"):
        client.predict(DOC, "What is the zebra code?", "separate", "qk_post", None, 1, api_name="/intrinsic")
