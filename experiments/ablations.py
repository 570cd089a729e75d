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
file, so a killed sweep resumes where it stopped. The sweeps are :data:`unreal_demo.evaluation.ablation.SWEEPS`
(the product's ``eval heads`` scores heads on their dev split)::

    python -m experiments ablations --sweep squad-l20 --steps 60 --sample 300   # → precomputed/ablations.json
    python -m experiments ablations --sweep mix-l25 --steps 100 --sample 300

Record: ``precomputed/ablations.json`` (the About tab shows it). Reported in docs/RESULTS.md, "Ablations (dev
split)" and "The second sweep, around the long run's settings". Adopted: ℓc = 25, |C0| = 2, no P, 15 BM25
negatives, τ = 0.05, lr = 5e-3 (the shipped base head's settings).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path

from unreal_demo.core.backbone import load_backbone
from unreal_demo.core.encoding import cache_folder, warm_cache
from unreal_demo.core.head import QueryHead
from unreal_demo.core.shipped_keys import shipped_path, training_keys
from unreal_demo.core.training import sample_dev, splits, train
from unreal_demo.errors import InputError
from unreal_demo.evaluation.ablation import SWEEPS, Sweep, read_sweeps, sweep_named
from unreal_demo.evaluation.retrieval import corpus_store, metrics, rankings
from unreal_demo.pipeline import Explorer
from unreal_demo.settings import PRECOMPUTED, cache_dir
from unreal_demo.store.memory import MemoryStore

from .common import run_main

RECORDS = ()  # its one record, precomputed/ablations.json, is read by the app


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.split(" (")[0]).strip("-").lower() or "base"


def _keys_settings(sweep: Sweep, variants: dict[str, dict]) -> list[tuple[int, int]]:
    base = sweep.base
    return sorted({(v.get("chunk_layer", base.chunk_layer), v.get("n_pool", base.n_pool))
                   for v in [{}, *variants.values()]})


def run_ablations(steps: int = 60, dev_sample: int = 300, out: str = str(PRECOMPUTED / "ablations.json"),
                  only: list[str] | None = None, seed: int = 0, sweep: str = "squad-l20") -> dict:
    """Train and score every variant of ``sweep`` (or those whose name contains one of ``only``); resumable.

    Returns
    -------
    The sweep's result (setting, command, BM25 reference row, one row per finished variant, markdown);
    ``out`` keeps it beside the other sweeps' results.
    """
    spec = sweep_named(sweep)
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
              "command": f"python -m experiments ablations --sweep {sweep} --steps {steps} --sample {n_q}",
              "bm25": bm25_row, "rows": table, "markdown": "\n".join(md)}
    sweeps = read_sweeps(path) | {sweep: result}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    ordered = {k: sweeps[k] for k in SWEEPS if k in sweeps} | sweeps  # other commands' sweeps (adapter) are kept
    tmp.write_text(json.dumps({"sweeps": ordered}, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments ablations [--sweep NAME] [--steps N] [--sample N] [--only A,B] [--out FILE]``."""
    p = argparse.ArgumentParser(prog="python -m experiments ablations", description=__doc__.split("\n")[0])
    p.add_argument("--sweep", default="squad-l20", help="squad-l20 (the first sweep, SQuAD dev) or mix-l25 (around "
                   "the long run: |C0|, P, head-mined negatives, τ, lr, ℓc 26-28)")
    p.add_argument("--sample", type=int, default=500, help="dev questions")
    p.add_argument("--steps", type=int, default=60, help="training steps per variant")
    p.add_argument("--only", default=None, help="comma list of name fragments to run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(PRECOMPUTED / "ablations.json"), help="the sweeps' result file")
    p.add_argument("--json", action="store_true")

    def handle(args: argparse.Namespace) -> None:
        if args.steps < 1 or args.sample < 1:
            raise InputError("--sample and --steps must be at least 1")
        result = run_ablations(args.steps, args.sample, args.out, args.only.split(",") if args.only else None,
                               args.seed, args.sweep)
        print(json.dumps(result) if args.json else result["markdown"])

    return run_main(p, handle, argv)
