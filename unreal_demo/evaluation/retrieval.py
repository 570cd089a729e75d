"""Evaluation: recall@k / MRR@k, and the held-out retrieval benchmark (Section 5's protocol, our data).

Held-out set: SQuAD-Shifts New-Wiki questions (48 articles that no training data
shares); corpus: all 1,581 New-Wiki paragraphs plus the 10,033 Wikipedia lead
summaries as distractors. Every method ranks the whole corpus exactly.

Example
-------
>>> recall_at_k([[3, 1, 2], [0, 2, 1]], [{1}, {1}], 2)
0.5
>>> round(mrr_at_k([[3, 1, 2], [0, 2, 1]], [{1}, {1}], 10), 4)
0.4167
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence

import torch
from tqdm import tqdm

from ..core.encoding import cached_encode
from ..core.selection import zscore
from ..data.sources import Passage, load_squad, load_summaries, read_jsonl
from ..errors import UserError
from ..retrieval.registry import METHODS, check, retrieve
from ..settings import DEFAULT_MODEL
from ..store.memory import MemoryStore
from .results import write_result

KS = (1, 5, 10, 20)


def recall_at_k(rankings: Sequence[Sequence[int]], gold: Sequence[set[int]], k: int) -> float:
    """Share of queries with a gold item among the first ``k`` of their ranking."""
    return sum(bool(set(r[:k]) & g) for r, g in zip(rankings, gold, strict=True)) / max(1, len(gold))


def mrr_at_k(rankings: Sequence[Sequence[int]], gold: Sequence[set[int]], k: int = 10) -> float:
    """Mean reciprocal rank of the first gold item, 0 when none is in the first ``k``."""
    total = 0.0
    for r, g in zip(rankings, gold, strict=True):
        total += next((1.0 / (i + 1) for i, x in enumerate(r[:k]) if x in g), 0.0)
    return total / max(1, len(gold))


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a proportion ``p`` over ``n`` trials, within [0, 1].

    >>> wilson(0.0, 20)
    (0.0, 0.161)
    """
    if n == 0:
        return (0.0, 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, round(centre - half, 3)), min(1.0, round(centre + half, 3)))  # never "-0.0"


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean of values in [0, 1] and its 95% normal interval, clipped to [0, 1]: ``(mean, low, high)``."""
    m = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return round(m, 4), round(max(0.0, m - half), 4), round(min(1.0, m + half), 4)


def estimate(row: dict, metric: str) -> tuple[float, float | None, float | None] | None:
    """``(mean, low, high)`` of ``metric`` in a result row, which holds either a :func:`mean_ci` triple or a value
    with a ``<metric>_ci`` pair (:func:`wilson`); low and high are None where the row has no interval, and the
    whole is None where the row lacks the metric.

    >>> estimate({"f1": [0.2, 0.1, 0.3]}, "f1")
    (0.2, 0.1, 0.3)
    >>> estimate({"em": 0.5, "em_ci": [0.3, 0.7]}, "em")
    (0.5, 0.3, 0.7)
    >>> estimate({"recall": 0.9}, "recall"), estimate({}, "f1")
    ((0.9, None, None), None)
    """
    value = row.get(metric)
    if value is None or isinstance(value, (list, tuple)):
        return None if value is None else tuple(value)
    low, high = row.get(f"{metric}_ci") or (None, None)
    return value, low, high


def gold_ranks(rankings: Sequence[Sequence[int]], gold: Sequence[set[int]]) -> list[int | None]:
    """Each query's 1-based rank of its first gold item, None when none is in its ranking (kept per question in
    every retrieval record, so two methods or two backbones can be compared question by question).

    >>> gold_ranks([[3, 1, 2], [0, 2, 1]], [{1}, {5}])
    [2, None]
    """
    return [next((i + 1 for i, x in enumerate(r) if x in g), None) for r, g in zip(rankings, gold, strict=True)]


def mcnemar_p(a_only: int, b_only: int) -> float:
    """McNemar's exact test: the two-sided sign-test p of ``a_only`` against ``b_only`` (the questions only one of
    two methods gets right; those both or neither get right carry no information), to three significant figures.

    >>> mcnemar_p(5, 0), mcnemar_p(14, 10), mcnemar_p(0, 0)
    (0.0625, 0.541, 1.0)
    """
    n = a_only + b_only
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / 2**n
    return float(f"{min(1.0, 2 * tail):.3g}")


def metrics(rankings: Sequence[Sequence[int]], gold: Sequence[set[int]]) -> dict:
    row = {f"R@{k}": round(recall_at_k(rankings, gold, k), 4) for k in KS}
    row["MRR@10"] = round(mrr_at_k(rankings, gold, 10), 4)
    row["R@1 95% CI"] = wilson(row["R@1"], len(gold))
    row["R@10 95% CI"] = wilson(row["R@10"], len(gold))
    return row


def top(scores: torch.Tensor, k: int = 100) -> list[list[int]]:
    """Best-first indices per row of a ``(Q, M)`` score matrix."""
    return torch.topk(scores, min(k, scores.shape[1]), dim=1).indices.tolist()


def corpus_store(texts: Sequence[str], explorer=None, keep_tokens: bool = False) -> MemoryStore:
    """A :class:`store.memory.MemoryStore` over a corpus whose chunk encodings (at the head's ℓc) come from the
    on-disk cache on first use; ``keep_tokens`` keeps the token states of that pass (for ``sparse``).
    Without an explorer the store serves BM25 and dense only."""
    if explorer is None:
        return MemoryStore(texts)

    def encode(parts: list | None) -> torch.Tensor:
        c = explorer.head.config
        bar = tqdm(total=len(texts), desc="encode corpus", unit="passage")
        out = cached_encode(explorer.backbone, list(texts), c.chunk_layer, c.n_pool, c.chunk_tokens,
                            progress=lambda d, t: bar.update(d - bar.n), token_parts=parts)
        bar.close()
        return out  # (M, L_p, d)

    return MemoryStore.lazy(texts, encode, keep_tokens)


def rankings(store, explorer, queries: Sequence[str], method: str, depth: int = 100,
             fusion_weight: float | None = None, batch: int = 100, memo: dict | None = None) -> list[list[int]]:
    """Best-first chunk ids per query (``depth`` of them) by one method, ``batch`` queries at a time.

    ``memo`` keeps the head's query vectors of each batch, so unreal and the hybrids encode the queries once.
    """
    out: list[list[int]] = []
    memo = {} if memo is None else memo
    for s in tqdm(range(0, len(queries), batch), desc=method, leave=False, disable=len(queries) <= batch):
        found = retrieve(store, explorer, queries[s : s + batch], depth, method, fusion_weight, memo.get(s))
        if found.query_vectors is not None:
            memo[s] = found.query_vectors
        out += found.ids
    return out


def fit_fusion_weight(unreal: torch.Tensor, bm25: torch.Tensor, gold: Sequence[set[int]]) -> float:
    """The weight w of ``w·z(UNREAL) + (1−w)·z(BM25)`` maximising MRR@10 (grid of 0.05)."""
    best = max((mrr_at_k(top(w * zscore(unreal) + (1 - w) * zscore(bm25), 10), gold), w)
               for w in [i / 20 for i in range(21)])
    return best[1]


def fusion_weight(explorer, methods: Sequence[str]) -> float | None:
    """The head's score-fusion weight w when ``hybrid-fusion`` is asked for (fitted on the dev split).

    Raises
    ------
    UserError
        ``hybrid-fusion`` asked for with a head that has no fitted weight.
    """
    if "hybrid-fusion" not in methods:
        return None
    if explorer.head.config.fusion_weight is None:
        raise UserError(f"the head {explorer.head_source} has no score-fusion weight: fit it on the dev split with "
                        f"`python -m unreal_demo eval heads --head {explorer.head_source} --save-fusion`")
    return explorer.head.config.fusion_weight


def _label(method: str, weight: float | None) -> str:
    """A result row's method label; score fusion names its weight."""
    return METHODS[method].label + (f" (w={weight} fitted on dev)" if method == "hybrid-fusion" else "")


CORPORA = {"full": "1,581 New-Wiki paragraphs + 10,033 Wikipedia summaries",
           "new_wiki": "the 1,581 New-Wiki paragraphs alone",
           "amazon": "the 2,050 Amazon product reviews of SQuAD-Shifts (out of domain: never trained on)"}


def held_out(sample: int, seed: int, corpus_name: str = "full") -> tuple[list[Passage], list, list[set[int]]]:
    """Corpus (New-Wiki, plus the summaries for ``"full"``; or the Amazon reviews), a seeded sample of its
    questions (New-Wiki's or Amazon's), gold indices."""
    if corpus_name not in CORPORA:
        raise ValueError(f"unknown corpus {corpus_name!r}; use {' or '.join(CORPORA)}")
    if corpus_name == "amazon":
        corpus, questions = load_squad("amazon")
        qs = random.Random(seed).sample(questions, min(sample, len(questions)))
    else:
        new_wiki, qs = sample_questions(sample, seed)
        corpus = new_wiki + (load_summaries() if corpus_name == "full" else [])
    where = {p.id: i for i, p in enumerate(corpus)}
    return corpus, qs, [{where[q.passage_id]} for q in qs]


def sample_questions(sample: int, seed: int) -> tuple[list[Passage], list]:
    """The New-Wiki paragraphs and a seeded sample of its questions: the one held-out draw every eval uses."""
    new_wiki, questions = load_squad("new_wiki")
    return new_wiki, random.Random(seed).sample(questions, min(sample, len(questions)))


def run_retrieval_eval(sample: int = 500, methods: Sequence[str] = ("bm25", "dense", "untrained", "unreal"),
                       head: str | None = None, model: str = DEFAULT_MODEL, out: str | None = None,
                       seed: int = 0, corpus_name: str = "full", dtype: str | None = None) -> dict:
    """Held-out retrieval for each method; returns (and optionally writes) the result table. ``dtype``: the
    encoding dtype (:func:`core.backbone.load_backbone`; None: the device's choice)."""
    from ..pipeline import Explorer

    methods = check(methods, "corpus")
    if corpus_name not in CORPORA:
        raise UserError(f"unknown corpus {corpus_name!r}; use {' or '.join(CORPORA)}")
    explorer = Explorer.load(model, head, require_head=True, dtype=dtype)
    corpus, qs, gold = held_out(sample, seed, corpus_name)
    store = corpus_store([p.text for p in corpus], explorer, keep_tokens="sparse" in methods)
    texts = [q.text for q in qs]
    weight = fusion_weight(explorer, methods)
    rows, seconds, memo, ranks = [], {}, {}, {}
    for m in methods:
        t0 = time.perf_counter()
        ranked = rankings(store, explorer, texts, m, memo=memo)
        seconds[m] = round(time.perf_counter() - t0, 1)
        rows.append({"method": _label(m, weight), "key": m} | metrics(ranked, gold) | {"n": len(gold)})
        ranks[m] = gold_ranks(ranked, gold)
    result = {
        "setting": f"{len(gold)} SQuAD-Shifts {'Amazon' if corpus_name == 'amazon' else 'New-Wiki'} questions "
                   f"(seed {seed}); corpus {len(corpus):,} passages "
                   f"({CORPORA[corpus_name]}); head {explorer.head_source}",
        "corpus": corpus_name,
        "seconds": seconds, "fusion_weight": weight, "table": rows,
        "markdown": _markdown(rows),
        "questions": [q.id for q in qs], "ranks": ranks,  # each question's gold rank per method (top 100)
    }
    return write_result(result, out, explorer)


def run_index_retrieval_eval(explorer, index, sample: int = 1000,
                             methods: Sequence[str] = ("bm25", "dense", "sparse", "unreal", "hybrid-rrf"),
                             seed: int = 0, out: str | None = None) -> dict:
    """Held-out retrieval against a built index (chunks, not paragraphs): a hit is any chunk of the gold
    paragraph. The same seeded New-Wiki questions as :func:`held_out`."""
    methods = check(methods, "index")
    weight = fusion_weight(explorer, methods)
    index.check_backbone(explorer.backbone, explorer.head.config.chunk_layer)
    _, qs = sample_questions(sample, seed)
    by_passage: dict[str, set[int]] = {}
    for i, c in enumerate(index.chunks):
        by_passage.setdefault(c["passage"], set()).add(i)
    gold = [by_passage.get(q.passage_id, set()) for q in qs]
    if not all(gold):
        raise UserError("the index does not hold the New-Wiki paragraphs: build it with --corpus all or new_wiki")
    rows, seconds, memo, ranks = [], {}, {}, {}
    for m in methods:
        t0 = time.perf_counter()
        ranked = rankings(index, explorer, [q.text for q in qs], m, depth=20, memo=memo)
        seconds[m] = round(time.perf_counter() - t0, 1)
        rows.append({"method": _label(m, weight), "key": m} | metrics(ranked, gold) | {"n": len(gold)})
        ranks[m] = gold_ranks(ranked, gold)
    m_ = index.manifest
    result = {"setting": f"{len(qs)} SQuAD-Shifts New-Wiki questions (seed {seed}) against the {m_['chunks']:,}-chunk "
                         f"index of {m_['passages']:,} passages (a hit: any chunk of the gold paragraph); head "
                         f"{explorer.head_source}",
              "corpus": "index", "seconds": seconds, "fusion_weight": weight, "table": rows,
              "markdown": _markdown(rows), "questions": [q.id for q in qs], "ranks": ranks}  # gold ranks (top 20)
    return write_result(result, out, explorer)


def _markdown(rows: list[dict]) -> str:
    cols = ["R@1", "R@5", "R@10", "R@20", "MRR@10"]
    lines = ["| method | " + " | ".join(cols) + " | R@1 95% CI |", "|---" * (len(cols) + 2) + "|"]
    lines += [f"| {r['method']} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + f" | {r['R@1 95% CI']} |"
              for r in rows]
    return "\n".join(lines)


def rank_jsonl(passages: str, queries: str, method: str, k: int = 10, model: str = DEFAULT_MODEL,
               head: str | None = None) -> dict:
    """``rank`` command: top-``k`` passage ids and scores per query, best first. ``hybrid-fusion`` uses the head's
    shipped score-fusion weight (fitted on the dev split) and says so under ``fusion_weight``; a head without one
    is refused in one line (:func:`fusion_weight`)."""
    from ..pipeline import Explorer

    (method,) = check([method], "corpus")
    ps, qs = read_jsonl(passages, "passages"), read_jsonl(queries, "queries")
    explorer = Explorer.load(model, head, require_head=True) if METHODS[method].model else None
    weight = fusion_weight(explorer, [method])
    store = corpus_store([str(p["text"]) for p in ps], explorer, keep_tokens=method == "sparse")
    found = retrieve(store, explorer, [str(q["text"]) for q in qs], k, method, fusion_weight=weight)
    out = {"results": [{"query": q["id"], "hits": [{"id": ps[i]["id"], "score": round(float(sc), 6)}
                                                   for i, sc in zip(ids, scores, strict=True)]}
                       for q, ids, scores in zip(qs, found.ids, found.scores, strict=True)]}
    if weight is not None:
        out["fusion_weight"] = {"w": weight, "source": f"the head's own weight, fitted on the dev split "
                                                       f"({explorer.head_source})"}
    return out
