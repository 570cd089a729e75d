"""End to end in a real browser: headless Debian chromium drives the app (tiny model) through playwright.

Runs the "Long document" tab on a pasted example and checks that the score plot, the selected
chunks and the streamed answer render; saves a screenshot (``$UNREAL_SCREENSHOT`` or the test's
temporary folder). No browser is downloaded: ``./run test`` installs Debian's ``chromium``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")

from unreal_demo.core.head import untrained_head  # noqa: E402
from unreal_demo.pipeline import Explorer  # noqa: E402
from unreal_demo.ui.app import CSS, build_demo  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DOC = "Cats sleep a lot. Dogs bark at night. " * 30 + "The zebra code is 4417. " + "Birds sing in spring. " * 30

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed")


@pytest.fixture(scope="module")
def url(tiny):
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3), None)
    demo = build_demo(explorer)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True, css=CSS)
    try:
        yield demo.local_url
    finally:
        demo.close()


def test_long_document_renders_plot_chunks_and_answer(url, tmp_path):
    shot = Path(os.environ.get("UNREAL_SCREENSHOT", tmp_path / "browser.png"))
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1500})
            page.goto(url)
            page.get_by_placeholder("Paste a long document…").fill(DOC)
            page.get_by_label("Question").fill("What is the zebra code?")
            page.get_by_label("bm25").check()
            page.get_by_role("button", name="Select evidence and answer").click()
            page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
            page.get_by_text("The zebra code is 4417.").first.wait_for(timeout=60_000)  # a selected chunk
            answer = page.get_by_label("Answer (streamed)")
            page.wait_for_function("el => el.value.length > 0", arg=answer.element_handle(), timeout=60_000)
            assert page.locator(".js-plotly-plot .bars path").count() > 10  # one bar per chunk
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
