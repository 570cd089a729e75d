"""Tab "Long document": paste or upload text, ask; per-chunk scores, the evidence inside each selected chunk,
every method side by side on the same chunks, the streamed answer, and downloads of what is shown."""

from __future__ import annotations

import html
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gradio as gr
import pandas as pd

from ...core.generation import ANSWER_RULE
from ...data.textio import read_document
from ...errors import InputError, UserError
from ...pipeline import AskStep, Explorer, FullContext, Ranking, check_n
from ...retrieval.registry import names
from ...serving import Loading
from .. import plots
from ..answer_check import ANSWER_LABEL, PLACEHOLDER, check_html, checked, prefill_html, verdict
from ..evidence import evidence_html
from ..examples import EXAMPLES, load_examples
from ..glossary import SYMBOLS
from ..gpu import on_gpu
from ..wiring import RUNS, Once, Ready, Run, stepped

MOST_N = 30  # the n slider's top: an n outside 1..MOST_N is refused with this range
COMPARED = names("document", single=True)  # unreal, bm25, dense, sparse
SELECTED_COLUMNS = ["chunk", "doc", "tokens", "score", "text"]
TIMING_COLUMNS = ["method", "prompt tokens", "encode s", "retrieval s", "prefill s", "time to first token s"]
COMPARE_COLUMNS = ["chunk", "selected by", *(f"{m} rank" for m in COMPARED), "text"]
ANSWER_COLUMNS = ["method", "answer", "evidence check", "prompt tokens", "time to first token s"]
EMPTY_TIMINGS = pd.DataFrame(columns=TIMING_COLUMNS)
# column widths: short number columns wide enough for their header words, the text column takes the rest
SELECTED_WIDTHS = ["13%", "10%", "14%", "14%", "49%"]
ANSWER_WIDTHS = ["11%", "45%", "20%", "11%", "13%"]  # the check and timing columns inside the panel
COMPARE_WIDTHS = ["8%", "13%", *["9%"] * len(COMPARED), "43%"]
EVIDENCE_PLACEHOLDER = ("<p class='unreal-placeholder'>The selected chunks appear here, each span coloured by how "
                        "strongly UNREAL's query groups matched it and BM25's terms underlined.</p>")
METHOD_INFO = ("unreal: the trained head (MaxSim) · bm25: words · dense: MiniLM vectors · sparse: the model's token "
               "states · hybrid-rrf: UNREAL and BM25 ranks merged · full: no selection")


def read_upload(path: str | None, current: str) -> str:
    """Text of an uploaded file; on a refused file the current text stays and a warning says why."""
    if not path:
        return current
    try:
        return read_document(path)  # the checks `ask --file` makes: type, size, encoding, damage, length
    except InputError as exc:
        gr.Warning(str(exc))
        return current


def ranks(ranking: Ranking) -> dict[int, int]:
    """1-based rank of every chunk under the method (best score first)."""
    if ranking.scores is None:
        return {}
    order = sorted(range(len(ranking.scores)), key=lambda i: -ranking.scores[i])
    return {i: r + 1 for r, i in enumerate(order)}


def selected_table(ranking: Ranking) -> pd.DataFrame:
    rows = [{"chunk": i, "doc": ranking.chunks[i].doc, "tokens": ranking.chunks[i].tokens,
             "score": None if ranking.scores is None else round(ranking.scores[i], 4),
             "text": ranking.chunks[i].text.strip()} for i in ranking.selected]
    return pd.DataFrame(rows, columns=SELECTED_COLUMNS)


def timing_table(step: AskStep, full: FullContext | None) -> pd.DataFrame:
    """Chosen method against full context (:meth:`Explorer.full_context`; None for method full): prompt tokens and
    measured seconds (from :meth:`Explorer.ask_stream`)."""
    t, ranking = step.timings, step.ranking
    rows = [{"method": ranking.method, "prompt tokens": step.prompt_tokens, "encode s": round(t.get("encode", 0.0), 3),
             "retrieval s": round(t.get("retrieval", 0.0), 3), "prefill s": round(t.get("prefill", 0.0), 3),
             "time to first token s": round(t["first_token"], 3)}]
    if full is not None:
        row = {"method": "full context", "prompt tokens": full.prompt_tokens, "encode s": 0.0, "retrieval s": 0.0}
        if full.prefill is not None:
            row |= {"prefill s": round(full.prefill, 3), "time to first token s": round(full.first_token, 3)}
        elif not full.fits:
            row |= {"prefill s": "does not fit", "time to first token s": f"window {full.window}"}
        else:
            row |= {"prefill s": "not run", "time to first token s": "tick 'also time full context'"}
        rows.append(row)
    return pd.DataFrame(rows, columns=TIMING_COLUMNS)


def chunk_rows(ranking: Ranking) -> list[dict]:
    """Every chunk under one method: offsets in its document, tokens, score, rank, selected (for downloads)."""
    rank, chosen = ranks(ranking), set(ranking.selected)
    return [{"method": ranking.method, "chunk": c.id, "doc": c.doc, "start": c.start, "end": c.end,
             "tokens": c.tokens, "score": None if ranking.scores is None else ranking.scores[c.id],
             "rank": rank.get(c.id), "selected": c.id in chosen} for c in ranking.chunks]


def export(kind: str, record: dict, rows: list[dict], tables: dict[str, pd.DataFrame]) -> list[str]:
    """Write what is shown as ``<kind>.json`` (everything) and CSVs (per-chunk rows, each table); their paths."""
    folder = Path(tempfile.mkdtemp(prefix=f"unreal-{kind}-"))
    (folder / f"{kind}.json").write_text(json.dumps(record | {"chunks": rows}, indent=1, default=str))
    pd.DataFrame(rows).to_csv(folder / f"{kind}_chunks.csv", index=False)
    for name, table in tables.items():
        table.to_csv(folder / f"{kind}_{name}.csv", index=False)
    return sorted(str(p) for p in folder.iterdir())


def compare_table(rankings: list[Ranking]) -> pd.DataFrame:
    """The chunks any method selected: who selected each, and its rank under every method."""
    by = {r.method: (ranks(r), set(r.selected)) for r in rankings}
    chunks = rankings[0].chunks
    ids = sorted({i for r in rankings for i in r.selected})
    rows = [{"chunk": i, "selected by": ", ".join(m for m, (_, chosen) in by.items() if i in chosen),
             **{f"{m} rank": by[m][0].get(i) if m in by else None for m in COMPARED},
             "text": chunks[i].text.strip()} for i in ids]
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


HOW_TO_READ = (
    "**How to read this tab.** Paste a long text (or upload one) and ask a question about it. The text is cut into "
    "chunks of about 141 tokens; every chunk gets a score; the *n* best chunks are given to the model, which answers "
    "from them alone. Below the answer: the model that wrote it and a check of its words against that evidence; the "
    "score of every chunk (a tall bar = a chunk the method thinks answers the question); the selected chunks with "
    "the words that matched shaded; timings against reading the whole text. *Compare methods* scores the same "
    "chunks with four methods.")
EXAMPLE_NOTE = (
    "**Worked example** (computed by this app at start-up, not a mock): the needle example below, “{question}”, "
    "n = {n}, method {method}, run once through the same pipeline as the button with `{model}` and head "
    "`{head}` ({seconds:.0f} s on this machine). Edit the text or the question and press *Select evidence and "
    "answer* to run your own.")


def build_tab(loader: Loading) -> Ready:
    """Lay out the tab and wire its events (``api_name="ask"`` and ``"compare"``)."""
    untrained = loader.head is None or not loader.head.config.trained
    status = ("**Untrained head**: no trained head for this model was found, so UNREAL scores are random. "
              "Train one with `python -m unreal_demo train`.") if untrained else ""
    spec = load_examples() if (EXAMPLES / "examples.json").exists() else []
    gr.Markdown(HOW_TO_READ, elem_classes=["unreal-howto"])
    with gr.Row(elem_classes=["unreal-examples"]):
        gr.Markdown("**Examples:**", elem_classes=["unreal-examples-label"])
        # each button states the answer its example should get (a slow test checks that it does)
        example_buttons = [gr.Button(e["label"] if e["answer"] in e["label"] else f"{e['label']} → {e['answer']}",
                                     size="sm", interactive=False) for e in spec]
    worked = spec[0] if spec else None
    with gr.Row():  # the first screen: the text, the question and its controls, then the answer and its chunks
        with gr.Column(scale=3):
            text = gr.Textbox(label="Document (scrolls)", lines=7, max_lines=7, placeholder="Paste a long document…",
                              value=worked["text"] if worked else "")
            with gr.Row():
                run = gr.Button("Select evidence and answer", variant="primary", interactive=False, scale=3)
                stop = gr.Button("Stop", variant="stop", elem_id="unreal-stop-ask", min_width=70, scale=1)
        with gr.Column(scale=2):
            question = gr.Textbox(label="Question", lines=1, value=worked["question"] if worked else "")
            n = gr.Slider(1, MOST_N, value=5, step=1, label="n (chunks to select)", info=SYMBOLS["n"])
            method = gr.Radio(names("document"), value="unreal", label="Method", info=METHOD_INFO)
    with gr.Row():
        with gr.Column(scale=3):
            answer = gr.Textbox(label=ANSWER_LABEL, lines=2, elem_classes=["unreal-answer"],
                                placeholder="The answer appears here, token by token.")
            check = gr.HTML(PLACEHOLDER, elem_id="unreal-answer-check")
        with gr.Column(scale=2):
            chosen = gr.Dataframe(pd.DataFrame(columns=SELECTED_COLUMNS), label="Selected chunks, document order",
                                  wrap=True, interactive=False, column_widths=SELECTED_WIDTHS, max_height=420)
            notice = gr.Markdown(status, elem_classes=["unreal-notice"] if status else None)
            with gr.Row():
                compare = gr.Button("Compare methods", interactive=False)
                answer_each = gr.Checkbox(label="Compare: answer with each method", value=False)
            also_full = gr.Checkbox(label="also time full context (slow on CPU)", value=False)
            upload = gr.File(label="…or upload a .txt / .md file", file_types=[".txt", ".md"], type="filepath",
                             height=90)
    banner = gr.Markdown("⏳ **Worked example**: the needle example's result is drawn here once the model has "
                         "loaded (computed once at start-up).", elem_id="unreal-example",
                         elem_classes=["unreal-example"], visible=worked is not None)
    with gr.Row():
        bars = gr.Plot(label="Per-chunk scores (after a run)", min_width=420)
        heat = gr.Plot(label="MaxSim detail (after an UNREAL run)", visible=False, min_width=420)
    gr.Markdown("*What to look for:* left, every chunk's score in document order, the selected top n in colour "
                "(a clear spike at the answer's chunk means a confident selection); right, for UNREAL, which "
                "query group g (its vector q_g) matched which pooled stretch p (its vector k_p) of each top chunk: "
                "Eq. 4 takes the best p in every row, then sums the rows.")
    evidence = gr.HTML(EVIDENCE_PLACEHOLDER, label="Evidence in the selected chunks")
    timings = gr.Dataframe(EMPTY_TIMINGS, label="Timings against full context (when the answer is complete)",
                           wrap=True, interactive=False)
    files = gr.File(label="Download: rankings with scores and chunk offsets, timings, answer (JSON, CSV)",
                    file_count="multiple", interactive=False)
    with gr.Accordion("Compare methods on the same chunks", open=False) as compare_box:
        gr.Markdown("UNREAL, BM25, dense and sparse token matching score the same chunks (the encoding of the "
                    "document is reused, so a second question costs only the query side).")
        cmp_plot = gr.Plot(label="Normalised score per chunk and method")
        cmp_table = gr.Dataframe(pd.DataFrame(columns=COMPARE_COLUMNS), wrap=True, interactive=False,
                                 column_widths=COMPARE_WIDTHS,
                                 label="Chunks any method selected: who selected each, and its rank under each")
        cmp_answers = gr.Dataframe(pd.DataFrame(columns=ANSWER_COLUMNS), wrap=True, interactive=False,
                                   column_widths=ANSWER_WIDTHS, label=(
            f"Each method's answer by {loader.model} ({ANSWER_RULE.limit}; tick 'answer with each method'), and "
            "whether a sentence of that method's selected chunks states it"))
        cmp_files = gr.File(label="Download the comparison (JSON, CSV)", file_count="multiple", interactive=False)
    upload.change(read_upload, [upload, text], text, api_name=False)

    def cleared(what: str) -> tuple:
        """Every panel of :func:`ask` emptied, before the first result of a new run arrives."""
        waiting = f"<p class='unreal-wait'>⏳ {html.escape(what)} …</p>"
        return ("", waiting, None, gr.update(value=None, visible=False), EVIDENCE_PLACEHOLDER,
                pd.DataFrame(columns=SELECTED_COLUMNS), EMPTY_TIMINGS, status, None)

    def answering(explorer: Explorer, doc: str, q: str, n_sel: float, meth: str, full_too: bool,
                  progress: Callable[..., object], run: Run | None = None):
        """The tab's outputs, step by step: every panel cleared, the ranking with a "prefilling" line, then the
        answer as it streams, then the checked answer, timings and downloads. ``run``'s Stop is checked after
        every encoding batch and every answer token (:class:`wiring.Stopped`)."""
        run = run or Run()
        n_sel = check_n(n_sel, "n", MOST_N)  # the slider's range: refused, never clamped
        yield cleared("chunking and encoding the document")
        waiting = None
        steps = explorer.ask_stream([doc or ""], q or "", n_sel, meth,
                                    watch=run.watch(progress, "encoding the document", 0.0, 0.5))
        for step in steps:
            run.check()
            if not step.prompt_tokens:  # the first step: the ranking, before the prompt
                ranking = step.ranking
                bar_fig = plots.chunk_scores(ranking)  # MaxSim detail only for a method that has it
                heat_fig = gr.update(value=plots.group_heatmap(ranking) if ranking.group_sims else None,
                                     visible=bool(ranking.group_sims))
                table, shown = selected_table(ranking), evidence_html(explorer, ranking, q, ranks(ranking))
                notes = "\n".join(f"- {m}" for m in ranking.notices)
                progress(0.5, desc="prefilling the prompt")
                continue
            if waiting is None:  # the second step: the prompt's length, before the model reads it
                waiting = prefill_html(step.prompt_tokens, len(ranking.selected), explorer)
            if not step.done:
                yield (step.text, waiting if not step.text else PLACEHOLDER, bar_fig, heat_fig, shown, table,
                       EMPTY_TIMINGS, notes or status, None)
        support, copied = checked(step.text, ranking.passages, ranking.selected, q)  # copied: by chunk id
        said = check_html(explorer, step, support)
        shown = evidence_html(explorer, ranking, q, ranks(ranking), copied)
        full = explorer.full_context(ranking, q, timed=full_too) if ranking.method != "full" else None
        times = timing_table(step, full)
        record = {"question": q, "method": meth, "n": int(n_sel), "answer": step.text, "model": loader.model,
                  "head": loader.head_source, "answer_rule": ANSWER_RULE.name, "answer_stop": step.stop,
                  "answer_check": [vars(x) for x in support.sentences], "check": support.to_dict(),
                  "timings": step.timings, "notices": ranking.notices}
        out = export("ask", record, chunk_rows(ranking), {"selected": table, "timings": times})
        yield step.text, said, bar_fig, heat_fig, shown, table, times, notes or status, out

    def stopped_outputs(run: Run, n_out: int, check_at: int, notice_at: int) -> tuple:
        """What a stopped run leaves: its "Stopped after X s" line in the check and notice panels, every other
        panel as this run left it."""
        line = run.stopped()
        out = [gr.skip()] * n_out
        out[check_at] = f"<p class='unreal-stopped' id='unreal-stopped'>⏹ {html.escape(line)}</p>"
        out[notice_at] = f"⏹ {line}"
        return tuple(out)

    def ask_steps(doc: str, q: str, n_sel: float, meth: str, full_too: bool, progress, run: Run):
        try:
            yield from answering(loader.get(), doc, q, n_sel, meth, full_too, progress, run)
        except UserError as exc:
            raise gr.Error(str(exc)) from None

    async def ask(doc: str, q: str, n_sel: float, meth: str, full_too: bool = False, request: gr.Request = None,
                  progress=gr.Progress()):  # noqa: B008 (Gradio's idiom for progress tracking)
        run = RUNS.begin(request, "long-document")
        async for out in stepped(ask_steps(doc, q, n_sel, meth, full_too, progress, run), run,
                                 lambda: stopped_outputs(run, 9, 1, 7)):
            yield out

    async def compare_all(doc: str, q: str, n_sel: float, answer_too: bool, request: gr.Request = None,
                          progress=gr.Progress()):  # noqa: B008
        """Every method on the same chunks. Its outputs are the comparison's and every panel of the tab's own
        run (answer, check, charts, tables, downloads): all cleared first, then the charts and selected chunks
        drawn from UNREAL's ranking of this text, so that nothing on screen is left from another input."""
        run = RUNS.begin(request, "long-document")
        async for out in stepped(compare_steps(doc, q, n_sel, answer_too, progress, run), run,
                                 lambda: stopped_outputs(run, 14, 5, 11)):
            yield out

    def compare_steps(doc: str, q: str, n_sel: float, answer_too: bool, progress, run: Run):
        try:
            n_sel = check_n(n_sel, "n", MOST_N)
            explorer = loader.get()
            yield (None, pd.DataFrame(columns=COMPARE_COLUMNS), pd.DataFrame(columns=ANSWER_COLUMNS), None,
                   *cleared("comparing the methods on this text"), gr.update(open=True))
            answers = []
            rankings, notes = explorer.compare(  # chunked and encoded once; a method that fails becomes a note
                [doc or ""], q or "", n_sel, COMPARED,
                progress=lambda j, m: progress(0.5 + 0.3 * j / len(COMPARED), desc=f"scoring with {m}"),
                watch=run.watch(progress, "encoding the document", 0.0, 0.5))
            for r in rankings if answer_too else []:
                run.check()
                progress(0.8, desc=f"answering with {r.method}")
                reply = explorer.answer(r, q)
                support, _ = checked(reply.text, r.passages, question=q)
                first = reply.timings["first_token"] if reply.tokens else 0.0  # no answer token: 0
                answers.append({"method": r.method, "answer": reply.text, "evidence check": verdict(support),
                                "prompt tokens": reply.prompt_tokens, "time to first token s": round(first, 3)})
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        table, said = compare_table(rankings), pd.DataFrame(answers, columns=ANSWER_COLUMNS)
        lead = rankings[0]
        record = {"question": q, "n": int(n_sel), "methods": [r.method for r in rankings], "answers": answers,
                  "model": loader.model, "head": loader.head_source, "notices": notes,
                  "timings": {r.method: r.timings for r in rankings}}
        out = export("compare", record, [row for r in rankings for row in chunk_rows(r)],
                     {"selected": table, "answers": said})
        heat_fig = gr.update(value=plots.group_heatmap(lead) if lead.group_sims else None,
                             visible=bool(lead.group_sims))
        lead_note = (f"<p class='unreal-placeholder'>Compare methods answers in the table of the comparison below "
                     f"(tick 'answer with each method'); the charts and selected chunks here are {lead.method}'s "
                     "ranking of this text.</p>")
        yield (plots.compare_methods(rankings), table, said, out,
                "", lead_note, plots.chunk_scores(lead), heat_fig, evidence_html(explorer, lead, q, ranks(lead)),
                selected_table(lead), EMPTY_TIMINGS, "\n".join(f"- {x}" for x in notes) or status, None,
                gr.update(open=True))

    outputs = [answer, check, bars, heat, evidence, chosen, timings, notice, files]
    hide_banner = {"fn": lambda: gr.update(visible=False), "inputs": None, "outputs": banner, "api_name": False,
                   "queue": False}
    run.click(on_gpu(ask), [text, question, n, method, also_full], outputs, api_name="ask", concurrency_limit=2)
    run.click(**hide_banner)
    compare.click(on_gpu(compare_all), [text, question, n, answer_each],
                  [cmp_plot, cmp_table, cmp_answers, cmp_files, *outputs[:-1], files, compare_box],
                  api_name="compare", concurrency_limit=2)
    compare.click(**hide_banner)
    for button, e in zip(example_buttons, spec, strict=True):
        button.click(**hide_banner)
        button.click(lambda e=e: (e["text"], e["question"], e["n"], e["method"]), None,
                     [text, question, n, method], api_name=False, queue=False) \
            .then(on_gpu(ask), [text, question, n, method, also_full], outputs, api_name=False, concurrency_limit=2)
    # Stop sets the run's flag: the work ends at its next check (an encoding batch, an answer token) and the
    # handler itself says "Stopped after X s" (a cancelled event would leave the work running and "Error" badges)
    def stop_run(request: gr.Request) -> None:
        RUNS.stop(request, "long-document")

    stop.click(stop_run, None, None, api_name="stop_ask", queue=False)

    def draw_example() -> dict:
        """The needle example through :func:`answering` to its end: the outputs the button would show."""
        explorer, t0 = loader.get(), time.perf_counter()
        *_, last = answering(explorer, worked["text"], worked["question"], worked["n"], worked["method"], False,
                             lambda *a, **k: None)
        note = EXAMPLE_NOTE.format(question=worked["question"], n=worked["n"], method=worked["method"],
                                   model=explorer.backbone.name, head=explorer.head_source,
                                   seconds=time.perf_counter() - t0)
        return dict(zip(outputs, last, strict=True)) | {banner: gr.update(value=note, visible=True)}

    return Ready(enable=[run, compare, *example_buttons], outputs=[*outputs, banner],
                 example=Once(draw_example) if worked else None)

