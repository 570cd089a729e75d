"""The joint fine-tune's levers: runs of ``train --stage joint`` with other settings, and heads averaged.

Each run is the product's joint stage (:func:`unreal_demo.training.joint.run_joint`) with one lever changed: C0
without the positive (``--train-c0``), the last state (``--keep last``), |C0| = 5, judged positives, distillation
and its weight, a fusion teacher, the judged more side, a wider query side (``--groups``, ``--adapter-rank``) and a
second seed; ``--average`` averages fine-tunes of one head and scores the mean next to each (:func:`run_average`)::

    python -m experiments joint-runs --head precomputed/heads/smollm2-135m-mix-alpha/head.json --positives judged \\
        --dev judged --train-c0 quarter --steps 240 --lr-rho 3e-4 --lr 1e-3 --r10-within 0.01 --patience 8 \\
        --distil 3.0 --seed 1 --adapter-rank 64 --out experiments/records/joint_runs/joint_run_r64.json
    python -m experiments joint-runs --average A/head.json,B/head.json --dev judged \\
        --out experiments/records/joint_runs/joint_heads_average.json

Records: :data:`RECORDS`. Reported in docs/RESULTS.md, "What was tried and not adopted"; the runs in
experiments/HISTORY.md (from "The joint head: the default since 2026-12-06" on). Adopted: judged positives and dev
checks, a quarter of the visits with C0 without the positive, distillation 3 and seed 1 (the default head); not
adopted: the rest, each for the dev reason RESULTS gives.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict

import torch

from unreal_demo.cli.train import joint_config, joint_flags, joint_widen
from unreal_demo.core.cpu import status_line
from unreal_demo.core.head import HeadConfig, HeadError, QueryHead
from unreal_demo.errors import UserError
from unreal_demo.evaluation.results import write_result
from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL, cache_dir, display_path
from unreal_demo.training.joint import run_joint
from unreal_demo.training.judged import open_sets
from unreal_demo.training.sets import cache_sets, fit_fusion_on_dev, grid_markdown, local, pool_of, score_row

from .common import run_main

RECORDS = ("joint_run.json", "joint_run_c0.json", "joint_run_c0_half.json", "joint_run_c0_half_320.json",
           "joint_run_c0_half_last.json", "joint_run_c0_quarter.json", "joint_run_c0_quarter_last.json",
           "joint_run_c0_quarter_lr3e-4.json", "joint_run_c0_quarter_lr3e-4_last.json", "joint_run_c5.json",
           "joint_run_judged.json", "joint_run_judged_distil.json", "joint_run_judged_distil3.json",
           "joint_run_judged_distil3_seed1.json", "joint_run_judged_more.json", "joint_run_levers.json",
           "joint_run_r16.json", "joint_run_r256.json", "joint_run_r64.json", "joint_heads_average.json",
           "fusion_w08_amazon_joint_seed1.json")  # the last: eval retrieval --corpus amazon, the default head at w 0.8


def average_heads(heads: Sequence[QueryHead]) -> QueryHead:
    """The element-wise mean of ``heads``' trained values (a "model soup", Wortsman et al. 2022): fine-tunes of
    one starting head that differ only in their batches and negatives, averaged into one head.

    Parameters
    ----------
    heads
        Two or more heads whose configurations agree in everything but the fitted fusion weight and provenance.

    Returns
    -------
    QueryHead
        A new head with the mean P, ρ, α (and adapter); its fusion weight is unset (refit it on dev) and its
        provenance lists the averaged heads' digests.

    Raises
    ------
    HeadError
        Fewer than two heads, or heads of different shapes or settings.

    Example
    -------
    >>> config = dict(model="m", hidden_size=4, n_layers=2, chunk_layer=1, n_ret=4, n_groups=2)
    >>> a, b = QueryHead(HeadConfig(**config)), QueryHead(HeadConfig(**config), seed=1)
    >>> torch.allclose(average_heads([a, b]).rho, (a.rho + b.rho) / 2)
    True
    """
    if len(heads) < 2:
        raise HeadError("averaging needs at least two heads")

    def setting(h: QueryHead) -> dict:
        return asdict(h.config) | {"fusion_weight": None, "provenance": {}}

    first = setting(heads[0])
    for h in heads[1:]:
        differ = sorted(k for k, v in setting(h).items() if v != first[k])
        if differ:
            raise HeadError(f"heads differ in {', '.join(differ)}: only fine-tunes of one head can be averaged")
    out = QueryHead(HeadConfig(**first | {"provenance": {"average of": [h.digest() for h in heads]}}))
    states = [h.state_dict() for h in heads]
    out.load_state_dict({k: torch.stack([s[k].float() for s in states]).mean(0) for k in states[0]})
    return out


def run_average(head_paths: list[str], out: str | None = None, save: str | None = None, dev: str = "judged") -> dict:
    """Average fine-tunes of one head (:func:`average_heads`, e.g. the joint recipe run with two seeds)
    and score the average next to each of them as :func:`run_joint` scores its rows (the dev sets, labelled by the
    ``dpr`` rule or judged by reading, and the New-Wiki test over the whole index); ``save`` receives the average
    with its fusion weight refitted on dev, ``out`` the result JSON."""
    if dev not in ("dpr", "judged"):
        raise ValueError(f"dev must be 'dpr' or 'judged', not {dev!r}")
    heads = [QueryHead.load(p) for p in head_paths]
    mean = average_heads(heads)  # the settings of every head checked equal (before anything large loads) …
    explorer, _, index, (_, devs, test) = open_sets(head_paths[0], None, "cleaner", dev)  # … so one set serves all
    keys, usable, _ = pool_of(index)
    folder, rows, states = cache_dir() / "query_states", [], []
    for label, model in [*zip(map(display_path, head_paths), heads, strict=True),
                         (f"the mean of these {len(heads)} heads", mean)]:
        states.append(cache_sets(model, explorer.backbone, devs, folder))
        (test_s,) = cache_sets(model, explorer.backbone, [test], folder)
        rows.append(score_row(label, model, local(states[-1], usable), keys[usable], test_s, keys,
                              {"digest": model.digest()[:16]}))
    result = {"heads": [display_path(p) for p in head_paths], "dev": dev,
              "dev sets": {q.name: len(q.texts) for q in devs}, "new_wiki test": len(test.texts), "rows": rows,
              "markdown": grid_markdown(rows)}
    result = write_result(result | {"cpu": status_line()}, out, explorer)
    if save:
        mean.config.fusion_weight = fit_fusion_on_dev(mean, index, devs, states[-1], keys, usable)  # the mean's
        mean.config.provenance |= {"average_command": result["provenance"]["command"],
                                   "average_row": rows[-1], "average_date": result["provenance"]["date"]}
        mean.save(save)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments joint-runs …`` (the joint stage's flags) or ``… joint --average A,B [--dev D]``."""
    p = argparse.ArgumentParser(prog="python -m experiments joint-runs", description=__doc__.split("\n")[0])
    p.add_argument("--head", default=None, help="starting head (default: the shipped head)")
    p.add_argument("--out", default=None, help="write the result JSON here")
    p.add_argument("--save", default=None, help="write the trained (or averaged) head here")
    p.add_argument("--average", default=None, help="instead of a run: average these comma-separated heads (fine-"
                   "tunes of one head, e.g. two seeds of one recipe), score the mean next to each on --dev, and "
                   "--save it")
    joint_flags(p)

    def handle(args: argparse.Namespace) -> None:
        if args.average:
            paths = [x.strip() for x in args.average.split(",") if x.strip()]
            if len(paths) < 2 or args.head:
                raise UserError("--average takes two or more comma-separated heads and runs alone (not with --head)")
            print(run_average(paths, args.out, args.save, args.dev)["markdown"])
            return
        head = args.head or str(DEFAULT_HEADS[DEFAULT_MODEL].with_suffix(".json"))
        result = run_joint(head, joint_config(args), args.out, args.save, train_c0=args.train_c0, keep=args.keep,
                           n_context=args.n_context, positives=args.positives, dev=args.dev,
                           widen=joint_widen(args))
        print(result["markdown"])

    return run_main(p, handle, argv)
