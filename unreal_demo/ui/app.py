"""Build the Blocks app from a :class:`~unreal_demo.serving.Loading` (or an already loaded Explorer).

The page is served at once; the model loads in a background thread. Each tab lays itself out from what
is known before the model is ready (the model id, the head) and returns a :class:`~.wiring.Ready`: the
buttons to enable and the updates to compute once the model is loaded. One ``load`` event per page
streams the loading progress into the status line, then applies them, then draws the worked examples
(computed once, after the model loads: :meth:`demo.warm <build_demo>` starts them in the background).
"""

from __future__ import annotations

import copy
import threading
import time

import gradio as gr

from ..pipeline import Explorer
from ..serving import Loading, open_any_default
from ..settings import ASSETS
from .glossary import glossary_markdown
from .tabs import about, flops, intrinsic, long_document, topn, wikipedia
from .wiring import Ready

CSS = (ASSETS / "style.css").read_text()
# short labels: all six stay in the tab bar at 800 px (Gradio folds the ones that do not fit into a "⋯" menu)
TABS = (("Long document", long_document), ("Wikipedia", wikipedia), ("Top-n", topn), ("By layer", intrinsic),
        ("FLOPs", flops), ("About", about))
INTRO = ("A small language model (frozen, never fine-tuned) picks the few passages of a long text that answer "
         "a question, then answers from those alone. Each chunk of the text is read once by the model's first "
         "layers (up to ℓc); a tiny trained query side (the *head*) scores every chunk by MaxSim; the top n "
         "chunks go back to the same model, which writes the answer. Every symbol is explained under *Symbols* "
         "just below, and the small print under each control says what it sets.")


def build_demo(model: Loading | Explorer, open_stores: bool | None = None) -> gr.Blocks:
    """The UNREAL Explorer app; the model and head are shared read-only by every session. ``open_stores``: whether
    a visitor may open any index folder or Qdrant store, and build an index, in the Wikipedia tab (default
    :func:`settings.open_stores <unreal_demo.settings.open_stores>`: yes unless the app is public).

    ``demo.warm()`` starts the worked examples in the background (call it once the page serves; each page
    also starts them when it opens, and they are computed once).

    Raises
    ------
    UserError
        ``open_stores`` None and ``$UNREAL_OPEN_STORES`` set to something other than 0 or 1 (one line, before
        anything is built).
    """
    loader = model if isinstance(model, Loading) else Loading.of(model)
    stores = open_any_default() if open_stores is None else open_stores
    with gr.Blocks(title="UNREAL Explorer") as demo:
        gr.Markdown(f"# UNREAL Explorer\n{INTRO} Model: `{loader.model}`.", elem_classes=["unreal-header"])
        with gr.Accordion("Symbols: what ℓc, n, q_g, k_p, |C0|, κ, λ … mean", open=False, elem_id="unreal-glossary"):
            gr.Markdown(glossary_markdown())
        status = gr.Markdown(f"⏳ {loader.status()}", elem_classes=["unreal-status"], elem_id="unreal-status")
        readies: list[Ready] = []
        with gr.Tabs():
            for title, tab in TABS:
                with gr.Tab(title):
                    readies.append(tab.build_tab(loader, open_stores=stores) if tab is wikipedia else
                                   tab.build_tab(loader))
        outputs = [status, *{id(c): c for r in readies for c in r.components}.values()]
        examples = [r.example for r in readies if r.example is not None]

        def warm() -> None:
            """Compute the worked examples in the background once the model is loaded."""
            def run() -> None:
                try:
                    loader.get()
                except Exception:  # noqa: S110 (the page shows the failed load)
                    return
                for example in examples:
                    example.start()

            threading.Thread(target=run, name="warm", daemon=True).start()

        def wait_for_model():
            while not loader.done:
                yield {status: f"⏳ {loader.status()}"}
                time.sleep(0.5)
            try:
                explorer = loader.get()
            except Exception as exc:  # a failed load stays on screen (and in the log); the page keeps serving
                yield {status: f"⚠ {exc}"}
                return
            ready = f"✓ {loader.status()}"

            def filled() -> dict:  # made afresh for every yield: Gradio consumes the updates it sends
                updates = {}
                for r in readies:
                    updates |= {c: gr.update(interactive=True) for c in r.enable}
                    if r.fill is not None:
                        updates |= r.fill(explorer)
                return updates

            pending = [r.example for r in readies if r.example is not None and not r.example.done]
            note = " · drawing the worked example (computed once, after start-up) …" if pending else ""
            yield filled() | {status: ready + note}
            if not examples:
                return
            # a generator's later yield resets the outputs it leaves out (a table to empty): it repeats them all
            drawn = filled() | {status: ready}
            for r in readies:
                if r.example is not None:
                    try:
                        drawn |= {c: copy.deepcopy(v) for c, v in r.example.get().items()}
                    except Exception as exc:  # the page stays usable without its example
                        drawn[status] = f"{ready} · the worked example could not be computed: {exc}"
            yield drawn

        demo.load(wait_for_model, None, outputs, api_name=False, concurrency_limit=None, show_progress="hidden")
    demo.queue(default_concurrency_limit=2, max_size=32)
    demo.warm = warm
    return demo
