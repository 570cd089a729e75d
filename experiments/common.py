"""Helpers shared by several experiments: the index's dense vectors and centred keys, the BM25 and dense MiniLM
reference rows, the grid's finished variants, and a row printer.

Experiments import the library (``unreal_demo``); the library never imports them.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from unreal_demo.core.head import QueryHead
from unreal_demo.core.joint_training import TextSet
from unreal_demo.core.maxsim import normalize_chunks
from unreal_demo.core.minilm import embed
from unreal_demo.core.state_training import recall_from_scores
from unreal_demo.errors import UserError
from unreal_demo.evaluation.retrieval import mcnemar_p
from unreal_demo.settings import cache_dir
from unreal_demo.training.sets import bm25_within

RECORDS = Path(__file__).resolve().parent / "records"


def paired(a: Sequence[int | None], b: Sequence[int | None], k: int) -> dict:
    """R@k of two rank lists over the same questions, compared question by question: how many only ``a`` / only
    ``b`` finds within ``k``, and :func:`unreal_demo.evaluation.retrieval.mcnemar_p` of that split.

    >>> paired([1, 3, None, 1], [2, 1, 1, None], 1)
    {'k': 1, 'a': 0.5, 'b': 0.5, 'a_only': 2, 'b_only': 2, 'p': 1.0}
    """
    if len(a) != len(b):
        raise ValueError(f"paired ranks need the same questions ({len(a)} against {len(b)})")
    hit_a = [r is not None and r <= k for r in a]
    hit_b = [r is not None and r <= k for r in b]
    a_only = sum(x and not y for x, y in zip(hit_a, hit_b, strict=True))
    b_only = sum(y and not x for x, y in zip(hit_a, hit_b, strict=True))
    n = max(1, len(a))
    return {"k": k, "a": round(sum(hit_a) / n, 4), "b": round(sum(hit_b) / n, 4), "a_only": a_only,
            "b_only": b_only, "p": mcnemar_p(a_only, b_only)}


def record(experiment: str, name: str) -> str:
    """The repository-relative path of the record ``name`` of ``experiment``: ``experiments/records/EXP/NAME``."""
    return f"experiments/records/{experiment}/{name}"


def variants_folder() -> Path:
    """Where the grid keeps its finished variants (``<cache>/adapter_variants``, :func:`alpha.run_variants`)."""
    return cache_dir() / "adapter_variants"


@functools.cache
def dense_vectors(index) -> torch.Tensor:
    """The index's stored MiniLM vectors ``(M, 384)``, decoded once per opened index."""
    return torch.cat([torch.from_numpy(index.dense_vectors(s)) for s in index.shards]).float()


def centred_keys(index) -> tuple[torch.Tensor, torch.Tensor]:
    """The index's keys centred on their mean vector, then normalised ``(M, L_p, d)``, and that mean ``(d,)``.

    A MaxSim score with a normalised query moves by the same −⟨q, μ⟩ for every chunk, so centring changes a
    ranking only through each vector's norm ‖k − μ‖ (against ‖k‖): the few large outlier dimensions of ℓc's
    residual stream, nearly constant across chunks, stop dominating it. An index would carry μ as one stored
    vector beside its codes."""
    raw = torch.cat([index.vectors(shard) for shard in index.shards]).float()  # (M, L_p, d)
    mu = raw.reshape(-1, raw.shape[-1]).mean(0)  # (d,)
    return normalize_chunks(raw - mu), mu


def bm25_recall(index, data: TextSet, usable: torch.Tensor, ks=(1, 10)) -> dict[str, float]:
    """BM25's R@k for a set over the chunks ``usable`` marks (the same candidates UNREAL ranks)."""
    return recall_from_scores(bm25_within(index, data.texts, usable), data.positives, ks)


def dense_recall(index, data: TextSet, usable: torch.Tensor, ks=(1, 10)) -> dict[str, float]:
    """Dense MiniLM's R@k for a set over the chunks ``usable`` marks (the index's stored MiniLM vectors)."""
    scores = embed(data.texts) @ dense_vectors(index).T  # (N, M)
    scores[:, ~usable] = float("-inf")
    return recall_from_scores(scores, data.positives, ks)


def grid_heads(folder: Path, n_context: int) -> list[tuple[str, object, bool]]:
    """Every finished grid variant in ``folder`` (:func:`variants_folder`) whose head reads ``n_context``
    C0 chunks: (label, head, trained on centred keys)."""
    out = []
    for row_file in sorted(Path(folder).glob("*/row.json")):
        row = json.loads(row_file.read_text())
        head = QueryHead.load(row_file.parent / "head")
        if head.config.n_context == n_context:  # a variant whose dev checks ran on the judged dev set says so
            judged = " (step chosen on the judged dev set)" if any(":judged" in k for k in row) else ""
            out.append((row["variant"] + judged, head, "keys" in row))
    return sorted(out, key=lambda t: t[0])


def print_rows(rows: list[dict]) -> None:
    """Each row on one line: its label and its recall columns."""
    for row in rows:
        print(f"{row['variant']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if "R@" in k))


def run_main(parser: argparse.ArgumentParser, handler, argv: list[str] | None) -> int:
    """Parse ``argv`` and run ``handler(args)``; a :class:`errors.UserError` exits 2 with one line on stderr."""
    args = parser.parse_args(argv)
    try:
        handler(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
