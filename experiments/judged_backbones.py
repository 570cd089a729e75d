"""The judged natural questions on each backbone's own index: SmolLM2's default head over the shipped index against
Qwen2.5-0.5B's head over its own index of the same 13,787 passages, paired question by question.

    python -m experiments judged-backbones --side more \\
        --out experiments/records/second_backbone/judged_more_backbones.json   # the 527 held-out questions
    python -m experiments judged-backbones --side dev \\
        --out experiments/records/second_backbone/judged_dev_backbones.json    # the 147 dev questions

The verdicts (``precomputed/judged/{dev,more}.json.gz``, :mod:`judged_dev`) were read on the chunks of the shipped
SmolLM2 index. Qwen's index cuts the same passages with its own tokenizer, so its chunk boundaries move: a Qwen
chunk counts as a positive when the text it shares with a ``yes`` chunk of the same passage holds an answer alias
(:func:`carried`); its unread alias chunks in a top 10 are counted as for any head nobody read (a miss, so R@10 is
a lower bound there). On the SmolLM2 side nothing is mapped, and its default head's row reproduces
``judged_dev``'s (a check printed beside the result).

Each backbone ranks the chunks the judged sets range over (not New-Wiki's, :func:`training.sets.masks`), C0 from
BM25 over those chunks, as ``judged-dev score`` does; BM25, dense MiniLM and the two hybrids (score fusion with the
head's dev-fitted weight, RRF k = 60) are scored on each index's own chunks. Every question's rank of its first
positive is kept per (backbone, method), and the pairs are McNemar splits at R@1 and R@10
(:func:`second_backbone.retrieval_side_by_side`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from unreal_demo.core.cpu import status_line
from unreal_demo.core.minilm import embed
from unreal_demo.core.selection import score_fusion
from unreal_demo.core.state_training import cache_layer_groups, scores
from unreal_demo.data.answers import occurs
from unreal_demo.data.natural import load_natural
from unreal_demo.errors import UserError
from unreal_demo.pipeline import Explorer
from unreal_demo.settings import PRECOMPUTED, REPO, cache_dir, display_path
from unreal_demo.store.index import Index
from unreal_demo.training.judged import JUDGED_ON, load_judged
from unreal_demo.training.sets import (
    NATURAL_SETS,
    bm25_contexts,
    bm25_within,
    chunks_by_passage,
    pool_of,
    positions,
    usable_pool,
)

from .common import dense_vectors, run_main
from .judged_dev import rrf_matrix
from .second_backbone import RECORDS, retrieval_side_by_side

BACKBONES = {"smollm2-default": ("smollm2-135m-instruct", PRECOMPUTED / "heads/smollm2-135m-mix-joint-seed1/head.json",
                                 None),
             "qwen": ("qwen2.5-0.5b", PRECOMPUTED / "heads/qwen2.5-0.5b/head.json", "qwen2.5-0.5b-l21-all")}
"""name → (model, head, its index's folder in ``<cache>/indexes``; None: the index the verdicts were read on)."""

PAIRS = [(("qwen", "unreal"), ("smollm2-default", "unreal")), (("qwen", "unreal"), ("qwen", "bm25")),
         (("smollm2-default", "unreal"), ("smollm2-default", "bm25")), (("qwen", "bm25"), ("smollm2-default", "bm25")),
         (("qwen", "hybrid-fusion"), ("smollm2-default", "hybrid-fusion")),
         (("qwen", "hybrid-fusion"), ("qwen", "bm25")), (("qwen", "hybrid-rrf"), ("smollm2-default", "hybrid-rrf"))]
DEPTH = 100  # ranks kept; a positive deeper than this counts as not found


def collapsed(texts: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """A passage's whitespace-collapsed text (its chunks' texts, each collapsed, joined by one space) and each
    chunk's character span in it, in order; chunk boundaries of two tokenizers then share one coordinate system.

    >>> collapsed(["Ab cd.", "Ef  g."])
    ('Ab cd. Ef g.', [(0, 6), (7, 12)])
    """
    parts = [" ".join(t.split()) for t in texts]
    out, start = [], 0
    for part in parts:
        out.append((start, start + len(part)))
        start += len(part) + 1
    return " ".join(parts), out


def carried(yes: list[tuple[int, int]], target: list[tuple[int, int]], passage: str,
            answers: tuple[str, ...]) -> list[int]:
    """Which ``target`` chunks (spans in ``passage``, the collapsed text) share with a ``yes`` span text that holds
    an answer alias.

    >>> p = "Paris is in France. It is large. Lyon is too."
    >>> carried([(0, 19)], [(0, 10), (10, 32), (33, 45)], p, ("France",))
    [1]
    """
    out = []
    for j, (c, d) in enumerate(target):
        if any(occurs(passage[max(a, c):min(b, d)], answers) for a, b in yes if max(a, c) < min(b, d)):
            out.append(j)
    return out


def passages(index) -> tuple[dict[str, list[int]], dict[str, str], dict[int, tuple[int, int]]]:
    """Passage id → its chunk ids (in order) and its whitespace-collapsed text; chunk id → its span in that text."""
    ids = chunks_by_passage(index.chunks)
    text, span = {}, {}
    for p, chunk_ids in ids.items():
        text[p], chunk_spans = collapsed([index.chunks[i]["text"] for i in chunk_ids])
        span |= dict(zip(chunk_ids, chunk_spans, strict=True))
    return ids, text, span


def verdict_chunks(verdict: dict) -> dict[str, list[int]]:
    """A question's ``yes`` chunks and every chunk it read (``yes``, ``partial``, ``no``)."""
    return {"yes": list(verdict["yes"]), "read": [*verdict["yes"], *verdict["partial"], *verdict["no"]]}


def mapped_positives(judged: dict, questions: list, source, target) -> tuple[dict[str, dict[str, list[int]]], int]:
    """Per question id, its ``yes`` chunks and every chunk it read (:func:`verdict_chunks`) as chunk ids of
    ``target``: the ids themselves when ``target`` is ``source``, else carried over by :func:`carried`; and how many
    passages the two collapse to different texts (a cut inside a word), where nothing is carried."""
    verdicts = {q["id"]: q for q in judged["questions"]}
    if target is source:
        return {q.id: verdict_chunks(verdicts[q.id]) for q in questions}, 0
    _, text, s_span = passages(source)
    t_ids, t_text, t_span = passages(target)
    misaligned: set[str] = set()
    out = {}
    for q in questions:
        row = {}
        for kind, chunk_ids in verdict_chunks(verdicts[q.id]).items():
            found = []
            for p in dict.fromkeys(source.chunks[c]["passage"] for c in chunk_ids):
                if t_text.get(p) != text[p]:
                    misaligned.add(p)
                    continue
                yes = [s_span[c] for c in chunk_ids if source.chunks[c]["passage"] == p]
                found += [t_ids[p][j] for j in carried(yes, [t_span[i] for i in t_ids[p]], text[p], q.answers)]
            row[kind] = found
        out[q.id] = row
    return out, len(misaligned)


def first_ranks(matrix: torch.Tensor, positives: list[list[int]]) -> list[int | None]:
    """Each row's 1-based rank of its first positive (column ids) within the top :data:`DEPTH` (None: not there).

    >>> first_ranks(torch.tensor([[0.1, 0.9, 0.5], [0.8, 0.1, 0.3]]), [[2], []])
    [2, None]
    """
    top = matrix.topk(min(DEPTH, matrix.shape[1]), dim=1).indices.tolist()
    return [next((r for r, j in enumerate(row, start=1) if j in set(p)), None)
            for row, p in zip(top, positives, strict=True)]


def unread_in_top10(matrix: torch.Tensor, questions: list, read: list[list[int]], pool: list[int], index) -> int:
    """Alias-holding chunks in the rows' top 10 (columns; ``pool`` their chunk ids) that no verdict covers: each
    counts as a miss."""
    top = matrix.topk(10, dim=1).indices.tolist()
    return sum(1 for row, q, r in zip(top, questions, read, strict=True) for j in row
               if pool[j] not in set(r) and occurs(index.chunks[pool[j]]["text"], q.answers))


def score_backbone(name: str, judged: dict, questions: list, shipped: Index) -> dict:
    """Every method's rank of each question's first positive on ``name``'s own index (:data:`BACKBONES`), over the
    chunks the judged sets range over (the score matrices' columns)."""
    model, head, folder = BACKBONES[name]
    explorer = Explorer.load(model, head=str(head), dtype="fp32", require_head=True)
    index = Index(cache_dir() / "indexes" / folder) if folder is not None else shipped
    index.check_backbone(explorer.backbone, explorer.head.config.chunk_layer)
    keys, usable, _ = pool_of(index)  # (M, L_p, d), (M,)
    pool, texts, bm25 = usable_pool(index)
    qtexts = [q.text for q in questions]
    contexts = bm25_contexts(bm25, texts, qtexts, explorer.head.config.n_context)
    groups = cache_layer_groups(explorer.head, explorer.backbone, qtexts, contexts, cache_dir() / "query_states")
    unreal = scores(explorer.head, groups, keys[usable])  # (N, P)
    lexical = bm25_within(index, qtexts, usable)[:, usable]  # (N, P)
    dense = embed(qtexts) @ dense_vectors(index)[usable].T  # (N, P)
    w = explorer.head.config.fusion_weight
    matrices = {"unreal": unreal, "bm25": lexical, "dense": dense, "hybrid-fusion": score_fusion(unreal, lexical, w),
                "hybrid-rrf": rrf_matrix(unreal, lexical)}
    mapped, misaligned = mapped_positives(judged, questions, shipped, index)
    remap = positions(usable)
    positives = [[int(remap[c]) for c in mapped[q.id]["yes"] if remap[c] >= 0] for q in questions]
    read = [mapped[q.id]["read"] for q in questions]
    return {"model": model, "head": str(head.relative_to(REPO)), "index": display_path(index.folder),
            "chunks": len(index.chunks), "ranked": len(pool), "fusion_weight": w,
            "encoded_in": explorer.backbone.encoding_name,
            "questions_without_positive": sum(not p for p in positives), "passages_misaligned": misaligned,
            "questions": [q.id for q in questions],
            "ranks": {m: first_ranks(s, positives) for m, s in matrices.items()},
            "unread_alias_chunks_in_top10": {m: unread_in_top10(s, questions, read, pool, index)
                                             for m, s in matrices.items()}}


def judged_questions(side: str) -> tuple[dict, list]:
    """The judged ``side`` and its questions with a ``yes`` chunk, in the verdicts' order."""
    judged = load_judged(side)
    by_id = {q.id: q for source in NATURAL_SETS.values() for q in load_natural(source)}
    return judged, [by_id[q["id"]] for q in judged["questions"] if q["yes"]]


def run(side: str, out: Path) -> dict:
    """Score both backbones on the judged ``side`` and pair them (written to ``out``)."""
    judged, questions = judged_questions(side)
    shipped = Index(JUDGED_ON)  # the index the verdicts were read on
    records = {name: score_backbone(name, judged, questions, shipped) for name in BACKBONES}
    table = retrieval_side_by_side(records, PAIRS)
    result = {"side": side, "questions": len(questions), "rule": __doc__.split("\n\n")[2].strip(),
              "check": reproduces(records["smollm2-default"], side),
              "backbones": {n: {k: v for k, v in r.items() if k not in ("questions", "ranks")}
                            for n, r in records.items()},
              "rows": table["rows"], "pairs": table["pairs"], "ranks": {n: r["ranks"] for n, r in records.items()},
              "question_ids": records["qwen"]["questions"], "cpu": status_line(),
              "command": f"python -m experiments judged-backbones --side {side} --out {display_path(out)}"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


JUDGED_DEV = {"dev": "judged_dev_recall_seed1.json", "more": "judged_more_recall.json"}


def reproduces(record: dict, side: str) -> dict:
    """The SmolLM2 default head's per-set mean R@1 / R@10 here beside ``judged-dev score``'s row of the same
    head (its record), which scores the same questions the same way."""
    mine = {}
    for short, source in NATURAL_SETS.items():
        ranks = [r for q, r in zip(record["questions"], record["ranks"]["unreal"], strict=True)
                 if q.startswith(source + ":")]
        mine[short] = {k: sum(r is not None and r <= k for r in ranks) / max(1, len(ranks)) for k in (1, 10)}
    path = RECORDS.parent / "judged_dev" / JUDGED_DEV[side]
    row = next(r for r in json.loads(path.read_text())["rows"] if r["variant"] == "smollm2-135m-mix-joint-seed1")
    return {"here": {f"mean R@{k}": round(sum(m[k] for m in mine.values()) / len(mine), 4) for k in (1, 10)},
            "judged_dev": {k: row[k] for k in ("mean R@1", "mean R@10")}, "record": str(path.relative_to(REPO))}


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments judged-backbones --side dev|more [--out F]``."""
    p = argparse.ArgumentParser(prog="python -m experiments judged-backbones", description=__doc__.split("\n")[0])
    p.add_argument("--side", choices=("dev", "more"), default="more",
                   help="the 147 judged dev questions or the 527 held-out ones (more)")
    p.add_argument("--out", default=None,
                   help="the record (default: records/second_backbone/judged_SIDE_backbones.json)")
    return run_main(p, handle, argv)


def handle(args: argparse.Namespace) -> None:
    """Run :func:`run` and print its rows and pairs."""
    folder = cache_dir() / "indexes" / BACKBONES["qwen"][2]
    if not (folder / "manifest.json").exists():
        raise UserError(f"no Qwen index at {display_path(folder)}: build it first with "
                        f"`python -m unreal_demo index build --model qwen2.5-0.5b --out {folder}`")
    out = Path(args.out or RECORDS / f"judged_{args.side}_backbones.json")
    result = run(args.side, out)
    for row in result["rows"] + result["pairs"]:
        print(row)
    print("check:", result["check"])
