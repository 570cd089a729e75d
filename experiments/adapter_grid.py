"""The adapter grid: α and a query adapter trained on cached query states, one variant per lever, at equal budget.

Each variant of :data:`GRID` trains α (and an adapter of rank r) on the α stage's sets (:mod:`unreal_demo.training`)
from the same head, and is scored on the dev sets and the New-Wiki test next to BM25 and dense MiniLM. Adopted: the
variant "α alone, mix", which became the α stage of the default head's recipe (``train --stage alpha``).

    python -m experiments adapter-grid --head precomputed/heads/smollm2-135m-mix/head.json \\
        --out experiments/records/adapter_grid/adapter_grid.json
    python -m experiments adapter-grid --n-context 5 --out experiments/records/adapter_grid/adapter_grid_c5.json
    python -m experiments adapter-grid --variants "α alone, mix" --save precomputed/heads/smollm2-135m-mix-alpha/head

Records (:data:`RECORDS`): the grid's ``adapter_grid.json`` and ``adapter_grid_c5.json``, and the ``dpr`` and
``title`` rules' positives read by hand (``distant_supervision_precision.json``, ``distant_supervision_title.json``).
Reported in docs/RESULTS.md, "What was tried and not adopted"; the runs in experiments/HISTORY.md, "Query adapter
and natural questions".
"""

from __future__ import annotations

import argparse

import torch

from unreal_demo.core.joint_training import TextSet
from unreal_demo.core.selection import BM25
from unreal_demo.core.state_training import StateSet, StateTrainConfig
from unreal_demo.data.natural import distant_positives
from unreal_demo.errors import UserError
from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL, cache_dir
from unreal_demo.training.alpha import Variant, finish, prepare
from unreal_demo.training.judged import judged_sets, require_read_on
from unreal_demo.training.sets import (
    NATURAL_SETS,
    cache_sets,
    natural_questions,
    usable_pool,
    without_positive_c0,
)

from .common import bm25_recall, centred_keys, dense_recall, print_rows, run_main

RECORDS = ("adapter_grid.json", "adapter_grid_c5.json",  # the grid, and the natural labels read by hand:
           "distant_supervision_precision.json", "distant_supervision_title.json")

GRID = {  # label → (train sets, overrides of StateTrainConfig): what the dev split decides, at equal budget
    "α alone, mix": (("nq", "tqa", "squad"), {"rank": 0}),
    "r = 64, mix": (("nq", "tqa", "squad"), {"rank": 64}),
    "full d × d, mix": (("nq", "tqa", "squad"), {"rank": -1}),
    "r = 16, mix": (("nq", "tqa", "squad"), {"rank": 16}),
    "r = 256, mix": (("nq", "tqa", "squad"), {"rank": 256}),
    "r = 64, mix, cleaner positives (BM25 rank ≤ 3)": (("nq@3", "tqa@3", "squad"), {"rank": 64}),
    "r = 64, natural only": (("nq", "tqa"), {"rank": 64}),
    "r = 64, SQuAD only": (("squad",), {"rank": 64}),
    "r = 64, mix, adapter alone (α fixed)": (("nq", "tqa", "squad"), {"rank": 64, "train_alpha": False}),
    "r = 64, mix, whole-pool negatives": (("nq", "tqa", "squad"), {"rank": 64, "negatives": "pool"}),
    "α alone, mix, keys centred": (("nq", "tqa", "squad"), {"rank": 0, "centre": True}),
    "r = 64, mix, cleaner positives, keys centred": (("nq@3", "tqa@3", "squad"), {"rank": 64, "centre": True}),
    "α alone, mix, half the visits with C0 without the positive": (("nq", "tqa", "squad", "nq~", "tqa~", "squad~"),
                                                                   {"rank": 0}),
    "α alone, mix, C0 without the positive": (("nq~", "tqa~", "squad~"), {"rank": 0}),
    "r = 64, mix, half the visits with C0 without the positive": (("nq", "tqa", "squad", "nq~", "tqa~", "squad~"),
                                                                  {"rank": 64}),
    "α alone, mix, title positives": (("nq:title", "tqa:title", "squad"), {"rank": 0}),
    "r = 64, mix, title positives": (("nq:title", "tqa:title", "squad"), {"rank": 64}),
    "α alone, mix, judged positives": (("nq:judged", "tqa:judged", "squad"), {"rank": 0}),
    "r = 16, mix, judged positives": (("nq:judged", "tqa:judged", "squad"), {"rank": 16}),
    "r = 64, mix, judged positives": (("nq:judged", "tqa:judged", "squad"), {"rank": 64}),
}


def titled(index, pooled: tuple[list[int], list[str], BM25], sets: list[TextSet], cached: list[StateSet],
           ) -> list[StateSet]:
    """The natural sets with positives by the ``title`` rule (named ``nq:title``, …): the best-ranked of BM25's top
    100 usable chunks whose passage *title* is an answer alias and whose text holds one — a chunk about the answer,
    not one that mentions it (50 read pairs: 23 right, 19 without the borderline ones; TriviaQA 22 of 41, NQ 1 of 9;
    ``experiments/records/adapter_grid/distant_supervision_title.json``); questions without one are dropped. The
    questions are those of the ``dpr`` sets, so their cached states serve unchanged. ``pooled``: :func:`usable_pool`'s
    chunk ids, texts and BM25."""
    pool, texts, bm25 = pooled
    titles = [index.chunks[i]["title"] for i in pool]
    out = []
    natural = [(q, c) for q, c in zip(sets, cached, strict=True) if q.name in NATURAL_SETS]
    for (q, c), questions in zip(natural, natural_questions([q for q, _ in natural]), strict=True):
        found = distant_positives(questions, texts, bm25, rule="title", titles=titles)
        keep = [i for i, f in enumerate(found) if f]
        out.append(StateSet(f"{q.name}:title", c.groups[keep], [[pool[j] for j in found[i]] for i in keep]))
    return out


def variants(labels: list[str] | None, steps: int, hidden_size: int) -> list[Variant]:
    """The :data:`GRID` variants of ``labels`` (all by default), each trained ``steps`` steps; rank −1 is the full
    d × d map (``hidden_size``)."""
    out = []
    for label, (sources, overrides) in GRID.items():
        if labels is None or label in labels:
            settings = {"steps": steps} | {k: v for k, v in overrides.items() if k != "centre"}
            if settings.get("rank") == -1:
                settings["rank"] = hidden_size
            out.append(Variant(label, sources, StateTrainConfig(**settings), overrides.get("centre", False)))
    return out


def run(head_path: str, n_context: int | None = None, labels: list[str] | None = None, steps: int = 600,
        out: str | None = None, save: str | None = None, save_label: str | None = None, dev: str = "dpr") -> dict:
    """The grid end to end: the α stage's sets and cached states (:func:`training.alpha.prepare`), the train sets
    the chosen variants name (title positives ``:title``, judged ``:judged``, C0 without the positive ``~``), the
    variants, BM25 and dense MiniLM as reference rows, the result (``out``) and the best variant on dev (or
    ``save_label``) as a head (``save``)."""
    stage = prepare(head_path, n_context, dev)
    chosen = variants(labels, steps, stage.head.config.hidden_size)
    named = {src for v in chosen for src in v.sources}
    n = len(stage.trains)
    pooled = usable_pool(stage.index) if any(s.endswith((":title", "~")) for s in named) else None  # BM25 built once
    if any(s.endswith(":title") for s in named):
        stage.train_s += titled(stage.index, pooled, stage.trains, stage.train_s[:n])
    if any(s.endswith(":judged") for s in named):
        require_read_on(stage.index)
        stage.train_s += judged_sets("train", stage.trains, stage.train_s[:n])[1]
    if any(s.endswith("~") for s in named):  # C0 without the positive
        stage.train_s += cache_sets(stage.head, stage.explorer.backbone,
                                    without_positive_c0(*pooled, stage.trains, stage.head.config.n_context),
                                    cache_dir() / "query_states")
    everything = torch.ones(len(stage.index.chunks), dtype=torch.bool)
    reference = []
    for name, fn in {"BM25": bm25_recall, "dense MiniLM": dense_recall}.items():
        r = {"variant": name}
        for s in stage.devs:
            r |= {f"dev {s.name} {k}": v for k, v in fn(stage.index, s, stage.usable).items()}
        reference.append(r | {f"test new_wiki {k}": v for k, v in fn(stage.index, stage.test, everything).items()})
    centred = centred_keys(stage.index)[0] if any(v.centre for v in chosen) else None
    return finish(stage, head_path, chosen, out, save, save_label, reference, centred)


def parser() -> argparse.ArgumentParser:
    """The grid's flags."""
    p = argparse.ArgumentParser(prog="python -m experiments adapter-grid", description=__doc__.split("\n")[0])
    p.add_argument("--head", default=None, help="starting head (default: the shipped head)")
    p.add_argument("--n-context", dest="n_context", type=int, default=None, help="|C0| (default: the head's)")
    p.add_argument("--variants", default=None, help="';'-separated grid labels (default: the whole grid)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--out", default=None, help="write the result JSON here")
    p.add_argument("--save", default=None, help="write the best variant on dev (or --save-variant) as a head here")
    p.add_argument("--save-variant", dest="save_variant", default=None)
    p.add_argument("--dev", choices=("dpr", "judged"), default="dpr",
                   help="the natural dev sets: labelled by the dpr rule, or their questions with a chunk judged by "
                   "reading to answer them (precomputed/judged/dev.json.gz)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments adapter-grid …``."""
    def handle(args: argparse.Namespace) -> None:
        if args.n_context is not None and not 0 <= args.n_context <= 16:
            raise UserError(f"--n-context is |C0|, from 0 to 16 passages, not {args.n_context}")
        labels = [x.strip() for x in args.variants.split(";")] if args.variants else None
        if unknown := [x for x in labels or [] if x not in GRID]:
            raise UserError(f"unknown variant {unknown[0]!r}; known: {'; '.join(GRID)}")
        head = args.head or str(DEFAULT_HEADS[DEFAULT_MODEL].with_suffix(".json"))
        result = run(head, args.n_context, labels, args.steps, args.out, args.save, args.save_variant, args.dev)
        print_rows(result["rows"] + result["reference"])

    return run_main(parser(), handle, argv)
