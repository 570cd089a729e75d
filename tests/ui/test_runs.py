"""Every output belongs to the current input, and Stop ends the work (issue 57), through ``gradio_client`` on a
tiny model."""

from __future__ import annotations

import threading
import time

import pytest

gradio_client = pytest.importorskip("gradio_client")

from unreal_demo import pipeline  # noqa: E402
from unreal_demo.core.head import untrained_head  # noqa: E402
from unreal_demo.pipeline import Explorer  # noqa: E402
from unreal_demo.ui.app import build_demo  # noqa: E402

PIZZA = "Cats sleep a lot. Dogs bark at night. " * 20 + "The pizza oven runs at 485 degrees. " + \
    "Birds sing in spring. " * 20
LICENCE = "Trees grow slowly. Rivers run to the sea. " * 20 + "The licence must be kept with the code. " + \
    "Clouds drift by. " * 20
PIZZA_WORDS = ("pizza", "485 degrees", "Cats sleep", "Birds sing")  # "485" alone occurs inside plotted floats


@pytest.fixture(scope="module")
def explorer(tiny):
    return Explorer(tiny, untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3), None)


@pytest.fixture(scope="module")
def client(explorer):
    demo = build_demo(explorer, open_stores=True)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        yield gradio_client.Client(demo.local_url, verbose=False)
    finally:
        demo.close()


def _shows(outputs, words) -> list[str]:
    return [w for w in words if any(w in str(o) for o in outputs)]


def test_no_panel_shows_the_earlier_documents_output(client):
    client.predict(PIZZA, "How hot is the pizza oven?", 2, "bm25", False, api_name="/ask")
    job = client.submit(LICENCE, "What must be kept with the code?", 2, "bm25", False, api_name="/ask")
    job.result()
    steps = job.outputs()
    assert len(steps) >= 2 and steps[0][0] == ""  # the first step clears every panel, before any result
    for step in steps:
        assert not _shows(step, PIZZA_WORDS), step
    assert "licence" in str(steps[-1][5]).lower()  # the selected chunks are this text's
    # Compare methods after an answer on another text: the answer, check, charts and tables are this text's
    client.predict(PIZZA, "How hot is the pizza oven?", 2, "bm25", False, api_name="/ask")
    compared = client.predict(LICENCE, "What must be kept with the code?", 2, False, api_name="/compare")
    assert not _shows(compared, PIZZA_WORDS)
    assert compared[4] == "" and "licence" in str(compared[9]).lower()


def test_stop_ends_the_encoding_and_says_so(client, monkeypatch):
    real, batches, started = pipeline.encode_chunks, [], threading.Event()

    def slow(*args, progress=None, **kwargs):  # 200 batches of 0.1 s: 20 s unless stopped
        started.set()
        for i in range(200):
            time.sleep(0.1)
            batches.append(i)
            if progress is not None:
                progress(i + 1, 200)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "encode_chunks", slow)
    doc = LICENCE + " A text this test alone encodes."
    job = client.submit(doc, "What must be kept?", 2, "unreal", False, api_name="/ask")
    assert started.wait(30)
    time.sleep(0.5)
    t0 = time.perf_counter()
    client.predict(api_name="/stop_ask")
    while not job.done():
        time.sleep(0.05)
    ended = time.perf_counter() - t0
    assert ended < 2.0, f"the handler ended {ended:.1f} s after Stop"
    time.sleep(0.3)
    assert len(batches) < 60  # the encoding stopped at its next batch, not after 200
    last = job.outputs()[-1]
    assert "Stopped after" in last[1] and "Stopped after" in last[7] and "Error" not in str(last)
    # the app serves on, and the stopped text encodes afresh when asked again
    monkeypatch.setattr(pipeline, "encode_chunks", real)
    answer, *_ = client.predict(doc, "What must be kept?", 2, "unreal", False, api_name="/ask")
    assert isinstance(answer, str)


def test_a_new_search_clears_the_last_ones_panels_first(client, explorer, tmp_path):
    from unreal_demo.data.sources import Passage
    from unreal_demo.store import index as ix

    passages = [Passage(f"p{i}", f"Title {i}", f"Passage {i}: the widget{i:02d} weighs {i * 3} kilograms.",
                        "new_wiki") for i in range(12)]
    ix.build_index(tmp_path / "ix", explorer.backbone, passages, layer=3, n_pool=explorer.head.config.n_pool,
                   shard_size=8)
    where = str(tmp_path / "ix")
    client.predict("How much does widget07 weigh?", 3, "bm25", "new_wiki", where, "", "", api_name="/search")
    job = client.submit("How much does widget02 weigh?", 3, "bm25", "new_wiki", where, "", "", api_name="/search")
    job.result()
    first, last = job.outputs()[0], job.outputs()[-1]
    assert first[0] is None and not first[1]["data"] and not first[2]["data"] and first[5] == ""
    assert last[1]["data"][0][-1].startswith("Passage 2:")


def test_by_layer_clears_before_scoring_another_context(client):
    client.predict(PIZZA, "How hot is the pizza oven?", "separate", "qk_post", -1, 2, api_name="/intrinsic")
    job = client.submit(LICENCE, "What must be kept?", "separate", "qk_post", -1, 2, api_name="/intrinsic")
    job.result()
    for step in job.outputs():
        assert not _shows(step, PIZZA_WORDS)
    assert job.outputs()[0][2].startswith("⏳")


def test_titles_are_shown_decoded():
    from unreal_demo.ui.evidence import title_text

    assert title_text("Marxism%E2%80%93Leninism") == "Marxism–Leninism" and title_text("Paris") == "Paris"
