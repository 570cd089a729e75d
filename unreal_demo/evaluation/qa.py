"""Downstream QA with each retriever's top-k from the Wikipedia index — the paper's Table 1 on our data.

The generator is fixed (the same frozen LLM, greedy, Eq. 7); only the retriever that supplies its
top-k chunks changes. Every method answers the same seeded held-out SQuAD-Shifts New-Wiki questions
(never trained on) through the same prompt; the k chunks go in index (document) order, the rule
UNREAL uses for its selection. Two rows bound the table: ``none`` (the question alone) and
``oracle`` (the gold paragraph alone, exactly as in the dataset). Scores: SQuAD exact match and
token F1 against all gold answers (:mod:`squad_metrics`), "contained" (a gold answer appears in
the reply) and evidence recall@k (a chunk of the gold paragraph among the k).

Each method's per-question rows are cached on disk under a key of everything that determines them
(index, head for UNREAL/hybrid, questions, k, prompt, decoding), so adding a method runs only that method,
and answers are cached by prompt, so a killed run resumes.

Example
-------
>>> gap_closed(0.30, none=0.10, oracle=0.50)
0.5
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.generation import ANSWER_RULE, DEFAULT_PROMPT, PROMPTS, prompt_ids
from ..data.sources import Question
from ..errors import UserError
from ..retrieval.registry import METHODS as RETRIEVERS
from ..retrieval.registry import check, names, retrieve
from ..settings import cache_dir
from ..store.index import Index
from .answers import AnswerCache, answer_cache, keeps
from .metrics import contained, exact_match, f1
from .results import write_result
from .retrieval import mean_ci, sample_questions, wilson

BOUNDS = {"none": "no context (question alone)", "oracle": "oracle (gold paragraph alone)"}
LABELS = BOUNDS | {m: RETRIEVERS[m].label for m in names("index")}
PLACEHOLDER = "\x00PASSAGES\x00"


def gap_closed(score: float, none: float, oracle: float) -> float | None:
    """Share of the no-context → oracle gap a method closes: ``(s − none) / (oracle − none)``."""
    return None if oracle == none else round((score - none) / (oracle - none), 4)


def template_hash(backbone, ids: list[int], passages: Sequence[str]) -> str:
    """SHA-1 of the prompt the model sees with the passages cut out (same for every method)."""
    text = backbone.tokenizer.decode(ids)
    context = "\n\n".join(p.strip() for p in passages if p.strip())
    if context:
        if context not in text:
            raise RuntimeError("the passages are not in the prompt verbatim: the template hash would be wrong")
        text = text.replace(context, PLACEHOLDER)
    return hashlib.sha1(text.encode()).hexdigest()


def questions(sample: int, seed: int) -> tuple[list[Question], dict[str, str]]:
    """A seeded sample of held-out New-Wiki questions and the gold paragraph text by passage id."""
    passages, qs = sample_questions(sample, seed)
    return qs, {p.id: p.text for p in passages}


def _key(index: Index, explorer, method: str, qs: Sequence[Question], k: int) -> str:
    parts = [index.manifest["model"], index.manifest["revision"], index.manifest["chunks"],
             index.manifest["tokens"], index.manifest.get("dtype"), index.manifest.get("codec_sha256"),
             explorer.backbone.numerics, method, k, ANSWER_RULE.name, repr(PROMPTS[DEFAULT_PROMPT]),
             [q.id for q in qs]]
    if RETRIEVERS.get(method) is not None and RETRIEVERS[method].model:
        parts.append(explorer.head.digest())
    return hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:16]


def run_method(index: Index, explorer, method: str, qs: Sequence[Question], gold_text: dict[str, str],
               k: int = 5, answers: AnswerCache | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict:
    """Per-question rows (chunks, answer, EM, F1, contained, recall, template hash) of one method."""
    (method,) = check([method], "index", BOUNDS)
    k = 0 if method in BOUNDS else k  # the bounds do not retrieve
    path = cache_dir() / "qa" / f"{method}-{_key(index, explorer, method, qs, k)}.json"
    if path.exists():
        return json.loads(path.read_text())
    answers = answers or answer_cache("qa")
    chunks, t0 = index.chunks, time.perf_counter()
    if method in ("none", "oracle"):
        picked: list[list[int]] = [[] for _ in qs]
    else:
        ranked = retrieve(index, explorer, [q.text for q in qs], k, method).ids
        picked = [sorted(row[:k]) for row in ranked]  # index (document) order, as UNREAL selects
    retrieval_s, rows = time.perf_counter() - t0, []
    for j, (q, ids) in enumerate(zip(qs, picked, strict=True)):
        passages = [gold_text[q.passage_id]] if method == "oracle" else [chunks[i]["text"] for i in ids]
        prompt = prompt_ids(explorer.backbone, passages, q.text)
        reply = answers.get(explorer.backbone, prompt)
        rows.append({"id": q.id, "chunks": ids, "answer": reply, "em": exact_match(reply, q.answers),
                     "f1": f1(reply, q.answers), "contained": contained(reply, q.answers),
                     "recall": (1.0 if method == "oracle" else
                                float(any(chunks[i]["passage"] == q.passage_id for i in ids))),
                     "prompt_tokens": len(prompt), "template": template_hash(explorer.backbone, prompt, passages)})
        if progress is not None:
            progress(j + 1, len(qs))
    result = {"method": method, "retrieval_seconds": round(retrieval_s, 2),
              "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(path)
    return result


def summarize(results: Sequence[dict]) -> list[dict]:
    """One table row per method and k: EM, F1 and "contained" with 95% intervals, recall@k, gap closed.

    The bounds (``none``, ``oracle``) do not depend on k: one row each, ``k`` None; the gap closed is
    measured against them at every k.
    """
    by = {(r["method"], r.get("k")): r for r in results}
    bound = {m: r for (m, _), r in by.items() if m in BOUNDS}
    f1s = {key: statistics.fmean(x["f1"] for x in r["rows"]) for key, r in by.items()}
    ems = {key: statistics.fmean(x["em"] for x in r["rows"]) for key, r in by.items()}
    table = []
    for (m, k), r in by.items():
        rows, n = r["rows"], len(r["rows"])
        held = statistics.fmean(x["contained"] for x in rows)
        row = {"method": LABELS[m], "key": m, "k": None if m in BOUNDS else k, "questions": n,
               "em": round(ems[m, k], 4), "em_ci": wilson(ems[m, k], n), "f1": mean_ci([x["f1"] for x in rows]),
               "contained": round(held, 4), "contained_ci": wilson(held, n),
               "recall": None if m == "none" else round(statistics.fmean(x["recall"] for x in rows), 4),
               "prompt_tokens": round(statistics.fmean(x["prompt_tokens"] for x in rows)),
               "seconds": r["seconds"]}
        if set(bound) == set(BOUNDS):
            none, oracle = ((m2, bound[m2].get("k")) for m2 in BOUNDS)
            row["f1_gap_closed"] = gap_closed(f1s[m, k], f1s[none], f1s[oracle])
            row["em_gap_closed"] = gap_closed(ems[m, k], ems[none], ems[oracle])
        table.append(row)
    return table


def markdown(table: Sequence[dict]) -> str:
    lines = ["| method | k | EM | F1 | F1 95% CI | answer contained | contained 95% CI | evidence recall@k | "
             "F1 gap closed |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        rec = "—" if r["recall"] is None else f"{r['recall']:.2f}"
        gap = r.get("f1_gap_closed")
        lines.append(f"| {r['method']} | {r['k'] or '—'} | {r['em']:.3f} | {r['f1'][0]:.3f} "
                     f"| {r['f1'][1]:.2f}–{r['f1'][2]:.2f} | {r['contained']:.3f} "
                     f"| {r['contained_ci'][0]:.2f}–{r['contained_ci'][1]:.2f} | {rec} | "
                     f"{'—' if gap is None else f'{gap:.2f}'} |")
    return "\n".join(lines)


def _label(run: dict) -> str:
    """``method@k`` of a run; the bounds by name alone (they retrieve nothing)."""
    return run["method"] if run["method"] in BOUNDS else f"{run['method']}@{run['k']}"


def run_qa_eval(explorer, index: Index, sample: int = 100, methods: Sequence[str] | None = None,
                ks: Sequence[int] = (5,), seed: int = 0, out: str | Path | None = None,
                progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Every method at every k on the same questions (the bounds once; default the bounds and every index
    retriever); the summary table as a dict."""
    methods = check(methods or [*BOUNDS, *names("index", costly=False)], "index", BOUNDS)
    if not ks or min(ks) < 1:
        raise UserError(f"k must be at least 1 (got {', '.join(map(str, ks)) or 'none'})")
    if any("keys" in RETRIEVERS[m].needs for m in methods if m in RETRIEVERS):  # BM25, dense and the bounds
        index.check_backbone(explorer.backbone, explorer.head.config.chunk_layer)  # read no keys: any LLM answers
    qs, gold_text = questions(sample, seed)
    answers = answer_cache("qa", keep=keeps(out))
    runs = [(m, k) for m in methods if m in BOUNDS for k in ks[:1]] + [(m, k) for k in ks for m in methods
                                                                       if m not in BOUNDS]
    results = [run_method(index, explorer, m, qs, gold_text, k, answers,
                          None if progress is None else (lambda d, t, m=m, k=k: progress(f"{m} k={k}", d, t)))
               | {"k": k} for m, k in runs]
    if answers.export_every:
        answers.export()
    table = summarize(results)
    result = {
        "setting": f"{len(qs)} held-out SQuAD-Shifts New-Wiki questions (seed {seed}); top-k chunks "
                   f"(k = {', '.join(map(str, ks))}) from the {index.manifest['chunks']:,}-chunk index "
                   f"({index.manifest['passages']:,} passages); prompt {DEFAULT_PROMPT}; greedy, "
                   f"{ANSWER_RULE.name}; model {explorer.backbone.name}; head {explorer.head_source}",
        "k": list(ks), "prompt": DEFAULT_PROMPT, "answer_rule": ANSWER_RULE.name, "table": table,
        "markdown": markdown(table),
        "answers": {_label(r): [{"id": x["id"], "answer": x["answer"], "chunks": x["chunks"]} for x in r["rows"]]
                    for r in results},
    }
    return write_result(result, out, explorer)
