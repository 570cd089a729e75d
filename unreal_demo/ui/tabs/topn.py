"""Tab "Top-n trade-off": the inverted U of accuracy against n, and accuracy against context length."""

from __future__ import annotations

import json

import gradio as gr
import pandas as pd

from ...errors import UserError
from ...evaluation.longcontext.contexts import DISTRACTORS, label
from ...evaluation.longcontext.report import curve_methods, describe_peak, rank
from ...evaluation.longcontext.report import name as method_name
from ...evaluation.results import head_digest, head_mismatch, made_by
from ...serving import Loading
from ...settings import PRECOMPUTED
from .. import plots
from ..glossary import SYMBOLS
from ..gpu import on_gpu
from ..wiring import RUNS, Ready, Run, stepped

CAPTION = ("**What to look for.** With few chunks accuracy is limited by evidence recall (dotted): the answer "
           "may not be among the selected chunks; every extra chunk is also another distractor to read past. If "
           "the second effect wins late, accuracy rises, peaks and falls (the inverted U). Full context (dashed) "
           "reads everything{fit}. **What these data show:** ")


def full_context_fit(rows: list[dict]) -> str:
    """Where full context fits the model's window in ``rows`` (a result's cells), in words for :data:`CAPTION`."""
    cells = {r["length"]: r["fits"] for r in rows if r.get("method") == "full"}
    if not cells:
        return ""
    fits = sorted(x for x, ok in cells.items() if ok)
    if not fits:
        return f": in these data it fits the window at none of the lengths ({', '.join(map(label, sorted(cells)))})"
    if len(fits) == len(cells):
        return f": in these data it fits the window at every length up to {label(max(fits))}"
    return f": in these data it fits the window only up to {label(max(fits))} tokens"
HOW_TO_READ = (
    "**How to read this tab.** How many chunks should the model read? Each point is a benchmark result "
    "(precomputed, shown at once): many questions, each hidden in a long text, answered after each method picks n "
    "chunks. Left: answer quality (F1: word overlap with the right answer, 0–1) against n at one context length; "
    "right: against the context length. Pick a precomputed run, length and metric to redraw; a small live run "
    "below adds its own plot and leaves these as they are.")
LIVE_NS = [1, 2, 3, 5, 8, 10, 15, 20, 30]
SUMMARY_COLUMNS = ["method", "length", "n", "questions", "EM", "F1", "contained", "evidence recall", "prompt tokens",
                   "fits window", "CPU s / answer", "selection CPU s"]


# The precomputed runs (in precomputed/), the first present one shown first: name -> (file, distractor setting, what)
RESULTS = {"pool": ("longcontext.json", "pool", DISTRACTORS["pool"]),
           "same-topic": ("longcontext_same_topic.json", "same-topic", DISTRACTORS["same-topic"]),
           "pool, up to 1M": ("longcontext_1m.json", "pool", "the pool setting at 8K and 1M tokens")}
# The same questions with selection alone (``bench longcontext --evidence-only``), for a head the answers predate
EVIDENCE = {"pool": "longcontext_evidence.json", "same-topic": "longcontext_same_topic_evidence.json"}


def load_results(name: str = "pool", files: dict | None = None) -> dict | None:
    """One precomputed benchmark (``bench longcontext … --out precomputed/FILE``), if it exists; ``files``: the
    name → file map to read (default :data:`RESULTS`; :data:`EVIDENCE` for the evidence-only runs)."""
    file = files[name] if files else RESULTS[name][0]
    path = PRECOMPUTED / file
    return json.loads(path.read_text()) if path.exists() else None


def evidence_note(result: dict, name: str, loader: Loading) -> str:
    """The loaded head's own evidence recall@1 on ``result``'s questions, from a complete evidence-only run made
    with that head over the same questions and lengths (the answered result being an earlier head's); else ""."""
    evidence = load_results(name, EVIDENCE) if name in EVIDENCE else None
    if not evidence or not evidence.get("complete") or \
            evidence.get("provenance", {}).get("head_digest") != head_digest(loader.head_path):
        return ""
    if {(r["id"], r["length"]) for r in evidence["rows"]} != {(r["id"], r["length"]) for r in result["rows"]}:
        return ""  # other questions (another --sample or seed) or lengths: not comparable
    cells = {(r["method"], r["length"]): r["recall"] for r in evidence["table"] if r["n"] == 1}
    lengths = sorted({x for _, x in cells})
    parts = [f"{method_name(m)} " + " / ".join(f"{cells[m, x]:.2f}" for x in lengths)
             for m in ("unreal", "bm25") if all((m, x) in cells for x in lengths)]
    if not lengths or not parts:  # no n = 1 cell
        return ""
    return (f"\n\nThe loaded head's own selection on the same questions (`{made_by(evidence)}`, nothing answered): "
            f"evidence recall@1 at {' / '.join(label(x) for x in lengths)} tokens: {'; '.join(parts)}.")


def describe_result(result: dict | None, name: str, loader: Loading) -> str:
    """What the precomputed result is: its setting and command, and a warning if another head made it, followed by
    the loaded head's own evidence recall on the same questions where :func:`evidence_note` has it."""
    if not result:
        file, distractors, _ = RESULTS[name]
        return (f"No precomputed results for {name} yet: run `python -m unreal_demo bench longcontext "
                f"--distractors {distractors} --out precomputed/{file}` or use the live run below.")
    text = f"Precomputed: {result['setting']}. Command: `{made_by(result)}`"
    if warning := head_mismatch(result, loader):
        text += f"\n\n⚠ {warning}" + evidence_note(result, name, loader)
    return text


def summary_frame(table: list[dict]) -> pd.DataFrame:
    """Every cell of a result, one row each, in the registry's method order (UNREAL first), then length and n (full
    context takes "all" chunks; a bound selects none)."""
    def n(r: dict) -> int | str:
        return r["n"] if r["n"] is not None else "all" if r["method"] == "full" else "—"

    table = sorted(table, key=lambda r: (rank(r["method"]), r.get("length", 0), r["n"] or 0))
    rows = [{"method": r["method"], "length": r["label"], "n": n(r),
             "questions": r["questions"], "EM": r.get("em"), "F1": r["f1"][0] if "f1" in r else None,
             "contained": r.get("contained"), "evidence recall": r.get("recall"),
             "prompt tokens": r.get("prompt_tokens"), "fits window": r["fits"],
             "CPU s / answer": r.get("answer_cpu_s"), "selection CPU s": r.get("retrieval_cpu_s")} for r in table]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def build_tab(loader: Loading) -> Ready:
    shipped = [k for k in RESULTS if load_results(k)] or ["pool"]
    result = load_results(shipped[0])
    table = result["table"] if result else []
    lengths = sorted({r["length"] for r in table}) or [2000]
    gr.Markdown(HOW_TO_READ, elem_classes=["unreal-howto"])
    gr.Markdown("Long prompts as retrieval (paper Section 4): each New-Wiki question's gold paragraph sits at a "
                "fixed depth among real distractor text (Wikipedia summaries, essays, a novel); each retriever "
                "(UNREAL, BM25, …) selects n chunks, the same LLM answers. In the *same-topic* setting the "
                "distractors next to the gold are its own article's other paragraphs and BM25's nearest pool "
                "passages.")
    with gr.Row():
        setting = gr.Radio(shipped, value=shipped[0], label="precomputed run",
                           info="; ".join(f"{k}: {RESULTS[k][2]}" for k in shipped))
        length = gr.Dropdown([label(x) for x in lengths], value=label(min(lengths, key=lambda x: abs(x - 8000))),
                             label="context length")
        metric = gr.Radio(["f1", "em", "contained"], value="f1", label="answer metric")
    about = gr.Markdown(describe_result(result, shipped[0], loader))

    def draw(length_label: str, metric_name: str, rows: list[dict]):
        chosen = next((x for x in sorted({r["length"] for r in rows}) if label(x) == length_label), None)
        shows = " ".join(describe_peak(rows, m, chosen, metric_name) for m in curve_methods(rows)) if chosen else \
            "nothing measured yet."
        return (plots.topn_curve(rows, chosen or 0, metric_name), plots.length_curve(rows, metric_name),
                CAPTION.format(fit=full_context_fit(rows)) + shows)

    first = draw(length.value, "f1", table)
    with gr.Row():
        topn = gr.Plot(first[0], label="accuracy against n", min_width=420)
        by_length = gr.Plot(first[1], label="accuracy against length", min_width=420)
    caption = gr.Markdown(first[2])
    frame = gr.Dataframe(summary_frame(table) if table else None, label="all cells (95% CIs in the JSON)")
    shown = gr.State(table)
    for comp in (length, metric):
        comp.change(draw, [length, metric, shown], [topn, by_length, caption], api_name=False)

    def show_setting(name: str, length_label: str, metric_name: str):
        chosen = load_results(name)
        rows = chosen["table"] if chosen else []
        labels = [label(x) for x in sorted({r["length"] for r in rows})] or [length_label]
        keep = length_label if length_label in labels else labels[0]
        return (describe_result(chosen, name, loader), gr.update(choices=labels, value=keep),
                *draw(keep, metric_name, rows), summary_frame(rows) if rows else None, rows)

    setting.change(show_setting, [setting, length, metric], [about, length, topn, by_length, caption, frame, shown],
                   api_name=False)

    gr.Markdown("### Live run\nRe-runs a small sample on this machine (chunk encodings and answers are cached, so "
                "a repeat is fast; on 2 CPU cores one question at 2K with five n values takes about a minute). Its "
                "result is drawn here, below the precomputed one, which stays as it is.")
    with gr.Row():
        live_length = gr.Dropdown(["2K", "4K", "8K", "16K"], value="2K", label="length")
        live_ns = gr.CheckboxGroup(LIVE_NS, value=[1, 3, 5, 10], label="n values", info=SYMBOLS["n"])
        live_sample = gr.Slider(1, 5, value=1, step=1, label="questions")
        live_distractors = gr.Radio(list(DISTRACTORS), value="pool", label="distractors",
                                    info="; ".join(f"{k}: {v}" for k, v in DISTRACTORS.items()))
    with gr.Row():
        go = gr.Button("Run live sample", variant="primary", interactive=False)
        stop = gr.Button("Stop", variant="stop", min_width=80, scale=0)
    status = gr.Markdown()
    live_plot = gr.Plot(label="live run: accuracy against n (after a run)")
    live_caption = gr.Markdown(elem_id="unreal-live-caption")
    live_frame = gr.Dataframe(pd.DataFrame(columns=SUMMARY_COLUMNS), label="live run: every cell (after a run)",
                              interactive=False)

    def live_steps(length_label: str, ns: list[int], sample: int, metric_name: str, distractors: str, progress,
                   run: Run):
        from ...evaluation.longcontext.contexts import parse_lengths
        from ...evaluation.longcontext.run import run_benchmark

        if not ns:
            raise gr.Error("pick at least one n")
        # nothing of an earlier live run stays
        yield None, "", pd.DataFrame(columns=SUMMARY_COLUMNS), "⏳ running the live sample …"

        def report(f: float, d: str) -> None:
            run.check()  # Stop: the benchmark ends at its next step
            progress(f, desc=d)

        try:
            out = run_benchmark(loader.get(), int(sample), parse_lengths(length_label), sorted(int(n) for n in ns),
                                ("unreal", "bm25", "full"), distractors=distractors, progress=report)
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        rows = out["table"]
        fig, _, text = draw(length_label, metric_name, rows)
        note = f"Live: {out['setting']} — {out['wall_seconds']:.0f} s."
        yield fig, text.replace("**What these data show:**", "**What this live run shows:**"), \
            summary_frame(rows), note

    async def live(length_label: str, ns: list[int], sample: int, metric_name: str, distractors: str = "pool",
                   request: gr.Request = None, progress=gr.Progress()):  # noqa: B008 (Gradio's idiom)
        run = RUNS.begin(request, "topn")
        async for out in stepped(live_steps(length_label, ns, sample, metric_name, distractors, progress, run), run,
                                 lambda: (gr.skip(), gr.skip(), gr.skip(), f"⏹ {run.stopped()}")):
            yield out

    def stop_run(request: gr.Request) -> None:
        RUNS.stop(request, "topn")

    go.click(on_gpu(live, 600), [live_length, live_ns, live_sample, metric, live_distractors],
             [live_plot, live_caption, live_frame, status], api_name="topn", concurrency_limit=1)
    stop.click(stop_run, None, None, api_name="stop_topn", queue=False)
    return Ready(enable=[go])
