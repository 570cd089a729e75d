"""Panel "About the head": its configuration, provenance, loss curve and held-out evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pandas as pd

from .. import plots
from ..pipeline import PRECOMPUTED, Explorer


def build_tab(explorer: Explorer) -> None:
    c = explorer.head.config
    gr.Markdown(f"### Head: `{explorer.head_source}`\n"
                f"{'trained' if c.trained else '**untrained**'} · {explorer.head.n_params():,} parameters · "
                f"ℓc = {c.chunk_layer} of {c.n_layers} · L_p = {c.n_pool} · R = {c.n_ret} · G = {c.n_groups} · "
                f"|C0| = {c.n_context} ({c.context_tokens} tokens each) · P {'on' if c.use_prompt else 'off'} · "
                f"τ = {c.temperature}")
    log_path = Path(explorer.head_source).parent / "train_log.jsonl"
    if log_path.exists():
        log = [json.loads(line) for line in log_path.read_text().splitlines()]
        gr.Plot(plots.loss_curve(log), label="training loss")
    result = PRECOMPUTED / "eval_retrieval.json"
    if result.exists():
        data = json.loads(result.read_text())
        table = pd.DataFrame(data["table"])
        gr.Markdown(f"**Held-out retrieval** — {data['setting']}\n\n`{data['command']}`")
        gr.Dataframe(table)
        gr.Plot(plots.metric_bars(table))
    if c.provenance:
        gr.JSON(c.provenance, label="provenance")
