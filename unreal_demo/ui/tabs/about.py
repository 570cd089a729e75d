"""Panel "About": what the app is and what each tab answers, then the head: its settings in a table, how it was
trained (loss and dev curves), how it was chosen, its held-out evaluation and ablations, its provenance (a table;
the JSON is a download), and the glossary of symbols."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import gradio as gr
import pandas as pd

from ...core.head import CONTEXT_SOURCES, QueryHead
from ...evaluation.ablation import read_sweeps
from ...evaluation.results import for_head, head_digest, head_mismatch, made_by
from ...serving import Loading, head_note, model_rows
from ...settings import OFFLINE_MODELS, PRECOMPUTED
from .. import plots
from ..glossary import SYMBOLS, glossary_markdown
from ..wiring import Ready

WHAT = """### What this app is
UNREAL lets a small language model answer questions about texts far longer than it could read at once. The model
itself is never changed: each chunk of the text is read once by its first layers, a tiny trained add-on (the
*head*, a few thousand numbers) turns the question into query vectors, every chunk is scored against them, and
only the best few chunks go back to the same model to answer from. This app shows each step on your own text and
the measured results behind the method. The answers are written by a small model: check them against the
evidence the page shows with each answer.

### What each tab answers
- **Long document**: which parts of *my* text answer *my* question, and what does the model answer from them?
  (It opens on a worked example.)
- **Wikipedia**: which passages of a fixed offline Wikipedia collection match a query, next to classic word
  matching (BM25)?
- **Top-n**: how many chunks should the model read? Answer quality against n and against the text's length.
- **By layer**: does the untrained model already know where the answer is, and in which layers?
- **FLOPs**: from what text length on is selecting chunks cheaper than reading everything?
- **About**: this page: the head that ships, how it was trained, how it scores on held-out questions.
"""


def _adapter(rank: int, d: int) -> str:
    if not rank:
        return "no query adapter"
    return f"query adapter of rank {rank}" if rank < d else "full d × d query adapter"


def describe(head: QueryHead, source: str) -> str:
    """The head's one-line summary: trained or not, parameters (adapter included), ℓc, L_p, R, G, |C0| and where
    C0 comes from, the query adapter, P and τ."""
    c = head.config
    rank, context = getattr(c, "adapter_rank", 0), getattr(c, "context_source", "bm25")
    c0 = "BM25" if context == "bm25" else "the head's own first pass" if context == "head" else context
    return (f"### Head: `{source}`\n{'trained' if c.trained else '**untrained**'} · {head.n_params():,} parameters · "
            f"ℓc = {c.chunk_layer} of {c.n_layers} · L_p = {c.n_pool} · R = {c.n_ret} · G = {c.n_groups} · "
            f"|C0| = {c.n_context} ({c.context_tokens} tokens each) from {c0} · "
            f"{_adapter(rank, c.hidden_size)} · P {'on' if c.use_prompt else 'off'} · τ = {c.temperature}")


def settings_table(head: QueryHead) -> pd.DataFrame:
    """The head's settings, one row each: symbol, value, what it means."""
    c = head.config
    rank, context = getattr(c, "adapter_rank", 0), getattr(c, "context_source", "bm25")
    rows = [("ℓc", f"{c.chunk_layer} of {c.n_layers}", SYMBOLS["ℓc"]), ("L_p", c.n_pool, SYMBOLS["L_p"]),
            ("R", c.n_ret, SYMBOLS["R"]), ("G", c.n_groups, SYMBOLS["G"]),
            ("|C0|", f"{c.n_context} ({c.context_tokens} tokens each)", SYMBOLS["|C0|"]),
            ("C0 source", context, CONTEXT_SOURCES.get(context, context)),
            ("adapter rank r", rank, SYMBOLS["adapter"]),
            ("α", f"{len(c.readout_layers)} layers read", SYMBOLS["α"]),
            ("ρ", f"{c.n_ret} × {c.hidden_size}", SYMBOLS["ρ"]),
            ("P", "on" if c.use_prompt else "off", SYMBOLS["P"]), ("τ", c.temperature, SYMBOLS["τ"]),
            ("chunk tokens", c.chunk_tokens, "chunks are cut to this many tokens when encoded"),
            ("parameters", f"{head.n_params():,}", "every trained number: ρ, α, the adapter, and P where used")]
    return pd.DataFrame(rows, columns=["symbol", "value", "what it means"]).astype({"value": str})


def provenance_table(provenance: dict) -> pd.DataFrame:
    """The head's provenance flattened to ``setting · value`` rows (nested keys joined by ``.``)."""
    def flat(d: dict, prefix: str = "") -> list[tuple[str, str]]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out += flat(v, f"{prefix}{k}.")
            else:
                out.append((f"{prefix}{k}", v if isinstance(v, str) else json.dumps(v)))
        return out

    return pd.DataFrame(flat(provenance), columns=["setting", "value"])


def head_files(loader: Loading) -> list[str]:
    """The head's configuration with its provenance, and its training config, as JSON files to download."""
    folder = Path(tempfile.mkdtemp(prefix="unreal-head-"))
    paths = []
    if loader.head_path is not None and loader.head_path.exists():
        (folder / "head.json").write_text(loader.head_path.read_text())
        paths.append(str(folder / "head.json"))
        config = loader.head_path.parent / "train_config.json"
        if config.exists():
            (folder / "train_config.json").write_text(config.read_text())
            paths.append(str(folder / "train_config.json"))
    return paths


WIDTHS = ["16%", "22%", "62%"]
EVALUATIONS = {"new_wiki": "Held-out retrieval, New-Wiki paragraphs",
               "full": "Held-out retrieval, New-Wiki + 10,033 summaries",
               "index": "Held-out retrieval against the full offline index (chunks)",
               "amazon": "Out of domain: Amazon reviews (a source never trained on)"}


def retrieval_results(folder: Path) -> dict[str, list[dict]]:
    """``eval retrieval`` results in ``folder`` (``eval_retrieval*.json``) by corpus, the fullest table first."""
    out: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("eval_retrieval*.json")):
        data = json.loads(path.read_text())
        if (data.get("corpus") in EVALUATIONS and data.get("table") and "setting" in data
                and all("key" in row for row in data["table"])):  # a result the tab can read
            out.setdefault(data["corpus"], []).append(data)
    return {k: sorted(v, key=lambda r: -len(r["table"])) for k, v in out.items()}


MODEL_COLUMNS = ["model", "backbone", "ℓc", "head", "index"]


def models_table(loader: Loading) -> pd.DataFrame:
    """One row per offline model (and the app's own model when it is another): backbone, ℓc, the head it uses or
    why its UNREAL scores are untrained (its training's progress), the index the Wikipedia tab searches for it."""
    models = getattr(loader, "models", None)  # the app's serving.Models (ui.models.Session), else one model
    first = models.first.model if models is not None else loader.model
    loaded = models.in_memory() if models is not None else {}
    rows = model_rows(tuple(dict.fromkeys([first, *OFFLINE_MODELS])), loaded)
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)


def head_heading(explorer) -> str:
    """The head's summary, and for an untrained one which head the model lacks and why (still training)."""
    text = describe(explorer.head, explorer.head_source)
    if explorer.head_path is None:
        text += f"\n\n⚠ {explorer.backbone.name}: {head_note(explorer.backbone.name, None)}"
    return text


def build_tab(loader: Loading) -> Ready:
    gr.Markdown(WHAT, elem_id="unreal-about-what")
    gr.Markdown("### The models\nThe model picker (beside *Symbols*, under the title) switches between them; each "
                "model has its own head (trained for its layers) and its own index. A model without a head runs with "
                "an untrained one, and its UNREAL scores say so.")
    models = gr.Dataframe(models_table(loader), interactive=False, wrap=True, label="models",
                          elem_id="unreal-models", datatype=["str", "str", "str", "markdown", "markdown"],
                          column_widths=["14%", "20%", "5%", "31%", "30%"])
    head = gr.Markdown(describe(loader.head, loader.head_source) if loader.head is not None else
                       "### Head: untrained (made for the model once it is loaded)")
    settings = gr.Dataframe(settings_table(loader.head) if loader.head is not None else None, wrap=True,
                            interactive=False, label="the head's settings", column_widths=WIDTHS)
    log_path = loader.head_path.parent / "train_log.jsonl" if loader.head_path else None
    if log_path is not None and log_path.exists():
        with gr.Accordion("How it was trained: loss and dev curves", open=False):
            log = [json.loads(line) for line in log_path.read_text().splitlines()]
            gr.Plot(plots.loss_curve(log), label="training loss")
            gr.Markdown("*What to look for:* the loss (smoothed) against ln |B(x)|, the loss of a uniform guess "
                        "over the candidates; a curve still falling at the end means more steps would help.")
            if any("dev_R@1" in r for r in log):
                config = log_path.parent / "train_config.json"
                n_dev = json.loads(config.read_text()).get("dev_sample") if config.exists() else None
                gr.Plot(plots.dev_curve(log, n_dev), label="dev recall")
                gr.Markdown("*What to look for:* dev R@1 (dev articles, never trained on) against question "
                            "visits; once the curve stays inside its bands, more of the same budget stops helping.")
    choices = [PRECOMPUTED / name  # oldest first
               for name in ("head_choice.json", "head_choice_joint.json", "head_choice_seed1.json")]
    if any(path.exists() for path in choices):
        with gr.Accordion("Which head ships: the heads on the head-choice dev split", open=False):
            gr.Markdown("The long-run head was chosen here over the first head; the α and joint heads, built on it, "
                        "were chosen on dev sets of natural questions (docs/RESULTS.md) and measured here after.")
            for path in choices:
                if path.exists():
                    data = json.loads(path.read_text())
                    gr.Markdown(f"{data['setting']}\n\n`{made_by(data)}`\n\n{data['markdown']}\n\n"
                                f"best on this split: `{data['chosen']}`")
    evaluations = retrieval_results(PRECOMPUTED)
    if evaluations:
        digest = head_digest(loader.head_path)
        with gr.Accordion("How well it retrieves on held-out questions", open=True):
            gr.Markdown(f"*How to read these tables:* each row is a retrieval method; {SYMBOLS['R@k']}; MRR is "
                        "the mean of 1 / (rank of the right passage). UNREAL against BM25 alone, and whether "
                        "fusing the two beats both. The UNREAL and hybrid rows are the loaded head's where it "
                        "has been evaluated; BM25, dense and sparse rows do not depend on the head.")
            for corpus, title in EVALUATIONS.items():
                if corpus not in evaluations:
                    continue
                rows, sources = for_head(evaluations[corpus], digest)
                commands = "\n\n".join(f"`{made_by(r)}`" for r in sources)
                gr.Markdown(f"**{title}** — {sources[0]['setting']}\n\n{commands}")
                if warning := head_mismatch(sources[0], loader):
                    gr.Markdown(f"⚠ {warning}", elem_classes=["unreal-notice"])
                table = pd.DataFrame(rows)
                gr.Dataframe(table.drop(columns=["key"], errors="ignore"), interactive=False, wrap=True)
                gr.Plot(plots.metric_bars(table))
    sweeps = read_sweeps(PRECOMPUTED / "ablations.json")
    if sweeps:
        with gr.Accordion("Ablations on the dev split", open=False):
            for sweep, data in sweeps.items():
                gr.Markdown(f"**{sweep}** — {data['setting']}\n\n`{made_by(data)}`\n\n" + data["markdown"])
    if loader.head is not None and loader.head.config.provenance:
        with gr.Accordion("Provenance: the data and settings it was trained with", open=False):
            gr.Dataframe(provenance_table(loader.head.config.provenance), interactive=False, wrap=True,
                         column_widths=["35%", "65%"])
            gr.File(head_files(loader), label="the head's configuration and training settings (JSON)",
                    file_count="multiple", interactive=False)
    with gr.Accordion("Symbols", open=False):
        gr.Markdown(glossary_markdown())
    return Ready(fill=lambda explorer: {head: head_heading(explorer), settings: settings_table(explorer.head),
                                        models: models_table(loader)}, outputs=[head, settings, models])
