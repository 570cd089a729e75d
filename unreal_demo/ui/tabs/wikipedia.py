"""Tab "Wikipedia": build or load a corpus index, search it with any method next to BM25, answer from the
top 5, and the downstream QA tables (the paper's Table 1 on our data: top-k from the index, and top-n of
same-topic contexts)."""

from __future__ import annotations

import html
import json

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from ...errors import UserError
from ...evaluation.longcontext.report import qa_table
from ...evaluation.qa import BOUNDS
from ...evaluation.results import head_mismatch, made_by
from ...pipeline import BuildProgress, Explorer, check_search
from ...retrieval.registry import names, unsupported
from ...serving import (
    BORROWED_METHODS,
    CORPORA,
    Loading,
    StoreInfo,
    Stores,
    borrowed_index,
    borrowed_note,
    index_state,
    store_filter,
)
from ...settings import DEFAULT_MODEL, MAX_TOKENS, PRECOMPUTED, SECOND_MODEL, TOKENS_PER_S, display_path
from ...store.index import IndexStoreError
from .. import plots
from ..answer_check import ANSWER_LABEL, PLACEHOLDER, check_html, checked, prefill_html
from ..evidence import hits_html, title_text
from ..gpu import on_gpu
from ..wiring import RUNS, Once, Ready, Run, Stopped, stepped

HIT_COLUMNS = ["rank", "title", "score", "BM25 rank", "passage"]
METHOD_INFO = ("unreal: the trained head (MaxSim); bm25: word matching; dense: sentence vectors; sparse: token "
               "states; hybrid: UNREAL and BM25 merged; upr: UNREAL's top 10 re-read by the LLM (slow)")
EXAMPLE_QUERIES = {  # held-out questions whose gold passage is in the index ("all"), and one SQuAD dev question
    "Tesla: year he moved to the US": "In what year did Tesla move to the United States?",
    "US flag: fringe first used": "When did the Army first use fringe on a flag?",
    "Ice hockey: puck speed": "Hockey pucks approach goaltenders at upwards of what speed?",
}
HOW_TO_READ = (
    "**How to read this tab.** Search a fixed offline collection of Wikipedia passages (not the live web) with "
    "any method, next to BM25 (classic word matching). The chart shows the scores of the top k hits; the two "
    "tables put the chosen method's hits beside BM25's, with where BM25 ranked each; the cards show the top 5 "
    "hits with what matched shaded. *Answer from the top 5* gives those five to the model and checks its answer "
    "against them. The downstream QA tables at the bottom are precomputed results over 300 questions.")


def _hits_table(result: dict, bm25_rank: dict[int, int]) -> pd.DataFrame:
    return pd.DataFrame([{"rank": h["rank"], "title": title_text(h["title"]), "score": h["score"],
                          "BM25 rank": bm25_rank.get(h["id"]), "passage": h["text"].strip()}
                         for h in result["hits"]], columns=HIT_COLUMNS)


# The precomputed downstream QA results: title -> (file in precomputed/, where the k chunks come from, command)
QA_RESULTS = {"top-k from the index": ("qa.json", "from the index", "eval qa --sample 300 --k 1,3,5,10"),
              "top-n of same-topic 2K contexts": (
                  "qa_same_topic.json", "selected from the context",
                  "bench longcontext --sample 300 --lengths 2K --n 1,3,5,10 --methods none,oracle,unreal,bm25 "
                  "--distractors same-topic")}


def qa_rows(data: dict) -> list[dict]:
    """The QA table of a result: ``eval qa``'s own rows, or a one-length ``bench longcontext`` result's cells as
    the same table (k = n)."""
    if "distractors" in data:  # a long-context result (QA_RESULTS names one-length runs): its shortest length
        return qa_table(data["table"], min(r["length"] for r in data["table"])) if data["table"] else []
    # older results hold one k for the whole table; the bounds (no context, oracle) retrieve nothing
    return [{"k": None if r.get("key") in BOUNDS else data["k"]} | r for r in data["table"]]


def qa_panel(loader: Loading | None = None) -> None:
    """The precomputed downstream QA tables (from the index; from same-topic contexts) and their curves."""
    with gr.Tabs():
        for title, (file, source, command) in QA_RESULTS.items():
            with gr.Tab(title):
                path = PRECOMPUTED / file
                if not path.exists():
                    gr.Markdown(f"No result yet: run `python -m unreal_demo {command} --out precomputed/{file}`.")
                    continue
                data = json.loads(path.read_text())
                if not (rows := qa_rows(data)):
                    gr.Markdown(f"`precomputed/{file}` holds no scored rows: run `python -m unreal_demo {command} "
                                f"--out precomputed/{file}` again.")
                    continue
                table = pd.DataFrame([{"method": r["method"], "k": r["k"], "EM": r["em"], "F1": r["f1"][0],
                                       "F1 95% CI": f"{r['f1'][1]:.2f}–{r['f1'][2]:.2f}",
                                       "answer contained": r["contained"], "evidence recall@k": r["recall"],
                                       "F1 gap closed": r.get("f1_gap_closed")} for r in rows]).astype({"k": "Int64"})
                gr.Markdown(f"{data['setting']}\n\n`{made_by(data)}`")
                if loader is not None and (warning := head_mismatch(data, loader)):
                    gr.Markdown(f"⚠ {warning}", elem_classes=["unreal-notice"])
                gr.Dataframe(table)
                gr.Plot(plots.qa_curves(rows, source=source))
    gr.Markdown("*What to look for:* the retrieval rows between the two bounds, no context and oracle; "
                "“F1 gap closed” is the share of that gap each retriever closes. Evidence recall says how often "
                "the gold paragraph was among the chunks at all. From the index, the k chunks compete with 20,354 "
                "others; in a same-topic context, with the gold's own article and its nearest pool passages.")


def _filter_text(terms: list[tuple[str, str, str]]) -> str:
    return ", ".join(f"{field} {'starting with' if kind == 'prefix' else '='} {value!r}"
                     for field, kind, value in terms)


def describe(info: StoreInfo) -> str:
    """The status line of an opened index or Qdrant store (:func:`serving.store_info`): where, codec or storage
    type, chunks, passages, size on disk (an index folder or a Qdrant Edge folder), the filter and the search of a
    Qdrant store."""
    size = "" if info.mib is None else f" · {info.mib:.1f} MiB"
    counts = f"{info.chunks:,} chunks of {info.passages:,} passages{size} · ℓc = {info.chunk_layer}"
    if info.kind != "index":
        where = f"Qdrant Edge store `{info.where}`" if info.kind == "qdrant-edge" else f"Qdrant store `{info.where}`"
        only = f" · only chunks with {_filter_text(info.only)}" if info.only is not None else ""
        how = "exact MaxSim" if info.ef is None else f"HNSW search, ef = {info.ef} (approximate)"
        return f"{where} · {info.encoding} · {counts}{only} · {how}"
    shipped = " (shipped with the app)" if info.shipped else ""
    return f"index `{info.where}`{shipped} · codec {info.encoding} · {counts}"


def ready_corpora(explorer: Explorer) -> list[str]:
    """The corpora with an index for this model and ℓc (built in the cache or shipped)."""
    return [name for name in CORPORA if explorer.index_ready(name)]


def borrowed_corpora(explorer: Explorer) -> list[str]:
    """The corpora this model searches through another model's shipped index, BM25 and dense only
    (:func:`serving.borrowed_index`: an offline model whose own index is not built yet)."""
    return [name for name in CORPORA if not explorer.index_ready(name) and borrowed_index(explorer, name)]


def build_tab(loader: Loading, open_stores: bool | None = None) -> Ready:
    """The tab; ``open_stores`` False (a public app) hides the store and filter boxes, refuses a folder, store or
    filter sent to its functions (:data:`serving.CLOSED <unreal_demo.serving.CLOSED>`) and builds no index
    (:class:`serving.Stores <unreal_demo.serving.Stores>`); None (the default) reads
    :func:`settings.open_stores <unreal_demo.settings.open_stores>`.

    Raises
    ------
    UserError
        ``open_stores`` None and ``$UNREAL_OPEN_STORES`` set to something other than 0 or 1.
    """
    stores = Stores(loader, open_any=open_stores)  # each index or Qdrant store opened once, for every visitor

    gr.Markdown(HOW_TO_READ, elem_classes=["unreal-howto"])
    with gr.Row(elem_classes=["unreal-examples"]):
        gr.Markdown("**Examples:**", elem_classes=["unreal-examples-label"])
        example_buttons = [gr.Button(label, size="sm", interactive=False) for label in EXAMPLE_QUERIES]
    with gr.Row():
        query = gr.Textbox(label="Query", scale=3)
        k = gr.Slider(1, 50, value=10, step=1, label="k", info="how many hits to show")
        method = gr.Radio(names("index"), value="unreal", label="method", info=METHOD_INFO)
        with gr.Column(min_width=120, scale=0):
            go_btn = gr.Button("Search", variant="primary", interactive=False)
            stop = gr.Button("Stop", variant="stop")
    gr.Markdown("Exact MaxSim over every chunk of an offline Wikipedia index (Eq. 4). The index stores chunk "
                "states at ℓc only, so it does not depend on the trained head. Building encodes every chunk once "
                f"(on 2 CPU cores about {TOKENS_PER_S[DEFAULT_MODEL]} tokens/s with {DEFAULT_MODEL}: New-Wiki ≈ 6 "
                f"min, all ≈ 70–80 min; {TOKENS_PER_S[SECOND_MODEL]} tokens/s with {SECOND_MODEL}: New-Wiki ≈ 20–25 "
                "min, all ≈ 3 h: 20,317 chunks took 2.97 h) and resumes if stopped; `python -m unreal_demo index build "
                "--corpus all --token-states` builds the same folder.")
    with gr.Row():
        corpus = gr.Dropdown(list(CORPORA), value="all", label="corpus", info="; ".join(
            f"{k}: {v}" for k, v in CORPORA.items()))
        load = gr.Button("Build or load index", interactive=False)
        status = gr.Markdown("the indexes ready to search are listed once the model is loaded")
    with gr.Row(visible=stores.open_any):
        store_box = gr.Textbox(value="", label="index folder or Qdrant store", scale=2,
                               placeholder="empty: the corpus's index",
                               info="an index folder, qdrant-edge:DIR (made by `python -m unreal_demo index export "
                                    "--to qdrant-edge:DIR`) or qdrant:http(s)://HOST[:PORT][/COLLECTION]; "
                                    "searched instead of the corpus's index")
        source_box = gr.Textbox(value="", label="only source", placeholder="e.g. summaries",
                                info="a Qdrant store: only chunks of this source (new_wiki, squad_dev, summaries, "
                                     "enwiki)")
        title_box = gr.Textbox(value="", label="only titles starting with", placeholder="e.g. Nikola",
                               info="a Qdrant store: only chunks whose title starts with this")
    chart = gr.Plot(label="Scores of the top k (after a search)")
    gr.Markdown("*What to look for:* a large gap between the first hit and the rest marks a confident match; "
                "the BM25 rank column and the BM25 table beside show where the method and lexical matching "
                "disagree.")
    with gr.Row():
        table = gr.Dataframe(pd.DataFrame(columns=HIT_COLUMNS), wrap=True, label="chosen method", interactive=False,
                             column_widths=["10%", "18%", "12%", "12%", "48%"], min_width=380)
        bm25_table = gr.Dataframe(pd.DataFrame(columns=[c for c in HIT_COLUMNS if c != "BM25 rank"]), wrap=True,
                                  label="BM25, same query", interactive=False,
                                  column_widths=["10%", "20%", "13%", "57%"], min_width=380)
    with gr.Accordion("Evidence in the top 5 hits", open=True):
        evidence = gr.HTML("<p class='unreal-placeholder'>After a search: the top 5 hits of the chosen method, "
                           "UNREAL's pooled spans shaded by max_g ⟨q_g, k_p⟩ and BM25's matched terms "
                           "underlined.</p>")
    answer_btn = gr.Button("Answer from the top 5", interactive=False)
    answer = gr.Textbox(label=ANSWER_LABEL, lines=3, placeholder="Search, then answer from the top 5 hits.")
    check = gr.HTML(PLACEHOLDER)
    searched = gr.State({})  # per user: the last search's query, its top 5 hits and the index's L_p and token cut
    with gr.Accordion("Downstream QA: each retriever's top-k, same LLM (the paper's Table 1)", open=False):
        qa_panel(loader)

    def open_index(name: str, where: str = "", source: str = "", title: str = "", request: gr.Request = None,
                   progress=gr.Progress()):  # noqa: B008 (Gradio's idiom)
        run = RUNS.begin(request, "wikipedia-build")

        def report(p: BuildProgress) -> None:
            run.check()  # Stop: the build ends at its next batch, and resumes from there when pressed again
            if not p.total:  # the corpus is read; the encoding begins
                progress(0, desc=f"building: about {p.estimate / 60:.0f} min on 2 CPU cores")
            else:
                left = f"about {p.left / 60:.0f} min left"
                progress(p.done / p.total, desc=f"encoding chunks {p.done:,}/{p.total:,}, {left}")

        try:  # a folder or store named: opened, never built; the corpus's own index: built or resumed if need be
            got = stores.load(name, where, store_filter(source, title), progress=report)
        except Stopped:
            return f"⏹ {run.stopped()} The build resumes where it stopped when you press *Build or load index*."
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        if got.built is None:
            note = borrowed_note(got.info.model, loader.model)
            return "loaded " + describe(got.info) + (f" · ⚠ {note}" if note else "")
        b = got.built
        return f"built {b.chunks:,} chunks in {b.seconds:.0f} s at `{display_path(b.folder)}`"

    def cleared_search() -> tuple:
        """Every panel a search fills, emptied before its result arrives (the status line stays)."""
        return (None, pd.DataFrame(columns=HIT_COLUMNS),
                pd.DataFrame(columns=[c for c in HIT_COLUMNS if c != "BM25 rank"]), gr.skip(),
                "<p class='unreal-wait'>⏳ searching …</p>", {}, "", PLACEHOLDER)

    def search_steps(q: str, k_: float, m: str, name: str, where: str, source: str, title: str, run: Run):
        try:
            check_search(q, k_)
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        yield cleared_search()
        result = found_for(q, k_, m, name, where, source, title)  # one scan: Stop is checked when it ends
        run.check()
        yield result

    async def do_search(q: str, k_: float, m: str, name: str = "all", where: str = "", source: str = "",
                        title: str = "", request: gr.Request = None):
        run = RUNS.begin(request, "wikipedia")
        async for out in stepped(search_steps(q, k_, m, name, where, source, title, run), run,
                                 lambda: (gr.skip(),) * 3 + (f"⏹ {run.stopped()}",) + (gr.skip(),) * 4):
            yield out

    def found_for(q: str, k_: float, m: str, name: str = "all", where: str = "", source: str = "",
                  title: str = ""):
        try:
            k_ = check_search(q, k_)
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        only = store_filter(source, title)
        try:
            got = stores.open(name, where, only)
        except IndexStoreError as exc:
            if (where or "").strip() or only is not None or stores.building(name):  # its own message says why
                raise gr.Error(str(exc)) from None
            raise gr.Error(f"no index for {name} yet: press 'Build or load index' to build it") from None
        except UserError as exc:  # an unknown corpus, the model still loading or failed to load
            raise gr.Error(str(exc)) from None
        model = loader.model
        if (note := borrowed_note(got.info.model, model)) is not None and m not in BORROWED_METHODS:
            raise gr.Error(f"{m} cannot search here: {note}") from None
        try:  # BM25 beside it: scored once per search
            result = loader.get().search(got.store, q, k_, m, bm25_k=100)
            bm25 = {"hits": result["bm25_hits"]}
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        bm25_rank = {h["id"]: h["rank"] for h in bm25["hits"]}
        fig = go.Figure(go.Bar(x=[f"{h['rank']}. {title_text(h['title'])[:24]}" for h in result["hits"]],
                               y=[h["score"] for h in result["hits"]], marker_color="#e4572e"))
        t = result["timings"]
        reread = f", LLM re-read {t['rerank']:.2f} s" if "rerank" in t else ""  # upr
        fig.update_layout(title=f"top {len(result['hits'])} by {m} — query {t.get('query_encoding', 0):.2f} s, "
                                f"scan {t.get('scan', 0):.3f} s{reread}", height=300)
        bm25["hits"] = bm25["hits"][:k_]
        last = {"query": q, "hits": result["hits"][:5], "n_pool": got.store.manifest["n_pool"]}
        said = describe(got.info) + (f" · ⚠ {note}" if note else "")
        return (fig, _hits_table(result, bm25_rank), _hits_table(bm25, bm25_rank).drop(columns=["BM25 rank"]),
                said, _cards(last), last, "", PLACEHOLDER)

    def _cards(last: dict, copied: dict | None = None) -> str:
        return hits_html(loader.get(), last["hits"], last["query"], last["n_pool"], MAX_TOKENS, copied)

    async def do_answer(last: dict, request: gr.Request = None):
        run = RUNS.begin(request, "wikipedia")
        stopped = "<p class='unreal-stopped' id='unreal-stopped'>⏹ {}</p>"
        async for out in stepped(answer_steps(last, run), run,
                                 lambda: (gr.skip(), stopped.format(html.escape(run.stopped())), gr.skip())):
            yield out

    def answer_steps(last: dict, run: Run):
        """The searched query answered from its top 5 hits by :meth:`Explorer.answer_stream`, the Long document
        tab's answering path, then checked against them; Stop is checked after every token."""
        if not last.get("hits"):
            raise gr.Error("search first")
        explorer, passages = loader.get(), [h["text"] for h in last["hits"]]
        try:
            steps = explorer.answer_stream(passages, last["query"], source="the top 5 hits")
            yield "", prefill_html(next(steps).prompt_tokens, len(passages), explorer, "hit"), gr.skip()
            for step in steps:
                run.check()
                yield step.text, PLACEHOLDER, gr.skip()
        except UserError as exc:
            raise gr.Error(str(exc)) from None
        support, copied = checked(step.text, passages, question=last["query"])
        yield step.text, check_html(explorer, step, support), _cards(last, copied)

    found = [chart, table, bm25_table, status, evidence, searched, answer, check]
    where = [corpus, store_box, source_box, title_box]
    load.click(open_index, where, status, api_name=False)
    go_btn.click(on_gpu(do_search), [query, k, method, *where], found, api_name="search")
    answer_btn.click(on_gpu(do_answer), searched, [answer, check, evidence], api_name=False)
    def example_method() -> str:
        """UNREAL, or BM25 for a model searching another model's index (:func:`serving.borrowed_index`)."""
        try:
            explorer = loader.get(timeout=0)
        except UserError:
            return "unreal"
        return "bm25" if not explorer.index_ready("all") and borrowed_index(explorer, "all") else "unreal"

    for button, q in zip(example_buttons, EXAMPLE_QUERIES.values(), strict=True):
        button.click(lambda q=q: (q, example_method()), None, [query, method], api_name=False, queue=False) \
            .then(on_gpu(do_search), [query, k, method, *where], found, api_name=False)

    def stop_run(request: gr.Request) -> None:
        RUNS.stop(request, "wikipedia")
        RUNS.stop(request, "wikipedia-build")

    # Stop sets the flag of the search, answer or build under way: each ends at its next check, saying so
    stop.click(stop_run, None, None, api_name="stop_search", queue=False)

    def fill(explorer: Explorer) -> dict:
        ready = ready_corpora(explorer)
        borrowed = [] if ready else borrowed_corpora(explorer)
        first = "all" if "all" in ready or not ready else ready[0]
        model = explorer.backbone.name
        started = explorer.index_folder("all")
        partial = f" (its own index of all is {index_state(started)})" if not ready and (
            started / "manifest.json").exists() else ""
        out = {corpus: gr.update(value=first),
               status: f"ready to search: {', '.join(ready)} (opened on the first query)" if ready else
               f"⚠ no UNREAL index for {model} yet; BM25/dense only, over the shipped index of "
               f"{', '.join(borrowed)}{partial}" if borrowed else f"no index built yet{partial}: press 'Build or "
               "load index'"}
        if ready or borrowed:
            first = first if ready else ("all" if "all" in borrowed else borrowed[0])
            out[corpus] = gr.update(value=first)
            try:
                out[method] = offered(stores.open(first).store, model)
            except UserError:  # opened on the first query instead, which says why
                pass
        else:
            out[method] = offered(None, model)
        return out

    def draw_example() -> dict:
        """The first example query searched with UNREAL on the first ready index and answered from its top 5,
        through the tab's own functions, once after start-up: the tab opens with a result, not empty boxes.
        Nothing (the boxes stay empty) when no index is ready."""
        explorer = loader.get()
        ready = ready_corpora(explorer)
        if not ready:
            return {}
        q = next(iter(EXAMPLE_QUERIES.values()))
        name = "all" if "all" in ready else ready[0]
        found_now = found_for(q, 10, "unreal", name)
        *_, (said, checked_html, cards) = answer_steps(found_now[5], Run())
        shown = dict(zip(found, found_now, strict=True)) | {answer: said, check: checked_html, evidence: cards}
        return shown | {query: q, method: gr.update(value="unreal"), corpus: gr.update(value=name)}

    return Ready(enable=[load, go_btn, answer_btn, *example_buttons], fill=fill,
                 outputs=[corpus, status, method, query, chart, table, bm25_table, evidence, searched, answer, check],
                 example=Once(draw_example))


def offered(store, model: str | None = None) -> dict:
    """The method choices a store can serve; the others named with the reason in the control's help text (never
    offered and then failed). An index of another model's states (:func:`serving.borrowed_index`) serves BM25 and
    dense only; no store (None): every method (the first search opens the index and says what it lacks)."""
    methods = names("index")
    if store is None:
        return gr.update(choices=methods, value="unreal", info=METHOD_INFO)
    lacking = unsupported(store, methods)
    note = borrowed_note(store.manifest.get("model", ""), model)
    if note is not None:
        lacking |= {m: "" for m in methods if m not in BORROWED_METHODS and m not in lacking}
    info = METHOD_INFO + "".join(f" · {m} is off for this index: it needs {why}" for m, why in lacking.items()
                                 if why)
    if note is not None:
        info += f" · {', '.join(m for m in methods if m not in BORROWED_METHODS)} are off: {note}"
    choices = [m for m in methods if m not in lacking]
    return gr.update(choices=choices, info=info, **({"value": choices[0]} if note is not None else {}))
