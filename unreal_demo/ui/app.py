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

from ..errors import UserError
from ..pipeline import Explorer
from ..serving import Loading, Models, open_any_default
from ..settings import ASSETS
from .glossary import glossary_markdown
from .models import Session, session_of
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


def picker_note(models: Models) -> str:
    """What the header says of the model picker (top right): what switching does, or why it is off."""
    if not models.switchable:
        return f" Model: `{models.first.model}` (the model picker is off: {models.reason})."
    return " Model: pick it beside *Symbols* (About lists each one's head)."


def build_demo(model: Loading | Explorer | Models, open_stores: bool | None = None) -> gr.Blocks:
    """The UNREAL Explorer app; the models and heads are shared read-only by every session. ``model``: the one
    model served, or the :class:`serving.Models` of the header's model picker (each session picks its own: its
    choice is a ``gr.State`` mirrored in ``Models``, and every tab's handler uses the session's model through
    :class:`.models.Session`). ``open_stores``: whether a visitor may open any index folder or Qdrant store, and
    build an index, in the Wikipedia tab (default :func:`settings.open_stores <unreal_demo.settings.open_stores>`:
    yes unless the app is public).

    ``demo.warm()`` starts the worked examples in the background (call it once the page serves; each page
    also starts them when it opens, and they are computed once).

    Raises
    ------
    UserError
        ``open_stores`` None and ``$UNREAL_OPEN_STORES`` set to something other than 0 or 1 (one line, before
        anything is built).
    """
    if isinstance(model, Models):
        models = model
    else:
        models = Models(model if isinstance(model, Loading) else Loading.of(model))
    loader = Session(models)  # the tabs' model: the loading of the model of the session each event serves
    stores = open_any_default() if open_stores is None else open_stores
    with gr.Blocks(title="UNREAL Explorer") as demo:
        gr.Markdown(f"# UNREAL Explorer\n{INTRO}{picker_note(models)}", elem_classes=["unreal-header"])
        with gr.Row(equal_height=True):  # the picker beside the glossary's closed accordion: no line of its own
            with gr.Column(scale=1):
                with gr.Accordion("Symbols: what ℓc, n, q_g, k_p, |C0|, κ, λ … mean", open=False,
                                  elem_id="unreal-glossary"):
                    gr.Markdown(glossary_markdown())
            picker = gr.Dropdown([(f"model: {m}", m) for m in models.offered], value=models.first.model,
                                 label="model", show_label=False, container=False, interactive=models.switchable,
                                 scale=0, min_width=300, elem_id="unreal-model")
        chosen = gr.State(models.first.model)  # per session: the model its tabs use (mirrored in models)
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

        def enabled(on: bool) -> dict:
            return {c: gr.update(interactive=on) for r in readies for c in r.enable}

        def switch(name: str, request: gr.Request):
            """The session's model becomes ``name``: its loading starts (if it is not in memory), every button
            waits for it, then each tab's ready updates are applied for it (:func:`wait_for_model`)."""
            try:
                models.choose(session_of(request), name)
            except UserError as exc:
                raise gr.Error(str(exc)) from None
            yield enabled(False) | {chosen: name, status: f"⏳ {loader.status()}"}
            for out in wait_for_model(name, request, draw=False):
                yield out | {chosen: name}

        def wait_for_model(name: str | None = None, request: gr.Request = None, draw: bool = True):
            if name is not None and name != models.chosen(session_of(request)):  # the session's State rules
                try:
                    models.choose(session_of(request), name)
                except UserError as exc:
                    yield {status: f"⚠ {exc}"}
                    return
            while not loader.done:
                yield {status: f"⏳ {loader.status()}"}
                time.sleep(0.5)
            try:
                explorer = loader.get()
            except Exception as exc:  # a failed load stays on screen (and in the log); the page keeps serving
                yield {status: f"⚠ {exc}"}
                return
            ready = f"✓ {loader.status()}"
            if (warning := loader.head_warning()) is not None:
                ready += f" · ⚠ {warning}"

            def filled() -> dict:  # made afresh for every yield: Gradio consumes the updates it sends
                updates = {}
                for r in readies:
                    updates |= {c: gr.update(interactive=True) for c in r.enable}
                    if r.fill is not None:
                        updates |= r.fill(explorer)
                return updates

            if not draw or loader.model != models.first.model:  # the worked examples are the first model's
                yield filled() | {status: ready}
                return
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

        demo.load(wait_for_model, chosen, outputs, api_name=False, concurrency_limit=None, show_progress="hidden")
        picker.input(switch, picker, [chosen, *outputs], api_name="choose_model", concurrency_limit=None,
                     show_progress="hidden")
    demo.queue(default_concurrency_limit=2, max_size=32)
    demo.warm = warm
    demo.models = models
    return demo
