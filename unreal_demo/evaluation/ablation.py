"""The dev split of the ablation sweeps: their results as the About tab reads them, and heads scored on it.

The sweeps (one-factor variants of a base run, each trained at equal budget and scored by exact MaxSim, Eq. 5, on
a fixed sample of dev questions; the study that trains them runs outside the library) are kept in
``precomputed/ablations.json`` (:func:`read_sweeps`). :func:`compare_heads` scores finished heads on a sweep's dev
split: how the shipped head was chosen (``eval heads``), and how a head gets its score-fusion weight
(``--save-fusion``). Two sweeps (:data:`SWEEPS`):

* ``squad-l20``: the first sweep, on SQuAD v1.1 dev alone around a cheap base (ℓc = 20, |C0| = 0): ℓc, R,
  G, L_p, |C0|, the read-out blocks, P and the number of BM25 negatives. It settled ℓc = 25.
* ``mix-l25``: around the long run's settings (ℓc = 25, |C0| = 2, SQuAD dev + NYT + Reddit): |C0|, the
  soft prompt P, head-mined negatives (:mod:`core.negatives`), temperature τ, learning rate and ℓc 26–28.

Dev keys come from the local cache, else the repository's compressed copy of a shipped run's keys
(:func:`core.shipped_keys.training_keys`), else they are encoded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.backbone import load_backbone
from ..core.head import QueryHead
from ..core.shipped_keys import training_keys
from ..core.training import TrainConfig, head_at_checkpoint, sample_dev
from ..errors import InputError
from ..pipeline import Explorer
from ..retrieval.registry import all_scores
from ..store.memory import MemoryStore
from .results import write_result
from .retrieval import corpus_store, fit_fusion_weight, metrics, rankings


@dataclass(frozen=True)
class Sweep:
    """One ablation sweep: its base run, its one-factor variants (name → overrides) and its dev split."""

    base: TrainConfig
    variants: dict[str, dict]
    dev: str  # what the dev split is, for the result's setting line


SWEEPS: dict[str, Sweep] = {
    "squad-l20": Sweep(
        TrainConfig(sources="squad_dev", chunk_layer=20, n_pool=7, n_ret=32, n_groups=4, n_context=0, negatives=15,
                    steps=60, checkpoint_every=20),
        {"base (ℓc=20, R=32, G=4, L_p=7, |C0|=0, all blocks, 15 HN)": {},
         "ℓc = 10": {"chunk_layer": 10}, "ℓc = 15": {"chunk_layer": 15}, "ℓc = 25": {"chunk_layer": 25},
         "ℓc = 26": {"chunk_layer": 26}, "ℓc = 27": {"chunk_layer": 27}, "ℓc = 28": {"chunk_layer": 28},
         "R = 8": {"n_ret": 8}, "R = 64": {"n_ret": 64}, "G = 1": {"n_groups": 1}, "G = 8": {"n_groups": 8},
         "L_p = 1": {"n_pool": 1}, "L_p = 14": {"n_pool": 14}, "|C0| = 2 (64 tokens each)": {"n_context": 2},
         "single-layer read-out (block ℓc)": {"readout": "chunk"}, "soft prompt P on": {"use_prompt": True},
         "100 hard negatives": {"negatives": 100}},
        "SQuAD v1.1 dev questions from articles disjoint from train"),
    "mix-l25": Sweep(
        TrainConfig(sources="squad_dev,nyt,reddit", chunk_layer=25, n_pool=7, n_ret=32, n_groups=4, n_context=2,
                    negatives=15, steps=100, warmup=10, checkpoint_every=10),
        {"base (ℓc=25, |C0|=2, no P, 15 BM25 HN, τ=0.05, lr=5e-3)": {},  # run in this order (resumable)
         "|C0| = 5": {"n_context": 5}, "soft prompt P on": {"use_prompt": True},
         "+ 8 head-mined negatives (refreshed every 25 steps)": {"mined": 8, "mine_every": 25},
         "τ = 0.1": {"temperature": 0.1}, "lr = 1e-2": {"lr": 1e-2}, "|C0| = 0": {"n_context": 0},
         "τ = 0.02": {"temperature": 0.02}, "lr = 2e-3": {"lr": 2e-3},
         "ℓc = 26": {"chunk_layer": 26}, "ℓc = 27": {"chunk_layer": 27}, "ℓc = 28": {"chunk_layer": 28}},
        "questions of SQuAD dev, NYT and Reddit from articles disjoint from train"),
}
# The first sweep's names, kept for the tests and the README's references.
BASE, VARIANTS = SWEEPS["squad-l20"].base, SWEEPS["squad-l20"].variants


def sweep_named(name: str) -> Sweep:
    """The sweep ``name`` of :data:`SWEEPS` (an :class:`errors.InputError` names the known ones)."""
    if name not in SWEEPS:
        raise InputError(f"unknown ablation sweep {name!r}; use {' or '.join(SWEEPS)}")
    return SWEEPS[name]


def read_sweeps(path: Path) -> dict[str, dict]:
    """Every sweep's result in ``path`` by sweep name (a file of the first sweep alone counts as ``squad-l20``)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return data["sweeps"] if "sweeps" in data else {"squad-l20": data}


def compare_heads(heads: list[str], dev_sample: int = 400, sweep: str = "mix-l25", seed: int = 0,
                  out: str | None = None, save_fusion: bool = False) -> dict:
    """Score finished heads on one sweep's dev split (exact MaxSim, Eq. 5) and name the best.

    The rule: highest dev R@1, ties (within 0.005) broken by R@10. Used to decide which head ships; the
    questions are dev questions, never the held-out sets the README reports.

    Parameters
    ----------
    heads
        Head files (``NAME.json``), each with its own ℓc and L_p, or run folders (their last checkpoint,
        :func:`training.head_at_checkpoint`); their dev keys are encoded if neither the cache nor the
        repository holds them.
    save_fusion
        Write each head's score-fusion weight w (``w·z(UNREAL) + (1−w)·z(BM25)``, the grid value with the best
        dev MRR@10) into its JSON, where ``hybrid-fusion`` reads it.

    Returns
    -------
    ``{"setting", "command", "bm25", "rows", "chosen", "markdown"}``; written to ``out`` when given.

    Raises
    ------
    InputError
        Unknown sweep, or no head given.
    """
    spec = sweep_named(sweep)
    if not heads:
        raise InputError("give the heads to compare with --head A.json,B.json")
    runs = {p for p in heads if Path(p).is_dir()}  # a run folder: its last checkpoint (a run in progress)
    finished = {p: QueryHead.load(Path(p)) for p in heads if p not in runs}  # a bad file fails before the model loads
    models = {p: finished[p].config.model if p in finished
              else json.loads((Path(p) / "train_config.json").read_text())["model"] for p in heads}
    backbones = {m: load_backbone(m) for m in dict.fromkeys(models.values())}  # each head on its own model
    loaded = [finished[p] if p in finished else head_at_checkpoint(p, backbones[models[p]]) for p in heads]
    texts, gold, dev_texts = sample_dev(spec.base, dev_sample, seed)
    reference = corpus_store(dev_texts)
    bm25_row = metrics(rankings(reference, None, texts, "bm25"), gold)
    bm25_scores = reference.bm25_scores(texts)  # (Q, M), the same for every head
    rows = []
    for path, head in zip(heads, loaded, strict=True):
        cfg, backbone = head.config, backbones[models[path]]
        store = MemoryStore(dev_texts, training_keys(backbone, dev_texts, cfg.chunk_layer, cfg.n_pool,
                                                     cfg.chunk_tokens))  # keys (M, L_p, d)
        explorer = Explorer(backbone, head, Path(path))
        found, scores = all_scores(store, explorer, texts, "unreal")  # scores (Q, M)
        weight = fit_fusion_weight(scores, bm25_scores, gold)
        if save_fusion and path not in runs:
            cfg.fusion_weight = weight
            head.save(Path(path))
        prov = cfg.provenance
        rows.append({"head": str(path), "visits": prov.get("question_visits", 0), "data": prov.get("data", ""),
                     "chunk_layer": cfg.chunk_layer, "fusion_weight": weight} | metrics(found.ids, gold))
    best = max(rows, key=lambda r: (round(r["R@1"] / 0.005), r["R@10"]))
    cols = ["R@1", "R@5", "R@10", "MRR@10"]
    md = ["| head | visits | " + " | ".join(cols) + " | fusion w |", "|---" * (len(cols) + 3) + "|",
          "| BM25 (reference) | – | " + " | ".join(f"{bm25_row[c]:.3f}" for c in cols) + " | – |"]
    md += [f"| {r['head']} | {r['visits']:,} | " + " | ".join(f"{r[c]:.3f}" for c in cols)
           + f" | {r['fusion_weight']} |" for r in rows]
    result = {"setting": f"dev split of sweep {sweep}: {len(texts)} {spec.dev}, corpus {len(dev_texts):,} dev "
                         "paragraphs; rule: highest R@1, ties by R@10",
              "command": f"python -m unreal_demo eval heads --head {','.join(heads)} --sweep {sweep} "
                         f"--sample {len(texts)}" + (" --save-fusion" if save_fusion else ""),
              "bm25": bm25_row, "rows": rows, "chosen": best["head"], "markdown": "\n".join(md)}
    return write_result(result, out)
