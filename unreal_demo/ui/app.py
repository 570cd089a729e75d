"""Build the Blocks app from an :class:`~unreal_demo.pipeline.Explorer`."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ..pipeline import Explorer
from .tabs import about as about_head
from .tabs import flops as flops_tab
from .tabs import intrinsic as intrinsic_tab
from .tabs import long_document
from .tabs import topn as topn_tab
from .tabs import wikipedia as wikipedia_tab

CSS = (Path(__file__).resolve().parents[2] / "assets" / "style.css").read_text()


def build_demo(explorer: Explorer) -> gr.Blocks:
    """The UNREAL Explorer app; the model and head are shared read-only by every session."""
    with gr.Blocks(title="UNREAL Explorer") as demo:
        gr.Markdown(f"# UNREAL Explorer\nA frozen LLM selects its own evidence: chunks are encoded up to "
                    f"layer ℓc, scored by MaxSim against a tiny trained query side, and the top-n go back to "
                    f"the same model. Model: `{explorer.backbone.name}` on {explorer.backbone.device}.",
                    elem_classes=["unreal-header"])
        with gr.Tab("Long document"):
            long_document.build_tab(explorer)
        with gr.Tab("Wikipedia"):
            wikipedia_tab.build_tab(explorer)
        with gr.Tab("Top-n trade-off"):
            topn_tab.build_tab(explorer)
        with gr.Tab("Intrinsic retrieval by layer"):
            intrinsic_tab.build_tab(explorer)
        with gr.Tab("FLOPs & break-even"):
            flops_tab.build_tab(explorer)
        with gr.Tab("About the head"):
            about_head.build_tab(explorer)
    demo.queue(default_concurrency_limit=2, max_size=32)
    return demo
