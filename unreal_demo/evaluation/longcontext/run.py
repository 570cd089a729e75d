"""Running the long-context benchmark: UNREAL and BM25 selection at every n, and full context.

For each question and length (:mod:`.contexts`), every chunk is scored once
per method; the top-n chunks for each n go, in document order, into the same prompt
template (Eq. 7) and the frozen LLM answers greedily. Full context answers from every
chunk where the prompt fits the model window and is reported as "does not fit" beyond. Two bounds, as in
the QA table, can be asked for as methods: ``none`` (the question alone) and ``oracle`` (the gold
paragraph alone); they do not depend on the length, so their answers come from the cache after the first.
Pool chunks are encoded once for all questions and lengths, in fixed blocks cached on
disk; answers are cached by prompt, so sweeping n, adding a method or resuming a killed
run recomputes nothing already answered. An evidence-only run (``answer=False``) stops after selection: which
chunks each method picks at every n (evidence recall@n), nothing answered.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from ...core.encoding import cached_encode
from ...core.generation import ANSWER_RULE, DEFAULT_PROMPT, fits_window, prompt_ids
from ...core.selection import select_top_n
from ...errors import InputError
from ...retrieval.registry import METHODS, all_scores, check
from ...store.memory import MemoryStore
from ..answers import AnswerCache, answer_cache, keeps
from ..metrics import contained, exact_match, f1
from ..qa import BOUNDS
from ..results import write_result
from ..retrieval import mean_ci, wilson
from .contexts import Builder, Context, gold_chunks, label
from .report import markdown

BLOCK = 256  # pool chunks per cached encoding block (small: a 2K context encodes one block)


class ContextEncoder:
    """Pooled chunk keys of contexts: shared pool chunks encoded once in cached blocks."""

    def __init__(self, builder: Builder, backbone, head) -> None:
        self.builder, self.backbone, self.head = builder, backbone, head
        self.pool_chunks: list[str] = []
        self.start: list[int] = []  # first pool-chunk index of each pool passage
        self.blocks: dict[int, torch.Tensor] = {}

    def _extend(self, passages: int, chunks: int = 0) -> None:
        """Chunk pool passages until there are ``passages`` of them and ``chunks`` chunks (or the pool ends)."""
        pool = self.builder.pool
        while len(self.start) < len(pool) and (len(self.start) < passages or len(self.pool_chunks) < chunks):
            self.start.append(len(self.pool_chunks))
            self.pool_chunks += self.builder.chunks_of(pool[len(self.start) - 1])
        if len(self.start) == len(pool) and len(self.start) < passages:
            self.start.append(len(self.pool_chunks))  # the end sentinel

    def _encode(self, texts: list[str]) -> torch.Tensor:
        c = self.head.config
        return cached_encode(self.backbone, texts, c.chunk_layer, c.n_pool, c.chunk_tokens)  # raw (M, L_p, d)

    def pool_keys(self, lo: int, hi: int) -> torch.Tensor:
        """Keys of pool chunks ``lo:hi``, from fixed blocks of :data:`BLOCK` chunks (cached on disk)."""
        parts = []
        for b in range(lo // BLOCK, math.ceil(hi / BLOCK)):
            if b not in self.blocks:
                self._extend(0, (b + 1) * BLOCK)  # a block's content never depends on the lengths asked for
                self.blocks[b] = self._encode(self.pool_chunks[b * BLOCK : (b + 1) * BLOCK])
            s = max(lo, b * BLOCK) - b * BLOCK
            parts.append(self.blocks[b][s : min(hi, (b + 1) * BLOCK) - b * BLOCK])
        return torch.cat(parts) if parts else torch.zeros(0, self.head.config.n_pool, self.backbone.hidden_size)

    def keys(self, ctx: Context) -> tuple[list[str], list[int], torch.Tensor]:
        """Chunk texts, document index per chunk, and keys ``(M, L_p, d)`` of a context, in order.

        A context is ``pool[:n_pool]`` (+ the cut tail) with a block (the gold paragraph, and its hard
        distractors in the same-topic setting) inserted: whole pool passages come from the shared blocks,
        the block and the tail are encoded on their own (cached on disk by their texts).
        """
        texts, doc_of = self.builder.chunked(ctx)
        self._extend(ctx.n_pool + 1)
        lo, hi = ctx.block
        at = min(lo, ctx.n_pool)  # pool passages before the block
        block = [self._encode([c for d in ctx.docs[lo:hi] for c in self.builder.chunks_of(d)])]
        tail = [self._encode(self.builder.chunks_of(ctx.tail))] if ctx.tail else []
        last = lo > ctx.n_pool  # the block follows the tail
        parts = [self.pool_keys(0, self.start[at]), *([] if last else block),
                 self.pool_keys(self.start[at], self.start[ctx.n_pool]), *tail, *(block if last else [])]
        return texts, doc_of, torch.cat(parts)


def refuse_answering(methods: Sequence[str], answer: bool) -> None:
    """Refuse full context and the bounds in an evidence-only run (``answer=False``): they select nothing.

    Raises
    ------
    InputError
        Naming the methods that only answer.
    """
    if not answer and (answering := [m for m in methods if m == "full" or m in BOUNDS]):
        raise InputError(f"--evidence-only measures selection, and {', '.join(answering)} select nothing (they only "
                         "answer): leave them out of --methods, or drop --evidence-only")


def per_answer(rows: list[dict], ns: Sequence[int]) -> list[dict]:
    """An evidence-only run's rows (one per question, length and method, ``"found"`` a string of 0/1 per n in
    ``ns``) as one row per n with its ``recall``, the form of an answered run's rows; other rows unchanged.

    >>> per_answer([{"id": "0", "method": "bm25", "found": "01"}], [1, 3])
    [{'id': '0', 'method': 'bm25', 'n': 1, 'recall': 0.0}, {'id': '0', 'method': 'bm25', 'n': 3, 'recall': 1.0}]
    """
    out = []
    for r in rows:
        if "found" not in r:
            out.append(r)
            continue
        base = {k: v for k, v in r.items() if k != "found"}
        out += [base | {"n": n, "recall": float(bit == "1")} for n, bit in zip(ns, r["found"], strict=True)]
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """Mean EM, F1, contained and evidence recall per (method, length, n), with 95% intervals; rows without
    answers (an evidence-only run, :func:`per_answer`) give recall alone."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["length"], r["n"]), []).append(r)
    out = []
    for (method, length, n), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        fit = [r for r in rs if r.get("fits", True)]  # an evidence-only row has no prompt to fit
        row = {"method": method, "length": length, "label": label(length), "n": n, "questions": len(rs),
               "fits": len(fit) == len(rs)}
        if fit:
            recall = statistics.fmean(r["recall"] for r in fit)
            row |= {"recall": round(recall, 4), "recall_ci": wilson(recall, len(fit))}
        if len({"f1" in r for r in fit}) > 1:
            raise ValueError(f"{method} at {label(length)}, n = {n}: answered and evidence-only rows cannot be "
                             "summarised together (merge results of one kind)")
        if fit and "f1" in fit[0]:
            em = statistics.fmean(r["em"] for r in fit)
            row |= {"em": round(em, 4), "em_ci": wilson(em, len(fit)), "f1": mean_ci([r["f1"] for r in fit]),
                    "contained": round(statistics.fmean(r["contained"] for r in fit), 4),
                    "contained_ci": wilson(statistics.fmean(r["contained"] for r in fit), len(fit)),
                    "prompt_tokens": round(statistics.fmean(r["prompt_tokens"] for r in fit))}
            for part, keep in (("hit", 1.0), ("miss", 0.0)):  # accuracy = recall·F1|hit + (1 − recall)·F1|miss
                some = [r["f1"] for r in fit if r["recall"] == keep]
                row[f"f1_{part}"] = round(statistics.fmean(some), 4) if some else None
        timed = [r["answer_cpu_s"] for r in fit if r.get("answer_cpu_s") is not None]
        if timed:  # CPU per answer, from the answer cache (answers made before timing was kept have none)
            row |= {"answer_cpu_s": round(statistics.fmean(timed), 2), "timed": len(timed), "answered": len(fit)}
        if spent := [r["retrieval_cpu_s"] for r in rs if "retrieval_cpu_s" in r]:
            row["retrieval_cpu_s"] = round(statistics.fmean(spent), 3)
        out.append(row)
    return out


def run_longcontext(explorer, builder: Builder, lengths: Sequence[int], ns: Sequence[int],
                    methods: Sequence[str] = ("unreal", "bm25", "full"),
                    progress: Callable[[float, str], None] | None = None, answers: AnswerCache | None = None,
                    on_length: Callable[[dict], None] | None = None, shard: tuple[int, int] = (1, 1),
                    answer: bool = True) -> dict:
    """Run every item at every length with every method; rows per answer plus the summary table.

    ``answer=False`` measures selection alone (evidence recall@n, no prompt is answered: minutes instead of
    hours): one row per question, length and method, whose ``"found"`` says for each n whether the gold chunk
    was among the n selected (:func:`per_answer` expands it); full context and the bounds, which only answer,
    are refused. ``on_length`` receives the result so far each time a length is complete (all its questions), so a
    long run can be written as it goes. ``cpu_seconds`` gives each length's process CPU time. ``shard``
    ``(k, N)`` runs only the k-th of every N questions (k from 1): N processes sharing the answer cache split a
    run, and one run without a shard then assembles the whole result from the cache."""
    methods = check(methods, "document", BOUNDS)
    refuse_answering(methods, answer)
    ns = sorted(set(ns))  # each n once, in order: an evidence row's "found" string follows this list
    backbone, head = explorer.backbone, explorer.head
    encoder = ContextEncoder(builder, backbone, head)
    answers = answers or answer_cache("longcontext")
    rows, seconds = [], {"encode": 0.0, "retrieval": 0.0, "generate": 0.0}
    cpu: dict[str, float] = {}
    k, parts = shard
    mine = builder.items[k - 1::parts]
    jobs = [(item, length) for length in lengths for item in mine]

    def so_far() -> dict:
        return {"rows": rows, "table": summarize(per_answer(rows, ns)), "ns": ns,
                "seconds": {k: round(v, 1) for k, v in seconds.items()},
                "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()}, "lengths_done": list(cpu)}

    for j, (item, length) in enumerate(jobs):
        c0 = time.process_time()
        if progress is not None:
            progress(j / len(jobs), f"{label(length)} tokens, question {builder.items.index(item) + 1}")
        ctx = builder.context(item, length)
        t0 = time.perf_counter()
        needs_keys = any(METHODS[m].model for m in methods if m in METHODS)
        texts, doc_of, keys = encoder.keys(ctx) if needs_keys else (*builder.chunked(ctx), None)
        t1 = time.perf_counter()
        gold = gold_chunks(texts, doc_of, ctx.gold_doc, item.answers)
        store = MemoryStore(texts, keys)
        rankings, spent = {}, {}
        for method in methods:
            if method not in ("full", *BOUNDS):
                r0 = time.process_time()
                rankings[method] = all_scores(store, explorer, [item.question], method)[1][0]  # (M,)
                spent[method] = round(time.process_time() - r0, 3)
        t2 = time.perf_counter()
        base = {"id": item.id, "length": length, "tokens": ctx.tokens, "chunks": len(texts), "depth": item.depth}
        for method, scores in rankings.items():
            picks = [select_top_n(scores, min(n, len(texts))) for n in ns]  # the chunks selected at each n
            if not answer:
                found = "".join("1" if gold & set(chosen) else "0" for chosen in picks)
                rows.append({"id": item.id, "length": length, "method": method, "found": found,
                             "retrieval_cpu_s": spent[method]})
                continue
            for n, chosen in zip(ns, picks, strict=True):
                rows.append(base | {"method": method, "n": n, "retrieval_cpu_s": spent[method]}
                            | _answer(backbone, answers, item, texts, chosen, gold))
        if "full" in methods:
            rows.append(base | {"method": "full", "n": None}
                        | _answer(backbone, answers, item, texts, list(range(len(texts))), gold))
        for bound in (m for m in methods if m in BOUNDS):  # the gold paragraph alone, or nothing
            passages = [item.gold] if bound == "oracle" else []
            rows.append(base | {"method": bound, "n": None}
                        | _answer(backbone, answers, item, passages, list(range(len(passages))), {0}))
        seconds["encode"] += t1 - t0
        seconds["retrieval"] += t2 - t1
        seconds["generate"] += time.perf_counter() - t2
        cpu[label(length)] = cpu.get(label(length), 0.0) + time.process_time() - c0
        if on_length is not None and (j + 1 == len(jobs) or jobs[j + 1][1] != length):
            on_length(so_far())
    if progress is not None:
        progress(1.0, "done")
    return so_far()


def _answer(backbone, answers: AnswerCache, item, texts: list[str], chosen: list[int], gold: set[int]) -> dict:
    ids = prompt_ids(backbone, [texts[i] for i in chosen], item.question)
    record = {"recall": float(bool(gold & set(chosen))), "prompt_tokens": len(ids)}
    if not fits_window(backbone, len(ids), ANSWER_RULE.budget):
        return record | {"fits": False}
    text = answers.get(backbone, ids)
    return record | {"fits": True, "answer": text, "em": exact_match(text, item.answers),
                     "f1": f1(text, item.answers), "contained": contained(text, item.answers),
                     "answer_cpu_s": answers.cost(backbone, ids)}


def parse_shard(text: str | None, out: str | None = None) -> tuple[int, int]:
    """``"K/N"`` (the K-th of N shares of the questions, K from 1) as ``(K, N)``; None is the whole run.

    >>> parse_shard("2/3"), parse_shard(None)
    ((2, 3), (1, 1))

    Raises
    ------
    InputError
        For text that is not K/N with 1 ≤ K ≤ N, or a shard writing into ``precomputed/`` (a shard's result is
        partial: write it elsewhere and assemble the whole with one run without ``--shard``).
    """
    if text is None:
        return (1, 1)
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise InputError(f"--shard {text!r}: give K/N with 1 ≤ K ≤ N, e.g. 1/2")
    if int(n) > 1 and keeps(out):
        raise InputError("a shard's result is partial: write it outside precomputed/, then run once without "
                         "--shard (every answer then comes from the shared cache) to write the whole result")
    return int(k), int(n)


def run_benchmark(explorer, sample: int, lengths: Sequence[int], ns: Sequence[int], methods: Sequence[str],
                  seed: int = 0, out: str | None = None, distractors: str = "pool",
                  progress: Callable[[float, str], None] | None = None, shard: tuple[int, int] = (1, 1),
                  answer: bool = True) -> dict:
    """The benchmark on the offline data; the result (rows, summary, markdown, CPU time per length).

    With ``out``, the result is written each time a length is complete (``"complete": false`` and the
    setting saying which lengths are done until the last), so a stopped run leaves what it measured.

    ``distractors``: ``"pool"`` or ``"same-topic"`` (:data:`.contexts.DISTRACTORS`); ``shard`` and ``answer``:
    see :func:`run_longcontext`."""
    from .contexts import DISTRACTORS, offline_builder

    t0 = time.perf_counter()
    k, parts = shard
    part = "" if parts == 1 else f"; shard {k}/{parts}: questions {k}, {k + parts}, … only"
    builder = offline_builder(explorer.backbone.tokenizer, sample, seed, distractors)
    answers = answer_cache("longcontext", keep=answer and keeps(out))  # evidence only adds none

    def written(partial: dict) -> dict:
        done = partial["lengths_done"]
        left = "" if len(done) == len(lengths) else (
            f"; in progress: {', '.join(done)} of {', '.join(label(x) for x in lengths)} done")
        result = partial | {
            "distractors": distractors, "complete": not left,
            "setting": f"{len(builder.items)} SQuAD-Shifts New-Wiki questions (seed {seed}); "
                       f"{DISTRACTORS[distractors]}; distractor pool {len(builder.pool):,} passages (Wikipedia "
                       "summaries, Paul Graham essays, a Gutenberg novel); model "
                       f"{explorer.backbone.name}, head {explorer.head_source}; "
                       + (f"prompt {DEFAULT_PROMPT}, greedy, {ANSWER_RULE.name}" if answer
                          else "evidence only: which chunks each method selects, nothing answered") + f"{part}{left}",
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "markdown": markdown(partial["table"], per_answer(partial["rows"], partial["ns"]), answered=answer),
        }
        return write_result(result, out, explorer)

    result = run_longcontext(explorer, builder, lengths, ns, methods, progress, answers,
                             on_length=written if out else None, shard=shard, answer=answer)
    if answers.export_every:
        answers.export()
    return written(result)
