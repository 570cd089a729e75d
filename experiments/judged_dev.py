"""Natural questions whose positives were read, not matched: the judged sets.

The grid's natural sets (:mod:`adapter_grid`) are labelled by the ``dpr`` rule — the best-ranked of BM25's top 100
chunks holding an answer alias — which is right for about a quarter of the questions and BM25-ranked by
construction, so dev R@k cannot reward a head that finds a *better* chunk than the alias match BM25 found. Here
every chunk that holds an answer alias and sits in the top :data:`DEPTH` of any compared retriever (BM25, dense
MiniLM, the shipped heads; plus the ``dpr`` positive) is a candidate, and each candidate is read with its question
and marked by :data:`RULE`. A question's positives are its ``yes`` chunks; a question without one is left out
(nobody can find it among the candidates); ``lenient`` rows count ``partial`` chunks too.

The questions are the grid's NQ and TriviaQA questions, so their cached query states serve unchanged and every
finished variant is scored in seconds. R@10 is exact for the retrievers that made the candidates; for any other
head an unread alias chunk in its top 10 counts as a miss, and :func:`run` reports how many there were.

    python -m experiments judged-dev candidates [--side train|more]  # <cache>/judged_dev/candidates*.jsonl
    python -m experiments judged-dev collect --verdicts V.jsonl ... --judged-by WHO [--side train|more]
    python -m experiments judged-dev score --out experiments/records/judged_dev/judged_dev_recall.json
    python -m experiments judged-dev score --side more --out experiments/records/judged_dev/judged_more_recall.json

Records: the verdicts ``precomputed/judged/{dev,train,more}.json.gz`` (read by ``train --stage joint --positives
judged --dev judged``, the default head's recipe) and the scores in :data:`RECORDS`. Reported in docs/RESULTS.md,
"Natural questions judged by reading" (history: experiments/HISTORY.md, "A natural dev set judged by reading").
Adopted: the judged train positives and dev checks are the joint stage's.
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import replace
from pathlib import Path

import torch

from unreal_demo.core.cpu import status_line
from unreal_demo.core.head import QueryHead
from unreal_demo.core.minilm import embed
from unreal_demo.core.selection import reciprocal_rank_fusion, score_fusion
from unreal_demo.core.state_training import StateSet, recall_from_scores, scores, states_key
from unreal_demo.data.answers import occurs
from unreal_demo.errors import InputError, UserError
from unreal_demo.evaluation.results import write_result
from unreal_demo.pipeline import Explorer
from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL, PRECOMPUTED, cache_dir, display_path
from unreal_demo.store.index import Index, shipped_folder
from unreal_demo.training.judged import judged_path, load_judged, natural_sets
from unreal_demo.training.sets import NATURAL_SETS, bm25_within, cache_sets, natural_questions, pool_of, positions

from .common import centred_keys, dense_vectors, grid_heads, run_main, variants_folder

RECORDS = ("judged_dev_recall.json", "judged_dev_recall_seed1.json", "judged_more_recall.json")
DEPTH = 10  # each retriever's top DEPTH chunks are read for an answer alias
# precomputed/heads/…: the heads whose top 10 made the candidates (fixed: the verdicts are on their chunks) …
HEADS = ("smollm2-135m-mix", "smollm2-135m-mix-alpha", "smollm2-135m-mix-adapter")
# … and every shipped head, scored on the judged set
SCORED = (*HEADS, "smollm2-135m-mix-joint", "smollm2-135m-mix-joint-seed1", "smollm2-135m-mix-joint-r64")
JOINT_START = "smollm2-135m-mix-alpha"  # the head whose joint fine-tunes on this machine are scored too


RULE = ("yes: the chunk, read alone with its title, states the answer to the question, key constraints (date, "
        "place, role) included, or one clue that pins the answer down; partial: it links the answer to the "
        "question's topic but misses one key constraint, gives only part of a many-part answer, or needs a small "
        "outside inference; no: the answer string occurs in passing, in another sense or another context")


def top_ids(score_matrix: torch.Tensor, depth: int = DEPTH) -> list[list[int]]:
    """Each row's ``depth`` best columns, best first."""
    return score_matrix.topk(depth, dim=1).indices.tolist()


def candidates(index, devs, states: list[StateSet], usable: torch.Tensor, keys: torch.Tensor,
               heads: dict[str, object]) -> list[dict]:
    """One row per natural question: its id, set, text, answers and the chunk ids to read.

    Parameters
    ----------
    devs : the grid's dev (or train) :class:`TextSet` (only ``nq`` and ``tqa`` are used); ``states`` their cached
        states.
    usable : mask of the chunks the dev sets range over; ``keys`` their normalised keys ``(P, L_p, d)``.
    heads : label → :class:`core.head.QueryHead`, each scored on the cached states.

    Returns
    -------
    Rows with ``candidates``: every usable chunk id in a retriever's top :data:`DEPTH` (BM25, dense MiniLM,
    each head) whose text holds an answer alias, and the ``dpr`` positive, in first-seen order.
    """
    pool = torch.nonzero(usable).squeeze(1)  # local position → chunk id
    natural = [(d, s) for d, s in zip(devs, states, strict=True) if d.name in NATURAL_SETS]
    rows = []
    for (d, s), qs in zip(natural, natural_questions([d for d, _ in natural]), strict=True):
        tops = [top_ids(bm25_within(index, d.texts, usable)[:, usable])]
        dense = embed(d.texts) @ dense_vectors(index)[usable].T  # (N, P)
        tops.append(top_ids(dense))
        tops += [top_ids(scores(h, s.groups, keys)) for h in heads.values()]
        for i, q in enumerate(qs):
            seen: dict[int, None] = {}
            for top in tops:
                for j in top[i]:
                    c = int(pool[j])
                    if c not in seen and occurs(index.chunks[c]["text"], q.answers):
                        seen[c] = None
            for c in d.positives[i]:
                seen.setdefault(c, None)
            rows.append({"id": q.id, "set": d.name, "question": q.text, "answers": list(q.answers),
                         "candidates": list(seen)})
    return rows


def judged_positives(qs, judged: dict, usable: torch.Tensor) -> tuple[list[int], list[list[int]]]:
    """(the rows of ``qs`` with a ``yes`` chunk, their ``yes`` chunks as positions among the usable chunks)."""
    remap = positions(usable)
    verdicts = {q["id"]: q for q in judged["questions"]}
    keep = [i for i, q in enumerate(qs) if verdicts.get(q.id, {}).get("yes")]
    return keep, [[int(remap[c]) for c in verdicts[qs[i].id]["yes"] if remap[c] >= 0] for i in keep]


def unread(top: list[list[int]], qs, judged: dict, index, pool: torch.Tensor) -> int:
    """How many alias-holding chunks in the rows of ``top`` (positions among the usable chunks, ``pool`` their
    chunk ids) were never read."""
    verdicts = {q["id"]: q for q in judged["questions"]}
    n = 0
    for row, q in zip(top, qs, strict=True):
        v = verdicts[q.id]
        read = {*v["yes"], *v["partial"], *v["no"]}
        n += sum(1 for j in row if int(pool[j]) not in read and occurs(index.chunks[int(pool[j])]["text"], q.answers))
    return n


def recall_row(label: str, matrices: list[torch.Tensor], names: list[str], qs: list[list], judged: dict,
               usable: torch.Tensor) -> dict:
    """R@1 / R@10 of score matrices ``(N, P)`` (one per set, rows = ``qs``) on the judged questions, per set and
    their mean over sets."""
    row = {"variant": label}
    for m, name, q in zip(matrices, names, qs, strict=True):
        keep, positives = judged_positives(q, judged, usable)
        row |= {f"{name} {k}": v for k, v in recall_from_scores(m[keep], positives).items()}
    for k in ("R@1", "R@10"):
        row[f"mean {k}"] = round(sum(row[f"{n} {k}"] for n in names) / len(names), 4)
    return row


def candidate_heads(explorer) -> dict[str, object]:
    """The heads whose top 10 make the candidates: the shipped heads of the default model, and the grid's
    "α alone, mix, title positives" when this machine has it (``<cache>/adapter_variants``)."""
    heads = {name: QueryHead.load(PRECOMPUTED / "heads" / name / "head") for name in HEADS}
    n = explorer.head.config.n_context
    heads |= {label: h for label, h, _ in grid_heads(variants_folder(), n)
              if label == "α alone, mix, title positives"}
    return heads


def candidates_path(side: str = "dev") -> Path:
    """Where :func:`write_candidates` writes: ``<cache>/judged_dev/candidates.jsonl`` (``candidates-train.jsonl``)."""
    return cache_dir() / "judged_dev" / ("candidates.jsonl" if side == "dev" else f"candidates-{side}.jsonl")


def write_candidates(side: str = "dev", out: Path | None = None) -> Path:
    """The candidates (:func:`candidates`) of the natural questions of ``side`` with each chunk's title and text,
    one JSON line per question, for reading; ``out`` defaults to :func:`candidates_path`."""
    explorer, index = _open()
    devs = natural_sets(index, explorer.head.config.n_context, side)
    states = cache_sets(explorer.head, explorer.backbone, devs, cache_dir() / "query_states")
    keys, usable, _ = pool_of(index)
    heads = candidate_heads(explorer)
    rows = candidates(index, devs, states, usable, keys[usable], heads)
    out = Path(out or candidates_path(side))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for r in rows:
            chunks = [{"chunk": c, "title": index.chunks[c]["title"], "text": index.chunks[c]["text"]}
                      for c in r.pop("candidates")]
            f.write(json.dumps(r | {"chunks": chunks, "heads": list(heads)}, ensure_ascii=False) + "\n")
    return out


def collect(candidates_file: Path, verdict_files: list[Path], judged_by: str, out: Path) -> dict:
    """Merge read verdicts (JSON lines ``{"id", "chunk", "verdict": "yes"|"partial"|"no"}``) into the compact
    judged set written to ``out``.

    Raises
    ------
    ValueError
        A candidate without a verdict, a verdict for no candidate, or an unknown verdict.
    """
    rows = [json.loads(line) for line in Path(candidates_file).read_text().splitlines()]
    verdicts: dict[tuple[str, int], str] = {}
    for f in verdict_files:
        for n, line in enumerate(Path(f).read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                v = json.loads(line)
                pair, verdict = (str(v["id"]), int(v["chunk"])), v["verdict"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{f}:{n}: not a verdict line {{\"id\", \"chunk\", \"verdict\"}} ({e})") from None
            if verdict not in ("yes", "partial", "no"):
                raise ValueError(f"{f}:{n}: unknown verdict {verdict!r} for {pair[0]} chunk {pair[1]}")
            if verdicts.get(pair, verdict) != verdict:
                raise ValueError(f"{f}:{n}: {pair[0]} chunk {pair[1]} is read both {verdicts[pair]!r} and {verdict!r}")
            verdicts[pair] = verdict
    wanted = {(r["id"], c["chunk"]) for r in rows for c in r["chunks"]}
    if missing := wanted - verdicts.keys():
        raise ValueError(f"{len(missing)} candidates have no verdict, e.g. {sorted(missing)[0]}")
    if extra := verdicts.keys() - wanted:
        raise ValueError(f"{len(extra)} verdicts are for no candidate, e.g. {sorted(extra)[0]}")
    questions = [{"id": r["id"]} | {k: [c["chunk"] for c in r["chunks"] if verdicts[(r["id"], c["chunk"])] == k]
                                    for k in ("yes", "partial", "no")} for r in rows]
    judged = {"rule": RULE, "judged_by": judged_by, "depth": DEPTH, "heads": rows[0]["heads"] if rows else [],
              "questions": questions}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_bytes(gzip.compress(json.dumps(judged, ensure_ascii=False, separators=(",", ":")).encode(),
                                        mtime=0))
    return judged


def _open():
    explorer = Explorer.load(head=str(PRECOMPUTED / "heads" / HEADS[0] / "head.json"), require_head=True)
    return explorer, Index(shipped_folder(explorer))


def judged_questions(sets: list[tuple[str, int]]) -> int:
    """How many judged natural questions a joint run trained on, from its checkpoint's (set name, size) pairs: a set
    and its copy with C0 without the positive (``name~``) hold the same questions, and a run may train on the copy
    alone; more than the judged train side's questions means it trained on the more side too.

    >>> judged_questions([("nq:judged", 145), ("squad", 600), ("nq:judged~", 145), ("tqa:judged~", 392)])
    537
    """
    sizes = {n.rstrip("~"): size for n, size in sets}
    return sum(size for n, size in sizes.items() if n.endswith(":judged"))


def joint_heads(start, without_more: bool = False) -> list[tuple[str, object]]:
    """The last state of every joint fine-tune from ``start`` kept on this machine (``<cache>/joint_runs``), and its
    best dev check's state when that is neither step 0 nor the last step; ``without_more``: not the runs that
    trained on the judged more side (:func:`judged_questions`)."""
    from ..core.head import QueryHead
    out = []
    judged_train = sum(1 for q in load_judged("train")["questions"] if q["yes"])  # more: a judged-more run
    for ckpt in sorted((cache_dir() / "joint_runs").glob(f"{start.digest()[:12]}-*/checkpoint.pt")):
        state = torch.load(ckpt, weights_only=False)
        settings, names = state["settings"], [n for n, _ in state["settings"]["sets"]]
        c0 = ("C0 from BM25" if not any("~" in n for n in names) else "every visit without the positive"
              if all("~" in n for n in names) else "1 in 4 visits without the positive" if "weights" in settings
              else "1 in 2 visits without the positive")
        judged_dev = any(":judged" in k for k in state["history"][0])  # its dev checks ran on the judged set
        judged = judged_questions(settings["sets"])
        if without_more and judged > judged_train:
            continue
        positives = ("" if not judged else ", judged positives with the more side" if judged > judged_train
                     else ", judged positives")
        label = (f"joint ρ + α, {c0}{positives}, "
                 f"lr(ρ) {settings['lr_rho']:g}" + (f", distillation {settings['distil']:g}" if settings.get("distil")
                                                     else "")
                 + (f" toward score fusion (w {settings['teacher_fusion']:g})" if settings.get("teacher_fusion")
                    is not None else "") + (", judged dev checks" if judged_dev else ""))
        last, best = state["history"][-1]["step"], state["best"]["step"]
        for step, weights in ((last, state["model"]), *(((best, state["best_state"]),) if 0 < best < last else ())):
            head = QueryHead(start.config)
            head.load_state_dict(weights)
            out.append((f"{label}, step {step}" + (" (its best dev check)" if step == best else ""), head.eval()))
    return out


def run(out: str | None = None, side: str = "dev") -> dict:
    """Score BM25, dense MiniLM, the shipped heads (and the default head's two hybrids), every finished grid variant
    and every joint run kept on this machine (:func:`joint_heads`) on the judged ``side`` (positives: ``yes``;
    lenient: ``yes`` or ``partial``); the result carries its table (:func:`markdown`).

    ``side="more"`` scores the judged train questions the grid's sample left out (:func:`training.sets.more_train_sets`)
    instead of the dev set: no head but a ``judged-more`` joint run trained on them (left out here), so for every
    other head they are held-out natural questions, three times the dev set's; only their questions with a ``yes``
    chunk are encoded, so there the lenient rows count ``partial`` chunks of those questions only (on dev they
    also count the questions with a ``partial`` chunk alone)."""
    if side not in ("dev", "more"):
        raise ValueError(f"side must be 'dev' or 'more', not {side!r}")
    judged = load_judged(side)
    explorer, index = _open()
    devs = natural_sets(index, explorer.head.config.n_context, side)
    qs, names = natural_questions(devs), [d.name for d in devs]
    if side == "more":  # only its questions with a yes chunk (a third of the side) are encoded
        yes = {q["id"] for q in judged["questions"] if q["yes"]}
        keep = [[i for i, x in enumerate(q) if x.id in yes] for q in qs]
        devs = [replace(d, texts=[d.texts[i] for i in k], contexts=[d.contexts[i] for i in k],
                        positives=[d.positives[i] for i in k]) for d, k in zip(devs, keep, strict=True)]
        qs = [[q[i] for i in k] for q, k in zip(qs, keep, strict=True)]
    folder = cache_dir() / "query_states"
    keys, usable, _ = pool_of(index)
    pool = torch.nonzero(usable).squeeze(1)
    keys, centred = keys[usable], centred_keys(index)[0][usable]
    lenient = judged | {"questions": [q | {"yes": q["yes"] + q["partial"]} for q in judged["questions"]]}
    kept = [judged_positives(q, judged, usable)[0] for q in qs]

    def row(label: str, matrices: list[torch.Tensor]) -> dict:
        r = recall_row(label, matrices, names, qs, judged, usable)
        loose = recall_row(label, matrices, names, qs, lenient, usable)
        r |= {f"lenient mean {k}": loose[f"mean {k}"] for k in ("R@1", "R@10")}
        r["unread alias chunks in top 10"] = sum(unread(top_ids(m[keep]), [q[i] for i in keep], judged, index, pool)
                                                 for m, q, keep in zip(matrices, qs, kept, strict=True))
        print(r)
        return r

    base = cache_sets(explorer.head, explorer.backbone, devs, folder)
    bm25 = [bm25_within(index, d.texts, usable)[:, usable] for d in devs]
    reference = [row("BM25", bm25),
                 row("dense MiniLM", [embed(d.texts) @ dense_vectors(index)[usable].T for d in devs])]
    shipped = {name: QueryHead.load(PRECOMPUTED / "heads" / name / "head") for name in SCORED}
    models = [(name, h, False) for name, h in shipped.items()]
    models += [(f"grid: {label}", h, c) for label, h, c in grid_heads(variants_folder(),
                                                                       explorer.head.config.n_context)]

    def own_states(h) -> list:  # a head that reads the question with its own ρ (or P) has its own states
        return base if reads_alike(h, explorer.head) else cache_sets(h, explorer.backbone, devs, folder)

    rows = [row(label, [scores(h, s.groups, centred if c else keys) for s in own_states(h)]) for label, h, c in models]
    default_name = DEFAULT_HEADS[DEFAULT_MODEL].parent.name
    default = shipped[default_name]  # the app's default head, its hybrids as a search runs them
    unreal = [scores(default, s.groups, keys) for s in own_states(default)]
    w = default.config.fusion_weight
    reference.append(row(f"{default_name} + BM25, score fusion (w = {w})",
                         [score_fusion(u, b, w) for u, b in zip(unreal, bm25, strict=True)]))
    reference.append(row(f"{default_name} + BM25, RRF (k = 60)", [rrf_matrix(u, b) for u, b in zip(unreal, bm25,
                                                                                                   strict=True)]))
    for label, h in joint_heads(shipped[JOINT_START], without_more=side == "more"):  # not a run trained on them
        rows.append(row(label, [scores(h, s.groups, keys) for s in own_states(h)]))
    verdicts = {q["id"]: q for q in judged["questions"]}
    dpr = {d.name: {k: sum(d.positives[i][0] in verdicts[x.id][k] for i, x in enumerate(q))
                    for k in ("yes", "partial", "no")} for d, q in zip(devs, qs, strict=True)}
    result = {"dpr positive judged": dpr,
              "judged": {n: len(k) for n, k in zip(names, kept, strict=True)},
              "lenient": {n: len(judged_positives(q, lenient, usable)[0]) for n, q in zip(names, qs, strict=True)},
              "side": side, "questions": len(judged["questions"]), "rows": rows, "reference": reference,
              "cpu": status_line()}
    result["markdown"] = markdown(result)
    return write_result(result, out, explorer)


def reads_alike(a, b) -> bool:
    """Whether heads ``a`` and ``b`` turn a question into the same cached states (the same ρ, P and every setting
    the states' cache key holds, :func:`core.state_training.states_key`): then they differ only after the LLM (α,
    the adapter) and may share one cache of states.

    >>> from unreal_demo.core.head import HeadConfig, QueryHead
    >>> a = QueryHead(HeadConfig(model="tiny", hidden_size=8, n_layers=2, chunk_layer=1, n_ret=2, n_groups=1))
    >>> b = QueryHead(a.config); _ = b.load_state_dict(a.state_dict())
    >>> _ = b.alpha.data.add_(1.0); reads_alike(a, b)
    True
    >>> _ = b.rho.data.add_(1.0); reads_alike(a, b)
    False
    """
    return states_key(a, [], []) == states_key(b, [], [])


def rrf_matrix(a: torch.Tensor, b: torch.Tensor, depth: int = 100) -> torch.Tensor:
    """Reciprocal-rank fusion of two score matrices' top ``depth`` lists as a score matrix ``(N, P)`` (−inf outside
    both lists), as :class:`retrieval.hybrid.HybridRRF` fuses them."""
    out = torch.full_like(a, float("-inf"), dtype=torch.float)
    for i, (x, y) in enumerate(zip(top_ids(a, depth), top_ids(b, depth), strict=True)):
        for j, v in reciprocal_rank_fusion([x, y]):
            out[i, j] = v
    return out


COLUMNS = ("nq R@1", "nq R@10", "tqa R@1", "tqa R@10", "mean R@1", "mean R@10", "lenient mean R@1",
           "lenient mean R@10", "unread alias chunks in top 10")


def markdown(result: dict) -> str:
    """The result as a table: the heads, then the references (BM25, dense MiniLM, the default head's hybrids); rows
    with identical numbers in every column (a grid variant whose best dev check was step 0 is the head it started
    from) share one line, their labels joined by " = "."""
    merged: dict[tuple, list[str]] = {}
    for r in result["rows"] + result["reference"]:
        merged.setdefault(tuple(r[c] for c in COLUMNS), []).append(r["variant"])
    lines = ["| retriever | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {' = '.join(labels)} | " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in values)
              + " |" for values, labels in merged.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments judged-dev candidates|collect|score [--side dev|train|more] …``."""
    p = argparse.ArgumentParser(prog="python -m experiments judged-dev", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("candidates", "collect", "score"),
                   help="write the candidate chunks to read, collect the read verdicts into "
                   "precomputed/judged/SIDE.json.gz, or score every head on the judged side")
    p.add_argument("--side", choices=("dev", "train", "more"), default="dev",
                   help="which questions (more: the train questions the grid's sample left out)")
    p.add_argument("--verdicts", nargs="*", default=None, help="collect: the verdict files (JSON lines)")
    p.add_argument("--judged-by", dest="judged_by", default=None, help="collect: who read them")
    p.add_argument("--out", default=None, help="score: write the result JSON here")
    return run_main(p, handle, argv)


def handle(args: argparse.Namespace) -> None:
    """Run one action of :func:`main`."""
    if args.action == "candidates":
        print(f"candidates to read: {write_candidates(args.side)}")
    elif args.action == "collect":
        if not args.verdicts or not args.judged_by:
            raise UserError("collect needs --verdicts FILE… (the read verdicts) and --judged-by (who read them)")
        if missing := [f for f in args.verdicts if not Path(f).is_file()]:
            raise InputError(f"no verdict file {missing[0]}")
        if not candidates_path(args.side).is_file():
            raise InputError(f"no candidates to collect verdicts for: run `judged-dev candidates --side {args.side}` "
                             "first")
        try:
            judged = collect(candidates_path(args.side), args.verdicts, args.judged_by, judged_path(args.side))
        except ValueError as e:
            raise InputError(str(e)) from e
        print(f"{len(judged['questions'])} questions judged → {display_path(judged_path(args.side))}")
    elif args.side == "train":
        raise UserError("score: the judged set is scored on its dev side or on the more side (held out from every "
                        "head but a judged-more run), not on the train side the heads learnt from")
    else:
        result = run(args.out, args.side)
        for row in result["reference"] + result["rows"]:
            print(f"{row['variant']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "variant"))
