"""The joint stage: ρ, α and the query adapter fine-tuned together through the LLM (:mod:`core.joint_training`).

Same pool, sets and splits as the α stage (:mod:`training.sets`); the mined negatives come from the starting head's
cached states. After training, the best head's query states are cached for every dev and test question and scored
as the α stage's rows (:func:`sets.score_row`), next to the starting head's row. The default head
(``precomputed/heads/smollm2-135m-mix-joint-seed1``) is this stage from the α head::

    python -m unreal_demo train --stage joint --head precomputed/heads/smollm2-135m-mix-alpha/head.json \\
        --positives judged --dev judged --train-c0 quarter --steps 240 --lr-rho 3e-4 --lr 1e-3 \\
        --r10-within 0.01 --patience 8 --distil 3.0 --seed 1 --out joint_run.json \\
        --save precomputed/heads/smollm2-135m-mix-joint-seed1/head

(the head's ``provenance.joint_command`` records it under its earlier name, ``adapter --joint``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict

import torch

from ..core.cpu import status_line
from ..core.head import QueryHead
from ..core.joint_training import JointConfig, TextSet, fit_joint, lexical_scale, settings_of
from ..core.maxsim import maxsim_reference
from ..core.state_training import StateSet, mine
from ..evaluation.results import write_result
from ..settings import cache_dir, display_path
from .judged import POSITIVES, judged_digest, open_sets
from .sets import (
    NATURAL_SETS,
    cache_sets,
    clean_ids,
    fit_fusion_on_dev,
    grid_markdown,
    local,
    pool_of,
    positions,
    score_row,
    usable_pool,
    without_positive_c0,
)

DEPTH = 3  # the cleaner positives' BM25 depth (the grid's best row)


TRAIN_C0 = {"bm25": "C0 = BM25's top chunks", "without-positive": "C0 without the positive",
            "half": "half the visits with C0 without the positive",
            "quarter": "a quarter of the visits with C0 without the positive"}


def run_joint(head_path: str, cfg: JointConfig, out: str | None = None, save: str | None = None,
              log=print, train_c0: str = "bm25", keep: str = "best", n_context: int | None = None,
              positives: str = "cleaner", dev: str = "dpr", widen: dict | None = None) -> dict:
    """Train (or resume) the joint fine-tune from ``head_path`` and score it; the best head so far sits in the run
    folder (``<cache>/joint_runs/…/best``) while it trains; ``save`` receives the best head with its fusion weight
    refitted on dev (none when no dev check beat step 0), ``out`` the result JSON. ``train_c0``: each training
    question's C0 is BM25's top chunks (``"bm25"``), BM25's top chunks that are not its positive
    (``"without-positive"``, :func:`sets.without_positive_c0`), or each question once with each
    (``"half"``: half the visits; ``"quarter"``: a quarter); dev and test keep BM25's top chunks, as a search
    has them. ``keep``: score and save the best dev check's state (``"best"``) or the last step's (``"last"``,
    written even when the best is step 0). ``n_context``: |C0| to train and score with (default: the head's); the
    starting row reads that many passages with the starting head's weights (:meth:`core.head.QueryHead.reshaped`).
    ``positives``: the natural training questions' positives — ``cleaner`` (the ``dpr`` rule's, BM25 rank ≤ 3),
    ``judged`` (the chunks read as answering them; :mod:`training.judged`) or ``judged-more`` (those and the judged
    questions the grid's sample left out, :func:`judged.with_more`); ``dev``: the natural dev sets labelled
    by the ``dpr`` rule or judged by reading (the checks and the final rows). ``widen``: a wider query side to start
    from, :meth:`core.head.QueryHead.reshaped`'s fields — ``n_groups`` (its R retrieval tokens cut into more query
    vectors) and ``adapter_rank`` (a new query adapter, the identity at first) — so the starting row is the head
    as given, widened.

    Raises
    ------
    HeadError
        A ``widen`` the head cannot take (before the model loads)."""
    if train_c0 not in TRAIN_C0:
        raise ValueError(f"train_c0 must be one of {', '.join(TRAIN_C0)}, not {train_c0!r}")
    if widen:  # a G or rank the head cannot take: refused before the model loads; one it has: no change
        start = QueryHead.load(head_path)
        start.reshaped(**widen)
        widen = {k: v for k, v in widen.items() if v != getattr(start.config, k)}
    explorer, head, index, (trains, devs, test) = open_sets(head_path, n_context, positives, dev)
    head = head.reshaped(**widen) if widen else head
    backbone = explorer.backbone
    folder = cache_dir() / "query_states"
    weights = None
    if train_c0 != "bm25":
        masked = without_positive_c0(*usable_pool(index), trains, head.config.n_context)
        if train_c0 == "quarter":
            weights = [3.0] * len(trains) + [1.0] * len(masked)
        trains = masked if train_c0 == "without-positive" else trains + masked
    train_s, dev_s = cache_sets(head, backbone, trains, folder), cache_sets(head, backbone, devs, folder)
    (test_s,) = cache_sets(head, backbone, [test], folder)
    keys, usable, train_mask = pool_of(index)
    remap = positions(usable)
    dev_keys, cand_mask = keys[usable], train_mask[usable]
    pool = dev_keys[cand_mask]

    def texts(q, ids: list[int], name: str) -> TextSet:
        return TextSet(name, [q.texts[i] for i in ids], [q.contexts[i] for i in ids],
                       [[int(remap[j]) for j in q.positives[i] if remap[j] >= 0] for i in ids])

    train_t, hard, kept = [], [], []
    for q, c in zip(trains, train_s, strict=True):
        # cleaner()'s rule: the dpr-labelled natural sets keep their cleaner positives only (judged sets: all)
        natural = q.name.rstrip("~") in NATURAL_SETS
        ids = clean_ids(index, usable, q, DEPTH) if natural else list(range(len(q.texts)))
        name = f"{q.name}@{DEPTH}" if natural else q.name
        train_t.append(texts(q, ids, name))
        kept.append(ids)
        hard.append(mine(head, StateSet(name, c.groups[ids], []), pool, cfg.mined))
    dev_t = [texts(q, list(range(len(q.texts))), q.name) for q in devs]
    named = (({"c0": TRAIN_C0[train_c0]} if train_c0 != "bm25" else {})
             | ({"positives": positives} if positives != "cleaner" else {}) | ({"widen": widen} if widen else {})
             | ({"dev": dev} if dev != "dpr" else {})
             | ({"judged": judged_digest(("dev", "train", "more") if positives == "judged-more" else ("dev", "train"))}
                if positives != "cleaner" or dev == "judged" else {}))  # the verdicts it was built on
    settings = hashlib.sha1(json.dumps(settings_of(cfg) | {"steps": None} | named,
                                       sort_keys=True).encode()).hexdigest()[:8]
    run_folder = cache_dir() / "joint_runs" / f"{head.digest()[:12]}-{settings}"  # more --steps resume the run
    t0 = time.time()
    with torch.no_grad():  # the starting head's query vectors held by --distil: the SQuAD-style questions', or
        # with a fusion teacher every question's (BM25 and the head both rank real questions better together)
        held = [None if cfg.teacher_fusion is None and re.split(r"[~:@]", t.name)[0] in NATURAL_SETS
                else head.from_layer_groups(c.groups[ids].float())
                for t, c, ids in zip(train_t, train_s, kept, strict=True)] if cfg.distil else None
        lexical = None if cfg.teacher_fusion is None else [
            lexical_scale(index.bm25_scores(t.texts)[:, usable][:, cand_mask],
                          torch.cat([maxsim_reference(v[b : b + 32], pool) for b in range(0, len(v), 32)])).half()
            for t, v in zip(train_t, held, strict=True)]  # (N, C) each
    model, history, best = fit_joint(head, backbone, train_t, dev_t, dev_keys, cfg, run_folder, hard=hard,
                                     train_mask=cand_mask, log=log, keep=keep, weights=weights, held=held,
                                     lexical=lexical)
    seconds = round(time.time() - t0, 1)
    new_dev = cache_sets(model, backbone, devs, folder)
    (new_test,) = cache_sets(model, backbone, [test], folder)
    rank = head.config.adapter_rank
    trained = f"ρ, α and the r = {rank} adapter" if rank else "ρ and α"
    cut = f", G = {head.config.n_groups}" if widen and "n_groups" in widen else ""
    start = f"starting head ({f'r = {rank} adapter' if rank else 'no adapter'}, ρ as given{cut})"
    tuned = (f"joint fine-tune of {trained}{cut}" + (f", {TRAIN_C0[train_c0]}" if train_c0 != "bm25" else "")
             + (f", {POSITIVES[positives]}" if positives != "cleaner" else "")
             + (f", distillation {cfg.distil:g} toward the start" + (" on SQuAD-style questions"
                if cfg.teacher_fusion is None else f"'s score fusion with BM25 (w {cfg.teacher_fusion:g})")
                if cfg.distil else "")
             + ("" if keep == "best" else f", its last state (step {best['step']})"))
    rows = [score_row(start, head, local(dev_s, usable), dev_keys,
                      test_s, keys, {}),
            score_row(tuned, model, local(new_dev, usable), dev_keys,
                      new_test, keys, {"settings": asdict(cfg), "best step": best["step"],
                                       "steps run": history[-1]["step"], "seconds this call": seconds,
                                       "log": history})]
    result = {"head": display_path(head_path), "n_context": head.config.n_context,
              "train C0": TRAIN_C0[train_c0], "positives": positives, "dev": dev, "widen": widen or {},
              "train sets": {t.name: len(t.texts) for t in train_t}, "dev sets": {t.name: len(t.texts) for t in dev_t},
              "new_wiki test": len(test.texts), "rows": rows, "markdown": grid_markdown(rows)}
    result = write_result(result | {"cpu": status_line()}, out, explorer)  # with its provenance
    if save and best["step"] > 0:  # a run whose best check is step 0 changed nothing: no head is written
        model.config.fusion_weight = fit_fusion_on_dev(model, index, devs, new_dev, keys, usable)
        model.config.provenance = head.config.provenance | {"joint": asdict(cfg), "joint_row": rows[1] | {"log": []},
                                                            "joint_command": result["provenance"]["command"],
                                                            "joint_date": result["provenance"]["date"]}
        model.save(save)
    return result
