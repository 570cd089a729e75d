"""The natural training and dev sets of the α and joint stages, over the chunks of the head's model's index.

Pool: the chunks of that index (the shipped one for SmolLM2, the one built in the cache for a second backbone; its
keys decoded once; no chunk is encoded again) without New-Wiki's
(held out), and without the SQuAD dev articles of the dev split while training. Sets and positives:

- ``nq`` / ``tqa``: NQ-open and TriviaQA by distant supervision (:mod:`data.natural`, rule ``dpr``: the best of
  BM25's top 100 pool chunks holding an answer alias), split by question into train and dev;
- ``squad``: SQuAD v1.1 dev questions of the train (dev) articles; positives: every chunk of the gold paragraph;
- ``new_wiki`` (test only): the 1,000 seeded New-Wiki questions of ``eval retrieval --corpus index`` against
  the whole index, C0 from the whole index, exactly as a search on the shipped index runs.

C0 of the other sets comes from BM25 over the pool. Every question's layer groups are cached once
(:func:`core.state_training.cache_layer_groups`); a run on the cached states then takes minutes.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from ..core.joint_training import TextSet
from ..core.maxsim import normalize_chunks
from ..core.selection import BM25
from ..core.state_training import StateSet, cache_layer_groups, recall, scores
from ..data.natural import distant_positives, load_natural, question_split
from ..data.sources import article_split
from ..evaluation.retrieval import fit_fusion_weight, sample_questions

NATURAL_SETS = {"nq": "nq_open", "tqa": "trivia_qa"}


def pool_of(index) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalised keys ``(M, L_p, d)`` of the whole index, the mask of chunks any training or dev set may use (not
    New-Wiki), and the mask of training candidates (also not the SQuAD dev articles of the dev split)."""
    keys = torch.cat([index.vectors(shard) for shard in index.shards])  # (M, L_p, d)
    return normalize_chunks(keys), *masks(index)


TRAIN_CAP = {"nq": 600, "tqa": 1000, "squad": 600}  # questions per set, a seeded sample (~1 s each to cache on


DEV_CAP = {"nq": 300, "tqa": 300, "squad": 200}     # 2 busy AVX2 cores; all NQ dev questions with a positive fit)


TEST = 500  # the first 500 of eval retrieval's seeded 1,000 New-Wiki questions


def _cap(rng: random.Random, items: list, n: int) -> list:
    return items if len(items) <= n else rng.sample(items, n)


def usable_pool(index) -> tuple[list[int], list[str], BM25]:
    """The chunk ids any training or dev set may use (:func:`masks`), their texts, and BM25 over those texts."""
    usable, _ = masks(index)
    pool = [i for i in range(len(index.chunks)) if usable[i]]
    texts = [index.chunks[i]["text"] for i in pool]
    return pool, texts, BM25(texts)


def bm25_contexts(bm25: BM25, texts: list[str], queries: list[str], n_context: int) -> list[list[str]]:
    """C0 of each query: the texts of BM25's top ``n_context`` among ``texts`` (none for ``n_context`` 0)."""
    if not n_context:
        return [[] for _ in queries]
    ids, _ = bm25.search(queries, k=n_context)
    return [[texts[j] for j in row] for row in ids.tolist()]


def chunks_by_passage(chunks: list[dict]) -> dict[str, list[int]]:
    """Passage id → the ids of its chunks (every chunk of a gold paragraph is a positive)."""
    out: dict[str, list[int]] = {}
    for i, c in enumerate(chunks):
        out.setdefault(c["passage"], []).append(i)
    return out


def build_sets(index, n_context: int, seed: int = 0) -> tuple[list[TextSet], list[TextSet], TextSet]:
    """(train sets, dev sets, the New-Wiki test set) with C0 and positives, over ``index``'s chunk ids; each set a
    seeded sample of at most :data:`TRAIN_CAP` / :data:`DEV_CAP` questions."""
    chunks = index.chunks
    pool, texts, bm25 = usable_pool(index)

    def c0(queries: list[str]) -> list[list[str]]:
        return bm25_contexts(bm25, texts, queries, n_context)

    trains, devs, rng = [], [], random.Random(seed)
    for short, source in NATURAL_SETS.items():
        qs = load_natural(source)
        pos = distant_positives(qs, texts, bm25, depth=100, rule="dpr")
        kept = {q.id: [pool[j] for j in p] for q, p in zip(qs, pos, strict=True) if p}
        for side, out, cap in zip(question_split(qs), (trains, devs), (TRAIN_CAP, DEV_CAP), strict=True):
            side = _cap(rng, [q for q in side if q.id in kept], cap[short])
            qtexts = [q.text for q in side]
            out.append(TextSet(short, qtexts, c0(qtexts), [kept[q.id] for q in side]))
    by_passage = chunks_by_passage(chunks)
    for (_, questions), cap, out in zip(article_split("squad_dev"), (TRAIN_CAP, DEV_CAP), (trains, devs), strict=True):
        qs = [q for q in _cap(rng, questions, cap["squad"]) if q.passage_id in by_passage]
        qtexts = [q.text for q in qs]
        out.append(TextSet("squad", qtexts, c0(qtexts), [by_passage[q.passage_id] for q in qs]))
    test_qs = sample_questions(1000, 0)[1][:TEST]
    qtexts = [q.text for q in test_qs]
    _, ids = index.bm25_topk(qtexts, max(1, n_context))
    contexts = [[chunks[j]["text"] for j in row[:n_context]] for row in ids.tolist()]
    test = TextSet("new_wiki", qtexts, contexts, [by_passage[q.passage_id] for q in test_qs])
    return trains, devs, test


def _sets_path(folder, name: str, index):
    """``folder/NAME-KEY.json``: the file of sets built under today's caps (:data:`TRAIN_CAP`, :data:`DEV_CAP`) over
    ``index``'s chunks (positives are chunk ids, and another model's tokenizer cuts the passages elsewhere)."""
    m = index.manifest
    key = json.dumps([TRAIN_CAP, DEV_CAP, TEST, m["model"], m["target"], m["chunks"]], sort_keys=True)
    return Path(folder) / f"{name}-{hashlib.md5(key.encode()).hexdigest()[:8]}.json"


def cached_sets(index, n_context: int, folder) -> tuple[list[TextSet], list[TextSet], TextSet]:
    """:func:`build_sets`, kept as JSON in ``folder`` (the distant supervision takes ~2 minutes)."""
    path = _sets_path(folder, f"c{n_context}", index)
    if path.exists():
        raw = json.loads(path.read_text())
        trains, devs = ([TextSet(**q) for q in raw[side]] for side in ("train", "dev"))
        return trains, devs, TextSet(**raw["test"])
    trains, devs, test = build_sets(index, n_context)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"train": [asdict(q) for q in trains], "dev": [asdict(q) for q in devs],
                                "test": asdict(test)}))
    return trains, devs, test


def more_train_sets(index, n_context: int, folder) -> list[TextSet]:
    """The natural questions of the train split with a ``dpr`` positive that :func:`build_sets`' seeded sample
    left out (its caps), one :class:`TextSet` per source named as the grid's (``nq``, ``tqa``), C0 from BM25 over
    the pool; a question whose text is also a dev-split question's is dropped. Kept as JSON in ``folder``."""
    path = _sets_path(folder, f"more-c{n_context}", index)
    if path.exists():
        return [TextSet(**q) for q in json.loads(path.read_text())]
    trains, _, _ = cached_sets(index, n_context, folder)
    pool, texts, bm25 = usable_pool(index)
    out = []
    for t in trains:
        if t.name not in NATURAL_SETS:
            continue
        train_qs, dev_qs = question_split(load_natural(NATURAL_SETS[t.name]))
        taken = {*t.texts, *(q.text for q in dev_qs)}
        rest = list({q.text: q for q in train_qs if q.text not in taken}.values())  # one per text
        pos = distant_positives(rest, texts, bm25, depth=100, rule="dpr")
        kept = [(q.text, [pool[j] for j in p]) for q, p in zip(rest, pos, strict=True) if p]
        qtexts = [q for q, _ in kept]
        out.append(TextSet(t.name, qtexts, bm25_contexts(bm25, texts, qtexts, n_context), [p for _, p in kept]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(q) for q in out]))
    return out


def masks(index) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pool_of`'s two masks, without decoding any key."""
    dev_titles = {p.title for p in article_split("squad_dev")[1][0]}
    usable = torch.tensor([c["source"] != "new_wiki" for c in index.chunks])
    train = usable & torch.tensor([not (c["source"] == "squad_dev" and c["title"] in dev_titles)
                                   for c in index.chunks])
    return usable, train


def cache_sets(head, backbone, sets: list[TextSet], folder) -> list[StateSet]:
    """Each set's layer groups, cached in ``folder`` (resumable), as :class:`StateSet`."""
    out = []
    for s in sets:
        bar = tqdm(total=len(s.texts), desc=f"query states {s.name}", unit="q")
        groups = cache_layer_groups(head, backbone, s.texts, s.contexts, folder,
                                    progress=lambda d, t, bar=bar: bar.update(d - bar.n))
        bar.close()
        out.append(StateSet(s.name, groups, s.positives))
    return out


def bm25_within(index, texts: list[str], usable: torch.Tensor) -> torch.Tensor:
    """BM25 scores ``(N, M)`` of every index chunk, −inf where ``usable`` is False."""
    scores = index.bm25_scores(texts)  # (N, M)
    scores[:, ~usable] = float("-inf")
    return scores


def positions(usable: torch.Tensor) -> torch.Tensor:
    """Each chunk id's position among the usable chunks ``(M,)``, −1 for the others."""
    remap = torch.full((len(usable),), -1, dtype=torch.long)
    remap[usable] = torch.arange(int(usable.sum()))
    return remap


def local(sets: list[StateSet], usable: torch.Tensor) -> list[StateSet]:
    """The sets with positives as positions among the usable chunks (:func:`positions`)."""
    remap = positions(usable)
    return [StateSet(d.name, d.groups, [[int(remap[i]) for i in p if remap[i] >= 0] for p in d.positives])
            for d in sets]


def score_row(label: str, model, dev: list[StateSet], dev_keys: torch.Tensor, test: StateSet, keys: torch.Tensor,
              extra: dict) -> dict:
    """One grid row: R@1 / R@10 of ``model`` on each dev set (positives local to ``dev_keys``), their mean R@1,
    and R@1 / R@10 on the New-Wiki test set over the whole index (``keys``)."""
    out = {"variant": label, "parameters": model.n_params()} | extra
    for d in dev:
        out |= {f"dev {d.name} {k}": v for k, v in recall(model, d, dev_keys).items()}
    out["dev mean R@1"] = round(sum(out[f"dev {d.name} R@1"] for d in dev) / len(dev), 4)
    out |= {f"test new_wiki {k}": v for k, v in recall(model, test, keys).items()}
    return out


def natural_questions(sets: list[TextSet]) -> list[list]:
    """The :class:`data.natural.NaturalQuestion` (id, answers) of each question of natural sets, found by text."""
    out = []
    for s in sets:
        by_text = {n.text: n for n in load_natural(NATURAL_SETS[s.name])}
        out.append([by_text[t] for t in s.texts])
    return out


def cleaner(index, usable: torch.Tensor, sets: list[TextSet], cached: list[StateSet], depth: int,
            ) -> list[StateSet]:
    """The natural sets keeping only questions whose positive BM25 ranks in its top ``depth`` over the usable
    chunks (named ``nq@3``, …): fewer, cleaner positives (50 read pairs: 8 of 16 right at rank ≤ 3, 13 of 50 at
    rank ≤ 100; docs/RESULTS.md, "What was tried and not adopted")."""
    out = []
    for q, c in zip(sets, cached, strict=True):
        if q.name in NATURAL_SETS:
            keep = clean_ids(index, usable, q, depth)
            out.append(StateSet(f"{q.name}@{depth}", c.groups[keep], [q.positives[i] for i in keep]))
    return out


def clean_ids(index, usable: torch.Tensor, q: TextSet, depth: int) -> list[int]:
    """The questions of ``q`` with a positive among BM25's top ``depth`` usable chunks (the cleaner positives' rule)."""
    top = bm25_within(index, q.texts, usable).topk(depth, dim=1).indices.tolist()
    return [i for i, (t, p) in enumerate(zip(top, q.positives, strict=True)) if set(t) & set(p)]


def without_positive_c0(pool: list[int], texts: list[str], bm25: BM25, sets: list[TextSet], n_context: int,
                        ) -> list[TextSet]:
    """The sets again with C0 = BM25's top ``n_context`` usable chunks that are *not* a positive (named ``nq~``,
    …): questions whose BM25 context holds the answer's chunk teach the head to re-find its context; these teach
    it to find the answer without that help. Only the labelled positives are removed (another chunk may still
    hold an answer alias). ``pool``, ``texts``, ``bm25``: the usable chunks' ids, texts and BM25
    (:func:`usable_pool`); positives are chunk ids.

    >>> texts = ["washington first president", "obama first black president", "paris city"]
    >>> q = TextSet("nq", ["first president"], [[]], [[10]])  # chunk 10 (texts[0]) holds the answer
    >>> without_positive_c0([10, 11, 12], texts, BM25(texts), [q], 1)[0].contexts
    [['obama first black president']]
    """
    out = []
    for q in sets:
        ids, _ = bm25.search(q.texts, k=n_context + max(map(len, q.positives), default=0))
        contexts = [[texts[j] for j in row if pool[j] not in p][:n_context]
                    for row, p in zip(ids.tolist(), q.positives, strict=True)]
        out.append(TextSet(f"{q.name}~", q.texts, contexts, q.positives))
    return out


def fit_fusion_on_dev(head, index, devs: list[TextSet], cached: list[StateSet], keys: torch.Tensor,
                      usable: torch.Tensor) -> float:
    """The score-fusion weight w of ``head`` (``w·z(UNREAL) + (1−w)·z(BM25)``, best MRR@10) refitted on the dev
    sets' cached states over the usable chunks (:func:`evaluation.retrieval.fit_fusion_weight`)."""
    remap = positions(usable)
    unreal = torch.cat([scores(head, c.groups, keys[usable]) for c in cached])  # (N, P)
    bm25 = torch.cat([index.bm25_scores(q.texts)[:, usable] for q in devs])  # (N, P)
    gold = [{int(remap[i]) for i in p if remap[i] >= 0} for c in cached for p in c.positives]
    return fit_fusion_weight(unreal, bm25, gold)


def grid_columns(rows: list[dict]) -> list[str]:
    """The grid table's recall columns: R@1 / R@10 of each dev set the rows hold (in the order met), the dev mean
    R@1 and the New-Wiki test's R@1 / R@10."""
    devs = dict.fromkeys(k.rsplit(" ", 1)[0] for r in rows for k in r
                         if k.startswith("dev ") and k.endswith(("R@1", "R@10")) and k != "dev mean R@1")
    return [f"{d} {m}" for d in devs for m in ("R@1", "R@10")] + ["dev mean R@1", "test new_wiki R@1",
                                                                  "test new_wiki R@10"]


def grid_markdown(rows: list[dict]) -> str:
    """The grid's rows (and reference rows) as a markdown table; a cell a row lacks is "—".

    >>> print(grid_markdown([{"variant": "BM25", "dev nq R@1": 0.25}]).splitlines()[2][:30])
    | BM25 | — | — | 0.250 | — | —
    """
    columns = grid_columns(rows)
    head = "| variant | parameters | best step | " + " | ".join(c.replace("test new_wiki", "New-Wiki test")
                                                               for c in columns) + " |"
    lines = [head, "|---" * (len(columns) + 3) + "|"]
    for r in rows:
        params = f"{r['parameters']:,}" if "parameters" in r else "—"
        lines.append(f"| {r['variant']} | {params} | {r.get('best step', '—')} | "
                     + " | ".join(f"{r[c]:.3f}" if c in r else "—" for c in columns) + " |")
    return "\n".join(lines)
