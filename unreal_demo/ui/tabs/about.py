"""Panel "About the head": its configuration, provenance, loss curve and held-out evaluation."""

from __future__ import annotations

import json

import gradio as gr
import pandas as pd

from ...core.head import QueryHead
from ...evaluation.ablation import read_sweeps
from ...evaluation.results import head_mismatch, made_by
from ...pipeline import Loading
from ...settings import PRECOMPUTED
from .. import plots
from ..wiring import Ready


def describe(head: QueryHead, source: str) -> str:
    c = head.config
    return (f"### Head: `{source}`\n{'trained' if c.trained else '**untrained**'} · {head.n_params():,} parameters · "
            f"ℓc = {c.chunk_layer} of {c.n_layers} · L_p = {c.n_pool} · R = {c.n_ret} · G = {c.n_groups} · "
            f"|C0| = {c.n_context} ({c.context_tokens} tokens each) · P {'on' if c.use_prompt else 'off'} · "
            f"τ = {c.temperature}")


def build_tab(loader: Loading) -> Ready:
    head = gr.Markdown(describe(loader.head, loader.head_source) if loader.head is not None else
                       "### Head: untrained (made for the model once it is loaded)")
    log_path = loader.head_path.parent / "train_log.jsonl" if loader.head_path else None
    if log_path is not None and log_path.exists():
        log = [json.loads(line) for line in log_path.read_text().splitlines()]
        gr.Plot(plots.loss_curve(log), label="training loss")
        gr.Markdown("*What to look for:* the loss (smoothed) against ln |B(x)|, the loss of a uniform guess over "
                    "the candidates; a curve still falling at the end means more steps would help.")
        if any("dev_R@1" in r for r in log):
            config = log_path.parent / "train_config.json"
            n_dev = json.loads(config.read_text()).get("dev_sample") if config.exists() else None
            gr.Plot(plots.dev_curve(log, n_dev), label="dev recall")
            gr.Markdown("*What to look for:* dev R@1 (dev articles, never trained on) against question visits; "
                        "once the curve stays inside its bands, more of the same budget stops helping.")
    choice = PRECOMPUTED / "head_choice.json"
    if choice.exists():
        data = json.loads(choice.read_text())
        gr.Markdown(f"**Which head ships, chosen on the dev split** — {data['setting']}\n\n`{made_by(data)}`\n\n"
                    f"{data['markdown']}\n\nchosen: `{data['chosen']}`")
    for name, title in (("eval_retrieval_newwiki.json", "Held-out retrieval, New-Wiki paragraphs"),
                        ("eval_retrieval.json", "Held-out retrieval, New-Wiki + 10,033 summaries"),
                        ("eval_retrieval_index.json", "Held-out retrieval against the full offline index (chunks)"),
                        ("eval_retrieval_amazon.json", "Out of domain: Amazon reviews (a source never trained on)")):
        result = PRECOMPUTED / name
        if result.exists():
            data = json.loads(result.read_text())
            table = pd.DataFrame(data["table"])
            gr.Markdown(f"**{title}** — {data['setting']}\n\n`{made_by(data)}`")
            if warning := head_mismatch(data, loader):
                gr.Markdown(f"⚠ {warning}", elem_classes=["unreal-notice"])
            gr.Dataframe(table.drop(columns=["key"], errors="ignore"))
            gr.Plot(plots.metric_bars(table))
            gr.Markdown("*What to look for:* UNREAL against BM25 alone, and whether fusing the two beats both.")
    for sweep, data in read_sweeps(PRECOMPUTED / "ablations.json").items():
        gr.Markdown(f"**Ablations on the dev split ({sweep})** — {data['setting']}\n\n`{made_by(data)}`\n\n"
                    + data["markdown"])
    if loader.head is not None and loader.head.config.provenance:
        gr.JSON(loader.head.config.provenance, label="provenance")
    return Ready(fill=lambda explorer: {head: describe(explorer.head, explorer.head_source)}, outputs=[head])
