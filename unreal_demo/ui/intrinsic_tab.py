"""Tab "Intrinsic retrieval by layer": live q/k scores of a chosen chunk, and the precomputed benchmark."""

from __future__ import annotations

import json

import gradio as gr

from .. import plots
from ..backbone import BackboneError
from ..intrinsic import gold_rank, intrinsic_scores
from ..pipeline import PRECOMPUTED, Explorer, InputError, check_inputs
from .long_document import load_examples


def build_tab(explorer: Explorer) -> None:
    gr.Markdown("Untrained retrieval inside the frozen model (Appendix A.2.1): score_i = ⟨mean query of the "
                "question, mean key of chunk i⟩ per layer and head. Pick the chunk that holds the answer and see "
                "where each layer × head ranks it.")
    result_path = PRECOMPUTED / "intrinsic.json"
    if result_path.exists():
        result = json.loads(result_path.read_text())
        gr.Markdown(f"**Benchmark** — {result['setting']}; `{result['command']}`")
        with gr.Row():
            gr.Plot(plots.layer_curves(result, 1))
            gr.Plot(plots.layer_curves(result, 5))
    examples = load_examples()
    with gr.Row():
        text = gr.Textbox(label="Context", lines=8, value=examples[1][0] if len(examples) > 1 else "")
        with gr.Column():
            question = gr.Textbox(label="Question", value=examples[1][1] if len(examples) > 1 else "")
            mode = gr.Radio(["separate", "joint"], value="separate", label="reading",
                            info="separate: each chunk alone (as the index); joint: one pass, question after")
            side = gr.Radio(["qk_post", "qk_pre"], value="qk_post", label="keys/queries",
                            info="after or before the rotary embedding")
            target = gr.Number(value=-1, precision=0, label="answer chunk id (-1: BM25's top chunk)")
            run = gr.Button("Score every layer and head", variant="primary")
    heat = gr.Plot()
    info = gr.Markdown()

    def score(doc: str, q: str, m: str, view: str, chunk_id: float):
        try:
            check_inputs([doc], q, max_chars=60_000)
            chunks = explorer.chunk([doc])
            if len(chunks) > 64:
                raise InputError(f"{len(chunks)} chunks: the live view takes at most 64 (about 9K tokens)")
            cid = int(chunk_id)
            if cid < 0:
                cid = explorer.rank([doc], q, 1, "bm25", chunks=chunks).selected[0]
            if cid >= len(chunks):
                raise InputError(f"chunk id {cid} does not exist (0..{len(chunks) - 1})")
            s = intrinsic_scores(explorer.backbone, [c.text for c in chunks], q, m)
            ranks = gold_rank(getattr(s, view), {cid})
            resid = gold_rank(s.resid, {cid}).tolist()
            best = int(ranks.min())
            text = (f"chunk {cid} of {len(chunks)}: “{' '.join(chunks[cid].text.split()[:16])} …” — best rank {best}"
                    f" (layer × head); residual-stream rank by layer: {resid}")
            return plots.rank_heatmap(ranks.tolist(), f"rank of chunk {cid} ({m}, {view})"), text
        except (InputError, BackboneError) as exc:
            raise gr.Error(str(exc)) from None

    run.click(score, [text, question, mode, side, target], [heat, info], api_name="intrinsic")
