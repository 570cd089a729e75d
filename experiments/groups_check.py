"""How many query vectors: a trained head's ρ states cut into G groups again, without training (Eq. 3's pooling).

A head turns its R retrieval tokens' states into G query vectors by averaging R / G consecutive tokens per group
(:meth:`core.head.QueryHead.layer_groups`); α is one weight per read-out layer, shared by every group, so the same
ρ and α serve any G that divides R. More groups give MaxSim (Eq. 4) finer query vectors at G / 4 times today's scan
cost; the query encoding (one LLM pass) is unchanged, and no stored key changes. Here each question's states are
cached once with one group per retrieval token (G = R), every G is pooled from them, and each G is scored on the
adapter experiment's dev sets (the judged NQ / TriviaQA questions, SQuAD dev) and the New-Wiki test over the whole
index, exactly as the joint runs' rows (:func:`unreal_demo.training.sets.score_row`).

    python -m experiments groups-check 1,2,4,8,16,32 \\
        --head precomputed/heads/smollm2-135m-mix-joint-seed1/head.json \\
        --out experiments/records/groups_check/groups_check.json

Record: ``groups_check.json``. Reported in docs/RESULTS.md, "What was tried and not adopted" (history:
experiments/HISTORY.md, "Twice the judged natural questions, and how many query vectors"). Not adopted: G = 8 is level
at R@1, lower at R@10, at twice the scan cost.
"""

from __future__ import annotations

import argparse

import torch

from unreal_demo.core.cpu import status_line
from unreal_demo.core.head import HeadError, QueryHead
from unreal_demo.core.state_training import StateSet
from unreal_demo.errors import UserError
from unreal_demo.evaluation.results import write_result
from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL, cache_dir, display_path
from unreal_demo.training.judged import open_sets
from unreal_demo.training.sets import cache_sets, local, pool_of, score_row

from .common import run_main

RECORDS = ("groups_check.json",)


def pool_groups(states: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per-token states ``(N, |α|, R, d)`` averaged into ``n_groups`` groups of consecutive tokens ``(N, |α|, G, d)``,
    as :meth:`core.head.QueryHead.layer_groups` pools them.

    >>> s = torch.arange(8.0).reshape(1, 1, 4, 2)  # tokens (0, 1), (2, 3), (4, 5), (6, 7)
    >>> pool_groups(s, 2).tolist()
    [[[[1.0, 2.0], [5.0, 6.0]]]]
    """
    n, layers, r, d = states.shape
    return states.reshape(n, layers, n_groups, r // n_groups, d).mean(3)


def run(head_path: str, groups: list[int], out: str | None = None) -> dict:
    """Score ``head_path`` with each G of ``groups`` (every one a divisor of its R) on the judged dev sets and the
    New-Wiki test; rows as the joint runs' (:func:`unreal_demo.training.sets.score_row`) plus the dev mean R@10 and
    the number of query vectors; the result carries its table.

    Raises
    ------
    HeadError
        A bad head file, or a G that does not divide its R (before the model loads).
    """
    n_ret = QueryHead.load(head_path).config.n_ret
    if bad := [g for g in groups if n_ret % g]:
        raise HeadError(f"G = {bad[0]} does not divide the head's R = {n_ret} retrieval tokens")
    explorer, head, index, (_, devs, test) = open_sets(head_path, None, "cleaner", "judged")
    fine = head.reshaped(n_groups=head.config.n_ret)  # one group per retrieval token: every G pools from these
    folder = cache_dir() / "query_states"
    dev_s = cache_sets(fine, explorer.backbone, devs, folder)
    (test_s,) = cache_sets(fine, explorer.backbone, [test], folder)
    keys, usable, _ = pool_of(index)
    rows = []
    for g in groups:
        model = head.reshaped(n_groups=g)
        dev_g = [StateSet(s.name, pool_groups(s.groups.float(), g), s.positives) for s in dev_s]
        test_g = StateSet(test_s.name, pool_groups(test_s.groups.float(), g), test_s.positives)
        row = score_row(f"G = {g}" + (" (as trained)" if g == head.config.n_groups else ""), model,
                        local(dev_g, usable), keys[usable], test_g, keys, {"query vectors": g})
        r10 = [row[f"dev {s.name} R@10"] for s in dev_s]
        rows.append(row | {"dev mean of R@10": round(sum(r10) / len(r10), 4)})
        print({k: v for k, v in rows[-1].items() if "R@" in k or k == "variant"})
    result = {"head": display_path(head_path), "dev sets": {s.name: len(s.texts) for s in devs},
              "new_wiki test": len(test.texts), "rows": rows, "markdown": markdown(rows)}
    return write_result(result | {"cpu": status_line()}, out, explorer)


def markdown(rows: list[dict]) -> str:
    """The rows as a table: each dev set's R@1 / R@10, the dev means, the New-Wiki test."""
    cols = [k for k in rows[0] if k.startswith("dev ") and "R@" in k] + ["test new_wiki R@1", "test new_wiki R@10"]
    lines = ["| G (query vectors) | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {r['variant']} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments groups-check G,G,… [--head H] [--out FILE]``."""
    p = argparse.ArgumentParser(prog="python -m experiments groups-check", description=__doc__.split("\n")[0])
    p.add_argument("groups", metavar="G,G,…", help="numbers of query vectors G (divisors of R), comma-separated")
    p.add_argument("--head", default=str(DEFAULT_HEADS[DEFAULT_MODEL].with_suffix(".json")), help="the head to cut")
    p.add_argument("--out", default=None, help="write the result JSON here")

    def handle(args: argparse.Namespace) -> None:
        try:
            groups = [int(g) for g in args.groups.split(",")]
        except ValueError:
            raise UserError(f"G takes comma-separated whole numbers, not {args.groups!r}") from None
        if not all(g >= 1 for g in groups):
            raise UserError("G is a number of query vectors of at least 1")
        print(run(args.head, groups, args.out)["markdown"])  # a bad head or G: refused before the model loads

    return run_main(p, handle, argv)
