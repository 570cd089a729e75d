"""The α stage: α (and a query adapter, if asked) trained on cached query states, ρ fixed.

The default head's recipe: the base head (``train``), then α retrained on the mixed natural and SQuAD-style
questions (this stage, the variant :data:`ALPHA`), then the joint fine-tune (:mod:`training.joint`)::

    python -m unreal_demo train --stage alpha --head precomputed/heads/smollm2-135m-mix/head.json \\
        --steps 400 --out alpha_run.json --save precomputed/heads/smollm2-135m-mix-alpha/head

:func:`prepare` opens the sets and caches their states, :func:`finish` trains the variants and scores them on the
dev sets and the New-Wiki test; a study of other variants adds its own train sets between the two.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..core.cpu import status_line
from ..core.head import QueryHead
from ..core.state_training import StateSet, StateTrainConfig, fit_states
from ..evaluation.results import write_result
from ..settings import cache_dir, display_path
from .judged import judged_digest, open_sets, require_read_on, with_judged
from .sets import cache_sets, cleaner, fit_fusion_on_dev, grid_markdown, local, pool_of, score_row

ALPHA = "α alone, mix"  # the variant the shipped α head records (``provenance.adapter``)
SOURCES = ("nq", "tqa", "squad")  # its train sets: the natural questions and the SQuAD-style ones


def alpha_variant(steps: int = 400) -> Variant:
    """The α stage of the default head's recipe: α alone (no adapter) on the mixed train sets, ``steps`` steps."""
    return Variant(ALPHA, SOURCES, StateTrainConfig(rank=0, steps=steps))


@dataclass
class Variant:
    """One adapter run: its label, the train sets it draws from, and its settings."""

    label: str
    sources: tuple[str, ...]
    cfg: StateTrainConfig
    centre: bool = False  # train and score against keys centred on the index's mean vector


def run_variants(head, train: list[StateSet], dev: list[StateSet], test: StateSet, keys: torch.Tensor,
                 usable: torch.Tensor, train_mask: torch.Tensor, variants: list[Variant],
                 log=print, keep=None, centred: torch.Tensor | None = None, dev_label: str | None = None,
                 ) -> tuple[list[dict], dict]:
    """Train each variant, score it on the dev sets (over the usable chunks) and the New-Wiki test set (over
    the whole index). Returns the rows (the starting head first) and the trained heads by label.

    ``centred``: the index's keys centred on its mean vector and normalised, which the
    variants with ``centre`` train and score against (with the starting head's row on them first).

    ``keep``: a folder where each finished variant's head and row are written; a variant found there is loaded,
    not trained again, so a killed grid resumes after its last finished variant; ``dev_label`` names dev sets other
    than the grid's own (their checks choose another step, so the variant is kept apart)."""


    dev_local, train_local = local(dev, usable), local(train, usable)

    def row(label: str, model, extra: dict, centre: bool = False) -> dict:
        k = centred if centre else keys
        return score_row(label, model, dev_local, k[usable], test, k, extra)

    rows, heads = [row("shipped head (no adapter)", head, {})], {}
    log(rows[-1])
    if any(v.centre for v in variants):
        rows.append(row("shipped head (no adapter), keys centred", head, {}, centre=True))
        log(rows[-1])
    for v in variants:
        slot = None
        if keep is not None:
            key = json.dumps([v.label, v.sources, asdict(v.cfg), head.digest(), *(["centred"] if v.centre else []),
                              *([f"dev {dev_label}"] if dev_label else [])], sort_keys=True)
            slot = Path(keep) / hashlib.sha1(key.encode()).hexdigest()[:16]
        if slot is not None and (slot / "row.json").exists():
            rows.append(json.loads((slot / "row.json").read_text()))
            heads[v.label] = QueryHead.load(slot / "head")
            log(rows[-1])
            continue
        t0 = time.time()
        sets = [s for s in train_local if s.name in v.sources]
        k = centred if v.centre else keys
        model, history = fit_states(head, sets, dev_local, k[usable], v.cfg, train_mask[usable])
        best = max(history, key=lambda r: (r["mean R@1"], r["mean R@10"]))
        rows.append(row(v.label, model, {"sources": "+".join(v.sources), "settings": asdict(v.cfg),
                                         "best step": best["step"], "steps run": history[-1]["step"],
                                         "seconds": round(time.time() - t0, 1), "log": history}
                        | ({"keys": "centred on the index mean"} if v.centre else {}), centre=v.centre))
        heads[v.label] = model
        if slot is not None:
            model.save(slot / "head")
            (slot / "row.json").write_text(json.dumps(rows[-1]))
        log(rows[-1])
    return rows, heads


@dataclass
class Stage:
    """What :func:`prepare` opens: the model, the head, the shipped index, the sets and their cached states, and the
    pool's keys and masks (:func:`sets.pool_of`)."""

    explorer: object
    head: QueryHead
    index: object
    trains: list
    devs: list
    test: object
    train_s: list[StateSet]
    dev_s: list[StateSet]
    test_s: StateSet
    keys: torch.Tensor
    usable: torch.Tensor
    train_mask: torch.Tensor
    dev: str


def prepare(head_path: str, n_context: int | None = None, dev: str = "dpr") -> Stage:
    """The sets of ``head_path`` (|C0| ``n_context``, default the head's) with their query states cached, and the
    cleaner natural sets (``nq@3``, …) among the train sets. ``dev``: the natural dev sets as the ``dpr`` rule
    labels them, or ``judged``: their questions with a chunk read as answering them (:mod:`training.judged`)."""
    if dev not in ("dpr", "judged"):
        raise ValueError(f"dev must be 'dpr' or 'judged', not {dev!r}")
    explorer, head, index, (trains, devs, test) = open_sets(head_path, n_context, "cleaner", "dpr")
    folder = cache_dir() / "query_states"
    train_s, dev_s = (cache_sets(head, explorer.backbone, s, folder) for s in (trains, devs))
    (test_s,) = cache_sets(head, explorer.backbone, [test], folder)
    keys, usable, train_mask = pool_of(index)
    train_s += cleaner(index, usable, trains, train_s, depth=3)
    if dev == "judged":
        require_read_on(index)
        devs, dev_s = with_judged("dev", devs, dev_s)
    return Stage(explorer, head, index, trains, devs, test, train_s, dev_s, test_s, keys, usable, train_mask, dev)


def finish(stage: Stage, head_path: str, variants: list[Variant], out: str | None = None, save: str | None = None,
           save_label: str | None = None, reference: list[dict] | None = None,
           centred: torch.Tensor | None = None) -> dict:
    """Train ``variants`` on ``stage`` (:func:`run_variants`, resumable), write the result (``out``) and the best
    variant on dev (or ``save_label``) as a head (``save``) with its fusion weight refitted on dev and the command
    that made it in its provenance (``adapter_command``, as a joint head records ``joint_command``). ``reference``:
    rows of other retrievers shown under the variants."""
    s = stage
    rows, heads = run_variants(s.head, s.train_s, s.dev_s, s.test_s, s.keys, s.usable, s.train_mask, variants,
                               centred=centred, keep=cache_dir() / "adapter_variants",
                               dev_label=None if s.dev == "dpr" else f"{s.dev} {judged_digest()}")
    reference = reference or []
    result = {"head": display_path(head_path), "n_context": s.head.config.n_context, "dev": s.dev,
              "sets": {q.name + " " + side: len(q.texts) for side, group in (("train", s.trains), ("dev", s.devs))
                       for q in group} | {"new_wiki test": len(s.test.texts)},
              "pool": {"chunks": int(s.usable.sum()), "train candidates": int(s.train_mask.sum())},
              "rows": rows, "reference": reference, "markdown": grid_markdown(rows + reference)}
    result = write_result(result | {"cpu": status_line()}, out, s.explorer)  # with its provenance
    if save and heads:
        label = save_label or max(rows[1:], key=lambda r: r["dev mean R@1"])["variant"]
        chosen = heads[label]
        chosen.config.fusion_weight = fit_fusion_on_dev(chosen, s.index, s.devs, s.dev_s, s.keys, s.usable)
        chosen.config.provenance = s.head.config.provenance | {
            "adapter": label, "adapter_data": result["sets"],
            "adapter_row": next(r for r in rows if r["variant"] == label),
            "adapter_command": result["provenance"]["command"], "adapter_date": result["provenance"]["date"]}
        chosen.save(save)
    return result


def run_alpha(head_path: str, steps: int = 400, out: str | None = None, save: str | None = None) -> dict:
    """The α stage of the default head's recipe end to end (:func:`alpha_variant`), from the base head
    ``head_path``."""
    return finish(prepare(head_path), head_path, [alpha_variant(steps)], out, save, ALPHA)
