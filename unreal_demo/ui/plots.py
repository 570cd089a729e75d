"""Plotly figures, as pure functions: data in, figure out (no model, no Gradio)."""

from __future__ import annotations

import colorsys
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from ..evaluation.longcontext.report import ORDER, curve_methods, rank
from ..evaluation.longcontext.report import name as method_name
from ..evaluation.qa import BOUNDS
from ..evaluation.retrieval import estimate
from ..pipeline import Ranking
from ..retrieval.registry import canonical

ACCENT, MUTED = "#e4572e", "#9aa5b1"
CURVE_COLOURS = (ACCENT, "#3d5a80", "#17a398", "#f3a712", "#8e5572", "#5c946e", "#b56576", "#2a9d8f", "#6d597a")


def method_colour(method: str) -> str:
    """One colour per retrieval method, the same in every figure whichever methods a result holds (an old
    spelling as its registry name; a method outside the registry grey)."""
    place = rank(canonical(method))
    return CURVE_COLOURS[place] if place < min(len(ORDER), len(CURVE_COLOURS)) else MUTED


def _preview(text: str, words: int = 12) -> str:
    head = " ".join(text.split()[:words])
    return head + (" …" if len(text.split()) > words else "")


def chunk_scores(ranking: Ranking) -> go.Figure:
    """Bar chart of every chunk's score in document order; the selected chunks highlighted."""
    fig = go.Figure()
    if ranking.scores is None:
        fig.add_annotation(text="full context: every chunk is read, nothing is scored", showarrow=False)
        return fig.update_layout(height=260, margin={"t": 30, "b": 30})
    chosen = set(ranking.selected)
    fig.add_bar(
        x=[c.id for c in ranking.chunks], y=ranking.scores,
        marker_color=[ACCENT if c.id in chosen else MUTED for c in ranking.chunks],
        customdata=[[c.doc, c.tokens, _preview(c.text)] for c in ranking.chunks],
        hovertemplate="chunk %{x} (doc %{customdata[0]}, %{customdata[1]} tokens)<br>"
                      "score %{y:.3f}<br>%{customdata[2]}<extra></extra>",
    )
    label = "MaxSim score (Eq. 4)" if ranking.method == "unreal" else f"{ranking.method.upper()} score"
    return fig.update_layout(
        title=f"{label} per chunk, document order — top {len(chosen)} in colour",
        xaxis_title="chunk", yaxis_title="score", height=300, margin={"t": 50, "b": 40}, bargap=0.1,
    )


def group_heatmap(ranking: Ranking) -> go.Figure:
    """Query-group × pooled-vector similarities ⟨q_g, k_{i,p}⟩ for the top chunks, side by side (a ranking with
    ``group_sims``: UNREAL's)."""
    fig = go.Figure()
    ids = list(ranking.group_sims)
    n_pool = len(ranking.group_sims[ids[0]][0])
    z = [sum((ranking.group_sims[i][g] for i in ids), []) for g in range(len(ranking.group_sims[ids[0]]))]
    x = [f"c{i}·p{p + 1}" for i in ids for p in range(n_pool)]
    fig.add_heatmap(z=z, x=x, y=[f"q{g + 1}" for g in range(len(z))], colorscale="Viridis",
                    hovertemplate="%{y} × %{x}: %{z:.3f}<extra></extra>")
    for j in range(1, len(ids)):
        fig.add_vline(x=j * n_pool - 0.5, line_color="white", line_width=3)
    return fig.update_layout(title="⟨q_g, k_i,p⟩ for the top chunks (max over p, summed over g = score)",
                             height=280, margin={"t": 50, "b": 40})


def loss_curve(log: Sequence[dict], window: int = 20) -> go.Figure:
    """Training loss per step with a moving average."""
    df = pd.DataFrame(log)
    fig = go.Figure()
    if df.empty:
        fig.add_annotation(text="no training log", showarrow=False)
        return fig
    fig.add_scatter(x=df["step"], y=df["loss"], mode="lines", name="loss", line={"color": MUTED})
    fig.add_scatter(x=df["step"], y=df["loss"].rolling(window, min_periods=1).mean(), mode="lines",
                    name=f"mean of {window}", line={"color": ACCENT, "width": 3})
    return fig.update_layout(title="InfoNCE loss (Eq. 6)", xaxis_title="step", yaxis_title="loss", height=320)


def dev_curve(log: Sequence[dict], questions: int | None = None) -> go.Figure:
    """Dev R@1 and R@10 against question visits (the log's ``dev_R@k`` rows), 95% Wilson bands when the
    number of dev questions is known: where the curve flattens within its bands, more budget stops paying."""
    from ..evaluation.retrieval import wilson

    rows = [r for r in log if "dev_R@1" in r]
    fig = go.Figure()
    if not rows:
        fig.add_annotation(text="no dev evaluation in this log", showarrow=False)
        return fig
    xs = [r["visits"] for r in rows]
    for metric, colour in (("dev_R@1", ACCENT), ("dev_R@10", "#3d5a80")):
        ys = [r[metric] for r in rows]
        if questions:
            _band(fig, xs, [{metric: y, f"{metric}_ci": wilson(y, questions)} for y in ys], metric, colour, metric)
        fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=metric.removeprefix("dev_"), line={"color": colour})
    band = f"; bands: 95% intervals over {questions} dev questions" if questions else ""
    return fig.update_layout(title=f"Dev recall against question visits{band}", xaxis_title="question visits",
                             yaxis_title="recall", yaxis_range=[0, 1], height=320)


def metric_bars(table: pd.DataFrame, metrics: Sequence[str] = ("R@1", "R@10"),
                title: str = "held-out retrieval") -> go.Figure:
    """Grouped bars of metrics in [0, 1] per method (rows of ``table``, a ``method`` column)."""
    fig = go.Figure()
    for m in metrics:
        if m in table:
            fig.add_bar(name=m, x=table["method"], y=table[m])
    return fig.update_layout(barmode="group", height=320, yaxis_range=[0, 1], title=title)


def flops_curves(lengths: Sequence[float], full: Sequence[float], unreal: Sequence[float], n_star: float,
                 measured: pd.DataFrame | None = None) -> go.Figure:
    """FLOPs against context length N (log–log) for both pipelines, N* marked; measured TTFT overlaid."""
    fig = go.Figure()
    fig.add_scatter(x=list(lengths), y=list(full), name="full context (FLOPs)", line={"color": MUTED, "width": 3})
    fig.add_scatter(x=list(lengths), y=list(unreal), name="UNREAL (FLOPs)", line={"color": ACCENT, "width": 3})
    fig.add_vline(x=n_star, line_dash="dash", annotation_text=f"N* = {n_star:,.0f}")
    if measured is not None and not measured.empty:
        for method, color in (("full", MUTED), ("unreal", ACCENT)):
            part = measured[measured["method"] == method]
            fig.add_scatter(x=part["tokens"], y=part["ttft_s"], name=f"{method} TTFT (s, measured)", yaxis="y2",
                            mode="markers+lines", line={"color": color, "dash": "dot"})
        fig.update_layout(yaxis2={"title": "measured TTFT (s)", "type": "log", "overlaying": "y", "side": "right"})
    # the legend goes below the plot, clear of the measured-TTFT axis on the right and of the x-axis title
    return fig.update_layout(xaxis={"type": "log", "title": "context tokens N"},
                             yaxis={"type": "log", "title": "FLOPs"}, height=440, title="Eq. 8 cost model",
                             legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0},
                             margin={"t": 50, "b": 40})


def ratio_curve(lengths: Sequence[float], ratio: Sequence[float]) -> go.Figure:
    """FLOPs(UNREAL) / FLOPs(full) against N; below 1 UNREAL is cheaper."""
    fig = go.Figure()
    fig.add_scatter(x=list(lengths), y=list(ratio), line={"color": ACCENT, "width": 3}, name="UNREAL / full")
    fig.add_hline(y=1.0, line_dash="dash")
    return fig.update_layout(xaxis={"type": "log", "title": "context tokens N"},
                             yaxis={"type": "log", "title": "FLOP ratio"}, height=320, title="UNREAL / full context")


def layer_curves(result: dict, k: int = 1) -> go.Figure:
    """Benchmark recall@k of the gold chunk by layer: q/k (best head, mean over heads), residual, references."""
    fig = go.Figure()
    layers = result["layers"]
    styles = {"separate": "solid", "joint": "dot"}
    for name, curve in result["curves"].items():
        mode, view = name.split("/")
        keys = [f"R@{k}"] if view == "resid" else [f"R@{k} best head", f"R@{k} mean over heads"]
        for key in keys:
            fig.add_scatter(x=layers, y=curve[key], mode="lines", name=f"{mode} · {view} · {key}",
                            line={"dash": styles[mode]}, visible=True if "best" in key or view == "resid"
                            else "legendonly")
    # each reference's label at its own end of the line, so that two equal values (bm25 and unreal at 1.00) do
    # not print over each other
    for ref, color, where in (("random", "#666", "bottom right"), ("bm25", "#2e86ab", "top left"),
                              ("unreal", ACCENT, "top right")):
        fig.add_hline(y=result["references"][ref][f"R@{k}"], line_dash="dash", line_color=color,
                      annotation_text=f"{ref} {result['references'][ref][f'R@{k}']:.2f}", annotation_position=where)
    return fig.update_layout(title=f"gold chunk recall@{k} by layer ({result['sample']} held-out questions)",
                             xaxis_title="layer", yaxis_title=f"recall@{k}", yaxis_range=[0, 1], height=420)


def colour_name(colour: str) -> str:
    """A plain name for a ``#rrggbb`` colour, for captions: ``"yellow"``, ``"dark purple"``, ``"light green"``.

    >>> colour_name("#fde725"), colour_name("#440154"), colour_name("#21918c")
    ('yellow', 'dark purple', 'teal')
    """
    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    hue, light, saturation = colorsys.rgb_to_hls(r, g, b)
    if saturation < 0.15:
        return "black" if light < 0.2 else "white" if light > 0.85 else "grey"
    names = ((15, "red"), (40, "orange"), (70, "yellow"), (160, "green"), (200, "teal"), (255, "blue"),
             (330, "purple"), (360, "red"))
    name = next(n for top, n in names if hue * 360 < top)
    return f"dark {name}" if light < 0.3 else f"light {name}" if light > 0.8 else name


def scale_ends(fig: go.Figure) -> tuple[str, str]:
    """The colours of the lowest and of the highest value in the first trace of ``fig`` (its colour scale as drawn,
    reversed or not), by :func:`colour_name`: what a caption says about the figure's colours comes from here."""
    scale = fig.data[0].colorscale
    return colour_name(scale[0][1]), colour_name(scale[-1][1])


def layer_head_heatmap(z, title: str, label: str = "rank", reverse: bool = True) -> go.Figure:
    """Layer × head heatmap (e.g. a chunk's rank, 1 = top, or benchmark recall)."""
    fig = go.Figure()
    fig.add_heatmap(z=z, x=[f"h{h + 1}" for h in range(len(z[0]))], y=list(range(1, len(z) + 1)),
                    colorscale="Viridis_r" if reverse else "Viridis",
                    hovertemplate=f"layer %{{y}}, %{{x}}: {label} %{{z:.3g}}<extra></extra>")
    return fig.update_layout(title=title, xaxis_title="query head", yaxis_title="layer", height=460)


def layer_chunk_heatmap(z, title: str) -> go.Figure:
    """Layer × chunk heatmap of scores, the best chunk of each layer marked."""
    fig = go.Figure()
    fig.add_heatmap(z=z, y=list(range(1, len(z) + 1)), colorscale="Viridis",
                    hovertemplate="layer %{y}, chunk %{x}: %{z:.3f}<extra></extra>")
    best = [max(range(len(row)), key=row.__getitem__) for row in z]
    fig.add_scatter(x=best, y=list(range(1, len(z) + 1)), mode="markers", name="best chunk",
                    marker={"symbol": "x", "color": "white", "size": 8})
    return fig.update_layout(title=title, xaxis_title="chunk", yaxis_title="layer", height=460, showlegend=False)


def _metric(row: dict, metric: str) -> float | None:
    value = estimate(row, metric)
    return None if value is None else value[0]


def _rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _band(fig: go.Figure, xs: Sequence[float], rows: Sequence[dict], metric: str, colour: str, name: str) -> None:
    """Shade the 95% interval of ``metric`` over ``xs`` (nothing when the rows carry no interval)."""
    spans = [estimate(r, metric) for r in rows]
    if not spans or any(s is None or s[1] is None for s in spans):
        return
    fig.add_scatter(x=[*xs, *xs[::-1]], y=[s[2] for s in spans] + [s[1] for s in spans][::-1], fill="toself",
                    mode="lines", fillcolor=_rgba(colour, 0.15), line={"width": 0}, hoverinfo="skip",
                    showlegend=False, name=f"{name} 95% interval")  # lines: no marker at the band's corners


def topn_curve(table: Sequence[dict], length: int, metric: str = "f1") -> go.Figure:
    """The inverted U: answer ``metric`` against n for each measured method (UNREAL, BM25, …) at one length,
    evidence recall dotted."""
    fig = go.Figure()
    for method in curve_methods(list(table)):
        colour = method_colour(method)
        rows = sorted((r for r in table if r["method"] == method and r["length"] == length and metric in r),
                      key=lambda r: r["n"])
        if not rows:
            continue
        name = method_name(method)
        _band(fig, [r["n"] for r in rows], rows, metric, colour, name)
        fig.add_scatter(x=[r["n"] for r in rows], y=[_metric(r, metric) for r in rows], mode="lines+markers",
                        name=f"{name} {metric} (band: 95% interval)", line={"color": colour})
        fig.add_scatter(x=[r["n"] for r in rows], y=[r["recall"] for r in rows], mode="lines", yaxis="y2",
                        name=f"{name} evidence recall@n", line={"color": colour, "dash": "dot"})
    for method, text, where in (("full", "full context", "top left"), ("none", BOUNDS["none"], "bottom right"),
                                ("oracle", BOUNDS["oracle"], "top right")):  # labels apart: the lines may be close
        flat = [r for r in table if r["method"] == method and r["length"] == length and metric in r]
        if flat:
            fig.add_hline(y=_metric(flat[0], metric), line_dash="dash" if method == "full" else "dashdot",
                          line_color=MUTED, annotation_text=text, annotation_position=where)
    return fig.update_layout(
        title=f"Answer {metric} against n at {length:,} tokens", xaxis_title="n (chunks selected)",
        xaxis_type="log", yaxis_title=metric, yaxis2={"title": "evidence recall@n", "overlaying": "y",
                                                      "side": "right", "range": [0, 1.05]},
        height=360, margin={"t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})


def length_curve(table: Sequence[dict], metric: str = "f1") -> go.Figure:
    """Best-n ``metric`` of each measured method (UNREAL, BM25, …), and full context where it fits, against context
    length."""
    fig = go.Figure()
    curves = [(m, method_colour(m), f"{method_name(m)} (best n)") for m in curve_methods(list(table))]
    for method, colour, name in [*curves, ("full", MUTED, "full context")]:
        best: dict[int, dict] = {}
        for r in table:
            if r["method"] == method and metric in r and (
                    r["length"] not in best or _metric(r, metric) > _metric(best[r["length"]], metric)):
                best[r["length"]] = r
        xs = sorted(best)
        if xs:
            fig.add_scatter(x=xs, y=[_metric(best[x], metric) for x in xs], mode="lines+markers", name=name,
                            line={"color": colour}, customdata=[best[x]["n"] for x in xs],
                            hovertemplate="%{x:,} tokens: %{y:.3f} (n=%{customdata})<extra></extra>")
    return fig.update_layout(title=f"Answer {metric} against context length", xaxis_type="log",
                             xaxis_title="context tokens", yaxis_title=metric, height=360,
                             margin={"t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})


def qa_curves(table: Sequence[dict], metric: str = "contained", source: str = "from the index") -> go.Figure:
    """Downstream QA ``metric`` against k for each retriever, 95% bands; the two bounds as flat lines.

    ``source`` says where the k chunks come from (the x-axis title)."""
    fig = go.Figure()
    for key in dict.fromkeys(r["key"] for r in table if r.get("k")):
        rows = sorted((r for r in table if r["key"] == key and r.get("k")), key=lambda r: r["k"])
        xs, colour = [r["k"] for r in rows], method_colour(key)
        _band(fig, xs, rows, metric, colour, rows[0]["method"])
        fig.add_scatter(x=xs, y=[_metric(r, metric) for r in rows], mode="lines+markers", name=rows[0]["method"],
                        line={"color": colour})
    for r in table:
        if not r.get("k"):
            fig.add_hline(y=_metric(r, metric), line_dash="dash", line_color=MUTED, annotation_text=r["method"])
    return fig.update_layout(title=f"Downstream QA: answer {metric} against k (bands: 95% intervals)",
                             xaxis_title=f"k (chunks {source})", xaxis_type="log", yaxis_title=metric,
                             yaxis_rangemode="tozero", height=380, margin={"t": 50, "b": 40},
                             legend={"orientation": "h", "y": -0.25})


def compare_methods(rankings: Sequence[Ranking]) -> go.Figure:
    """Every chunk's score under each method, min–max normalised per method (document order); the chunks each
    method selected are drawn as large markers."""
    fig = go.Figure()
    colours = ["#e4572e", "#29335c", "#17a398", "#f3a712", "#8e5572"]
    for ranking, colour in zip(rankings, colours, strict=False):
        if ranking.scores is None:
            continue
        low, high = min(ranking.scores), max(ranking.scores)
        y = [(s - low) / (high - low) if high > low else 0.5 for s in ranking.scores]
        chosen = set(ranking.selected)
        fig.add_scatter(x=[c.id for c in ranking.chunks], y=y, mode="lines+markers", name=ranking.method,
                        line={"color": colour, "width": 1},
                        marker={"color": colour, "size": [11 if c.id in chosen else 3 for c in ranking.chunks]},
                        customdata=[[ranking.scores[c.id], _preview(c.text)] for c in ranking.chunks],
                        hovertemplate=f"{ranking.method}: chunk %{{x}}, score %{{customdata[0]:.3f}}<br>"
                                      "%{customdata[1]}<extra></extra>")
    return fig.update_layout(title="Each method's score per chunk (normalised per method); large markers: selected",
                             xaxis_title="chunk (document order)", yaxis_title="normalised score", height=340,
                             margin={"t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})
