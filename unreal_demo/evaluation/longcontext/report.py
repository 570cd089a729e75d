"""What a long-context result shows: the tables, the CPU per cell and the captions, from its summary rows.

:func:`describe_peak` states the shape of one curve from its 95% intervals (the Top-n tab's caption);
:func:`markdown` prints every table of a result (``bench longcontext``, the README); :func:`qa_table` turns the
cells at one length into the downstream QA table (k = n), the form of ``eval qa``. Rows are those of
:func:`.run.summarize`.
"""

from __future__ import annotations

from ...retrieval.registry import METHODS
from ..qa import BOUNDS, LABELS, gap_closed
from ..qa import markdown as qa_markdown
from ..retrieval import estimate, mcnemar_p
from .contexts import label

ORDER = {m: i for i, m in enumerate(METHODS)}


def rank(method: str) -> int:
    """A method's place in the registry's order (tables, curves, colours); methods outside it come last."""
    return ORDER.get(method, len(ORDER))


SHORT = {"unreal": "UNREAL", "bm25": "BM25"}


def curve_methods(table: list[dict]) -> list[str]:
    """The methods with a curve, i.e. rows at some n (UNREAL, BM25, dense, …), in the registry's order."""
    return sorted({r["method"] for r in table if r["n"] is not None}, key=lambda m: (rank(m), m))


def name(method: str) -> str:
    """A method's short name in tables and captions: UNREAL, BM25, else the registry's label."""
    return SHORT.get(method) or (METHODS[method].label if method in METHODS else method)


MIN_QUESTIONS = 10  # questions per cell below which a caption quotes no 95% interval (a live run has 1–5)


def describe_peak(table: list[dict], method: str, length: int, metric: str = "f1") -> str:
    """What the measured curve of ``method`` at ``length`` shows, in one or two sentences (for captions).

    An inverted U is claimed only when the best n's 95% interval lies above the intervals of both the
    smallest and the largest n; otherwise the text says there is no peak within the intervals. With fewer than
    :data:`MIN_QUESTIONS` questions per cell, or rows without intervals, no interval is quoted and no shape claimed.
    """
    cells = sorted((r for r in table if r["method"] == method and r["length"] == length and r["n"] is not None
                    and metric in r), key=lambda r: r["n"])
    if len(cells) < 2:
        return f"{name(method)} at {label(length)}: fewer than two n values measured."
    vals = [estimate(r, metric) for r in cells]
    best = max(range(len(cells)), key=lambda i: vals[i][0])
    (m, lo, hi), first, last = vals[best], vals[0], vals[-1]
    asked = min(r["questions"] for r in cells)
    others = [f"{v[0]:.3f} at n = {cells[i]['n']}" for i, v in ((0, first), (len(cells) - 1, last)) if i != best]
    recall = f"Evidence recall goes from {cells[0]['recall']:.2f} to {cells[-1]['recall']:.2f} over the same n"
    hits = "" if cells[0].get("f1_hit") is None or cells[-1].get("f1_hit") is None else (
        f", while F1 where the gold chunk was selected goes from {cells[0]['f1_hit']:.3f} to {cells[-1]['f1_hit']:.3f}")
    if asked < MIN_QUESTIONS or any(v[1] is None or v[2] is None for v in vals):
        why = "too few questions for a 95% interval" if asked < MIN_QUESTIONS else "this result holds no 95% intervals"
        return (f"{name(method)} at {label(length)} ({asked} question{'s' * (asked != 1)} per cell): {metric} is "
                f"highest at n = {cells[best]['n']} ({m:.3f}) against {' and '.join(others)}; {why}, so no shape "
                f"is claimed. {recall}{hits}.")
    ends = f"n = {cells[0]['n']}: {first[1]:.3f}–{first[2]:.3f}; n = {cells[-1]['n']}: {last[1]:.3f}–{last[2]:.3f}"
    if 0 < best < len(cells) - 1 and lo > first[2] and lo > last[2]:
        shape = "an inverted U: the peak's interval lies above both ends'"
    elif first[1] > last[2]:
        shape = f"no peak: it falls from the smallest n, beyond the 95% intervals ({ends})"
    elif last[1] > first[2]:
        shape = f"no peak: it rises to the largest n, beyond the 95% intervals ({ends})"
    else:
        shape = "no peak within the 95% intervals"
    return (f"{name(method)} at {label(length)} ({asked} questions per cell): {metric} is highest at "
            f"n = {cells[best]['n']} ({m:.3f}, 95% CI {lo:.3f}–{hi:.3f}) against {' and '.join(others)}: {shape}. "
            f"{recall}{hits}.")


def markdown(table: list[dict], rows: list[dict] | None = None, answered: bool = True) -> str:
    """Every table of a result: F1 (recall) against n per length; each method's best n and full context per
    length; the bounds; CPU per cell; F1 split by whether the gold chunk was selected; one caption per curve; and,
    for a result at one length with both bounds, the same cells as the downstream QA table (:func:`qa_table`); with
    the per-answer ``rows``, UNREAL's evidence recall against BM25's on the same questions (:func:`recall_pairs`).
    An evidence-only run (``answered=False``) gives :func:`evidence_markdown`."""
    if not answered:
        return evidence_markdown(table, rows)
    lengths = sorted({r["length"] for r in table})
    ns = sorted({r["n"] for r in table if r["n"] is not None})
    cell = {(r["method"], r["length"], r["n"]): r for r in table}
    methods = curve_methods(table)
    curves = [(m, x, vals) for m in methods for x in lengths
              if any(vals := [cell.get((m, x, n)) for n in ns])]  # each measured curve's cells, by n
    lines = ["| method | length | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
    for method, length, vals in curves:
        lines.append(f"| {method} | {label(length)} | " + " | ".join(
            f"{v['f1'][0]:.2f} ({v['recall']:.2f})" if v and "f1" in v else "–" for v in vals) + " |")
    lines += ["", "| length | " + "".join(f"{name(m)} best n: F1 / EM | " for m in methods)
              + "full context: F1 / EM |", "|---|" + "---|" * (len(methods) + 1)]
    for length in lengths:
        row = [f"| {label(length)} |"]
        for method in methods:
            cands = [r for r in table if r["method"] == method and r["length"] == length and "f1" in r]
            best = max(cands, key=lambda r: r["f1"][0], default=None)
            row.append(f" {best['f1'][0]:.3f} / {best['em']:.3f} (n={best['n']}) |" if best else " – |")
        full = cell.get(("full", length, None))
        row.append(f" {full['f1'][0]:.3f} / {full['em']:.3f} |" if full and "f1" in full
                   else " does not fit |" if full else " not run |")
        lines.append("".join(row))
    for bound, text in BOUNDS.items():
        row = next((r for r in table if r["method"] == bound and "f1" in r), None)
        if row:
            lines += ["", f"Bound, {text} ({row['questions']} questions): F1 {row['f1'][0]:.3f} "
                      f"({row['f1'][1]:.3f}–{row['f1'][2]:.3f}), EM {row['em']:.3f}, contained {row['contained']:.3f} "
                      f"({row['contained_ci'][0]:.3f}–{row['contained_ci'][1]:.3f})."]
    if any("answer_cpu_s" in r for r in table):
        lines += ["", "Process CPU seconds (all threads; the benchmark runs with one) per question: selection (scoring "
                  "every chunk, the chunk encoding excluded: it is cached and shared), then per answer at each n (mean "
                  "over the answers timed; the count where not all were):", "",
                  "| method | length | selection | " + " | ".join(f"n={n}" for n in ns) + " | full context |",
                  "|---|---|---|" + "---|" * (len(ns) + 1)]
        for method, length, vals in curves:
            sel = next((v["retrieval_cpu_s"] for v in vals if v and "retrieval_cpu_s" in v), None)
            full = cell.get(("full", length, None))
            lines.append(f"| {method} | {label(length)} | {'–' if sel is None else f'{sel:.3f}'} | "
                         + " | ".join(_cpu(v) for v in [*vals, full]) + " |")
    if any(r.get("f1_hit") is not None for r in table):
        lines += ["", "Why (the two effects behind the curve): token F1 where the gold chunk was among the n selected "
                  "/ where it was not:", "", "| method | length | " + " | ".join(f"n={n}" for n in ns) + " |",
                  "|---|---|" + "---|" * len(ns)]
        for method, length, vals in curves:
            lines.append(f"| {method} | {label(length)} | " + " | ".join(_split(v) for v in vals) + " |")
    captions = [describe_peak(table, m, x) for m in methods for x in lengths
                if sum(1 for r in table if r["method"] == m and r["length"] == x and "f1" in r) > 1]
    if captions:
        lines += ["", "What the curves show (token F1, generated by `describe_peak`):", "",
                  *(f"- {c}" for c in captions)]
    lines += _pairs_markdown(rows, lengths, ns)
    qa = qa_table(table, lengths[0]) if len(lengths) == 1 else []
    if set(BOUNDS) <= {r["key"] for r in qa}:
        lines += ["", f"As the downstream QA table (k = n chunks selected from each {label(lengths[0])} context; the "
                  "gap closed is measured between the two bounds):", "", qa_markdown(qa)]
    return "\n".join(lines)


def evidence_markdown(table: list[dict], rows: list[dict] | None = None) -> str:
    """An evidence-only result: recall@n with its 95% Wilson interval per method and length, the selection CPU
    per question, and (with the per-n ``rows``) UNREAL against BM25 on the same questions."""
    lengths = sorted({r["length"] for r in table})
    ns = sorted({r["n"] for r in table if r["n"] is not None})
    cell = {(r["method"], r["length"], r["n"]): r for r in table}
    lines = ["Evidence recall@n (the gold chunk among the n selected; 95% Wilson interval):", "",
             "| method | length | questions | selection CPU s | " + " | ".join(f"n={n}" for n in ns) + " |",
             "|---|---|---|---|" + "---|" * len(ns)]
    for method in curve_methods(table):
        for length in lengths:
            vals = [cell.get((method, length, n)) for n in ns]
            if not any(vals):
                continue
            first = next(v for v in vals if v)
            sel = first.get("retrieval_cpu_s")
            sel = "–" if sel is None else f"{sel:.3f}"
            lines.append(f"| {method} | {label(length)} | {first['questions']} | {sel} | "
                         + " | ".join(f"{v['recall']:.2f} ({v['recall_ci'][0]:.2f}–{v['recall_ci'][1]:.2f})"
                                      if v and "recall_ci" in v else "–" for v in vals) + " |")
    return "\n".join(lines + _pairs_markdown(rows, lengths, ns))


def _pairs_markdown(rows: list[dict] | None, lengths: list[int], ns: list[int]) -> list[str]:
    """The lines of :func:`recall_pairs`' table (none without per-answer rows holding both methods)."""
    pairs = recall_pairs(rows or [])
    if not pairs:
        return []
    lines = ["", "Evidence recall, UNREAL against BM25 on the same questions: questions whose gold chunk only "
             "UNREAL selected / only BM25 selected, and the exact two-sided sign-test (McNemar) p of that split:",
             "", "| length | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for length in lengths:
        got = {q["n"]: q for q in pairs if q["length"] == length}
        cells = [f"{got[n]['a_only']} / {got[n]['b_only']} (p {got[n]['p']:.2g})" if n in got else "–" for n in ns]
        lines.append(f"| {label(length)} | " + " | ".join(cells) + " |")
    return lines


def qa_table(table: list[dict], length: int) -> list[dict]:
    """The cells at ``length`` as downstream QA rows (:func:`qa.summarize`'s form, k = n): the bounds first, then
    each method at each n; the share of the bounds' F1 and EM gap each closes where both bounds were measured.

    Full context is left out (it selects no k), and so is a cell whose prompts do not all fit the window (its
    scores would cover fewer questions than the bounds').
    """
    bounds = list(BOUNDS)
    cells = sorted((r for r in table if r["length"] == length and "f1" in r and r["fits"] and r["method"] != "full"),
                   key=lambda r: (r["n"] or 0, bounds.index(r["method"]) if r["method"] in BOUNDS else len(bounds),
                                  rank(r["method"])))
    bound = {r["method"]: r for r in cells if r["method"] in BOUNDS}
    out = []
    for r in cells:
        row = {"method": LABELS.get(r["method"], name(r["method"])), "key": r["method"], "k": r["n"],
               "questions": r["questions"], "em": r["em"], "em_ci": r["em_ci"], "f1": r["f1"],
               "contained": r["contained"], "contained_ci": r["contained_ci"],
               "recall": None if r["method"] == "none" else r["recall"], "prompt_tokens": r["prompt_tokens"]}
        if set(bound) == set(BOUNDS):
            none, oracle = bound["none"], bound["oracle"]
            row["f1_gap_closed"] = gap_closed(r["f1"][0], none["f1"][0], oracle["f1"][0])
            row["em_gap_closed"] = gap_closed(r["em"], none["em"], oracle["em"])
        out.append(row)
    return out


def _split(row: dict | None) -> str:
    """F1 given the gold chunk selected / not selected (– where no question falls on that side)."""
    if not row or "f1" not in row:
        return "–"
    return " / ".join("–" if row.get(k) is None else f"{row[k]:.2f}" for k in ("f1_hit", "f1_miss"))


def _cpu(row: dict | None) -> str:
    """One CPU cell: mean seconds per answer, with the count timed where some answers were not."""
    if not row or "answer_cpu_s" not in row:
        return "–"
    answered = row.get("answered", row["questions"])
    part = "" if row["timed"] == answered else f" ({row['timed']}/{answered})"
    return f"{row['answer_cpu_s']:.1f}{part}"


def recall_pairs(rows: list[dict], a: str = "unreal", b: str = "bm25") -> list[dict]:
    """Paired evidence recall of methods ``a`` and ``b`` per (length, n), from per-answer rows.

    ``a_only`` / ``b_only`` count the questions whose gold chunk only ``a`` / only ``b`` selected; ``p`` is the
    exact two-sided sign test on that split (McNemar's exact test: the questions both or neither found carry no
    information about which method finds more), to three significant figures. Only answers whose prompt fits the
    window count, as in the summary's recall.

    >>> rows = [{"id": i, "length": 2000, "n": 1, "method": m, "recall": float(m == "unreal" or i == 0)}
    ...         for i in range(6) for m in ("unreal", "bm25")]
    >>> recall_pairs(rows)
    [{'length': 2000, 'n': 1, 'a_only': 5, 'b_only': 0, 'p': 0.0625}]
    """
    found: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["method"] in (a, b) and r.get("n") is not None and r.get("fits", True):
            found.setdefault((r["length"], r["n"], r["id"]), {})[r["method"]] = r["recall"]
    split: dict[tuple, list[int]] = {}
    for (length, n, _), got in found.items():
        if len(got) == 2:
            counts = split.setdefault((length, n), [0, 0])
            counts[0] += got[a] > got[b]
            counts[1] += got[b] > got[a]
    return [{"length": length, "n": n, "a_only": x, "b_only": y, "p": mcnemar_p(x, y)}
            for (length, n), (x, y) in sorted(split.items())]
