"""Ablations of the head on the dev split (articles disjoint from train and from the held-out set).

Each variant changes one setting of a cheap base run (|C0| = 0, so a step costs ~2 s on
2 CPU cores) and is trained for the same number of steps, then scored by exact MaxSim
over the 422 dev paragraphs for a fixed sample of dev questions. The sweep covers what
the paper ablates and a 2-core CPU allows: ℓc, R, G, L_p, |C0|, the read-out layers,
the soft prompt P and the number of hard negatives. Chunk encodings for every (ℓc, L_p)
are written in one forward pass (:func:`encoding.warm_cache`); each run checkpoints, and
finished variants are kept in the result file, so a killed sweep resumes where it stopped.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, replace
from pathlib import Path

from ..core.backbone import cache_dir, load_backbone
from ..core.encoding import warm_cache
from ..core.head import QueryHead
from ..core.training import TrainConfig, dev_questions, train, train_split
from ..pipeline import Explorer
from .retrieval import corpus_store, metrics, rankings

BASE = TrainConfig(sources="squad_dev", chunk_layer=20, n_pool=7, n_ret=32, n_groups=4, n_context=0, negatives=15,
                   steps=60, checkpoint_every=20)
VARIANTS: dict[str, dict] = {
    "base (ℓc=20, R=32, G=4, L_p=7, |C0|=0, all blocks, 15 HN)": {},
    "ℓc = 10": {"chunk_layer": 10},
    "ℓc = 15": {"chunk_layer": 15},
    "ℓc = 25": {"chunk_layer": 25},
    "ℓc = 26": {"chunk_layer": 26},
    "ℓc = 27": {"chunk_layer": 27},
    "ℓc = 28": {"chunk_layer": 28},
    "R = 8": {"n_ret": 8},
    "R = 64": {"n_ret": 64},
    "G = 1": {"n_groups": 1},
    "G = 8": {"n_groups": 8},
    "L_p = 1": {"n_pool": 1},
    "L_p = 14": {"n_pool": 14},
    "|C0| = 2 (64 tokens each)": {"n_context": 2},
    "single-layer read-out (block ℓc)": {"readout": "chunk"},
    "soft prompt P on": {"use_prompt": True},
    "100 hard negatives": {"negatives": 100},
}


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.split(" (")[0]).strip("-").lower() or "base"


def run_ablations(steps: int = 60, dev_sample: int = 300, out: str = "precomputed/ablations.json",
                  only: list[str] | None = None, seed: int = 0) -> dict:
    """Train and score every variant (or those whose name contains one of ``only``); resumable."""
    backbone = load_backbone(BASE.model)
    path = Path(out)
    done = json.loads(path.read_text())["rows"] if path.exists() else []
    done = [r for r in done if r["steps"] == steps and r["dev_questions"] == dev_sample]
    variants = {k: v for k, v in VARIANTS.items() if not only or any(o in k for o in only)}
    dev_corpus, dev_q = dev_questions(BASE)
    dev_q = random.Random(seed).sample(dev_q, min(dev_sample, len(dev_q)))
    where = {p.id: i for i, p in enumerate(dev_corpus)}
    gold = [{where[q.passage_id]} for q in dev_q]
    texts = [q.text for q in dev_q]
    train_passages = [p.text for p in train_split(BASE)[0]]
    settings = sorted({(v.get("chunk_layer", BASE.chunk_layer), v.get("n_pool", BASE.n_pool))
                       for v in [{}, *variants.values()]})
    for corpus in (train_passages, [p.text for p in dev_corpus]):
        warm_cache(backbone, corpus, settings, BASE.chunk_tokens)
    dev_texts = [p.text for p in dev_corpus]
    bm25_row = metrics(rankings(corpus_store(dev_texts), None, texts, "bm25"), gold)
    rows = {r["variant"]: r for r in done}
    for name, overrides in variants.items():
        if name in rows:
            continue
        cfg = replace(BASE, steps=steps, out=str(cache_dir() / "ablations" / _slug(name)), **overrides)
        train(cfg, backbone)
        head = QueryHead.load(Path(cfg.out) / "head")
        explorer = Explorer(backbone, head, Path(cfg.out) / "head.json")
        rows[name] = {"variant": name, "settings": {k: v for k, v in asdict(cfg).items() if k in overrides},
                      "steps": steps, "dev_questions": len(dev_q), "params": head.n_params(),
                      "final_loss": head.config.provenance["final_loss"],
                      "train_seconds": head.config.provenance["cpu_seconds"]}
        rows[name] |= metrics(rankings(corpus_store(dev_texts, explorer), explorer, texts, "unreal"), gold)
        _write(path, rows, bm25_row, steps, len(dev_q), len(dev_corpus))
    return _write(path, rows, bm25_row, steps, len(dev_q), len(dev_corpus))


def _write(path: Path, rows: dict, bm25_row: dict, steps: int, n_q: int, n_corpus: int) -> dict:
    order = [k for k in VARIANTS if k in rows]
    table = [rows[k] for k in order]
    cols = ["R@1", "R@5", "R@10", "MRR@10"]
    md = ["| variant | " + " | ".join(cols) + " | loss | params |", "|---" * (len(cols) + 3) + "|",
          "| BM25 (reference) | " + " | ".join(f"{bm25_row[c]:.3f}" for c in cols) + " | – | – |"]
    md += ["| " + r["variant"].replace("|", "\\|") + " | " + " | ".join(f"{r[c]:.3f}" for c in cols)
           + f" | {r['final_loss']:.2f} | {r['params']:,} |" for r in table]
    result = {"setting": f"dev split: {n_q} SQuAD v1.1 dev questions from articles disjoint from train, "
                         f"corpus {n_corpus} dev paragraphs; every variant {steps} steps × {BASE.batch} questions",
              "command": f"python -m unreal_demo eval ablations --steps {steps} --sample {n_q}",
              "bm25": bm25_row, "rows": table, "markdown": "\n".join(md)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    return result
