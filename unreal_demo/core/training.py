"""Eq. 6 — training the query side (P, ρ, α) with multi-positive InfoNCE; the backbone stays frozen.

L(x) = −(1/|O(x)|) Σ_{j∈O(x)} log [ exp(s_j(x)/τ) / Σ_{i∈B(x)} exp(s_i(x)/τ) ]

B(x) is the deduplicated union of the oracle and hard-negative chunks of every
query in the microbatch; a chunk that is an oracle of x counts as a positive of
x, never as its negative. Hard negatives (:mod:`negatives`) come from BM25 queried
with the oracle text (``negatives`` per passage) and, with ``mined``, from the head
itself: its top-scored wrong passages for the questions of the next ``mine_every``
steps, mined again every ``mine_every`` steps.

Training data: the train split (by article) of every source in ``sources`` — SQuAD v1.1 dev
and SQuAD-Shifts NYT and Reddit by default, other writers and domains than Wikipedia — each
with its own train paragraphs as the pool for its C0 contexts and hard negatives. New-Wiki
(the held-out evaluation) and Amazon reviews (the out-of-domain check) are never trained on.

Chunk embeddings do not depend on the trained parameters: they are computed
once (and cached on disk) at ℓc. Training checkpoints (head, optimiser, step, data-order
digest) every few steps and resumes from the last checkpoint when run again with the same
output folder and settings; every ``dev_every`` steps it logs R@1 / R@10 on a fixed sample
of the sources' dev splits (articles disjoint from train).

Example
-------
>>> s = torch.tensor([[2.0, 0.0, 0.0]]); pos = torch.tensor([[True, False, False]])
>>> round(info_nce(s, pos, 1.0).item(), 4)       # -log(e^2 / (e^2 + 2))
0.2395
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from ..data.sources import QUESTION_SOURCES, SOURCES, Passage, Question, article_split
from ..errors import UserError
from ..settings import DEFAULT_MODEL, cache_dir, in_precomputed
from .backbone import load_backbone
from .head import HeadConfig, QueryHead
from .maxsim import maxsim_reference, normalize_chunks
from .negatives import hard_negatives, mine_negatives
from .selection import BM25


@dataclass
class TrainConfig:
    """Settings of one training run; the defaults are the shipped head's (about 50 minutes on 2 CPU cores)."""

    out: str = ""  # default: <cache>/heads/<model>-l<ℓc> (see :func:`output_folder`)
    model: str = DEFAULT_MODEL
    chunk_layer: int = HeadConfig.chunk_layer
    n_pool: int = HeadConfig.n_pool
    n_ret: int = HeadConfig.n_ret
    n_groups: int = HeadConfig.n_groups
    n_context: int = HeadConfig.n_context
    context_tokens: int = HeadConfig.context_tokens
    chunk_tokens: int = HeadConfig.chunk_tokens
    use_prompt: bool = HeadConfig.use_prompt
    readout: str = "all"  # read-out blocks for α: "all", "chunk" (ℓc alone) or a comma list
    negatives: int = 15  # BM25 hard negatives per passage
    mined: int = 0  # head-mined negatives per question (0: BM25's alone)
    mine_every: int = 0  # steps between two minings for the next window's questions (first at this step)
    near_dup: float = 0.6
    steps: int = 250
    batch: int = 16
    lr: float = 5e-3
    warmup: int = 20
    temperature: float = HeadConfig.temperature
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 10
    dev_fraction: float = 0.2
    sources: str = "squad_dev"  # comma list of QUESTION_SOURCES to train on (their train splits)
    dev_every: int = 0  # log dev R@1 every this many steps (0: never)
    dev_sample: int = 200


HELD_OUT = ("new_wiki", "amazon")  # evaluation sets: never trained on
# Settings a resumed run may change without invalidating its checkpoint.
RESUMABLE = ("out", "steps", "checkpoint_every", "dev_every")


class TrainError(UserError, ValueError):
    """A training request that cannot run as given (held-out source, resume with other settings)."""


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


def train_sources(cfg: TrainConfig) -> list[str]:
    """The sources of ``cfg.sources``; a held-out evaluation set is refused."""
    names = [n.strip() for n in cfg.sources.split(",") if n.strip()]
    bad = [n for n in names if n in HELD_OUT or n not in QUESTION_SOURCES]
    if bad or not names:
        raise TrainError(f"cannot train on {', '.join(bad) or 'nothing'}: held out ({', '.join(HELD_OUT)}) "
                         "or not a source with questions")
    return names


def train_split(cfg: TrainConfig) -> tuple[list[Passage], list[Question]]:
    """The train split of every training source: their train articles' paragraphs and questions."""
    return splits(cfg)[0]


def dev_questions(cfg: TrainConfig) -> tuple[list[Passage], list[Question]]:
    """The dev split (articles disjoint from train) for choosing ℓc and hyper-parameters."""
    return splits(cfg)[1]


def sample_dev(cfg: TrainConfig, n: int, seed: int, split: tuple[list[Passage], list[Question]] | None = None,
               ) -> tuple[list[str], list[set[int]], list[str]]:
    """A seeded sample of ``n`` dev questions: (question texts, gold paragraph ids, all dev paragraph texts).
    ``split``: :func:`dev_questions` of ``cfg`` when the caller already has it."""
    corpus, questions = split or dev_questions(cfg)
    questions = random.Random(seed).sample(questions, min(n, len(questions)))
    where = {p.id: i for i, p in enumerate(corpus)}
    return [q.text for q in questions], [{where[q.passage_id]} for q in questions], [p.text for p in corpus]


def splits(cfg: TrainConfig) -> list[tuple[list[Passage], list[Question]]]:
    """(paragraphs, questions) of the train and the dev articles (disjoint by article), over every source."""
    out: list[tuple[list[Passage], list[Question]]] = [([], []), ([], [])]
    for name in train_sources(cfg):
        for side, (passages, questions) in zip(out, article_split(name, cfg.dev_fraction), strict=True):
            side[0].extend(passages)
            side[1].extend(questions)
    return out


def _keys(cfg: TrainConfig, backbone, texts: list[str], progress=None, bounds: Sequence[int] = ()) -> torch.Tensor:
    """Chunk keys at ℓc: local cache, else the repository's compressed copy of a shipped run's keys.

    ``bounds``: where each source ends in ``texts``; when the texts of the first sources have a shipped copy
    (a run adding a source to a shipped run's), those are loaded and only the rest is encoded."""
    from .shipped_keys import split_at_shipped, training_keys

    args = (cfg.chunk_layer, cfg.n_pool, cfg.chunk_tokens)
    keep = bool(cfg.out) and in_precomputed(cfg.out)  # a shipped run
    if end := split_at_shipped(backbone, texts, bounds, *args):
        return torch.cat([training_keys(backbone, texts[:end], *args),
                          training_keys(backbone, texts[end:], *args, keep, progress)])
    return training_keys(backbone, texts, *args, keep, progress)


def _source_ends(corpus: list[Passage]) -> list[int]:
    """Where each source's passages end in a corpus built source after source (:func:`splits`)."""
    return [i + 1 for i in range(len(corpus)) if i + 1 == len(corpus) or corpus[i + 1].source != corpus[i].source]


def prepare(cfg: TrainConfig, backbone) -> dict:
    """Train split, BM25 contexts C0 and hard negatives (each source's own pool), cached chunk embeddings."""
    corpus, train_q = train_split(cfg)
    texts, names = [p.text for p in corpus], train_sources(cfg)
    where = {p.id: i for i, p in enumerate(corpus)}
    contexts: list[list[str]] = [[] for _ in train_q]
    negatives: list[list[int]] = [[] for _ in corpus]
    for name in names:
        pool = [i for i, p in enumerate(corpus) if p.source == name]
        qs = [i for i, q in enumerate(train_q) if corpus[where[q.passage_id]].source == name]
        bm25 = BM25([texts[i] for i in pool])
        if cfg.n_context:
            ctx_ids, _ = bm25.search([train_q[i].text for i in qs], k=cfg.n_context)
            for i, row in zip(qs, ctx_ids.tolist(), strict=True):
                contexts[i] = [corpus[pool[j]].text for j in row]
        for i, row in zip(pool, hard_negatives([texts[i] for i in pool], bm25, cfg.negatives, cfg.near_dup),
                          strict=True):
            negatives[i] = [pool[j] for j in row]
    bar = tqdm(total=len(corpus), desc="encode chunks", unit="chunk")

    def tick(done: int, total: int) -> None:  # total: what is encoded now (the new sources only, or all)
        bar.total = total
        bar.update(done - bar.n)

    keys = _keys(cfg, backbone, texts, progress=tick, bounds=_source_ends(corpus))
    bar.close()
    return {"questions": train_q, "contexts": contexts,
            "oracle": [where[q.passage_id] for q in train_q], "negatives": negatives,
            "keys": normalize_chunks(keys), "corpus": corpus, "texts": texts,
            "pools": [names.index(p.source) for p in corpus]}  # mined negatives stay in their source


def prepare_dev(cfg: TrainConfig, backbone) -> dict | None:
    """A fixed sample of dev questions with their C0 and the dev paragraphs' keys, for R@1 in the log."""
    if not cfg.dev_every:
        return None
    split = dev_questions(cfg)
    texts, gold, passages = sample_dev(cfg, cfg.dev_sample, cfg.seed, split)
    ctx_ids, _ = BM25(passages).search(texts, k=cfg.n_context) if cfg.n_context else (None, None)
    keys = _keys(cfg, backbone, passages, bounds=_source_ends(split[0]))
    return {"questions": texts, "gold": torch.tensor([min(g) for g in gold]),
            "contexts": [[passages[j] for j in ctx_ids[i]] if cfg.n_context else [] for i in range(len(texts))],
            "keys": normalize_chunks(keys), "passages": len(passages)}


@torch.no_grad()
def dev_recall(head: QueryHead, backbone, dev: dict, batch: int = 16) -> dict:
    """R@1 and R@10 of the head on the dev sample (exact MaxSim over the dev paragraphs)."""
    keys, ranks = dev["keys"].to(backbone.device), []
    head.eval()
    for s in range(0, len(dev["questions"]), batch):
        q = head(backbone, dev["questions"][s : s + batch], dev["contexts"][s : s + batch])
        scores = maxsim_reference(q, keys).cpu()  # (b, P)
        gold = dev["gold"][s : s + batch]
        ranks.append((scores > scores.gather(1, gold[:, None])).sum(1))
    head.train()
    r = torch.cat(ranks)
    return {"dev_R@1": round((r < 1).float().mean().item(), 4), "dev_R@10": round((r < 10).float().mean().item(), 4)}


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


def head_at_checkpoint(folder: str | Path, backbone) -> QueryHead:
    """The head of a run's last checkpoint (``folder/checkpoint.pt`` with its ``train_config.json``), so a
    run still in progress can be scored (``eval heads --head RUN_FOLDER``) or tried.

    Raises
    ------
    TrainError
        When the folder holds no checkpoint or its settings.
    """
    folder = Path(folder)
    if not (folder / "checkpoint.pt").exists() or not (folder / "train_config.json").exists():
        raise TrainError(f"{folder} holds no training checkpoint (checkpoint.pt and train_config.json)")
    saved = json.loads((folder / "train_config.json").read_text())
    cfg = TrainConfig(**{k: v for k, v in saved.items() if k in TrainConfig.__dataclass_fields__})
    state = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=True)
    head = new_head(cfg, backbone)
    head.load_state_dict(state["head"])
    head.config.trained = True
    head.config.provenance = {"data": "train articles of " + ", ".join(train_sources(cfg)),
                              "question_visits": state["step"] * cfg.batch,
                              "checkpoint": f"step {state['step']} of {cfg.steps} (in progress)"}
    return head.eval()


def fit(head: QueryHead, backbone, data: dict, cfg: TrainConfig, out: Path | None = None,
        dev: dict | None = None) -> list[dict]:
    """The training loop: AdamW, warm-up + linear decay, clipping, checkpoints in ``out`` (resumed).

    Parameters
    ----------
    data : ``questions`` (objects with ``.text``), ``contexts`` (C0 texts per question), ``oracle``
        (passage index per question), ``negatives`` (hard-negative indices per passage), ``keys``
        (normalised chunk vectors ``(P, L_p, d)``); with ``cfg.mined`` also ``texts`` and ``pools``
        (:func:`negatives.mine_negatives`): every ``cfg.mine_every`` steps the head mines negatives for
        the questions of the next ``cfg.mine_every`` steps, kept in the checkpoint so a resumed run
        continues exactly.
    dev : from :func:`prepare_dev`; when given, dev R@1 / R@10 are logged every ``cfg.dev_every`` steps.

    Returns
    -------
    The log: one record per step (visits, loss, lr, candidates, wall and CPU seconds, dev recall).

    Raises
    ------
    TrainError
        When the checkpoint in ``out`` was made over other training data (its data-order digest differs).
    """
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    order = list(range(len(data["questions"])))
    random.Random(cfg.seed).shuffle(order)
    digest = hashlib.sha1("\n".join(data["questions"][i].text for i in order).encode()).hexdigest()[:16]
    step, log, mined, mined_at = 0, [], {}, -1
    ckpt_path = out / "checkpoint.pt" if out else None
    log_path = out / "train_log.jsonl" if out else None
    if ckpt_path is not None and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=True)
        if ckpt.get("order", digest) != digest:
            raise TrainError(f"{ckpt_path} was trained on other data (order {ckpt['order']} ≠ {digest}); "
                             "use another --out")
        head.load_state_dict(ckpt["head"])
        opt.load_state_dict(ckpt["opt"])
        step = int(ckpt["step"])
        mined, mined_at = {int(i): v for i, v in ckpt.get("mined", {}).items()}, int(ckpt.get("mined_at", -1))
        log = [json.loads(line) for line in log_path.read_text().splitlines()][:step] if log_path.exists() else []
    keys = data["keys"].to(backbone.device)
    on_device = data | {"keys": keys}  # what mining scores against, moved once
    bar = tqdm(total=cfg.steps, initial=step, desc="train", unit="step", disable=out is None)
    started = time.time() - (log[-1]["seconds"] if log else 0.0)
    cpu_started = time.process_time() - (log[-1].get("cpu_seconds", 0.0) if log else 0.0)
    while step < cfg.steps:
        start = (step * cfg.batch) % len(order)
        if cfg.mined and cfg.mine_every and step and step % cfg.mine_every == 0 and mined_at != step:
            window = _upcoming(order, start, cfg.mine_every * cfg.batch)
            mined, mined_at = mine_negatives(head, backbone, on_device, window, cfg.mined, cfg.near_dup), step
        batch = _upcoming(order, start, cfg.batch)
        oracles = [[data["oracle"][i]] for i in batch]
        cand, positive = candidate_set(oracles, [data["negatives"][data["oracle"][i]] + mined.get(i, [])
                                                 for i in batch])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        q = head(backbone, [data["questions"][i].text for i in batch], [data["contexts"][i] for i in batch])
        loss = info_nce(maxsim_reference(q, keys[cand]), positive.to(q.device), cfg.temperature)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), cfg.clip)
        opt.step()
        step += 1
        record = {"step": step, "visits": step * cfg.batch, "loss": round(loss.item(), 5), "lr": lr_at(step - 1, cfg),
                  "candidates": len(cand)}
        if dev is not None and (step % cfg.dev_every == 0 or step == cfg.steps):
            record |= dev_recall(head, backbone, dev)
            bar.write(f"step {step}: visits {record['visits']}, dev R@1 {record['dev_R@1']:.3f}, "
                      f"R@10 {record['dev_R@10']:.3f}")
        record |= {"seconds": round(time.time() - started, 1),
                   "cpu_seconds": round(time.process_time() - cpu_started, 1)}
        log.append(record)
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if ckpt_path is not None and (step % cfg.checkpoint_every == 0 or step == cfg.steps):
            _checkpoint(head, opt, step, digest, log, ckpt_path, log_path, {"mined": mined, "mined_at": mined_at}
                        if mined_at >= 0 else {})
    bar.close()
    return log


def check_resume(cfg: TrainConfig, out: Path) -> None:
    """Refuse to continue a run in ``out`` whose saved settings differ (but for :data:`RESUMABLE` ones)."""
    saved_path = out / "train_config.json"
    if not (out / "checkpoint.pt").exists() or not saved_path.exists():
        return
    saved, new = json.loads(saved_path.read_text()), asdict(cfg)
    diff = [f"{k}: {saved.get(k)!r} → {v!r}" for k, v in new.items()
            if k not in RESUMABLE and k in saved and saved[k] != v]
    if diff:
        raise TrainError(f"{out} holds a run with other settings ({'; '.join(diff)}); "
                         "give the same flags to resume, or another --out")


def output_folder(cfg: TrainConfig, force: bool = False) -> Path:
    """Where a run writes: ``cfg.out``, else ``<cache>/heads/<model>-l<ℓc>``. A finished head under
    ``precomputed/`` (a shipped head) is never overwritten without ``force``."""
    from ..settings import in_precomputed

    out = Path(cfg.out) if cfg.out else cache_dir() / "heads" / f"{cfg.model.replace('/', '_')}-l{cfg.chunk_layer}"
    if (out / "head.safetensors").exists() and in_precomputed(out) and not force:
        raise TrainError(f"{out} holds a shipped head; give another --out, or --force to train over it")
    return out


def train(cfg: TrainConfig, backbone=None, force: bool = False) -> QueryHead:
    """Train (or resume) a head on the sources' train splits; write it, its log and its settings to
    :func:`output_folder`."""
    out = output_folder(cfg, force)
    cfg = replace(cfg, out=str(out))
    train_sources(cfg)  # refuse held-out sources before anything loads
    check_resume(cfg, out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    backbone = backbone or load_backbone(cfg.model)
    data = prepare(cfg, backbone)
    dev = prepare_dev(cfg, backbone)
    head = new_head(cfg, backbone)
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    log = fit(head, backbone, data, cfg, out, dev)
    head.config.trained = True
    head.config.provenance = {
        "data": "train articles of " + ", ".join(f"{n} ({SOURCES[n].what})" for n in train_sources(cfg)),
        "questions": len(data["questions"]), "passages": len(data["corpus"]),
        "steps": cfg.steps, "batch": cfg.batch, "question_visits": cfg.steps * cfg.batch,
        "negatives_per_query": cfg.negatives, "mined_per_query": cfg.mined, "final_loss": _smooth(log),
        "seconds": log[-1]["seconds"], "cpu_seconds": log[-1]["cpu_seconds"],
        "settings": asdict(cfg),
    }
    head.cpu().save(out / "head")
    return head


def _upcoming(order: list[int], start: int, n: int) -> list[int]:
    """The next ``n`` question indices of the (cyclic) data order from position ``start``."""
    return [order[(start + i) % len(order)] for i in range(n)]


def _smooth(log: list[dict], last: int = 20) -> float:
    tail = [r["loss"] for r in log[-last:]]
    return round(sum(tail) / len(tail), 4) if tail else math.nan


def _checkpoint(head: QueryHead, opt, step: int, order: str, log: list[dict], ckpt: Path, log_path: Path,
                extra: dict) -> None:
    """Head, optimiser, step, data-order digest (and ``extra``: the current mined negatives) in one file."""
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "order": order} | extra, tmp)
    tmp.rename(ckpt)
    log_path.write_text("".join(json.dumps(r) + "\n" for r in log))

