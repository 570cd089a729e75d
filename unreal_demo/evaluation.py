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

import json
import math
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from .backbone import DEFAULT_MODEL, load_backbone
from .data import Passage, load_squad, load_summaries, read_jsonl
from .encoding import cached_encode, query_states
from .head import QueryHead
from .maxsim import maxsim, normalize_chunks
from .paths import DEFAULT_HEADS
from .selection import BM25, reciprocal_rank_fusion, zscore

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
    """95% Wilson interval of a proportion ``p`` over ``n`` trials."""
    if n == 0:
        return (0.0, 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (round(centre - half, 3), round(centre + half, 3))


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean of values in [0, 1] and its 95% normal interval, clipped to [0, 1]: ``(mean, low, high)``."""
    m = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return round(m, 4), round(max(0.0, m - half), 4), round(min(1.0, m + half), 4)


def metrics(rankings: Sequence[Sequence[int]], gold: Sequence[set[int]]) -> dict:
    row = {f"R@{k}": round(recall_at_k(rankings, gold, k), 4) for k in KS}
    row["MRR@10"] = round(mrr_at_k(rankings, gold, 10), 4)
    row["R@1 95% CI"] = wilson(row["R@1"], len(gold))
    row["R@10 95% CI"] = wilson(row["R@10"], len(gold))
    return row


def top(scores: torch.Tensor, k: int = 100) -> list[list[int]]:
    """Best-first indices per row of a ``(Q, M)`` score matrix."""
    return torch.topk(scores, min(k, scores.shape[1]), dim=1).indices.tolist()


class CorpusScorer:
    """Exact scores of queries against every passage of a corpus, for each method.

    Parameters
    ----------
    texts : the passages.
    backbone, head : the frozen LLM and the query head (for ``unreal``, ``untrained``, ``sparse``).
    keep_tokens : keep token states from the first encoding pass (needed by ``sparse``).
    """

    def __init__(self, texts: Sequence[str], backbone=None, head: QueryHead | None = None,
                 keep_tokens: bool = False) -> None:
        self.texts, self.backbone, self.head, self.keep_tokens = list(texts), backbone, head, keep_tokens
        self.bm25 = BM25(self.texts)
        self._keys: torch.Tensor | None = None
        self._tokens: list | None = None
        self._dense: torch.Tensor | None = None

    def _encode(self, tokens: bool) -> None:
        c = self.head.config
        parts = [] if tokens else None
        bar = tqdm(total=len(self.texts), desc="encode corpus", unit="passage")
        self._keys = cached_encode(self.backbone, self.texts, c.chunk_layer, c.n_pool, c.chunk_tokens,
                                   progress=lambda d, t: bar.update(d - bar.n), token_parts=parts)
        bar.close()
        self._tokens = parts

    @property
    def raw_keys(self) -> torch.Tensor:
        """Pooled chunk states ``(M, L_p, d)`` at the head's ℓc (cached on disk)."""
        if self._keys is None:
            self._encode(tokens=self.keep_tokens)
        return self._keys

    def sparse_scores(self, queries: Sequence[str], alpha: float = 0.5) -> torch.Tensor:
        """Sparse token matching (k = 64) fused with the pooled cosine at weight ``alpha``."""
        from . import sparse

        if self._tokens is None:
            self._encode(tokens=True)
        qt = sparse.query_token_states(self.backbone, queries, self.head.config.chunk_layer)
        local = torch.cat([sparse.sparse_scores(qt[s : s + 128], self._tokens) for s in range(0, len(qt), 128)])
        return sparse.fuse(local, sparse.pooled_scores(qt, self.raw_keys.mean(1)), alpha)

    def bm25_scores(self, queries: Sequence[str]) -> torch.Tensor:
        return torch.stack([torch.as_tensor(self.bm25.scores(q), dtype=torch.float32) for q in queries])

    def contexts(self, queries: Sequence[str]) -> list[list[str]]:
        """C0: the top-|C0| BM25 passages of each query."""
        n = self.head.config.n_context
        if not n:
            return [[] for _ in queries]
        ids, _ = self.bm25.search(list(queries), n)
        return [[self.texts[j] for j in row] for row in ids.tolist()]

    @torch.inference_mode()
    def unreal_scores(self, queries: Sequence[str], batch: int = 16) -> torch.Tensor:
        keys = self.raw_keys
        keys = normalize_chunks(keys) if self.head.config.normalize else keys
        ctx, out = self.contexts(queries), []
        for s in tqdm(range(0, len(queries), batch), desc="UNREAL queries", leave=False):
            q = self.head(self.backbone, queries[s : s + batch], ctx[s : s + batch])  # (b, G, d)
            out.append(maxsim(q, keys.to(q.device)).cpu())
        return torch.cat(out)

    @torch.inference_mode()
    def untrained_scores(self, queries: Sequence[str]) -> torch.Tensor:
        """The backbone's own states, no training: cosine of mean-pooled states at ℓc."""
        layer = self.head.config.chunk_layer
        passages = normalize_chunks(self.raw_keys.mean(1, keepdim=True))[:, 0]  # (M, d)
        means = torch.stack([h.mean(0) for h in query_states(self.backbone, queries, layer)])  # (Q, d)
        return torch.nn.functional.normalize(means, dim=-1) @ passages.T

    def dense_scores(self, queries: Sequence[str]) -> torch.Tensor:
        from . import dense

        if self._dense is None:
            self._dense = dense.embed(self.texts)
        return dense.embed(queries) @ self._dense.T


def fit_fusion_weight(unreal: torch.Tensor, bm25: torch.Tensor, gold: Sequence[set[int]]) -> float:
    """The weight w of ``w·z(UNREAL) + (1−w)·z(BM25)`` maximising MRR@10 (grid of 0.05)."""
    best = max((mrr_at_k(top(w * zscore(unreal) + (1 - w) * zscore(bm25), 10), gold), w)
               for w in [i / 20 for i in range(21)])
    return best[1]


CORPORA = {"full": "1,581 New-Wiki paragraphs + 10,033 Wikipedia summaries",
           "new_wiki": "the 1,581 New-Wiki paragraphs alone"}


def held_out(sample: int, seed: int, corpus_name: str = "full") -> tuple[list[Passage], list, list[set[int]]]:
    """Corpus (New-Wiki, plus the summaries for ``"full"``), a seeded sample of New-Wiki questions, gold indices."""
    if corpus_name not in CORPORA:
        raise ValueError(f"unknown corpus {corpus_name!r}; use {' or '.join(CORPORA)}")
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
                       seed: int = 0, dev_sample: int = 300, corpus_name: str = "full") -> dict:
    """Held-out retrieval for each method; returns (and optionally writes) the result table."""
    from .training import TrainConfig, dev_questions

    backbone = load_backbone(model)
    head_path = Path(head) if head else DEFAULT_HEADS[model]
    qhead = QueryHead.load(head_path).to(backbone.device).eval()
    qhead.check_backbone(backbone)
    corpus, qs, gold = held_out(sample, seed, corpus_name)
    scorer = CorpusScorer([p.text for p in corpus], backbone, qhead, keep_tokens="sparse" in methods)
    texts = [q.text for q in qs]
    scores, rows, seconds = {}, [], {}
    need = set(methods) | ({"unreal", "bm25"} if {"hybrid_rrf", "hybrid_fused"} & set(methods) else set())
    for m in ["bm25", "dense", "untrained", "sparse", "unreal"]:
        if m in need:
            t0 = time.perf_counter()
            scores[m] = getattr(scorer, f"{m}_scores")(texts)
            seconds[m] = round(time.perf_counter() - t0, 1)
    rankings = {m: top(s) for m, s in scores.items()}
    weight = None
    if "hybrid_rrf" in methods:
        rankings["hybrid_rrf"] = [[i for i, _ in reciprocal_rank_fusion([u, b])]
                                  for u, b in zip(rankings["unreal"], rankings["bm25"], strict=True)]
    if "hybrid_fused" in methods:
        dev_corpus, dev_q = dev_questions(TrainConfig())
        dev_q = random.Random(seed).sample(dev_q, min(dev_sample, len(dev_q)))
        where = {p.id: i for i, p in enumerate(dev_corpus)}
        dev_scorer = CorpusScorer([p.text for p in dev_corpus], backbone, qhead)
        dev_texts = [q.text for q in dev_q]
        weight = fit_fusion_weight(dev_scorer.unreal_scores(dev_texts), dev_scorer.bm25_scores(dev_texts),
                                   [{where[q.passage_id]} for q in dev_q])
        rankings["hybrid_fused"] = top(weight * zscore(scores["unreal"]) + (1 - weight) * zscore(scores["bm25"]))
    labels = {"bm25": "BM25 (bm25s, stemmed)", "dense": "dense MiniLM-L6-v2", "untrained":
              f"untrained backbone (mean state, block {qhead.config.chunk_layer}, cosine)",
              "sparse": f"sparse token matching (k=64, α=0.5, block {qhead.config.chunk_layer})",
              "unreal": "UNREAL (trained head)", "hybrid_rrf": "UNREAL + BM25, RRF (k=60)",
              "hybrid_fused": f"UNREAL + BM25, score fusion (w={weight} fitted on dev)"}
    for m in methods:
        rows.append({"method": labels[m], "key": m} | metrics(rankings[m], gold) | {"n": len(gold)})
    result = {
        "setting": f"{len(gold)} SQuAD-Shifts New-Wiki questions (seed {seed}); corpus {len(corpus):,} passages "
                   f"({CORPORA[corpus_name]}); head {head_path}",
        "command": f"python -m unreal_demo eval retrieval --sample {sample} --methods {','.join(methods)} "
                   f"--corpus {corpus_name}",
        "corpus": corpus_name,
        "seconds": seconds, "fusion_weight": weight, "table": rows,
        "markdown": _markdown(rows),
    }
    if out:
        Path(out).write_text(json.dumps(result, indent=2))
    return result


def run_index_retrieval_eval(explorer, index, sample: int = 1000,
                             methods: Sequence[str] = ("bm25", "dense", "sparse", "unreal", "hybrid"),
                             seed: int = 0, out: str | None = None) -> dict:
    """Held-out retrieval against a built index (chunks, not paragraphs): a hit is any chunk of the gold
    paragraph. The same seeded New-Wiki questions as :func:`held_out`."""
    from .index import retrieve

    index.check_backbone(explorer.backbone, explorer.head.config.chunk_layer)
    _, qs = sample_questions(sample, seed)
    by_passage: dict[str, set[int]] = {}
    for i, c in enumerate(index.chunks):
        by_passage.setdefault(c["passage"], set()).add(i)
    gold = [by_passage.get(q.passage_id, set()) for q in qs]
    if not all(gold):
        raise ValueError("the index does not hold the New-Wiki paragraphs: build it with --corpus all or new_wiki")
    labels = {"bm25": "BM25 (bm25s, stemmed)", "dense": "dense MiniLM-L6-v2",
              "sparse": f"sparse token matching (k=64, α=0.5, block {explorer.head.config.chunk_layer})",
              "unreal": "UNREAL (trained head)", "hybrid": "UNREAL + BM25, RRF (k=60)"}
    rows, seconds = [], {}
    for m in methods:
        t0 = time.perf_counter()
        ranked: list[list[int]] = []
        for s in range(0, len(qs), 100):  # bounded memory for sparse
            ranked += retrieve(index, explorer, [q.text for q in qs[s : s + 100]], 20, m)[0]
        seconds[m] = round(time.perf_counter() - t0, 1)
        rows.append({"method": labels[m], "key": m} | metrics(ranked, gold) | {"n": len(gold)})
    m_ = index.manifest
    result = {"setting": f"{len(qs)} SQuAD-Shifts New-Wiki questions (seed {seed}) against the {m_['chunks']:,}-chunk "
                         f"index of {m_['passages']:,} passages (a hit: any chunk of the gold paragraph); head "
                         f"{explorer.head_source}",
              "command": f"python -m unreal_demo eval retrieval --corpus index --sample {sample} "
                         f"--methods {','.join(methods)}",
              "corpus": "index", "seconds": seconds, "table": rows, "markdown": _markdown(rows)}
    if out:
        Path(out).write_text(json.dumps(result, indent=2))
    return result


def _markdown(rows: list[dict]) -> str:
    cols = ["R@1", "R@5", "R@10", "R@20", "MRR@10"]
    lines = ["| method | " + " | ".join(cols) + " | R@1 95% CI |", "|---" * (len(cols) + 2) + "|"]
    lines += [f"| {r['method']} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + f" | {r['R@1 95% CI']} |"
              for r in rows]
    return "\n".join(lines)


def rank_jsonl(passages: str, queries: str, method: str, k: int = 10, model: str = DEFAULT_MODEL,
               head: str | None = None) -> dict:
    """``rank`` command: top-``k`` passage ids and scores per query, best first."""
    ps, qs = read_jsonl(passages, "passages"), read_jsonl(queries, "queries")
    needs_model = method in {"unreal", "hybrid", "sparse"}
    backbone = load_backbone(model) if needs_model else None
    qhead = None
    if needs_model:
        qhead = QueryHead.load(Path(head) if head else DEFAULT_HEADS[model]).to(backbone.device).eval()
        qhead.check_backbone(backbone)
    scorer = CorpusScorer([str(p["text"]) for p in ps], backbone, qhead, keep_tokens=method == "sparse")
    texts = [str(q["text"]) for q in qs]
    if method == "hybrid":
        u, b = top(scorer.unreal_scores(texts)), top(scorer.bm25_scores(texts))
        results = [reciprocal_rank_fusion([x, y])[:k] for x, y in zip(u, b, strict=True)]
    else:
        s = getattr(scorer, f"{method}_scores")(texts)
        vals, idx = torch.topk(s, min(k, s.shape[1]), dim=1)
        results = [list(zip(i.tolist(), v.tolist(), strict=True)) for i, v in zip(idx, vals, strict=True)]
    return {"results": [{"query": q["id"], "hits": [{"id": ps[i]["id"], "score": round(float(sc), 6)}
                                                    for i, sc in hits]} for q, hits in zip(qs, results, strict=True)]}
