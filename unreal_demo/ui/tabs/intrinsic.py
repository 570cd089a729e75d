"""Tab "Intrinsic retrieval by layer": live q/k scores of a chosen chunk, and the precomputed benchmark."""

from __future__ import annotations

import json

import gradio as gr

from ...errors import UserError
from ...evaluation.intrinsic import live_scores
from ...evaluation.results import made_by
from ...pipeline import Explorer
from ...serving import Loading
from ...settings import PRECOMPUTED
from .. import plots
from ..examples import load_examples
from ..gpu import on_gpu
from ..wiring import RUNS, Ready, stepped

HOW_TO_READ = (
    "**How to read this tab.** Does the model, untrained, already know where the answer is? Every layer × attention "
    "head of the frozen model scores each chunk by how well the question's attention queries match the chunk's "
    "keys. The heatmaps show where each layer × head ranks the chunk that holds the answer; the benchmark above "
    "shows the same over many questions. This is what guides the choice of ℓc, the layer where chunks are read.")
SHORT = {"label": "Short: capital of France", "question": "What is the capital of France?",  # four chunks
         "text": "The fox jumps over the lazy dog and runs into the green field behind the old barn. " * 7 +
         "Paris is the capital of France, and its largest city, on the river Seine. " * 4 +
         "Rain fell on the hills all week, and the farmers waited for the sun to return. " * 7 +
         "A small boat crossed the quiet lake at dawn while the birds sang in the tall reeds. " * 7}


def rank_caption() -> str:
    """The caption of the live rank heatmap, its colours read from the colour scale
    :func:`plots.layer_head_heatmap` draws ranks with (rank 1 is the lowest value)."""
    first, last = plots.scale_ends(plots.layer_head_heatmap([[1, 2]], "ranks"))
    return (f"*What to look for:* {first} cells are layer × head pairs that rank the answer chunk first (rank 1); "
            f"the more {last} a cell, the lower that head ranks it.")


def recall_caption() -> str:
    """The caption of the benchmark's recall heatmap, its colours read from the colour scale it is drawn with."""
    low, high = plots.scale_ends(plots.layer_head_heatmap([[0.0, 1.0]], "recall", reverse=False))
    return (f"*What to look for:* {high} cells are heads that put the gold chunk first often, {low} cells rarely; "
            "a few heads carry the retrieval signal, and the mean over heads hides them.")


def build_tab(loader: Loading) -> Ready:
    gr.Markdown(HOW_TO_READ, elem_classes=["unreal-howto"])
    examples = [e for e in load_examples() if e["label"].startswith("Needle")] + [SHORT]
    with gr.Row(elem_classes=["unreal-examples"]):
        gr.Markdown("**Examples:**", elem_classes=["unreal-examples-label"])
        buttons = [gr.Button(e["label"], size="sm", interactive=False) for e in examples]
    result_path = PRECOMPUTED / "intrinsic.json"
    if result_path.exists():
        result = json.loads(result_path.read_text())
        gr.Markdown(f"**Benchmark** — {result['setting']}; `{made_by(result)}`")
        with gr.Row():
            gr.Plot(plots.layer_curves(result, 1))
            gr.Plot(plots.layer_curves(result, 5))
        gr.Markdown("*What to look for:* layers whose curves rise well above the random line retrieve without "
                    "any training; the residual view (cosine of mean states) is what guides the choice of ℓc; "
                    "separate vs joint shows what cross-chunk attention adds.")
        gr.Plot(plots.layer_head_heatmap(result["curves"]["separate/qk_post"]["R@1 by head"],
                                         "benchmark recall@1 by layer × head (separate, post-rotary)",
                                         label="recall@1", reverse=False))
        gr.Markdown(recall_caption())
    with gr.Row():
        text = gr.Textbox(label="Context", lines=8, value=examples[0]["text"])
        with gr.Column():
            question = gr.Textbox(label="Question", value=examples[0]["question"])
            mode = gr.Radio(["separate", "joint"], value="separate", label="reading",
                            info="separate: each chunk alone (as the index); joint: one pass, question after")
            side = gr.Radio(["qk_post", "qk_pre"], value="qk_post", label="keys/queries",
                            info="after or before the rotary embedding")
            target = gr.Number(value=-1, precision=0, label="answer chunk id (-1: BM25's top chunk)",
                               info="chunks are numbered from 0 in document order; the plots show where each "
                                    "layer × head ranks this one")
            with gr.Row():
                run = gr.Button("Score every layer and head", variant="primary", interactive=False)
                stop = gr.Button("Stop", variant="stop", min_width=80)
    heat = gr.Plot(label="Rank of the answer chunk by layer × head (after a run)")
    gr.Markdown(rank_caption(), elem_id="unreal-rank-caption")
    chunk_heat = gr.Plot(label="Chunk scores by layer (after a run)")
    low, high = plots.scale_ends(plots.layer_chunk_heatmap([[0.0, 1.0]], "scores"))
    gr.Markdown(f"*What to look for:* × marks each layer's best chunk (scores z-normalised per head, then averaged "
                f"over heads; {high}: high, {low}: low); a column of × on the answer chunk means many layers agree.")
    depth = loader.head.config.n_layers if loader.head is not None else 30  # the model's, once it is loaded
    layer = gr.Slider(1, depth, value=depth * 2 // 3, step=1, label="layer: show its top chunk")
    info = gr.Markdown()
    top_text = gr.Markdown()
    last = gr.State({})  # per user: the chunk texts and layer × chunk scores of the last run

    async def score(doc: str, q: str, m: str, view: str, chunk_id: float | None, at_layer: float,
                    request: gr.Request = None):
        """The scores, computed in a worker thread whose wait Stop abandons at once (:func:`wiring.stepped`)."""
        run = RUNS.begin(request, "by-layer")
        async for out in stepped(score_steps(doc, q, m, view, chunk_id, at_layer), run,
                                 lambda: (gr.skip(),) * 5):
            yield out

    def score_steps(doc: str, q: str, m: str, view: str, chunk_id: float | None, at_layer: float):
        """Every panel emptied first (nothing of an earlier context stays beside this one's), then the scores."""
        yield None, None, "⏳ scoring every layer and head …", "", {}
        try:
            s = live_scores(loader.get(), doc, q, m, view, chunk_id)  # checks the id (an empty box: None)
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        cid, best = s.chunk, min(min(row) for row in s.ranks)
        mine = {"chunks": s.chunks, "z": s.z}
        text = (f"chunk {cid} of {len(s.chunks)}: “{' '.join(s.chunks[cid].split()[:16])} …” — best rank "
                f"{best} (layer × head); residual-stream rank by layer: {s.resid}")
        yield (plots.layer_head_heatmap(s.ranks, f"rank of chunk {cid} ({m}, {view})"),
                plots.layer_chunk_heatmap(s.z, f"chunk scores by layer ({m}, {view}, mean over heads)"),
                text, top_chunk(at_layer, mine), mine)

    def top_chunk(at: float, mine: dict) -> str:
        if not mine:
            return ""
        row = mine["z"][int(at) - 1]
        best = max(range(len(row)), key=row.__getitem__)
        return f"**layer {int(at)}** ranks chunk {best} first:\n\n> {mine['chunks'][best].strip()}"

    outputs = [heat, chunk_heat, info, top_text, last]
    running = [run.click(on_gpu(score), [text, question, mode, side, target, layer], outputs, api_name="intrinsic")]
    for button, e in zip(buttons, examples, strict=True):
        running.append(button.click(lambda e=e: (e["text"], e["question"], -1), None, [text, question, target],
                                    api_name=False, queue=False)
                       .then(on_gpu(score), [text, question, mode, side, target, layer], outputs, api_name=False))
    stop.click(None, None, None, cancels=running, api_name=False)
    layer.change(top_chunk, [layer, last], top_text, api_name=False)

    def fill(explorer: Explorer) -> dict:
        n = explorer.backbone.n_layers
        return {layer: gr.update(maximum=n, value=min(layer.value, n))}

    return Ready(enable=[run, *buttons], fill=fill, outputs=[layer])
