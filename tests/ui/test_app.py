"""The Gradio app through ``gradio_client``: the ``ask`` endpoint on a tiny model."""

from __future__ import annotations

import pytest

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
    demo = build_demo(explorer)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        yield gradio_client.Client(demo.local_url, verbose=False)
    finally:
        demo.close()


def test_ask_endpoint(client):
    answer, _bars, _heat, chosen, timings, _notice = client.predict(DOC, "What is the zebra code?", 1, "bm25", False,
                                                                    api_name="/ask")
    assert isinstance(answer, str)
    assert len(chosen["data"]) == 1 and "4417" in chosen["data"][0][-1]
    assert [row[0] for row in timings["data"]] == ["bm25", "full context"]


def test_ask_endpoint_unreal(client):
    _answer, _bars, _heat, chosen, _timings, notice = client.predict(DOC, "zebra?", 3, "unreal", False,
                                                                     api_name="/ask")
    assert len(chosen["data"]) == 3
    assert "UNTRAINED" in notice


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
    *_, timings, _notice = client.predict(DOC, "What is the zebra code?", 2, "unreal", False, api_name="/ask")
    last = steps[-1].timings
    shown = timings["data"][0][timings["headers"].index("time to first token s")]
    assert shown == round(last["first_token"], 3)
    assert last["first_token"] < last["total"]
    streamed = [s.timings["first_token"] for s in steps[1:] if "first_token" in s.timings]
    assert len(set(streamed)) == 1  # set once, never moved by later tokens


@pytest.mark.parametrize("doc,question,match", [("", "q?", "document is empty"), (DOC, " ", "question is empty")])
def test_bad_input_is_a_clear_error(client, doc, question, match):
    with pytest.raises(Exception, match=match):
        client.predict(doc, question, 3, "bm25", False, api_name="/ask")


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
        assert results[i][0] == alone[i][0] and results[i][3] == alone[i][3]
    assert all(len(r[3]["data"]) == 2 for r in results)


def test_search_without_an_index_says_so(client):
    with pytest.raises(Exception, match="no index for new_wiki yet"):
        client.predict("who?", 5, "unreal", "new_wiki", api_name="/search")


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
    answer, _bars, _heat, chosen, _timings, _notice = client.predict(DOC, "What is the zebra code?", 1, "bm25",
                                                                    False, api_name="/ask")
    assert isinstance(answer, str) and "4417" in chosen["data"][0][-1]
    assert finished.wait(120)  # the cancelled request's thread ends on its own
    time.sleep(0.5)
