"""End to end in a real browser: headless Debian chromium drives every tab of the app (tiny model) through
playwright, and saves a screenshot of each (``$UNREAL_SCREENSHOTS`` or the test's temporary folder).

No browser is downloaded: ``./run test`` installs Debian's ``chromium``. The tiny model's index is built in
a temporary cache; MiniLM is replaced by a stand-in (the dense method is tested against it elsewhere).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
import torch

sync_api = pytest.importorskip("playwright.sync_api")

from unreal_demo.core.generation import ANSWER_RULE, Generation, stream_answer  # noqa: E402
from unreal_demo.core.head import untrained_head  # noqa: E402
from unreal_demo.data.sources import Passage  # noqa: E402
from unreal_demo.pipeline import Explorer  # noqa: E402
from unreal_demo.store import index as ix  # noqa: E402
from unreal_demo.ui.answer_check import ANSWER_LABEL  # noqa: E402
from unreal_demo.ui.app import CSS, build_demo  # noqa: E402
from unreal_demo.ui.plots import colour_name  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DOC = "Cats sleep a lot. Dogs bark at night. " * 30 + "The zebra code is 4417. " + "Birds sing in spring. " * 30
PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage {i}: the item {i} weighs {i * 3} kilograms.", "test")
            for i in range(30)]
# A licence hard-wrapped at 72 columns, and what a model that copies it says: the line break inside the sentence
# comes with the copy.
GPL = ("The Corresponding Source for a work in object code form is all the source\ncode needed to generate, "
       "install, and run the object code. If you convey\nobject code, you must comply with the requirements of "
       "this\nLicense. Corresponding Source conveyed under this section must be\naccompanied by the Installation "
       "Information.\n\n") * 12
GPL_QUESTION = "What must you do if you convey object code?"
GPL_SAYS = ["You must", " comply with", " the requirements", " of this", "\n", "License", ".", " Corresponding",
            " Source"]  # 38 of the tiny tokenizer's tokens to the period: within the 48-token limit
GPL_ANSWER = "You must comply with the requirements of this License."
SLOW_QUESTION = "What does the slow model say?"  # answered a word every 0.3 s after a 2 s prefill (the Stop test)
SAID: list[int] = []  # the words the slow answer has produced so far
TABS = ("Long document", "Wikipedia", "Top-n", "By layer", "FLOPs", "About")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed")


@pytest.fixture(scope="module")
def url(tiny, saying, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("UNREAL_CACHE", str(tmp_path_factory.mktemp("cache")))
    from unreal_demo.core import minilm as dense

    mp.setattr(dense, "embed", lambda texts: torch.nn.functional.normalize(  # MiniLM stand-in
        torch.tensor([[len(t) % 7 + 1.0, t.count("a") + 1.0, 1.0] for t in texts]), dim=-1))
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3), None)
    answer = explorer.stream_passages

    def copying_the_licence(passages, question, rule=ANSWER_RULE, source="the passages", ids=None):
        """The random tiny model, except that to the licence question it copies the licence's wrapped lines."""
        if question == SLOW_QUESTION:
            return slowly()
        if question != GPL_QUESTION:
            return answer(passages, question, rule, source, ids)
        return stream_answer(saying(GPL_SAYS), [1, 2, 3], rule.budget, rule.first_sentence)

    def slowly():
        time.sleep(2)  # the prefill: the page says so before the first token
        for i in range(1, 400):
            SAID.append(i)
            yield Generation(" ".join(["word"] * i), i, 9, {"prefill": 2.0})
            time.sleep(0.3)

    mp.setattr(explorer, "stream_passages", copying_the_licence)
    ix.build_index(ix.default_folder(explorer, "new_wiki"), tiny, PASSAGES, 3, explorer.head.config.n_pool,
                   dense=False)
    demo = build_demo(explorer)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True, css=CSS)
    try:
        yield demo.local_url
    finally:
        demo.close()
        mp.undo()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:  # one playwright per module: a second one in the same loop fails
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def page(url, browser):
    page = browser.new_page(viewport={"width": 1300, "height": 1500})
    page.goto(url)
    page.get_by_text("ready in").first.wait_for(timeout=60_000)  # the status line, once the model is in
    yield page


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("UNREAL_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def open_tab(page, name: str):
    page.get_by_role("tab", name=name, exact=True).click()
    return page.locator("[role=tabpanel]:visible").first


def shoot(page, shots: Path, name: str) -> None:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000


def test_the_first_view_shows_the_worked_example(page, shots):
    """Without a click: the needle example's question in the box, its result drawn (answer, scores, evidence,
    selected chunks) and marked as a worked example computed by the app."""
    from unreal_demo.ui.examples import load_examples

    needle = load_examples()[0]
    tab = open_tab(page, "Long document")
    banner = page.locator("#unreal-example")
    sync_api.expect(banner).to_contain_text("Worked example (computed by this app at start-up, not a mock)",
                                            timeout=60_000)
    assert needle["question"] in banner.inner_text() and "tiny-llama" in banner.inner_text()
    assert tab.get_by_label("Question", exact=True).input_value() == needle["question"]
    answer = tab.get_by_label(ANSWER_LABEL)
    page.wait_for_function("el => el.value.length > 0", arg=answer.element_handle(), timeout=30_000)
    assert tab.locator("#unreal-answer-check").get_by_text("Written by").count() == 1
    assert page.locator(".unreal-card").count() == 5  # the n = 5 selected chunks, shaded
    page.locator(".js-plotly-plot .bars path").first.wait_for(state="attached", timeout=30_000)
    assert page.locator(".js-plotly-plot .bars path").count() > 10  # one bar per chunk
    assert page.locator("a[href*='ask.json']").count() >= 1  # its download, too
    shoot(page, shots, "first_view")


def test_long_document_one_method(page, shots):
    tab = open_tab(page, "Long document")
    assert "1 2 3" not in tab.inner_text()  # no dummy table headers before a run
    page.get_by_placeholder("Paste a long document…").fill(DOC)
    tab.get_by_label("Question", exact=True).fill("What is the zebra code?")
    tab.get_by_role("radio", name="bm25").check()
    page.get_by_role("button", name="Select evidence and answer").click()
    # the worked example's cards, answer and downloads are on the page already: wait for this run's own
    page.locator(".unreal-card u").filter(has_text="zebra").first.wait_for(timeout=60_000)  # (downloads cleared)
    answer = tab.get_by_label(ANSWER_LABEL)
    page.wait_for_function("el => el.value.length > 0", arg=answer.element_handle(), timeout=60_000)
    page.locator(".js-plotly-plot .bars path").first.wait_for(state="attached", timeout=60_000)
    assert page.locator(".js-plotly-plot .bars path").count() > 10  # one bar per chunk
    assert page.locator(".unreal-card u").filter(has_text="zebra").count() >= 1  # the matched term, underlined
    assert tab.get_by_text("MaxSim detail").filter(visible=True).count() == 0  # BM25 has no MaxSim: no empty panel
    link = page.locator("a[href*='ask.json']").first  # the download list (names are split into stem and suffix)
    link.wait_for(timeout=60_000)
    with page.expect_download() as download:
        link.click()
    assert '"answer"' in Path(download.value.path()).read_text()
    shoot(page, shots, "long_document")


def test_a_hard_wrapped_answer_is_whole(page):
    tab = open_tab(page, "Long document")
    page.get_by_placeholder("Paste a long document…").fill(GPL)
    tab.get_by_label("Question", exact=True).fill(GPL_QUESTION)
    tab.get_by_role("radio", name="bm25").check()
    page.get_by_role("button", name="Select evidence and answer").click()
    answer = tab.get_by_label(ANSWER_LABEL)
    sync_api.expect(answer).to_have_value(GPL_ANSWER, timeout=60_000)  # not cut at the line break after "this"
    check = tab.locator("#unreal-answer-check")
    sync_api.expect(check).to_contain_text(f"“{GPL_ANSWER}”", timeout=30_000)
    assert "What the check does" in check.inner_text() and "✓" not in check.inner_text()
    assert "Written by tiny-llama" in check.inner_text()
    assert tab.locator("mark.unreal-copy[title]").count() >= 1  # the words it copies, marked in the evidence


def test_a_pasted_binary_document_is_refused_and_kept(page):
    tab = open_tab(page, "Long document")
    binary = "\x7fELF\x02\x01\x01\x03\x00>\x01\x10@\x00\x13\x14 pasted from a program file"
    box = page.get_by_placeholder("Paste a long document…")
    box.fill(binary)
    tab.get_by_label("Question", exact=True).fill("What does it say?")
    page.get_by_role("button", name="Select evidence and answer").click()
    page.get_by_text("the document: looks binary or damaged").first.wait_for(timeout=30_000)
    assert box.input_value() == binary  # the user's text stays


def test_long_document_compare_mode(page, shots):
    tab = open_tab(page, "Long document")
    page.get_by_placeholder("Paste a long document…").fill(DOC)  # also when this test runs alone
    tab.get_by_label("Question", exact=True).fill("What is the zebra code?")
    page.get_by_role("button", name="Compare methods", exact=True).click()
    page.locator("a[href*='compare.json']").first.wait_for(timeout=120_000)
    panel = page.locator(".js-plotly-plot").filter(has_text="normalised per method")
    panel.first.wait_for(timeout=60_000)  # the plot draws after the files arrive; slower on a busy machine
    assert panel.count() == 1
    for method in ("unreal", "bm25", "dense", "sparse"):
        assert page.get_by_text(f"{method} rank").count() >= 1
    assert page.locator(".unreal-card .unreal-seg").count() >= 1  # UNREAL's pooled spans, shaded
    shoot(page, shots, "compare")


def test_wikipedia_search_and_answer(page, shots):
    from unreal_demo.ui.tabs.wikipedia import EXAMPLE_QUERIES

    tab = open_tab(page, "Wikipedia")
    # the tab opens with its first example query searched and answered (drawn once after start-up)
    sync_api.expect(tab.get_by_label("Query", exact=True)).to_have_value(next(iter(EXAMPLE_QUERIES.values())),
                                                                       timeout=120_000)
    sync_api.expect(tab.get_by_label(ANSWER_LABEL)).not_to_have_value("", timeout=60_000)
    query_box, status = tab.get_by_label("Query", exact=True).bounding_box(), tab.get_by_text("corpus").first
    assert query_box["y"] < status.bounding_box()["y"]  # the query box comes first
    tab.get_by_label("Query", exact=True).fill("How much does item 7 weigh?")
    tab.get_by_role("radio", name="bm25").check()
    tab.get_by_role("button", name="Search").click()
    tab.get_by_text("Passage 7: the item 7 weighs 21 kilograms.").first.wait_for(timeout=60_000)
    tab.locator(".unreal-card u").first.wait_for(timeout=60_000)  # BM25's matched terms in the top-5 hits
    tab.get_by_role("radio", name="unreal").check()
    tab.get_by_role("button", name="Search").click()
    tab.locator(".unreal-card .unreal-seg").first.wait_for(timeout=60_000)  # UNREAL's pooled spans, shaded
    tab.get_by_role("button", name="Answer from the top 5").click()
    answer = tab.get_by_label(ANSWER_LABEL)
    page.wait_for_function("el => el.value.length > 0", arg=answer.element_handle(), timeout=60_000)
    shoot(page, shots, "wikipedia")


def test_topn_precomputed_plots_and_a_live_run(page, shots):
    tab = open_tab(page, "Top-n")
    tab.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
    assert tab.locator(".js-plotly-plot").count() >= 2
    shipped = tab.locator(".js-plotly-plot").count()
    tab.get_by_role("button", name="Run live sample").click()
    tab.get_by_text(re.compile(r"Live: .* s\.")).wait_for(timeout=300_000)
    tab.get_by_text("What this live run shows").wait_for(timeout=30_000)
    assert tab.locator(".js-plotly-plot").count() == shipped + 1  # beside the shipped result, not in its place
    live = tab.locator("#unreal-live-caption").inner_text()
    assert "too few questions for a 95% interval" in live and "95% CI" not in live
    shoot(page, shots, "topn")


def test_intrinsic_live_scoring(page, shots):
    tab = open_tab(page, "By layer")
    tab.get_by_label("Context").fill("Paris is the capital of France. " * 8 + "The fox jumps over the dog. " * 8)
    tab.get_by_label("Question").fill("What is the capital of France?")
    tab.get_by_role("button", name="Score every layer and head").click()
    tab.get_by_text("best rank").wait_for(timeout=120_000)
    assert tab.locator(".js-plotly-plot .heatmaplayer").count() >= 1
    rank_plot = tab.locator(".js-plotly-plot").filter(has_text="rank of chunk").first
    first, last = rank_plot.evaluate("el => [el.data[0].colorscale[0][1], el.data[0].colorscale.at(-1)[1]]")
    caption = tab.locator("#unreal-rank-caption").inner_text()  # what the page says the colours mean
    assert caption.startswith(f"What to look for: {colour_name(first)} cells are layer × head pairs that rank the "
                              "answer chunk first (rank 1)") and f"the more {colour_name(last)} a cell" in caption
    shoot(page, shots, "intrinsic")


def test_flops_moving_n_changes_n_star(page, shots):
    tab = open_tab(page, "FLOPs")
    summary = tab.get_by_text("N* =").first
    summary.wait_for(timeout=30_000)
    before = summary.inner_text()
    n = tab.locator("input[type=number]").first  # the n slider's number box
    n.fill("20")
    n.press("Tab")
    sync_api.expect(tab.get_by_text("N* =").first).not_to_have_text(before, timeout=30_000)
    assert re.search(r"N\* = [\d,]+", tab.get_by_text("N* =").first.inner_text())
    shoot(page, shots, "flops")


def test_about_says_what_the_app_is_in_tables_not_json(page, shots):
    tab = open_tab(page, "About")
    tab.get_by_text("Head:").first.wait_for(timeout=30_000)
    text = tab.inner_text()
    assert text.lstrip().startswith("What this app is") and "What each tab answers" in text
    for name in TABS:
        assert f"{name}:" in text  # what each tab answers
    head_line = tab.locator("p").filter(has_text="parameters ·").first.inner_text()
    assert "no query adapter" in head_line and "from BM25" in head_line  # adapter and C0 source
    assert tab.get_by_text("what it means", exact=True).count() >= 1  # the settings table: symbol, value, meaning
    assert tab.get_by_text("3 of 4", exact=True).count() >= 1  # ℓc of the tiny head
    assert tab.locator(".json-holder, [data-testid=json]").count() == 0  # no gr.JSON
    assert not re.search(r'[{\[]\s*"\w+"\s*:', text)  # no raw JSON text on screen
    shoot(page, shots, "about")


def test_stop_cancels_a_run_after_its_prefilling_state(page):
    """Between the ranking and the first token the page says what it is doing; Stop ends the stream."""
    tab = open_tab(page, "Long document")
    page.get_by_placeholder("Paste a long document…").fill(DOC)
    tab.get_by_label("Question", exact=True).fill(SLOW_QUESTION)
    tab.get_by_role("radio", name="bm25").check()
    page.get_by_role("button", name="Select evidence and answer").click()
    sync_api.expect(page.locator("#unreal-prefill")).to_contain_text(re.compile(r"Prefilling [\d,]+ tokens"),
                                                                     timeout=60_000)
    answer = tab.get_by_label(ANSWER_LABEL)  # the Wikipedia tab has an answer box too
    sync_api.expect(answer).to_have_value(re.compile("^word word"), timeout=30_000)
    page.locator("#unreal-stop-ask").click()
    time.sleep(1.5)  # a step already under way may still land
    said, shown = len(SAID), answer.input_value()
    time.sleep(3)  # ten more words, had it gone on
    assert len(SAID) == said and answer.input_value() == shown
    assert 0 < said < 60
    sync_api.expect(page.locator("#unreal-stopped")).to_contain_text("Stopped after")  # said, not an error
    assert page.get_by_text("Error", exact=True).count() == 0


def test_a_new_document_leaves_nothing_of_the_last_one(page):
    """Ask on one text, then Ask and Compare on another: no panel shows the first text's chunks or answer."""
    tab = open_tab(page, "Long document")
    box = page.get_by_placeholder("Paste a long document…")
    box.fill(DOC)
    tab.get_by_label("Question", exact=True).fill("What is the zebra code?")
    tab.get_by_role("radio", name="bm25").check()
    page.get_by_role("button", name="Select evidence and answer").click()
    sync_api.expect(tab.locator("#unreal-answer-check")).to_contain_text("Answer check", timeout=60_000)
    box.fill(GPL)
    tab.get_by_label("Question", exact=True).fill(GPL_QUESTION)
    page.get_by_role("button", name="Compare methods", exact=True).click()
    sync_api.expect(tab.locator("#unreal-answer-check")).to_contain_text("Compare methods answers", timeout=60_000)
    page.wait_for_timeout(1000)
    shown = tab.inner_text()
    assert "zebra" not in shown and "4417" not in shown and "Cats sleep" not in shown


def test_every_tab_is_reachable_at_800_px(url, browser):
    page = browser.new_page(viewport={"width": 800, "height": 1000})
    try:
        page.goto(url)
        page.get_by_text("ready in").first.wait_for(timeout=60_000)
        assert page.locator(".overflow-menu:not(.hide)").count() == 0  # no tab folded behind "⋯"
        for name in TABS:
            label = page.get_by_role("tab", name=name, exact=True)
            sync_api.expect(label).to_be_visible()  # waits for the layout (a busy machine renders late)
            label.click()
            sync_api.expect(label).to_have_attribute("aria-selected", "true")
            assert page.locator("[role=tabpanel]:visible").first.inner_text().strip()
    finally:
        page.close()


def test_the_start_up_page_turns_into_the_app(browser, tmp_path):
    """The page served while Gradio imports lists the steps, then reloads into the app once it answers."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from unreal_demo.ui.splash import Splash

    class App(BaseHTTPRequestHandler):  # stands in for Gradio: a page and a config with components
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b'{"components": []}' if self.path.startswith("/config") else b"<h1>the real app</h1>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    splash = Splash("127.0.0.1", 0)
    splash.step("importing Gradio and building the six tabs")
    servers = []

    def serve_later():
        splash.hand_over()
        servers.append(HTTPServer(("127.0.0.1", splash.port), App))
        threading.Thread(target=servers[0].serve_forever, daemon=True).start()
        splash.served()

    page = browser.new_page()
    try:
        page.goto(f"http://127.0.0.1:{splash.port}/")
        page.get_by_text("importing Gradio and building the six tabs").wait_for(timeout=10_000)
        page.screenshot(path=str(tmp_path / "starting.png"))
        threading.Timer(1.0, serve_later).start()
        page.get_by_text("the real app").wait_for(timeout=30_000)  # reloaded by itself
    finally:
        page.close()
        for s in servers:
            s.shutdown()
            s.server_close()


def test_the_worked_example_fits_the_first_screen(url, browser):
    """At 1,400 × 900 the worked example's question, answer and selected chunks are on screen without scrolling."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(url)
        page.get_by_text("ready in").first.wait_for(timeout=60_000)
        tab = page.locator("[role=tabpanel]:visible").first
        answer = tab.get_by_label(ANSWER_LABEL)
        sync_api.expect(answer).not_to_have_value("", timeout=120_000)  # the worked example, drawn once loaded
        for part in (tab.get_by_label("Question", exact=True), answer, tab.get_by_text("Selected chunks, document "
                                                                                       "order").first):
            box = part.bounding_box()
            assert box is not None and box["y"] + min(box["height"], 40) <= 900, box
    finally:
        page.close()
