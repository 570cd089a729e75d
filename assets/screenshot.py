"""The README's screenshots: the real app on the offline default model, every tab driven as the browser test
drives it (tests/ui/test_browser.py, which takes the same shots of the tiny-model app), saved to
``assets/screenshots/<tab>.png`` (the README shows them).

    python assets/screenshot.py [topn ...]   (Debian's chromium and playwright; the app's model and the shipped index)

With names (from SHOTS), only those shots are taken again.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

from unreal_demo.ui.answer_check import ANSWER_LABEL

PORT = 7899
HERE = Path(__file__).parent
OUT = HERE / "screenshots"
QUESTION = "What is the secret ingredient of the best pizza in Oakland?"
SHOTS = ("long_document", "compare", "wikipedia", "topn", "intrinsic", "flops", "about")


def tab(page, name: str):
    page.get_by_role("tab", name=name, exact=True).click()
    return page.locator("[role=tabpanel]:visible").first


def shoot(page, name: str) -> None:
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
    print(f"saved {OUT / name}.png", flush=True)


def wait_answer(page, scope) -> None:
    box = scope.get_by_label(ANSWER_LABEL).first
    page.wait_for_function("el => el.value.length > 0", arg=box.element_handle(), timeout=300_000)
    time.sleep(5)  # let the stream finish


def main(names: list[str]) -> None:
    if unknown := set(names) - set(SHOTS):
        sys.exit(f"unknown shot {', '.join(sorted(unknown))}; choose from {', '.join(SHOTS)}")
    wanted = set(names or SHOTS)
    OUT.mkdir(exist_ok=True)
    app = subprocess.Popen([sys.executable, str(HERE.parent / "app.py"), "--port", str(PORT)])
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}", timeout=1)
                break
            except OSError:
                time.sleep(1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            page.goto(f"http://127.0.0.1:{PORT}")
            page.get_by_text("ready in").first.wait_for(timeout=300_000)

            if {"long_document", "compare"} & wanted:
                t = tab(page, "Long document")  # the page opens on the worked needle example, drawn without a click
                page.locator("#unreal-example").get_by_text("computed by this app").wait_for(timeout=600_000)
                assert QUESTION in page.locator("#unreal-example").inner_text()
                page.locator(".unreal-card").first.wait_for(timeout=60_000)
                wait_answer(page, t)
                if "long_document" in wanted:
                    shoot(page, "long_document")
                if "compare" in wanted:
                    page.get_by_role("button", name="Compare methods", exact=True).click()
                    page.locator("a[href*='compare.json']").first.wait_for(timeout=600_000)
                    shoot(page, "compare")

            if "wikipedia" in wanted:
                t = tab(page, "Wikipedia")
                t.get_by_label("Query", exact=True).fill("Who was the first president of the United States?")
                t.get_by_role("button", name="Search").click()  # the example's cards are cleared first
                t.locator(".unreal-wait").first.wait_for(timeout=60_000)
                t.locator(".unreal-wait").first.wait_for(state="detached", timeout=300_000)
                t.locator(".unreal-card").first.wait_for(timeout=300_000)
                t.get_by_role("button", name="Answer from the top 5").click()
                wait_answer(page, t)
                shoot(page, "wikipedia")

            if "topn" in wanted:
                t = tab(page, "Top-n")
                t.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
                shoot(page, "topn")

            if "intrinsic" in wanted:
                t = tab(page, "By layer")
                t.get_by_role("button", name="Short: capital of France").click()  # four chunks
                t.get_by_text("best rank").wait_for(timeout=300_000)
                shoot(page, "intrinsic")

            if "flops" in wanted:
                t = tab(page, "FLOPs")
                t.get_by_text(re.compile(r"N\* =")).first.wait_for(timeout=60_000)
                shoot(page, "flops")

            if "about" in wanted:
                t = tab(page, "About")
                t.get_by_text("Head:").first.wait_for(timeout=60_000)
                shoot(page, "about")
            browser.close()
    finally:
        app.terminate()


if __name__ == "__main__":
    main(sys.argv[1:])
