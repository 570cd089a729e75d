"""Tab "Wikipedia": build or load a corpus index, search it with UNREAL / BM25 / hybrid, answer from the top 5."""

from __future__ import annotations

import threading
import time

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from .. import index as ix
from ..backbone import cache_dir
from ..data import load_corpus
from ..generation import prompt_ids, stream_answer
from ..pipeline import Explorer, InputError
from .gpu import on_gpu

CORPORA = {"new_wiki": "SQuAD-Shifts New-Wiki paragraphs (1,581)", "squad_dev": "SQuAD v1.1 dev paragraphs (2,067)",
           "summaries": "Wikipedia lead summaries (10,033)", "all": "all of the above (13,681)"}


def build_tab(explorer: Explorer) -> None:
    state: dict[str, ix.Index] = {}
    lock = threading.Lock()
    gr.Markdown("Exact MaxSim over every chunk of an offline Wikipedia index (Eq. 4). The index stores chunk "
                "states at ℓc only, so it does not depend on the trained head. Building encodes every chunk "
                "once (about 650 tokens/s on 2 CPU cores: New-Wiki ≈ 6 min, all ≈ 45 min) and resumes if stopped.")
    with gr.Row():
        corpus = gr.Dropdown(list(CORPORA), value="new_wiki", label="corpus", info="; ".join(
            f"{k}: {v}" for k, v in CORPORA.items()))
        load = gr.Button("Build or load index")
        status = gr.Markdown()
    with gr.Row():
        query = gr.Textbox(label="Query", scale=3)
        k = gr.Slider(1, 50, value=10, step=1, label="k")
        method = gr.Radio(["unreal", "bm25", "hybrid"], value="unreal", label="method")
        go_btn = gr.Button("Search", variant="primary")
    chart = gr.Plot()
    gr.Markdown("*What to look for:* a large gap between the first hit and the rest marks a confident match; "
                "compare the BM25 rank column to see where UNREAL and lexical matching disagree.")
    table = gr.Dataframe(wrap=True)
    answer_btn = gr.Button("Answer from the top 5")
    answer = gr.Textbox(label="Answer (streamed)", lines=3)

    def folder(name: str):
        c = explorer.head.config
        return cache_dir() / "indexes" / f"{explorer.backbone.name.replace('/', '_')}-l{c.chunk_layer}-{name}"

    def open_index(name: str, progress=gr.Progress()):  # noqa: B008 (Gradio's idiom)
        path = folder(name)
        with lock:
            try:
                state[name] = ix.Index(path, verify=False)
                return f"loaded {state[name].manifest['chunks']:,} chunks from `{path}`"
            except ix.IndexStoreError:
                pass
            t0 = time.perf_counter()
            c = explorer.head.config
            ix.build_index(path, explorer.backbone, load_corpus([name]), c.chunk_layer, c.n_pool,
                           progress=lambda d, t: progress(d / t, desc=f"encoding chunks {d:,}/{t:,}"))
            state[name] = ix.Index(path)
        return f"built {state[name].manifest['chunks']:,} chunks in {time.perf_counter() - t0:.0f} s at `{path}`"

    def do_search(q: str, k_: float, m: str, name: str = "new_wiki"):
        if not q or not q.strip():
            raise gr.Error("the query is empty")
        if name not in state:
            raise gr.Error(f"no index loaded for {name}: press 'Build or load index' first")
        try:
            result = ix.search(state[name], explorer, q, int(k_), m)
        except (ix.IndexStoreError, InputError, ValueError) as exc:
            raise gr.Error(str(exc)) from None
        bm25_rank = {h["id"]: h["rank"] for h in ix.search(state[name], explorer, q, 100, "bm25")["hits"]}
        rows = [{"rank": h["rank"], "title": h["title"], "score": h["score"], "BM25 rank": bm25_rank.get(h["id"]),
                 "passage": h["text"].strip()} for h in result["hits"]]
        fig = go.Figure(go.Bar(x=[f"{h['rank']}. {h['title'][:24]}" for h in result["hits"]],
                               y=[h["score"] for h in result["hits"]], marker_color="#e4572e"))
        fig.update_layout(title=f"top {len(rows)} by {m} — query {result['timings'].get('query_encoding', 0):.2f} s,"
                                f" scan {result['timings'].get('scan', 0):.3f} s", height=300)
        return fig, pd.DataFrame(rows)

    def do_answer(q: str, rows: pd.DataFrame):
        if rows is None or len(rows) == 0:
            raise gr.Error("search first")
        ids = prompt_ids(explorer.backbone, list(rows["passage"][:5]), q)
        for gen in stream_answer(explorer.backbone, ids):
            yield gen.text

    load.click(open_index, corpus, status, api_name=False)
    go_btn.click(on_gpu(do_search), [query, k, method, corpus], [chart, table], api_name="search")
    answer_btn.click(on_gpu(do_answer), [query, table], answer, api_name=False)
