"""Ablations of the head on the dev split (articles disjoint from train and from the held-out sets).

Each variant changes one setting of a base run and is trained for the same number of steps from the same
seed (equal budget), then scored by exact MaxSim (Eq. 5) over the dev paragraphs for a fixed sample of dev
questions. Two sweeps (:data:`SWEEPS`), both kept in ``precomputed/ablations.json``:

* ``squad-l20``: the first sweep, on SQuAD v1.1 dev alone around a cheap base (ℓc = 20, |C0| = 0): ℓc, R,
  G, L_p, |C0|, the read-out blocks, P and the number of BM25 negatives. It settled ℓc = 25.
* ``mix-l25``: around the long run's settings (ℓc = 25, |C0| = 2, SQuAD dev + NYT + Reddit): |C0|, the
  soft prompt P, head-mined negatives (:mod:`core.negatives`), temperature τ, learning rate and ℓc 26–28.

Chunk keys come from the local cache, else the repository's compressed copy of a shipped run's keys
(:func:`core.shipped_keys.training_keys`); every other (ℓc, L_p) a sweep needs is encoded in one forward
pass (:func:`encoding.warm_cache`). Each run checkpoints, and finished variants are kept in the result
file, so a killed sweep resumes where it stopped.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..core.backbone import load_backbone
from ..core.encoding import cache_folder, warm_cache
from ..core.head import QueryHead
from ..core.shipped_keys import shipped_path, training_keys
from ..core.training import TrainConfig, head_at_checkpoint, sample_dev, splits, train
from ..errors import InputError
from ..pipeline import Explorer
from ..retrieval.registry import all_scores
from ..settings import cache_dir
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


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.split(" (")[0]).strip("-").lower() or "base"


def _sweep(name: str) -> Sweep:
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
    spec = _sweep(sweep)
    if not heads:
        raise InputError("give the heads to compare with --head A.json,B.json")
    runs = {p for p in heads if Path(p).is_dir()}  # a run folder: its last checkpoint (a run in progress)
    finished = {p: QueryHead.load(Path(p)) for p in heads if p not in runs}  # a bad file fails before the model loads
    backbone = load_backbone(spec.base.model)
    loaded = [finished[p] if p in finished else head_at_checkpoint(p, backbone) for p in heads]
    texts, gold, dev_texts = sample_dev(spec.base, dev_sample, seed)
    reference = corpus_store(dev_texts)
    bm25_row = metrics(rankings(reference, None, texts, "bm25"), gold)
    bm25_scores = reference.bm25_scores(texts)  # (Q, M), the same for every head
    rows = []
    for path, head in zip(heads, loaded, strict=True):
        cfg = head.config
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


def _keys_settings(sweep: Sweep, variants: dict[str, dict]) -> list[tuple[int, int]]:
    base = sweep.base
    return sorted({(v.get("chunk_layer", base.chunk_layer), v.get("n_pool", base.n_pool))
                   for v in [{}, *variants.values()]})


def run_ablations(steps: int = 60, dev_sample: int = 300, out: str = "precomputed/ablations.json",
                  only: list[str] | None = None, seed: int = 0, sweep: str = "squad-l20") -> dict:
    """Train and score every variant of ``sweep`` (or those whose name contains one of ``only``); resumable.

    Returns
    -------
    The sweep's result (setting, command, BM25 reference row, one row per finished variant, markdown);
    ``out`` keeps it beside the other sweeps' results.
    """
    spec = _sweep(sweep)
    backbone = load_backbone(spec.base.model)
    path = Path(out)
    done = read_sweeps(path).get(sweep, {}).get("rows", [])
    done = [r for r in done if r["steps"] == steps and r["dev_questions"] == dev_sample]
    variants = {k: v for k, v in spec.variants.items() if not only or any(o in k for o in only)}
    train_side, dev_side = splits(spec.base)  # every source read once
    texts, gold, dev_texts = sample_dev(spec.base, dev_sample, seed, dev_side)
    train_passages = [p.text for p in train_side[0]]
    for corpus in (train_passages, dev_texts):  # encode what neither the cache nor the repository holds
        missing = [st for st in _keys_settings(spec, variants)
                   if not shipped_path(cache_folder(backbone, corpus, *st, spec.base.chunk_tokens).name).exists()]
        if missing:
            warm_cache(backbone, corpus, missing, spec.base.chunk_tokens)
    bm25_row = metrics(rankings(corpus_store(dev_texts), None, texts, "bm25"), gold)
    rows, dev_stores = {r["variant"]: r for r in done}, {}  # a dev store (keys, BM25) per (ℓc, L_p), built once
    for name, overrides in variants.items():
        if name in rows:
            continue
        cfg = replace(spec.base, steps=steps, out=str(cache_dir() / "ablations" / sweep / _slug(name)), **overrides)
        train(cfg, backbone)
        head = QueryHead.load(Path(cfg.out) / "head")
        explorer = Explorer(backbone, head, Path(cfg.out) / "head.json")
        if (cfg.chunk_layer, cfg.n_pool) not in dev_stores:
            dev_stores[cfg.chunk_layer, cfg.n_pool] = MemoryStore(dev_texts, training_keys(
                backbone, dev_texts, cfg.chunk_layer, cfg.n_pool, cfg.chunk_tokens))  # keys (M, L_p, d)
        prov = head.config.provenance
        rows[name] = {"variant": name, "settings": {k: v for k, v in asdict(cfg).items() if k in overrides},
                      "steps": steps, "dev_questions": len(texts), "params": head.n_params(),
                      "final_loss": prov["final_loss"], "train_seconds": prov["seconds"],
                      "train_cpu_seconds": prov["cpu_seconds"]}
        rows[name] |= metrics(rankings(dev_stores[cfg.chunk_layer, cfg.n_pool], explorer, texts, "unreal"), gold)
        _write(path, sweep, rows, bm25_row, steps, len(texts), len(dev_texts))
    return _write(path, sweep, rows, bm25_row, steps, len(texts), len(dev_texts))


def _write(path: Path, sweep: str, rows: dict, bm25_row: dict, steps: int, n_q: int, n_corpus: int) -> dict:
    spec = SWEEPS[sweep]
    table = [rows[k] for k in spec.variants if k in rows]
    cols = ["R@1", "R@5", "R@10", "MRR@10"]
    md = ["| variant | " + " | ".join(cols) + " | loss | params |", "|---" * (len(cols) + 3) + "|",
          "| BM25 (reference) | " + " | ".join(f"{bm25_row[c]:.3f}" for c in cols) + " | – | – |"]
    md += ["| " + r["variant"].replace("|", "\\|") + " | " + " | ".join(f"{r[c]:.3f}" for c in cols)
           + f" | {r['final_loss']:.2f} | {r['params']:,} |" for r in table]
    result = {"setting": f"dev split: {n_q} {spec.dev}, corpus {n_corpus:,} dev paragraphs; every variant "
                         f"{steps} steps × {spec.base.batch} questions",
              "command": f"python -m unreal_demo eval ablations --sweep {sweep} --steps {steps} --sample {n_q}",
              "bm25": bm25_row, "rows": table, "markdown": "\n".join(md)}
    sweeps = read_sweeps(path) | {sweep: result}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    ordered = {k: sweeps[k] for k in SWEEPS if k in sweeps} | sweeps  # other commands' sweeps (adapter) are kept
    tmp.write_text(json.dumps({"sweeps": ordered}, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return result
