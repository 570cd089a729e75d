"""Training α and the query adapter on cached query states: Eq. 6 without running the LLM per step.

With ρ (and P) fixed, everything between the LLM and MaxSim is linear in the ρ states pooled per group and
layer (:meth:`QueryHead.layer_groups`, ``(|α|, G, d)`` per question): q_g = A · Σ_ℓ α_ℓ s_{ℓ,g}, then the
L2 norm, then MaxSim against fixed chunk keys (Eq. 4). So each training and dev question runs through the
LLM once (:func:`cache_layer_groups`, resumable), and α and the adapter A = I + U Vᵀ train on those tensors
alone (:func:`fit_states`) with the multi-positive InfoNCE of Eq. 6. The candidates B(x) of a step are either the
whole pool (``negatives="pool"``: every chunk) or, ~4x cheaper, the batch's positives, each question's ``mined``
best-scored wrong chunks under the starting head (found once) and ``sampled`` random chunks of the pool
(``negatives="mined"``). The adapter's weight decay pulls U Vᵀ toward zero, i.e. A toward the identity; the best
step on the dev sets (mean R@1) is kept.

Example
-------
>>> groups = torch.ones(2, 3, 4, 8)                 # (N, |α|, G, d): 2 questions, 3 layers
>>> alpha = torch.full((3,), 1 / 3)
>>> torch.einsum("l,nlgd->ngd", alpha, groups).shape  # (N, G, d) before the adapter
torch.Size([2, 4, 8])
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .head import HeadConfig, QueryHead
from .maxsim import maxsim_reference
from .training import info_nce


@dataclass
class StateTrainConfig:
    """Settings of one adapter run on cached states."""

    rank: int = 64  # r of q′ = q + U Vᵀ q (0: α alone; hidden_size: a full d × d map)
    train_alpha: bool = True
    steps: int = 600
    batch: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.05  # on the adapter only: toward the identity
    temperature: float = 0.05
    negatives: str = "mined"  # "pool" (every chunk a candidate) or "mined" (mined + sampled, see above)
    mined: int = 32
    sampled: int = 2048
    dev_every: int = 50
    patience: int = 3  # dev checks without a better mean R@1 before stopping
    seed: int = 0


def states_key(head: QueryHead, queries: Sequence[str], contexts: Sequence[Sequence[str]]) -> str:
    """What a cache of layer groups depends on: ρ/P (via the head's digest, adapter excluded), the questions, C0."""
    h = hashlib.sha1(json.dumps([asdict(head.config) | {"adapter_rank": 0, "provenance": {}, "fusion_weight": None,
                                                          "trained": True}], sort_keys=True, default=str).encode())
    for name in ("rho", "prompt"):
        h.update(getattr(head, name).detach().float().cpu().numpy().tobytes())
    for q, ctx in zip(queries, contexts, strict=True):
        h.update(json.dumps([q, list(ctx)]).encode())
    return h.hexdigest()[:16]


@torch.inference_mode()
def cache_layer_groups(head: QueryHead, backbone, queries: Sequence[str], contexts: Sequence[Sequence[str]],
                       folder: str | Path, batch: int = 16, part: int = 256,
                       progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """:meth:`QueryHead.layer_groups` of every question, ``(N, |α|, G, d)`` float16, cached in ``folder``.

    Written in parts of ``part`` questions (each renamed into place when complete), so a killed run resumes
    after its last whole part. The folder is keyed by :func:`states_key`.
    """
    folder = Path(folder) / states_key(head, queries, contexts)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for p, start in enumerate(range(0, len(queries), part)):
        path = folder / f"part_{p:05d}.pt"
        if not path.exists():
            end = min(start + part, len(queries))
            rows = [head.layer_groups(backbone, queries[s : min(s + batch, end)], contexts[s : min(s + batch, end)])
                    .half().cpu() for s in range(start, end, batch)]
            tmp = path.with_suffix(".tmp")
            torch.save(torch.cat(rows), tmp)
            tmp.rename(path)
        out.append(torch.load(path, weights_only=True))
        if progress is not None:
            progress(min(start + part, len(queries)), len(queries))
    return torch.cat(out)


@dataclass
class StateSet:
    """Cached questions of one source: layer groups ``(N, |α|, G, d)`` and positive chunk ids per question."""

    name: str
    groups: torch.Tensor
    positives: list[list[int]]


def scores(head: QueryHead, groups: torch.Tensor, keys: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """MaxSim ``(N, P)`` of cached questions against normalised chunk keys ``(P, L_p, d)``."""
    with torch.no_grad():
        return torch.cat([maxsim_reference(head.from_layer_groups(groups[s : s + batch].float()), keys)
                          for s in range(0, len(groups), batch)])


def recall_from_scores(s: torch.Tensor, positives: Sequence[Sequence[int]], ks: Sequence[int] = (1, 10),
                       ) -> dict[str, float]:
    """R@k from a score matrix ``(N, P)``: a hit is any positive among a row's first k.

    >>> recall_from_scores(torch.tensor([[0.1, 0.9, 0.5], [0.8, 0.1, 0.3]]), [[2], [0]], ks=(1, 2))
    {'R@1': 0.5, 'R@2': 1.0}
    """
    top = s.topk(min(max(ks), s.shape[1]), dim=1).indices.tolist()
    return {f"R@{k}": round(sum(bool(set(t[:k]) & set(p)) for t, p in zip(top, positives, strict=True))
                             / max(1, len(top)), 4) for k in ks}


def recall(head: QueryHead, data: StateSet, keys: torch.Tensor, ks: Sequence[int] = (1, 10)) -> dict[str, float]:
    """R@k of cached questions over the pool's chunks (:func:`recall_from_scores`)."""
    return recall_from_scores(scores(head, data.groups, keys), data.positives, ks)


def with_adapter(head: QueryHead, rank: int) -> QueryHead:
    """A copy of ``head`` (ρ, α, P kept) with a fresh identity adapter of rank ``rank``."""
    config = HeadConfig(**(asdict(head.config) | {"adapter_rank": rank}))
    new = QueryHead(config)
    state = {k: v for k, v in head.state_dict().items() if not k.startswith("adapter_")}
    new.load_state_dict(state, strict=False)
    return new


def mine(head: QueryHead, data: StateSet, pool: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Each question's ``n`` best-scored pool positions under ``head`` (positives included; they are masked as
    positives, never negatives, by the caller's candidate set)."""
    if not n:
        return [torch.empty(0, dtype=torch.long) for _ in data.positives]
    return list(scores(head, data.groups, pool).topk(min(n, len(pool)), dim=1).indices)


def step_candidates(pos: Sequence[torch.Tensor], mined: Sequence[torch.Tensor], n: int, sampled: int | None,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The candidate pool positions B(x) of one step and the ``(B, C)`` mask of each question's positives among them.

    ``pos``: each question's positives as pool positions (−1: not a candidate, skipped); ``mined``: each question's
    mined positions; ``sampled``: how many random pool positions join them (None: every one of the ``n``).

    >>> cand, positive = step_candidates([torch.tensor([3, -1])], [torch.tensor([1])], 5, None)
    >>> cand.tolist(), positive.tolist()
    ([0, 1, 2, 3, 4], [[False, False, False, True, False]])
    """
    if sampled is None:
        cand = torch.arange(n)
    else:
        cand = torch.cat([*pos, *mined, torch.randint(n, (sampled,))]).unique()
        cand = cand[cand >= 0]
    at = torch.full((n,), -1, dtype=torch.long)
    at[cand] = torch.arange(len(cand))
    positive = torch.zeros(len(pos), len(cand), dtype=torch.bool)
    for b, ids in enumerate(pos):
        positive[b, at[ids[ids >= 0]]] = True
    return cand, positive


def descend(opt: torch.optim.Optimizer, loss: torch.Tensor) -> float:
    """One optimiser step on ``loss``; returns its value."""
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def dev_row(check: Callable[[int, float], dict], step: int, running: list[float], started: float) -> dict:
    """A dev check's row with the mean training loss since the last one (``running``, then emptied) and the
    seconds since ``started``."""
    row = check(step, sum(running) / len(running)) | {"seconds": round(time.time() - started, 1)}
    running.clear()
    return row


@dataclass
class BestCheck:
    """Early stopping on dev checks: the best row so far, its weights, and how many checks have passed without a
    better one. Best is the highest mean R@1, then mean R@10; with a ``floor``, the highest mean R@10 (then R@1)
    among the checks whose mean R@1 is at least ``floor`` (a check below it is never better).

    >>> m = torch.nn.Linear(1, 1)
    >>> b = BestCheck({"mean R@1": 0.2, "mean R@10": 0.5}, m.state_dict())
    >>> b.see({"mean R@1": 0.2, "mean R@10": 0.6}, m), b.see({"mean R@1": 0.1, "mean R@10": 0.9}, m), b.waited
    (True, False, 1)
    >>> b = BestCheck({"mean R@1": 0.2, "mean R@10": 0.5}, m.state_dict(), floor=0.19)
    >>> b.see({"mean R@1": 0.3, "mean R@10": 0.4}, m), b.see({"mean R@1": 0.19, "mean R@10": 0.6}, m)
    (False, True)
    """

    row: dict
    state: dict
    waited: int = 0
    floor: float | None = None

    def key(self, row: dict) -> tuple:
        """What ``see`` compares: larger is better."""
        if self.floor is None:
            return row["mean R@1"], row["mean R@10"]
        return row["mean R@1"] >= self.floor, row["mean R@10"], row["mean R@1"]

    def see(self, row: dict, model: torch.nn.Module) -> bool:
        """Record a dev check; True (and the weights kept) when it beats the best so far."""
        if self.key(row) > self.key(self.row):
            self.row, self.state, self.waited = row, copy.deepcopy(model.state_dict()), 0
            return True
        self.waited += 1
        return False


def fit_states(head: QueryHead, train: Sequence[StateSet], dev: Sequence[StateSet], keys: torch.Tensor,
               cfg: StateTrainConfig, train_mask: torch.Tensor | None = None,
               log: Callable[[dict], None] | None = None) -> tuple[QueryHead, list[dict]]:
    """Train α (with ``train_alpha``) and a rank-``cfg.rank`` adapter of a copy of ``head`` on cached states.

    Parameters
    ----------
    train, dev : cached questions per source; a training batch draws its questions from every train source
        alike (uniform over sources, then over that source's questions).
    keys : normalised chunk keys ``(P, L_p, d)`` of the pool that positives index into.
    train_mask : ``(P,)`` bool, the chunks that are candidates in training (default: all); dev ranks all.

    Returns
    -------
    The best head on the dev sets (mean R@1, then mean R@10) and the log (one record per dev check).
    """
    gen = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = with_adapter(head, cfg.rank)
    adapter = [p for n, p in model.named_parameters() if n.startswith("adapter_")]
    groups = [{"params": adapter, "weight_decay": cfg.weight_decay}]
    if cfg.train_alpha:
        groups.append({"params": [model.alpha], "weight_decay": 0.0})
    for p in model.parameters():
        p.requires_grad_(any(p is q for g in groups for q in g["params"]))
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98))
    cand = torch.arange(len(keys)) if train_mask is None else train_mask.nonzero().squeeze(1)
    pool = keys[cand]  # (C, L_p, d)
    where = torch.full((len(keys),), -1, dtype=torch.long)
    where[cand] = torch.arange(len(cand))
    sources = [s for s in train if len(s.positives)]
    hard = {id(src): mine(model, src, pool, cfg.mined) for src in sources} if cfg.negatives == "mined" else {}

    def check(step: int, loss: float) -> dict:
        row = {"step": step, "loss": round(loss, 4)}
        for d in dev:
            row |= {f"{d.name} {k}": v for k, v in recall(model, d, keys).items()}
        row["mean R@1"] = round(sum(row[f"{d.name} R@1"] for d in dev) / max(1, len(dev)), 4)
        row["mean R@10"] = round(sum(row[f"{d.name} R@10"] for d in dev) / max(1, len(dev)), 4)
        return row

    history = [check(0, float("nan"))]
    best, started, running = BestCheck(history[0], copy.deepcopy(model.state_dict())), time.time(), []
    for step in range(1, cfg.steps + 1):
        picks = [(src := gen.choice(sources), gen.randrange(len(src.positives))) for _ in range(cfg.batch)]
        g = torch.stack([src.groups[i] for src, i in picks]).float()  # (B, |α|, G, d)
        pos = [where[torch.tensor(src.positives[i])] for src, i in picks]  # pool positions (−1: not a candidate)
        step_cand, positive = step_candidates(pos, [hard[id(src)][i] for src, i in picks] if hard else [],
                                              len(cand), None if cfg.negatives == "pool" else cfg.sampled)
        s = maxsim_reference(model.from_layer_groups(g), pool[step_cand])  # (B, C)
        running.append(descend(opt, info_nce(s, positive, cfg.temperature)))
        if step % cfg.dev_every == 0 or step == cfg.steps:
            history.append(dev_row(check, step, running, started))
            row = history[-1]
            if log is not None:
                log(row)
            if not best.see(row, model) and best.waited >= cfg.patience:
                break
    model.load_state_dict(best.state)
    for p in model.parameters():
        p.requires_grad_(True)
    return model.eval(), history
