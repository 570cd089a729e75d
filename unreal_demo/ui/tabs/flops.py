"""Tab "FLOPs & break-even": Eqs. 8–10 for the paper's backbones and the loaded model."""

from __future__ import annotations

import json

import gradio as gr
import numpy as np
import pandas as pd

from ...evaluation import flops
from ...pipeline import Explorer
from ...serving import Loading
from ...settings import CHUNK_TOKENS, PRECOMPUTED
from .. import plots
from ..glossary import SYMBOLS, explain
from ..wiring import Ready

HOW_TO_READ = (
    "**How to read this tab.** When is UNREAL cheaper than reading the whole text? Reading everything costs more "
    "with every token (attention grows with the square of the length); UNREAL pays a fixed price (reading each "
    "chunk up to ℓc once, the retrieval pass, re-reading the n chosen chunks). The left plot shows both costs "
    "against the context length N; they cross at N*, the break-even length. The formulas are the paper's (Eqs. "
    "8–10); move a slider to see N* move. The small print under each slider says "
    "what its symbol means; all are under *Symbols* at the top.")


def table6() -> pd.DataFrame:
    rows = []
    for key, spec in flops.PAPER_BACKBONES.items():
        for n in (5, 10):
            got = flops.n_star(spec, flops.Setting(n=n, x_ret=910))
            rows.append({"backbone": spec.name, "n": n, "κ": f"{spec.kappa:.3g}", "λ": spec.lambda_,
                         "N* (Eq. 10, ours)": round(got), "N* (paper)": flops.TABLE6[(key, n)],
                         "root of Eq. 8": round(flops.n_star_numeric(spec, flops.Setting(n=n, x_ret=910)))})
    return pd.DataFrame(rows)


def measured_ttft() -> pd.DataFrame | None:
    path = PRECOMPUTED / "ttft_breakeven.json"
    return pd.DataFrame(json.loads(path.read_text())["rows"]) if path.exists() else None


def build_tab(loader: Loading) -> Ready:
    specs = {spec.name: spec for spec in flops.PAPER_BACKBONES.values()}
    loaded = f"{loader.model} (loaded)"  # its spec is read from the model's config once it is loaded

    def update(name, n_, T_, c_, r_, tq_, tg_, lc_):
        if name not in specs:
            raise gr.Error(f"{name}: the model is still loading")
        spec = specs[name]
        if name == loaded:
            spec = flops.BackboneSpec(spec.name, spec.theta, spec.n_layers, spec.attn_layers, spec.d_attn,
                                      min(int(lc_), spec.n_layers))
        s = flops.Setting(n=int(n_), T=int(T_), T_q=int(tq_), T_g=int(tg_), n_context=int(c_), n_ret=int(r_))
        lengths = np.logspace(2.5, 6.3, 60)
        full = np.array([flops.flops_full(spec, s, x) for x in lengths])
        unreal = np.array([flops.flops_unreal(spec, s, x) for x in lengths])
        star, root = flops.n_star(spec, s), flops.n_star_numeric(spec, s)
        text = (f"**{spec.name}**: Θ = {spec.theta:.3g}, L = {spec.n_layers}, L_a = {spec.attn_layers}, "
                f"d_a = {spec.d_attn:.0f}, κ = {spec.kappa:.3g}, λ = {spec.lambda_:.3f}, |x_ret| = {s.xret} → "
                f"**N\\* = {star:,.0f}** tokens (Eq. 10); root of Eq. 8 = {root:,.0f}")
        return (text, plots.flops_curves(lengths, full, unreal, star, measured_ttft() if name == loaded else None),
                plots.ratio_curve(lengths, unreal / full))

    # the sliders start from the loaded head's |C0|, R and ℓc (the shipped head's file, read before the model)
    head = loader.head.config if loader.head is not None else None
    c0, r0, l0 = (head.n_context, head.n_ret, head.chunk_layer) if head else (2, 32, 20)
    gr.Markdown(HOW_TO_READ, elem_classes=["unreal-howto"])
    gr.Markdown("Δ = (a) + (b) − (c) − (d) + (e) (Eq. 8): " + "; ".join(f"**({k})** {v}" for k, v in
                                                                       flops.TERMS.items()))
    with gr.Row():
        backbone = gr.Dropdown([*specs, loaded], value=loaded, label="backbone",
                               info="the paper's backbones, or the model loaded here")
        n = gr.Slider(1, 30, value=5, step=1, label="n", info=SYMBOLS["n"])
        T = gr.Slider(32, 512, value=CHUNK_TOKENS, step=1, label="T (chunk tokens)", info=SYMBOLS["T"])
        n_ctx = gr.Slider(0, 10, value=c0, step=1, label="|C0| (loaded head's)", info=SYMBOLS["|C0|"])
        R = gr.Slider(1, 128, value=r0, step=1, label="R (loaded head's)", info=SYMBOLS["R"])
    with gr.Row():
        tq = gr.Slider(1, 1024, value=CHUNK_TOKENS, step=1, label="T_q", info=SYMBOLS["T_q"])
        tg = gr.Slider(1, 1024, value=CHUNK_TOKENS, step=1, label="T_g", info=SYMBOLS["T_g"])
        lc = gr.Slider(1, head.n_layers if head else 64, value=l0, step=1, label="ℓc (loaded model only)",
                       info=SYMBOLS["ℓc"])
    summary = gr.Markdown("The loaded model's FLOPs appear once it is loaded; pick a paper backbone meanwhile.")
    with gr.Row():
        curves = gr.Plot(label="FLOPs against N", min_width=420)
        ratio = gr.Plot(label="FLOP ratio", min_width=420)
    gr.Markdown("*What to look for:* where the UNREAL curve crosses below full context (N*, Eq. 10) and how the "
                "ratio keeps falling with length; on the loaded model the measured time-to-first-token points "
                "show whether FLOPs predict time on this machine.")
    gr.Markdown(f"**Table 6** (T = {CHUNK_TOKENS}, |x_ret| = 910): our Eq. 10 and Eq. 8 root beside the paper's values")
    gr.Markdown(explain("κ", "λ", "|x_ret|", "N*"), elem_classes=["unreal-legend"])
    gr.Dataframe(table6(), interactive=False, wrap=True)
    inputs = [backbone, n, T, n_ctx, R, tq, tg, lc]
    for comp in inputs:
        comp.change(update, inputs, [summary, curves, ratio], api_name=False)

    def fill(explorer: Explorer) -> dict:
        c = explorer.head.config
        specs[loaded] = flops.spec_from_config(explorer.backbone.model.config, c.chunk_layer, explorer.backbone.name)
        text, fig, fig_ratio = update(loaded, 5, CHUNK_TOKENS, c.n_context, c.n_ret, CHUNK_TOKENS, CHUNK_TOKENS,
                                      c.chunk_layer)
        return {summary: text, curves: fig, ratio: fig_ratio, n_ctx: c.n_context, R: c.n_ret,
                lc: gr.update(maximum=specs[loaded].n_layers, value=c.chunk_layer)}

    return Ready(fill=fill, outputs=[summary, curves, ratio, n_ctx, R, lc])
