"""Eq. 6 — training the query side (P, ρ, α) with multi-positive InfoNCE; the backbone stays frozen.

L(x) = −(1/|O(x)|) Σ_{j∈O(x)} log [ exp(s_j(x)/τ) / Σ_{i∈B(x)} exp(s_i(x)/τ) ]

B(x) is the deduplicated union of the oracle and hard-negative chunks of every
query in the microbatch; a chunk that is an oracle of x counts as a positive of
x, never as its negative. Hard negatives come from BM25 queried with the oracle
text: the oracle itself and near-duplicates (word Jaccard ≥ ``near_dup``) are
dropped, then the next ``negatives`` ranks are kept.

Chunk embeddings do not depend on the trained parameters: they are computed
once (and cached on disk) at ℓc. Training checkpoints every few steps and
resumes from the last checkpoint when run again with the same output folder.

Example
-------
>>> s = torch.tensor([[2.0, 0.0, 0.0]]); pos = torch.tensor([[True, False, False]])
>>> round(info_nce(s, pos, 1.0).item(), 4)       # -log(e^2 / (e^2 + 2))
0.2395
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .backbone import DEFAULT_MODEL, load_backbone
from .data import Passage, Question, article_split, load_squad
from .encoding import cached_encode
from .head import HeadConfig, QueryHead
from .maxsim import maxsim_reference, normalize_chunks
from .selection import BM25


@dataclass
class TrainConfig:
    """Settings of one training run; the defaults are the shipped head's (about 50 minutes on 2 CPU cores)."""

    out: str = "precomputed/heads/smollm2-135m"
    model: str = DEFAULT_MODEL
    chunk_layer: int = 25
    n_pool: int = 7
    n_ret: int = 32
    n_groups: int = 4
    n_context: int = 2
    context_tokens: int = 64
    chunk_tokens: int = 256
    use_prompt: bool = False
    readout: str = "all"  # read-out blocks for α: "all", "chunk" (ℓc alone) or a comma list
    negatives: int = 15
    near_dup: float = 0.6
    steps: int = 250
    batch: int = 16
    lr: float = 5e-3
    warmup: int = 20
    temperature: float = 0.05
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 10
    dev_fraction: float = 0.2


def info_nce(scores: torch.Tensor, positive: torch.Tensor, temperature: float) -> torch.Tensor:
    """Multi-positive InfoNCE (Eq. 6), averaged over queries.

    Parameters
    ----------
    scores : ``(B, C)`` MaxSim scores of every query against the candidate set B(x).
    positive : ``(B, C)`` bool, True where candidate c is an oracle of query b.
    temperature : τ.
    """
    logp = torch.log_softmax(scores / temperature, dim=-1)  # (B, C)
    per_query = -(logp * positive).sum(-1) / positive.sum(-1).clamp(min=1)
    return per_query.mean()


def _words(text: str) -> set[str]:
    return set(text.lower().split())


def hard_negatives(passages: list[Passage], bm25: BM25, count: int, near_dup: float) -> list[list[int]]:
    """Per passage: BM25 ranks for its own text, minus itself and near-duplicates, first ``count``."""
    ids, _ = bm25.search([p.text for p in passages], k=count * 2 + 5)
    out = []
    for i, row in enumerate(ids):
        mine = _words(passages[i].text)
        keep = []
        for j in row.tolist():
            other = _words(passages[j].text)
            if j == i or len(mine & other) / max(1, len(mine | other)) >= near_dup:
                continue
            keep.append(j)
            if len(keep) == count:
                break
        out.append(keep)
    return out


def candidate_set(oracles: list[list[int]], negatives: list[list[int]]) -> tuple[list[int], torch.Tensor]:
    """B(x) for a microbatch: sorted unique candidates and the ``(B, C)`` positive mask.

    A candidate that is an oracle of query b is positive for b even if it is another query's negative.
    """
    cand = sorted({c for row in oracles for c in row} | {c for row in negatives for c in row})
    where = {c: i for i, c in enumerate(cand)}
    positive = torch.zeros(len(oracles), len(cand), dtype=torch.bool)
    for b, row in enumerate(oracles):
        positive[b, [where[c] for c in row]] = True
    return cand, positive


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr``, then linear decay to 0 at ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.lr * max(0.0, (cfg.steps - step) / max(1, cfg.steps - cfg.warmup))


def train_split(cfg: TrainConfig) -> tuple[list[Passage], list[Question]]:
    """The train split of SQuAD v1.1 dev: its articles' paragraphs and questions."""
    return _split(cfg)[0]


def _split(cfg: TrainConfig) -> list[tuple[list[Passage], list[Question]]]:
    """(paragraphs, questions) of the train and the dev articles (disjoint by article)."""
    passages, questions = load_squad("squad_dev")
    out = []
    for qs in article_split(questions, cfg.dev_fraction):
        titles = {q.title for q in qs}
        out.append(([p for p in passages if p.title in titles], qs))
    return out


def prepare(cfg: TrainConfig, backbone) -> dict:
    """Train split, BM25 contexts C0, hard negatives and cached chunk embeddings."""
    corpus, train_q = train_split(cfg)
    where = {p.id: i for i, p in enumerate(corpus)}
    bm25 = BM25([p.text for p in corpus])
    ctx_ids, _ = bm25.search([q.text for q in train_q], k=cfg.n_context) if cfg.n_context else (None, None)
    contexts = [[corpus[j].text for j in ctx_ids[i]] if cfg.n_context else [] for i in range(len(train_q))]
    negatives = hard_negatives(corpus, bm25, cfg.negatives, cfg.near_dup)
    bar = tqdm(total=len(corpus), desc="encode chunks", unit="chunk")
    keys = cached_encode(backbone, [p.text for p in corpus], cfg.chunk_layer, cfg.n_pool, cfg.chunk_tokens,
                         progress=lambda done, total: bar.update(done - bar.n))
    bar.close()
    return {"questions": train_q, "contexts": contexts, "oracle": [where[q.passage_id] for q in train_q],
            "negatives": negatives, "keys": normalize_chunks(keys), "corpus": corpus}


def readout_layers(cfg: TrainConfig) -> list[int]:
    """The 1-based blocks α reads out (empty = every block)."""
    if cfg.readout == "all":
        return []
    if cfg.readout == "chunk":
        return [cfg.chunk_layer]
    return [int(x) for x in cfg.readout.split(",")]


def new_head(cfg: TrainConfig, backbone) -> QueryHead:
    """A fresh head with the run's settings, ρ and P initialised from real token embeddings."""
    head = QueryHead(HeadConfig(
        model=cfg.model, hidden_size=backbone.hidden_size, n_layers=backbone.n_layers,
        chunk_layer=cfg.chunk_layer, n_pool=cfg.n_pool, n_ret=cfg.n_ret, n_groups=cfg.n_groups,
        n_context=cfg.n_context, context_tokens=cfg.context_tokens, chunk_tokens=cfg.chunk_tokens,
        use_prompt=cfg.use_prompt, temperature=cfg.temperature, readout_layers=readout_layers(cfg)),
        seed=cfg.seed)
    head.init_from_embeddings(backbone, seed=cfg.seed)
    return head.to(backbone.device)


def fit(head: QueryHead, backbone, data: dict, cfg: TrainConfig, out: Path | None = None) -> list[dict]:
    """The training loop: AdamW, warm-up + linear decay, clipping, checkpoints in ``out`` (resumed).

    Parameters
    ----------
    data : ``questions`` (objects with ``.text``), ``contexts`` (C0 texts per question), ``oracle``
        (passage index per question), ``negatives`` (hard-negative indices per passage), ``keys``
        (normalised chunk vectors ``(P, L_p, d)``).

    Returns
    -------
    The log: one record per step (loss, lr, candidates, seconds).
    """
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    step, log = 0, []
    ckpt_path = out / "checkpoint.pt" if out else None
    log_path = out / "train_log.jsonl" if out else None
    if ckpt_path is not None and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=True)
        head.load_state_dict(ckpt["head"])
        opt.load_state_dict(ckpt["opt"])
        step = int(ckpt["step"])
        log = [json.loads(line) for line in log_path.read_text().splitlines()][:step] if log_path.exists() else []
    order = list(range(len(data["questions"])))
    random.Random(cfg.seed).shuffle(order)
    keys = data["keys"].to(backbone.device)
    bar = tqdm(total=cfg.steps, initial=step, desc="train", unit="step", disable=out is None)
    started = time.time() - (log[-1]["seconds"] if log else 0.0)
    while step < cfg.steps:
        start = (step * cfg.batch) % len(order)
        batch = [order[(start + i) % len(order)] for i in range(cfg.batch)]
        oracles = [[data["oracle"][i]] for i in batch]
        cand, positive = candidate_set(oracles, [data["negatives"][data["oracle"][i]] for i in batch])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        q = head(backbone, [data["questions"][i].text for i in batch], [data["contexts"][i] for i in batch])
        loss = info_nce(maxsim_reference(q, keys[cand]), positive.to(q.device), cfg.temperature)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.clip)
        opt.step()
        step += 1
        log.append({"step": step, "loss": round(loss.item(), 5), "lr": lr_at(step - 1, cfg),
                    "candidates": len(cand), "seconds": round(time.time() - started, 1)})
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if ckpt_path is not None and (step % cfg.checkpoint_every == 0 or step == cfg.steps):
            _checkpoint(head, opt, step, log, ckpt_path, log_path)
    bar.close()
    return log


def train(cfg: TrainConfig, backbone=None) -> QueryHead:
    """Train (or resume) a head on SQuAD v1.1 dev; write it, its log and its settings to ``cfg.out``."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    backbone = backbone or load_backbone(cfg.model)
    data = prepare(cfg, backbone)
    head = new_head(cfg, backbone)
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    log = fit(head, backbone, data, cfg, out)
    head.config.trained = True
    head.config.provenance = {
        "data": "SQuAD v1.1 dev (bigbench squad_shifts/squaddev_v1.1.json), train articles only",
        "questions": len(data["questions"]), "passages": len(data["corpus"]),
        "steps": cfg.steps, "batch": cfg.batch, "question_visits": cfg.steps * cfg.batch,
        "negatives_per_query": cfg.negatives, "final_loss": _smooth(log), "cpu_seconds": log[-1]["seconds"],
        "settings": asdict(cfg),
    }
    head.cpu().save(out / "head")
    return head


def _smooth(log: list[dict], last: int = 20) -> float:
    tail = [r["loss"] for r in log[-last:]]
    return round(sum(tail) / len(tail), 4) if tail else math.nan


def _checkpoint(head: QueryHead, opt, step: int, log: list[dict], ckpt: Path, log_path: Path) -> None:
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    tmp.rename(ckpt)
    log_path.write_text("".join(json.dumps(r) + "\n" for r in log))


def dev_questions(cfg: TrainConfig) -> tuple[list[Passage], list[Question]]:
    """The dev split (articles disjoint from train) for choosing ℓc and hyper-parameters."""
    return _split(cfg)[1]
