"""Tab "Long document": paste or upload text, ask, watch per-chunk MaxSim scores and the streamed answer."""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr
import pandas as pd

from ...core.generation import fits_window, prompt_ids
from ...data.textio import decode_text
from ...errors import InputError, UserError
from ...pipeline import MAX_CHARS, AskStep, Explorer, Ranking
from ...retrieval.registry import names
from .. import plots
from ..examples import EXAMPLES, load_examples
from ..gpu import on_gpu

MAX_UPLOAD_BYTES = 8 * MAX_CHARS // 2


def read_upload(path: str | None, current: str) -> str:
    """Text of an uploaded file; on a refused file the current text stays and a warning says why."""
    if not path:
        return current
    p = Path(path)
    try:
        if p.suffix.lower() not in {".txt", ".md", ".markdown", ".text"}:
            raise InputError(f"{p.name}: unsupported file type; use .txt or .md")
        if p.stat().st_size > MAX_UPLOAD_BYTES:
            raise InputError(f"{p.name}: {p.stat().st_size:,} bytes is over the upload limit")
        text = decode_text(p.read_bytes(), p.name)
        if len(text) > MAX_CHARS:
            raise InputError(f"{p.name}: {len(text):,} characters; the limit is {MAX_CHARS:,}")
        return text
    except InputError as exc:
        gr.Warning(str(exc))
        return current


def selected_table(ranking: Ranking) -> pd.DataFrame:
    rows = [{"chunk": i, "doc": ranking.chunks[i].doc, "tokens": ranking.chunks[i].tokens,
             "score": None if ranking.scores is None else round(ranking.scores[i], 4),
             "text": ranking.chunks[i].text.strip()} for i in ranking.selected]
    return pd.DataFrame(rows, columns=["chunk", "doc", "tokens", "score", "text"])


def timing_table(explorer: Explorer, step: AskStep, question: str, full: dict | None) -> pd.DataFrame:
    """Chosen method against full context: prompt tokens and measured seconds (from :meth:`Explorer.ask_stream`)."""
    t, ranking = step.timings, step.ranking
    rows = [{"method": ranking.method, "prompt tokens": step.prompt_tokens, "encode s": round(t.get("encode", 0.0), 3),
             "retrieval s": round(t.get("retrieval", 0.0), 3), "prefill s": round(t.get("prefill", 0.0), 3),
             "time to first token s": round(t["first_token"], 3)}]
    if ranking.method != "full":
        n_full = len(prompt_ids(explorer.backbone, [c.text for c in ranking.chunks], question))
        row = {"method": "full context", "prompt tokens": n_full, "encode s": 0.0, "retrieval s": 0.0}
        if full is not None:
            row |= {"prefill s": round(full["prefill"], 3), "time to first token s": round(full["ttft"], 3)}
        elif not fits_window(explorer.backbone, n_full, 48):
            row |= {"prefill s": "does not fit", "time to first token s": f"window {explorer.backbone.max_positions}"}
        else:
            row |= {"prefill s": "not run", "time to first token s": "tick 'also time full context'"}
        rows.append(row)
    return pd.DataFrame(rows)


def build_tab(explorer: Explorer) -> None:
    """Lay out the tab and wire its events (``api_name="ask"``)."""
    status = "" if explorer.trained else (
        "**Untrained head**: no trained head for this model was found, so UNREAL scores are random. "
        "Train one with `python -m unreal_demo train`.")
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(label="Document", lines=12, max_lines=20, placeholder="Paste a long document…")
            upload = gr.File(label="…or upload a .txt / .md file", file_types=[".txt", ".md"], type="filepath")
        with gr.Column(scale=2):
            question = gr.Textbox(label="Question", lines=2)
            n = gr.Slider(1, 30, value=5, step=1, label="n (chunks to select)")
            method = gr.Radio(names("document"), value="unreal", label="Method")
            also_full = gr.Checkbox(label="also time full context (slow on CPU)", value=False)
            run = gr.Button("Select evidence and answer", variant="primary")
            notice = gr.Markdown(status, elem_classes=["unreal-notice"] if status else None)
    answer = gr.Textbox(label="Answer (streamed)", lines=3, elem_classes=["unreal-answer"])
    with gr.Row():
        bars = gr.Plot(label="Per-chunk scores")
        heat = gr.Plot(label="MaxSim detail")
    gr.Markdown("*What to look for:* left, every chunk's score in document order, the selected top n in colour "
                "(a clear spike at the answer's chunk means a confident selection); right, for UNREAL, which "
                "query group g matched which pooled position p of each top chunk (Eq. 4 takes the max over p "
                "in every row, then sums the rows).")
    chosen = gr.Dataframe(label="Selected chunks, document order", wrap=True)
    timings = gr.Dataframe(label="Timings against full context")
    upload.change(read_upload, [upload, text], text, api_name=False)

    def ask(doc: str, q: str, n_sel: float, meth: str, full_too: bool = False,
            progress=gr.Progress()):  # noqa: B008 (Gradio's idiom for progress tracking)
        try:
            progress(0.1, desc="chunking and encoding")
            for step in explorer.ask_stream([doc or ""], q or "", int(n_sel), meth):
                if not step.prompt_tokens:  # the first step: the ranking, before any answer
                    ranking = step.ranking
                    bar_fig, heat_fig = plots.chunk_scores(ranking), plots.group_heatmap(ranking)
                    table = selected_table(ranking)
                    notes = "\n".join(f"- {m}" for m in ranking.notices)
                    progress(0.5, desc="answering")
                if not step.done:
                    yield step.text, bar_fig, heat_fig, table, None, notes or status
            full = _time_full(explorer, ranking, q) if full_too and meth != "full" else None
            yield step.text, bar_fig, heat_fig, table, timing_table(explorer, step, q, full), notes or status
        except UserError as exc:
            raise gr.Error(str(exc)) from None

    examples = load_examples() if (EXAMPLES / "examples.json").exists() else []
    if examples:
        gr.Examples(examples, [text, question, n, method], label="Ready examples (offline text)",
                    fn=on_gpu(ask), outputs=[answer, bars, heat, chosen, timings, notice], cache_examples=True,
                    cache_mode="lazy")
    run.click(on_gpu(ask), [text, question, n, method, also_full], [answer, bars, heat, chosen, timings, notice],
              api_name="ask", concurrency_limit=2)


def _time_full(explorer: Explorer, ranking: Ranking, question: str) -> dict | None:
    """Prefill and time to first token of the full context (None when it does not fit the window)."""
    full = Ranking("full", ranking.chunks, None, list(range(len(ranking.chunks))), dict(ranking.timings))
    t0 = time.perf_counter()
    try:
        for gen in explorer.stream(full, question, max_new_tokens=1):
            return {"prefill": gen.timings["prefill"], "ttft": ranking.timings.get("chunk", 0.0)
                    + time.perf_counter() - t0}
    except InputError:
        return None
    return None
