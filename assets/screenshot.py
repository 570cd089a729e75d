"""Take the README screenshot: start the app, run the needle example, capture the Long document tab.

    python assets/screenshot.py   (needs `pip install playwright` and Debian's chromium)
"""

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

PORT = 7899
OUT = Path(__file__).parent / "screenshot.png"


def main() -> None:
    app = subprocess.Popen([sys.executable, "app.py", "--port", str(PORT)])
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}", timeout=1)
                break
            except OSError:
                time.sleep(1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            page = browser.new_page(viewport={"width": 1400, "height": 1700})
            page.goto(f"http://127.0.0.1:{PORT}")
            page.get_by_text("Ready examples").wait_for()
            doc = (Path(__file__).parent / "examples" / "needle_haystack.txt").read_text()
            page.get_by_placeholder("Paste a long document…").fill(doc)
            page.locator("textarea").nth(1).fill("What is the secret ingredient of the best pizza in Oakland?")
            page.get_by_role("button", name="Select evidence and answer").click()
            time.sleep(60)  # encoding + streamed answer on CPU
            page.screenshot(path=str(OUT), full_page=True)
            browser.close()
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
