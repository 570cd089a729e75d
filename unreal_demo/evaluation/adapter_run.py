"""The query-adapter experiment: natural questions + SQuAD-style questions over the shipped index's chunks.

Pool: the chunks of the shipped index (its keys decoded once; no chunk is encoded again) without New-Wiki's
(held out), and without the SQuAD dev articles of the dev split while training. Questions and positives:

- ``nq`` / ``tqa``: NQ-open and TriviaQA by distant supervision (:mod:`data.natural`, rule ``dpr``: the best of
  BM25's top 100 pool chunks holding an answer alias), split by question into train and dev;
- ``squad``: SQuAD v1.1 dev questions of the train (dev) articles; positives: every chunk of the gold paragraph;
- ``new_wiki`` (test only): the 1,000 seeded New-Wiki questions of ``eval retrieval --corpus index`` against
  the whole index, C0 from the whole index, exactly as a search on the shipped index runs.

C0 of the other sets comes from BM25 over the pool. Every question's layer groups are cached once
(:func:`state_training.cache_layer_groups`); the adapter runs of :func:`run` then take minutes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ..core.maxsim import normalize_chunks
from ..core.selection import BM25
from ..core.state_training import StateSet, cache_layer_groups, recall_from_scores
from ..data.natural import distant_positives, load_natural, question_split
from ..data.sources import article_split
from .retrieval import sample_questions

NATURAL_SETS = {"nq": "nq_open", "tqa": "trivia_qa"}


@dataclass
class Questions:
    """One set before caching: question texts, C0 texts, positive chunk ids."""

    name: str
    texts: list[str]
    contexts: list[list[str]]
    positives: list[list[int]]


def pool_of(index) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalised keys ``(M, L_p, d)`` of the whole index, the mask of chunks any training or dev set may use (not
    New-Wiki), and the mask of training candidates (also not the SQuAD dev articles of the dev split)."""
    keys = torch.cat([index.vectors(shard) for shard in index.shards])  # (M, L_p, d)
    return normalize_chunks(keys), *masks(index)


def build_sets(index, n_context: int, squad_train: int = 1500, squad_dev: int = 400, seed: int = 0,
               ) -> tuple[list[Questions], list[Questions], Questions]:
    """(train sets, dev sets, the New-Wiki test set) with C0 and positives, over ``index``'s chunk ids."""
    chunks = index.chunks
    usable, _ = masks(index)
    pool = [i for i in range(len(chunks)) if usable[i]]
    texts = [chunks[i]["text"] for i in pool]
    bm25 = BM25(texts)

    def c0(queries: list[str]) -> list[list[str]]:
        if not n_context:
            return [[] for _ in queries]
        ids, _ = bm25.search(queries, k=n_context)
        return [[texts[j] for j in row] for row in ids.tolist()]

    trains, devs = [], []
    for short, source in NATURAL_SETS.items():
        qs = load_natural(source)
        pos = distant_positives(qs, texts, bm25, depth=100, rule="dpr")
        kept = {q.id: [pool[j] for j in p] for q, p in zip(qs, pos, strict=True) if p}
        for side, out in zip(question_split(qs), (trains, devs), strict=True):
            side = [q for q in side if q.id in kept]
            qtexts = [q.text for q in side]
            out.append(Questions(short, qtexts, c0(qtexts), [kept[q.id] for q in side]))
    by_passage: dict[str, list[int]] = {}
    for i, c in enumerate(chunks):
        by_passage.setdefault(c["passage"], []).append(i)
    rng = random.Random(seed)
    for (_, questions), n, out in zip(article_split("squad_dev"), (squad_train, squad_dev), (trains, devs),
                                      strict=True):
        qs = [q for q in rng.sample(questions, min(n, len(questions))) if q.passage_id in by_passage]
        qtexts = [q.text for q in qs]
        out.append(Questions("squad", qtexts, c0(qtexts), [by_passage[q.passage_id] for q in qs]))
    _, test_qs = sample_questions(1000, 0)
    qtexts = [q.text for q in test_qs]
    _, ids = index.bm25_topk(qtexts, max(1, n_context))
    contexts = [[chunks[j]["text"] for j in row[:n_context]] for row in ids.tolist()]
    test = Questions("new_wiki", qtexts, contexts, [by_passage[q.passage_id] for q in test_qs])
    return trains, devs, test


def masks(index) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pool_of`'s two masks, without decoding any key."""
    dev_titles = {p.title for p in article_split("squad_dev")[1][0]}
    usable = torch.tensor([c["source"] != "new_wiki" for c in index.chunks])
    train = usable & torch.tensor([not (c["source"] == "squad_dev" and c["title"] in dev_titles)
                                   for c in index.chunks])
    return usable, train


def cache_sets(head, backbone, sets: list[Questions], folder) -> list[StateSet]:
    """Each set's layer groups, cached in ``folder`` (resumable), as :class:`StateSet`."""
    out = []
    for s in sets:
        bar = tqdm(total=len(s.texts), desc=f"query states {s.name}", unit="q")
        groups = cache_layer_groups(head, backbone, s.texts, s.contexts, folder,
                                    progress=lambda d, t, bar=bar: bar.update(d - bar.n))
        bar.close()
        out.append(StateSet(s.name, groups, s.positives))
    return out


def bm25_recall(index, data: Questions, usable: torch.Tensor, ks=(1, 10)) -> dict[str, float]:
    """BM25's R@k for a set over the chunks ``usable`` marks (the same candidates UNREAL ranks)."""
    scores = index.bm25_scores(data.texts)  # (N, M)
    scores[:, ~usable] = float("-inf")
    return recall_from_scores(scores, data.positives, ks)


def dense_recall(index, data: Questions, usable: torch.Tensor, ks=(1, 10)) -> dict[str, float]:
    """Dense MiniLM's R@k for a set over the chunks ``usable`` marks (the index's stored MiniLM vectors)."""
    from ..retrieval.dense import embed

    vectors = torch.cat([torch.from_numpy(index.dense_vectors(s)) for s in index.shards]).float()  # (M, 384)
    scores = embed(data.texts) @ vectors.T  # (N, M)
    scores[:, ~usable] = float("-inf")
    return recall_from_scores(scores, data.positives, ks)
