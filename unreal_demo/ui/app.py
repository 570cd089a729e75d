"""Build the Blocks app from a :class:`~unreal_demo.pipeline.Loading` (or an already loaded Explorer).

The page is served at once; the model loads in a background thread. Each tab lays itself out from what
is known before the model is ready (the model id, the head) and returns a :class:`~.wiring.Ready`: the
buttons to enable and the updates to compute once the model is loaded. One ``load`` event per page
streams the loading progress into the status line, then applies them.
"""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr

from ..pipeline import Explorer, Loading
from .tabs import about, flops, intrinsic, long_document, topn, wikipedia
from .wiring import Ready

CSS = (Path(__file__).resolve().parents[2] / "assets" / "style.css").read_text()
TABS = (("Long document", long_document), ("Wikipedia", wikipedia), ("Top-n trade-off", topn),
        ("Intrinsic retrieval by layer", intrinsic), ("FLOPs & break-even", flops), ("About the head", about))


def build_demo(model: Loading | Explorer) -> gr.Blocks:
    """The UNREAL Explorer app; the model and head are shared read-only by every session."""
    loader = model if isinstance(model, Loading) else Loading.of(model)
    with gr.Blocks(title="UNREAL Explorer") as demo:
        gr.Markdown(f"# UNREAL Explorer\nA frozen LLM selects its own evidence: chunks are encoded up to "
                    f"layer ℓc, scored by MaxSim against a tiny trained query side, and the top-n go back to "
                    f"the same model. Model: `{loader.model}`.", elem_classes=["unreal-header"])
        status = gr.Markdown(f"⏳ {loader.status()}", elem_classes=["unreal-status"], elem_id="unreal-status")
        readies: list[Ready] = []
        for title, tab in TABS:
            with gr.Tab(title):
                readies.append(tab.build_tab(loader))
        outputs = [status, *{id(c): c for r in readies for c in r.components}.values()]

        def wait_for_model():
            while not loader.done:
                yield {status: f"⏳ {loader.status()}"}
                time.sleep(0.5)
            try:
                explorer = loader.get()
            except Exception as exc:  # a failed load stays on screen (and in the log); the page keeps serving
                yield {status: f"⚠ {exc}"}
                return
            updates = {status: f"✓ {loader.status()}"}
            for ready in readies:
                updates |= {c: gr.update(interactive=True) for c in ready.enable}
                if ready.fill is not None:
                    updates |= ready.fill(explorer)
            yield updates

        demo.load(wait_for_model, None, outputs, api_name=False, concurrency_limit=None, show_progress="hidden")
    demo.queue(default_concurrency_limit=2, max_size=32)
    return demo
