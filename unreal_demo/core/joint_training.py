"""Eq. 6 with the LLM back in the loop: a joint fine-tune of ρ, α and the query adapter on the mixed sets.

:mod:`state_training` trains α and the adapter on cached query states, with ρ fixed; here ρ trains too, so every
step runs the frozen LLM on its questions again (the prefix ``[sink, C0, x]`` without gradients into a KV cache,
then the R ρ tokens with gradients, :meth:`QueryHead.retrieval_states`); the prefix never changes while ρ
trains (no P), so its keys and values are kept per question after its first pass (:class:`PrefixCache`, float16 by
default) and later passes run the R ρ tokens alone. The loss is the multi-positive InfoNCE of
Eq. 6 over fixed chunk keys; the candidates of a step are the batch's positives, each question's ``mined`` best
wrong chunks under the starting head (found once, from cached states) and ``sampled`` random chunks of the pool —
:func:`state_training.fit_states`'s ``"mined"`` negatives. Every ``dev_every`` steps the dev sample's query vectors
are recomputed through the LLM (no gradients) and ranked over the whole dev pool; the best step (mean R@1, then
mean R@10) is kept. The run checkpoints at every dev check and resumes from its folder.

Example
-------
>>> cfg = JointConfig(steps=2, dev_every=1)
>>> param_groups_lr(cfg)             # ρ at its own learning rate, α and the adapter at another
{'rho': 0.0005, 'alpha': 0.0005, 'adapter': 0.0005}
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .head import QueryHead
from .maxsim import maxsim_reference
from .state_training import BestCheck, descend, dev_row, recall_from_scores, step_candidates
from .training import info_nce


@dataclass
class JointConfig:
    """Settings of one joint fine-tune (ρ, α and the adapter; the LLM frozen)."""

    steps: int = 400
    batch: int = 16
    lr_rho: float = 5e-4
    lr: float = 5e-4  # α and the adapter
    weight_decay: float = 0.05  # on the adapter only: toward the identity
    temperature: float = 0.05
    mined: int = 32
    sampled: int = 2048
    dev_every: int = 40
    dev_per_set: int = 60  # questions per dev set in the checks (the final evaluation uses every dev question)
    patience: int = 4
    seed: int = 0  # batches and sampled negatives (the dev sample is the same for every seed)
    prefix_cache: str = "float16"  # keep each question's prefix KV in this dtype after its first pass ("": never)
    r10_within: float | None = None  # keep the best mean R@10 among checks at most this far below step 0's mean R@1
    # (None: the best mean R@1), on the dev sample
    distil: float = 0.0  # weight of the KL term holding the held questions' candidate scores near the teacher's
    teacher_fusion: float | None = None  # the teacher: None the starting head; w: score fusion of the starting head
    # and BM25 at weight w (:func:`fused_teacher`), which needs each held question's ``lexical`` scores


LATER = {"distil": 0.0, "teacher_fusion": None}  # settings added after the first runs, with their unused value


def settings_of(cfg: JointConfig) -> dict:
    """``cfg`` as a record for run folders and checkpoints; a setting of :data:`LATER` only when used, so runs made
    before it existed keep their folders.

    >>> "distil" in settings_of(JointConfig()), settings_of(JointConfig(distil=0.5))["distil"]
    (False, 0.5)
    >>> "teacher_fusion" in settings_of(JointConfig(distil=0.5))
    False
    """
    return {k: v for k, v in asdict(cfg).items() if not (k in LATER and v == LATER[k])}


def distillation(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher ‖ student) of the two softmax distributions over the same candidates, averaged over rows: the
    term that holds a question's ranking where the starting head had it.

    >>> s = torch.tensor([[1.0, 0.0, 0.5]])
    >>> float(distillation(s, s, 0.05)), bool(distillation(s, s.flip(-1), 0.05) > 0)
    (0.0, True)
    """
    t = torch.log_softmax(teacher / temperature, dim=-1)  # (B, C)
    return (t.exp() * (t - torch.log_softmax(student / temperature, dim=-1))).sum(-1).mean()


def fused_teacher(start: torch.Tensor, lexical: torch.Tensor, weight: float) -> torch.Tensor:
    """The score-fusion ranking (:func:`core.selection.score_fusion`, w·z(UNREAL) + (1−w)·z(BM25)) written in the
    starting head's own score units, as a distillation teacher: ``weight · start + (1 − weight) · lexical``, where
    ``lexical`` is the question's BM25 scores standardised over the pool and multiplied by the spread (standard
    deviation) of the starting head's scores over the same pool (:func:`lexical_scale`). With both standardised over
    the pool this is σ_s · fusion + const per row, so its softmax ranks the candidates as score fusion does, at the
    temperature the head's own scores are read with.

    >>> s, b = torch.tensor([[3.0, 1.0, 2.0]]), torch.tensor([[-1.0, 1.0, 0.0]])
    >>> fused_teacher(s, b, 1.0).tolist(), fused_teacher(s, b, 0.5).tolist()
    ([[3.0, 1.0, 2.0]], [[1.0, 1.0, 1.0]])
    """
    return weight * start + (1.0 - weight) * lexical


def lexical_scale(bm25: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """``z(bm25) · std(start)`` per row: the BM25 scores ``(N, C)`` of each question over the pool, standardised
    and put on the spread of the starting head's scores ``(N, C)`` over the same pool (:func:`fused_teacher`).

    >>> lexical_scale(torch.tensor([[0.0, 2.0, 4.0]]), torch.tensor([[0.0, 4.0, 8.0]])).tolist()
    [[-4.0, 0.0, 4.0]]
    """
    from .selection import zscore

    return zscore(bm25) * start.float().std(-1, keepdim=True)


@dataclass
class TextSet:
    """Questions of one source as text: the question, its C0 passages and its positives (pool positions)."""

    name: str
    texts: list[str]
    contexts: list[list[str]]
    positives: list[list[int]]


def param_groups_lr(cfg: JointConfig) -> dict[str, float]:
    """Learning rate per trained group."""
    return {"rho": cfg.lr_rho, "alpha": cfg.lr, "adapter": cfg.lr}


class PrefixCache:
    """Each question's prefix KV (:meth:`QueryHead.prefix_cache`), computed on its first use and kept: while ρ
    trains the prefix ``[sink, C0, x]`` never changes (no P), so later passes run only the R ρ tokens.
    ``dtype`` None keeps nothing (every pass runs the prefix). ``budget`` bytes bound what is kept (five C0
    passages make each prefix more than twice as long as two): past it a question's prefix is computed on each visit,
    rounded to ``dtype`` the same way and used, but not kept — the same states up to float rounding (another
    visit batches it with other questions, so its padding differs); only the time depends on the budget.

    >>> PrefixCache(None, torch.float16, budget=0).kept_bytes
    0
    """

    def __init__(self, backbone, dtype: torch.dtype | None, budget: float = float("inf")) -> None:
        self.backbone, self.dtype, self.budget, self.kv, self.kept_bytes = backbone, dtype, budget, {}, 0

    def __call__(self, head: QueryHead, sets: Sequence[TextSet], picks: Sequence[tuple[int, int]]
                 ) -> list[torch.Tensor] | None:
        """The prefix KV of questions ``picks`` ((set, question) pairs), or None when nothing is kept."""
        if self.dtype is None:
            return None
        fresh = {}  # this call's prefixes that were not kept
        missing = [p for p in dict.fromkeys(picks) if (id(sets[p[0]]), p[1]) not in self.kv]
        for s in range(0, len(missing), 16):
            part = missing[s : s + 16]
            kv = head.prefix_cache(self.backbone, [sets[i].texts[j] for i, j in part],
                                   [sets[i].contexts[j] for i, j in part], self.dtype)
            for (i, j), t in zip(part, kv, strict=True):
                size = t.numel() * t.element_size()
                if self.kept_bytes + size <= self.budget:
                    self.kv[(id(sets[i]), j)], self.kept_bytes = t, self.kept_bytes + size
                else:
                    fresh[(id(sets[i]), j)] = t
        return [self.kv.get(k := (id(sets[i]), j), fresh.get(k)) for i, j in picks]


def memory_budget(share: float = 0.6) -> float:
    """Bytes a prefix cache may keep: ``share`` of the memory available now (``MemAvailable`` on Linux, else the
    free pages), no bound where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        return share * kib * 1024
    except (OSError, StopIteration, ValueError):
        pass
    try:
        return share * os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return float("inf")


def query_vectors(head: QueryHead, backbone, texts: Sequence[str], contexts: Sequence[Sequence[str]],
                  batch: int = 16, prefixes: Callable[[Sequence[int]], list | None] | None = None) -> torch.Tensor:
    """Query vectors ``(N, G, d)`` of ``texts`` through the LLM (no gradients); ``prefixes`` gives the prefix KV
    of question indices (a :class:`PrefixCache` bound to their set) or None."""
    with torch.no_grad():
        return torch.cat([head(backbone, texts[s : s + batch], contexts[s : s + batch],
                               prefixes(range(s, min(s + batch, len(texts)))) if prefixes else None).float().cpu()
                          for s in range(0, len(texts), batch)])


def dev_sample(dev: Sequence[TextSet], n: int, seed: int) -> list[TextSet]:
    """The first ``n`` questions of each dev set after a seeded shuffle (fixed for the whole run)."""
    out = []
    for d in dev:
        idx = list(range(len(d.texts)))
        random.Random(seed).shuffle(idx)
        idx = sorted(idx[:n])
        out.append(TextSet(d.name, [d.texts[i] for i in idx], [d.contexts[i] for i in idx],
                           [d.positives[i] for i in idx]))
    return out


def _optimizer(model: QueryHead, cfg: JointConfig) -> torch.optim.Optimizer:
    lr = param_groups_lr(cfg)
    adapter = [p for n, p in model.named_parameters() if n.startswith("adapter_")]
    groups = [{"params": [model.rho], "lr": lr["rho"], "weight_decay": 0.0},
              {"params": [model.alpha], "lr": lr["alpha"], "weight_decay": 0.0}]
    if adapter:
        groups.append({"params": adapter, "lr": lr["adapter"], "weight_decay": cfg.weight_decay})
    trained = {id(p) for g in groups for p in g["params"]}
    for p in model.parameters():
        p.requires_grad_(id(p) in trained)
    return torch.optim.AdamW(groups, betas=(0.9, 0.98))


def r1_floor(cfg: JointConfig, start: dict) -> float | None:
    """The mean R@1 a dev check needs to be kept by ``cfg.r10_within``'s rule (:class:`BestCheck`'s ``floor``;
    None: the best mean R@1 is kept), from the step-0 check ``start``.

    >>> r1_floor(JointConfig(r10_within=0.01), {"mean R@1": 0.44}), r1_floor(JointConfig(), {"mean R@1": 0.44})
    (0.43, None)
    """
    return None if cfg.r10_within is None else round(start["mean R@1"] - cfg.r10_within, 6)


def draw(gen: random.Random, sizes: Sequence[int], batch: int, weights: Sequence[float] | None = None
         ) -> list[tuple[int, int]]:
    """A batch's questions as (set, question) pairs: a set (alike among those of non-zero size, or by ``weights``),
    then one of its questions, uniformly.

    >>> sorted({i for i, _ in draw(random.Random(0), [5, 0, 3], 50)})   # an empty set is never drawn
    [0, 2]
    >>> sum(i == 0 for i, _ in draw(random.Random(0), [5, 5], 4000, weights=[3, 1])) / 4000
    0.74825
    """
    sets = [i for i, n in enumerate(sizes) if n]
    return [(i := gen.choice(sets) if weights is None else gen.choices(sets, [weights[k] for k in sets])[0],
             gen.randrange(sizes[i])) for _ in range(batch)]


def fit_joint(head: QueryHead, backbone, train: Sequence[TextSet], dev: Sequence[TextSet], keys: torch.Tensor,
              cfg: JointConfig, out: str | Path, hard: Sequence[Sequence[torch.Tensor]] | None = None,
              train_mask: torch.Tensor | None = None, log: Callable[[dict], None] | None = None,
              keep: str = "best", weights: Sequence[float] | None = None,
              held: Sequence[torch.Tensor | None] | None = None,
              lexical: Sequence[torch.Tensor | None] | None = None) -> tuple[QueryHead, list[dict], dict]:
    """Fine-tune ρ, α and the adapter of a copy of ``head`` jointly (Eq. 6), resumable from ``out``.

    Parameters
    ----------
    train, dev : questions per source; a batch draws from every train source alike (uniform over sources, then
        over that source's questions).
    keys : normalised chunk keys ``(P, L_p, d)`` that positives index into; dev ranks all of them.
    hard : per train set, each question's mined pool positions (:func:`state_training.mine`), or None.
    train_mask : ``(P,)`` bool, the chunks that are candidates in training (default: all).
    out : the run's folder (``checkpoint.pt``, ``log.jsonl``, ``best/`` the best head so far); a run with the
        same folder resumes.
    keep : ``"best"`` (the best dev check) or ``"last"`` (the state of the last step run: to read a trade-off the
        best-check rule does not keep).
    weights : per train set, how often a batch question comes from it relative to the others (default: alike;
        equal weights draw other batches than None, which repeats the runs from before weights existed).
    held : per train set, the starting head's query vectors ``(N, G, d)`` of its questions, or None: with
        ``cfg.distil`` > 0 each batch question of a held set adds ``distil`` × :func:`distillation` of its
        candidate scores toward the starting head's (which keeps what the head already ranks well while ρ moves).
    lexical : per held train set, each question's :func:`lexical_scale` scores ``(N, C)`` over the training
        candidates (``train_mask``'s chunks, in order), or None: with ``cfg.teacher_fusion`` the teacher is
        :func:`fused_teacher` of the starting head's scores and these.

    Returns
    -------
    The kept head, the log (one record per dev check) and the kept head's record: the best check's, or with
    ``keep="last"`` the last one's.
    """
    if keep not in ("best", "last"):
        raise ValueError(f"keep must be 'best' or 'last', not {keep!r}")
    if weights is not None and len(weights) != len(train):
        raise ValueError(f"{len(weights)} weights for {len(train)} train sets")
    if cfg.distil and (held is None or len(held) != len(train)):
        raise ValueError("distil needs the held query vectors of every train set (None for a set not held)")
    if cfg.teacher_fusion is not None and (not cfg.distil or lexical is None or any(
            (h is None) != (x is None) for h, x in zip(held, lexical, strict=True))):
        raise ValueError("teacher_fusion needs distil and the lexical scores of every held train set")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    gen = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = copy.deepcopy(head).train()
    opt = _optimizer(model, cfg)
    cand = torch.arange(len(keys)) if train_mask is None else train_mask.nonzero().squeeze(1)
    pool = keys[cand]  # (C, L_p, d)
    where = torch.full((len(keys),), -1, dtype=torch.long)
    where[cand] = torch.arange(len(cand))
    sizes = [len(t.texts) if t.positives else 0 for t in train]  # a set without positives is never drawn
    checks = dev_sample(dev, cfg.dev_per_set, 0)  # one dev sample for every seed, so runs compare
    prefix = PrefixCache(backbone, getattr(torch, cfg.prefix_cache) if cfg.prefix_cache else None, memory_budget())

    def check(step: int, loss: float) -> dict:
        row = {"step": step, "loss": round(loss, 4)}
        model.eval()
        for d in checks:
            q = query_vectors(model, backbone, d.texts, d.contexts,
                              prefixes=lambda ids, d=d: prefix(model, [d], [(0, i) for i in ids]))
            s = maxsim_reference(q, keys)  # (N, P)
            row |= {f"{d.name} {k}": v for k, v in recall_from_scores(s, d.positives).items()}
        model.train()
        row["mean R@1"] = round(sum(row[f"{d.name} R@1"] for d in checks) / max(1, len(checks)), 4)
        row["mean R@10"] = round(sum(row[f"{d.name} R@10"] for d in checks) / max(1, len(checks)), 4)
        return row

    ckpt = out / "checkpoint.pt"
    settings = settings_of(cfg) | {"steps": None, "head": head.digest(),
                                   "sets": [[s.name, len(s.texts)] for s in train]} | (
        {"weights": list(weights)} if weights is not None else {})
    # (more steps may be asked of a resumed run; every other setting must match)
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        if state["settings"] != settings:
            raise ValueError(f"{out} holds a run with other settings; use another folder")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.setstate(state["gen"])
        torch.set_rng_state(state["torch"])
        history = state["history"]
        best = BestCheck(state["best"], state["best_state"], state["waited"], r1_floor(cfg, history[0]))
        start = history[-1]["step"] + 1
    else:
        history = [check(0, float("nan"))]
        best, start = BestCheck(history[0], copy.deepcopy(model.state_dict()), floor=r1_floor(cfg, history[0])), 1
        if log is not None:
            log(history[0])
    started, running = time.time(), []
    for step in range(start, cfg.steps + 1):
        if best.waited >= cfg.patience:
            break
        picks = draw(gen, sizes, cfg.batch, weights)
        pos = [where[torch.tensor(train[i].positives[j])] for i, j in picks]  # pool positions (−1: not one)
        mined = [hard[i][j] for i, j in picks] if hard is not None else []
        step_cand, positive = step_candidates(pos, mined, len(cand), cfg.sampled)
        q = model(backbone, [train[i].texts[j] for i, j in picks], [train[i].contexts[j] for i, j in picks],
                  prefix(model, train, picks))
        s = maxsim_reference(q.float().cpu(), pool[step_cand])  # (B, C)
        loss = info_nce(s, positive, cfg.temperature)
        rows = [b for b, (i, _) in enumerate(picks) if cfg.distil and held is not None and held[i] is not None]
        if rows:
            t = torch.stack([held[picks[b][0]][picks[b][1]] for b in rows]).float()  # (H, G, d)
            teacher = maxsim_reference(t, pool[step_cand])  # (H, C)
            if cfg.teacher_fusion is not None:
                lex = torch.stack([lexical[picks[b][0]][picks[b][1]] for b in rows])[:, step_cand].float()  # (H, C)
                teacher = fused_teacher(teacher, lex, cfg.teacher_fusion)
            loss = loss + cfg.distil * distillation(s[rows], teacher, cfg.temperature)
        running.append(descend(opt, loss))
        if step % cfg.dev_every == 0 or step == cfg.steps:
            history.append(dev_row(check, step, running, started))
            row = history[-1]
            if best.see(row, model):
                model.save(out / "best")  # the best head so far, readable while the run goes on
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"settings": settings, "model": model.state_dict(), "opt": opt.state_dict(),
                        "gen": gen.getstate(), "torch": torch.get_rng_state(), "history": history, "best": best.row,
                        "best_state": best.state, "waited": best.waited}, tmp)
            tmp.replace(ckpt)
            with (out / "log.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            if log is not None:
                log(row)
    if keep == "best":
        model.load_state_dict(best.state)
    for p in model.parameters():
        p.requires_grad_(True)
    return model.eval(), history, best.row if keep == "best" else history[-1]
