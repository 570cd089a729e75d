"""The query-adapter experiment: natural questions + SQuAD-style questions over the shipped index's chunks.

Pool: the chunks of the shipped index (its keys decoded once; no chunk is encoded again) without New-Wiki's
(held out), and without the SQuAD dev articles of the dev split while training. TextSet and positives:

- ``nq`` / ``tqa``: NQ-open and TriviaQA by distant supervision (:mod:`data.natural`, rule ``dpr``: the best of
  BM25's top 100 pool chunks holding an answer alias), split by question into train and dev;
- ``squad``: SQuAD v1.1 dev questions of the train (dev) articles; positives: every chunk of the gold paragraph;
- ``new_wiki`` (test only): the 1,000 seeded New-Wiki questions of ``eval retrieval --corpus index`` against
  the whole index, C0 from the whole index, exactly as a search on the shipped index runs.

C0 of the other sets comes from BM25 over the pool. Every question's layer groups are cached once
(:func:`state_training.cache_layer_groups`); the adapter runs of :func:`run` then take minutes.
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import asdict, dataclass

import torch
from tqdm import tqdm

from ..core.joint_training import TextSet
from ..core.maxsim import normalize_chunks
from ..core.selection import BM25
from ..core.state_training import (
    StateSet,
    StateTrainConfig,
    cache_layer_groups,
    fit_states,
    recall,
    recall_from_scores,
    scores,
)
from ..data.natural import distant_positives, load_natural, question_split
from ..data.sources import article_split
from ..errors import InputError
from ..settings import display_path
from .retrieval import sample_questions

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


def _sets_path(folder, name: str):
    """``folder/NAME-CAPS.json``: the file of sets built under today's caps (:data:`TRAIN_CAP`, :data:`DEV_CAP`)."""
    import hashlib
    import json
    from pathlib import Path

    caps = hashlib.md5(json.dumps([TRAIN_CAP, DEV_CAP, TEST], sort_keys=True).encode()).hexdigest()[:8]
    return Path(folder) / f"{name}-{caps}.json"


def cached_sets(index, n_context: int, folder) -> tuple[list[TextSet], list[TextSet], TextSet]:
    """:func:`build_sets`, kept as JSON in ``folder`` (the distant supervision takes ~2 minutes)."""
    import json

    path = _sets_path(folder, f"c{n_context}")
    if path.exists():
        raw = json.loads(path.read_text())
        trains, devs = ([TextSet(**q) for q in raw[side]] for side in ("train", "dev"))
        return trains, devs, TextSet(**raw["test"])
    trains, devs, test = build_sets(index, n_context)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"train": [asdict(q) for q in trains], "dev": [asdict(q) for q in devs],
                                "test": asdict(test)}))
    return trains, devs, test


POSITIVES = {"cleaner": "the dpr rule's positives at BM25 rank ≤ 3", "judged": "judged positives",
             "judged-more": "judged positives with the more side"}  # the natural train sets' positives


def open_sets(head_path: str, n_context: int | None, positives: str, dev: str) -> tuple:
    """(the :class:`pipeline.Explorer` of ``head_path``, its head reading ``n_context`` passages (default: its
    own |C0|), the shipped index, (train sets, dev sets, New-Wiki test)) of the adapter experiment, with the judged
    sets in place where ``positives`` (:data:`POSITIVES`) and ``dev`` (``dpr`` or ``judged``) ask for them.

    Raises
    ------
    ValueError
        An unknown ``positives`` or ``dev``.
    InputError
        ``judged-more`` without the judged more side (``precomputed/judged/more.json.gz``).
    """
    if positives not in POSITIVES or dev not in ("dpr", "judged"):
        raise ValueError(f"positives must be one of {', '.join(POSITIVES)} and dev 'dpr' or 'judged', not "
                         f"{positives!r}, {dev!r}")
    from .judged_dev import judged_path, with_judged, with_more

    if positives == "judged-more" and not judged_path("more").exists():
        raise InputError(f"no judged more side ({display_path(judged_path('more'))}): run `adapter --judged "
                         "candidates --side more`, read the candidates and `--judged collect --side more` first")
    from ..pipeline import Explorer
    from ..settings import cache_dir
    from ..store.index import Index, shipped_folder

    explorer = Explorer.load(head=head_path, require_head=True)
    head = explorer.head
    if n_context is not None and n_context != head.config.n_context:
        head = head.reshaped(n_context=n_context)
    index = Index(shipped_folder(explorer))
    trains, devs, test = cached_sets(index, head.config.n_context, cache_dir() / "adapter_sets")
    if positives != "cleaner":
        trains = with_judged("train", trains)[0]
    if positives == "judged-more":
        trains = with_more(trains, index, head.config.n_context)
    if dev == "judged":
        devs = with_judged("dev", devs)[0]
    return explorer, head, index, (trains, devs, test)


def more_train_sets(index, n_context: int, folder) -> list[TextSet]:
    """The natural questions of the train split with a ``dpr`` positive that :func:`build_sets`' seeded sample
    left out (its caps), one :class:`TextSet` per source named as the grid's (``nq``, ``tqa``), C0 from BM25 over
    the pool; a question whose text is also a dev-split question's is dropped. Kept as JSON in ``folder``."""
    import json

    path = _sets_path(folder, f"more-c{n_context}")
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


def centred_keys(index) -> tuple[torch.Tensor, torch.Tensor]:
    """The index's keys centred on their mean vector, then normalised ``(M, L_p, d)``, and that mean ``(d,)``.

    A MaxSim score with a normalised query moves by the same −⟨q, μ⟩ for every chunk, so centring changes a
    ranking only through each vector's norm ‖k − μ‖ (against ‖k‖): the few large outlier dimensions of ℓc's
    residual stream, nearly constant across chunks, stop dominating it. An index would carry μ as one stored
    vector beside its codes."""
    raw = torch.cat([index.vectors(shard) for shard in index.shards]).float()  # (M, L_p, d)
    mu = raw.reshape(-1, raw.shape[-1]).mean(0)  # (d,)
    return normalize_chunks(raw - mu), mu


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


@functools.cache
def _dense_vectors(index) -> torch.Tensor:
    """The index's stored MiniLM vectors ``(M, 384)``, decoded once per opened index."""
    return torch.cat([torch.from_numpy(index.dense_vectors(s)) for s in index.shards]).float()


def bm25_recall(index, data: TextSet, usable: torch.Tensor, ks=(1, 10)) -> dict[str, float]:
    """BM25's R@k for a set over the chunks ``usable`` marks (the same candidates UNREAL ranks)."""
    return recall_from_scores(bm25_within(index, data.texts, usable), data.positives, ks)


def dense_recall(index, data: TextSet, usable: torch.Tensor, ks=(1, 10)) -> dict[str, float]:
    """Dense MiniLM's R@k for a set over the chunks ``usable`` marks (the index's stored MiniLM vectors)."""
    from ..core.minilm import embed

    scores = embed(data.texts) @ _dense_vectors(index).T  # (N, M)
    scores[:, ~usable] = float("-inf")
    return recall_from_scores(scores, data.positives, ks)


@dataclass
class Variant:
    """One adapter run: its label, the train sets it draws from, and its settings."""

    label: str
    sources: tuple[str, ...]
    cfg: StateTrainConfig
    centre: bool = False  # train and score against keys centred on the index's mean vector (:func:`centred_keys`)


def run_variants(head, train: list[StateSet], dev: list[StateSet], test: StateSet, keys: torch.Tensor,
                 usable: torch.Tensor, train_mask: torch.Tensor, variants: list[Variant],
                 log=print, keep=None, centred: torch.Tensor | None = None, dev_label: str | None = None,
                 ) -> tuple[list[dict], dict]:
    """Train each variant, score it on the dev sets (over the usable chunks) and the New-Wiki test set (over
    the whole index). Returns the rows (the starting head first) and the trained heads by label.

    ``centred``: the index's keys centred on its mean vector and normalised (:func:`centred_keys`), which the
    variants with ``centre`` train and score against (with the starting head's row on them first).

    ``keep``: a folder where each finished variant's head and row are written; a variant found there is loaded,
    not trained again, so a killed grid resumes after its last finished variant; ``dev_label`` names dev sets other
    than the grid's own (their checks choose another step, so the variant is kept apart)."""
    import hashlib
    import json
    from pathlib import Path

    from ..core.head import QueryHead

    dev_local, train_local = local(dev, usable), local(train, usable)

    def row(label: str, model, extra: dict, centre: bool = False) -> dict:
        k = centred if centre else keys
        return score_row(label, model, dev_local, k[usable], test, k, extra)

    rows, heads = [row("shipped head (no adapter)", head, {})], {}
    log(rows[-1])
    if any(v.centre for v in variants):
        rows.append(row("shipped head (no adapter), keys centred", head, {}, centre=True))
        log(rows[-1])
    for v in variants:
        slot = None
        if keep is not None:
            key = json.dumps([v.label, v.sources, asdict(v.cfg), head.digest(), *(["centred"] if v.centre else []),
                              *([f"dev {dev_label}"] if dev_label else [])], sort_keys=True)
            slot = Path(keep) / hashlib.sha1(key.encode()).hexdigest()[:16]
        if slot is not None and (slot / "row.json").exists():
            rows.append(json.loads((slot / "row.json").read_text()))
            heads[v.label] = QueryHead.load(slot / "head")
            log(rows[-1])
            continue
        t0 = time.time()
        sets = [s for s in train_local if s.name in v.sources]
        k = centred if v.centre else keys
        model, history = fit_states(head, sets, dev_local, k[usable], v.cfg, train_mask[usable])
        best = max(history, key=lambda r: (r["mean R@1"], r["mean R@10"]))
        rows.append(row(v.label, model, {"sources": "+".join(v.sources), "settings": asdict(v.cfg),
                                         "best step": best["step"], "steps run": history[-1]["step"],
                                         "seconds": round(time.time() - t0, 1), "log": history}
                        | ({"keys": "centred on the index mean"} if v.centre else {}), centre=v.centre))
        heads[v.label] = model
        if slot is not None:
            model.save(slot / "head")
            (slot / "row.json").write_text(json.dumps(rows[-1]))
        log(rows[-1])
    return rows, heads


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


GRID = {  # label → (train sets, overrides of StateTrainConfig): what the dev split decides, at equal budget
    "α alone, mix": (("nq", "tqa", "squad"), {"rank": 0}),
    "r = 64, mix": (("nq", "tqa", "squad"), {"rank": 64}),
    "full d × d, mix": (("nq", "tqa", "squad"), {"rank": -1}),
    "r = 16, mix": (("nq", "tqa", "squad"), {"rank": 16}),
    "r = 256, mix": (("nq", "tqa", "squad"), {"rank": 256}),
    "r = 64, mix, cleaner positives (BM25 rank ≤ 3)": (("nq@3", "tqa@3", "squad"), {"rank": 64}),
    "r = 64, natural only": (("nq", "tqa"), {"rank": 64}),
    "r = 64, SQuAD only": (("squad",), {"rank": 64}),
    "r = 64, mix, adapter alone (α fixed)": (("nq", "tqa", "squad"), {"rank": 64, "train_alpha": False}),
    "r = 64, mix, whole-pool negatives": (("nq", "tqa", "squad"), {"rank": 64, "negatives": "pool"}),
    "α alone, mix, keys centred": (("nq", "tqa", "squad"), {"rank": 0, "centre": True}),
    "r = 64, mix, cleaner positives, keys centred": (("nq@3", "tqa@3", "squad"), {"rank": 64, "centre": True}),
    "α alone, mix, half the visits with C0 without the positive": (("nq", "tqa", "squad", "nq~", "tqa~", "squad~"),
                                                                   {"rank": 0}),
    "α alone, mix, C0 without the positive": (("nq~", "tqa~", "squad~"), {"rank": 0}),
    "r = 64, mix, half the visits with C0 without the positive": (("nq", "tqa", "squad", "nq~", "tqa~", "squad~"),
                                                                  {"rank": 64}),
    "α alone, mix, title positives": (("nq:title", "tqa:title", "squad"), {"rank": 0}),
    "r = 64, mix, title positives": (("nq:title", "tqa:title", "squad"), {"rank": 64}),
    "α alone, mix, judged positives": (("nq:judged", "tqa:judged", "squad"), {"rank": 0}),
    "r = 16, mix, judged positives": (("nq:judged", "tqa:judged", "squad"), {"rank": 16}),
    "r = 64, mix, judged positives": (("nq:judged", "tqa:judged", "squad"), {"rank": 64}),
}


def run(head_path: str, n_context: int | None = None, labels: list[str] | None = None, steps: int = 600,
        out: str | None = None, save: str | None = None, save_label: str | None = None, dev: str = "dpr") -> dict:
    """The adapter experiment end to end: sets, cached states, the :data:`GRID` variants (or ``labels`` of it),
    a result (``out``) and the best variant on dev (or ``save_label``) written as a head (``save``). ``dev``:
    the natural dev sets as the ``dpr`` rule labels them, or ``judged``: their questions with a chunk read as
    answering them, those chunks the positives (:mod:`judged_dev`); the dev check that each variant keeps, the
    dev columns and the saved head's fusion weight follow it."""

    from ..core.cpu import status_line
    from ..settings import cache_dir
    from .results import write_result

    explorer, head, index, (trains, devs, test) = open_sets(head_path, n_context, "cleaner", "dpr")
    folder = cache_dir() / "query_states"
    train_s, dev_s = cache_sets(head, explorer.backbone, trains, folder), cache_sets(head, explorer.backbone, devs,
                                                                                      folder)
    (test_s,) = cache_sets(head, explorer.backbone, [test], folder)
    keys, usable, train_mask = pool_of(index)
    train_s += cleaner(index, usable, trains, train_s, depth=3)
    if dev not in ("dpr", "judged"):
        raise ValueError(f"dev must be 'dpr' or 'judged', not {dev!r}")
    from .judged_dev import judged_digest, judged_sets, with_judged

    if dev == "judged":
        devs, dev_s = with_judged("dev", devs, dev_s)
    d = head.config.hidden_size
    chosen = {label: v for label, v in GRID.items() if labels is None or label in labels}
    named = {src for sources, _ in chosen.values() for src in sources}
    pooled = usable_pool(index) if any(src.endswith((":title", "~")) for src in named) else None  # BM25 built once
    if any(src.endswith(":title") for src in named):
        train_s += titled(index, pooled, trains, train_s[: len(trains)])
    if any(src.endswith(":judged") for src in named):
        train_s += judged_sets("train", trains, train_s[: len(trains)])[1]
    if any(src.endswith("~") for src in named):  # C0 without the positive
        train_s += cache_sets(head, explorer.backbone,
                              without_positive_c0(*pooled, trains, head.config.n_context), folder)
    variants = []
    for label, (sources, overrides) in chosen.items():
        settings = {"steps": steps} | {k: v for k, v in overrides.items() if k != "centre"}
        if settings.get("rank") == -1:  # the full d × d map
            settings["rank"] = d
        variants.append(Variant(label, sources, StateTrainConfig(**settings), overrides.get("centre", False)))
    centred = centred_keys(index)[0] if any(v.centre for v in variants) else None
    rows, heads = run_variants(head, train_s, dev_s, test_s, keys, usable, train_mask, variants, centred=centred,
                               keep=cache_dir() / "adapter_variants",
                               dev_label=None if dev == "dpr" else f"{dev} {judged_digest()}")
    base = {"BM25": bm25_recall, "dense MiniLM": dense_recall}
    reference = []
    for name, fn in base.items():
        r = {"variant": name}
        for s in devs:
            r |= {f"dev {s.name} {k}": v for k, v in fn(index, s, usable).items()}
        r |= {f"test new_wiki {k}": v for k, v in fn(index, test, torch.ones(len(index.chunks), dtype=torch.bool)
                                                      ).items()}
        reference.append(r)
    result = {"head": display_path(head_path), "n_context": head.config.n_context, "dev": dev,
              "sets": {s.name + " " + side: len(s.texts) for side, group in (("train", trains), ("dev", devs))
                       for s in group} | {"new_wiki test": len(test.texts)},
              "pool": {"chunks": int(usable.sum()), "train candidates": int(train_mask.sum())},
              "rows": rows, "reference": reference, "markdown": grid_markdown(rows + reference)}
    result = write_result(result | {"cpu": status_line()}, out, explorer)  # with its provenance
    if save and heads:
        label = save_label or max(rows[1:], key=lambda r: r["dev mean R@1"])["variant"]
        chosen = heads[label]
        chosen.config.fusion_weight = fit_fusion_on_dev(chosen, index, devs, dev_s, keys, usable)
        chosen.config.provenance = head.config.provenance | {"adapter": label, "adapter_data": result["sets"],
                                                             "adapter_row": next(r for r in rows
                                                                                 if r["variant"] == label)}
        chosen.save(save)
    return result


def cleaner(index, usable: torch.Tensor, sets: list[TextSet], cached: list[StateSet], depth: int,
            ) -> list[StateSet]:
    """The natural sets keeping only questions whose positive BM25 ranks in its top ``depth`` over the usable
    chunks (named ``nq@3``, …): fewer, cleaner positives (50 read pairs: 8 of 16 right at rank ≤ 3, 13 of 50 at
    rank ≤ 100; ``precomputed/distant_supervision_precision.json``)."""
    out = []
    for q, c in zip(sets, cached, strict=True):
        if q.name in NATURAL_SETS:
            keep = clean_ids(index, usable, q, depth)
            out.append(StateSet(f"{q.name}@{depth}", c.groups[keep], [q.positives[i] for i in keep]))
    return out


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


def natural_questions(sets: list[TextSet]) -> list[list]:
    """The :class:`data.natural.NaturalQuestion` (id, answers) of each question of natural sets, found by text."""
    out = []
    for s in sets:
        by_text = {n.text: n for n in load_natural(NATURAL_SETS[s.name])}
        out.append([by_text[t] for t in s.texts])
    return out


def titled(index, pooled: tuple[list[int], list[str], BM25], sets: list[TextSet], cached: list[StateSet],
           ) -> list[StateSet]:
    """The natural sets with positives by the ``title`` rule (named ``nq:title``, …): the best-ranked of BM25's top
    100 usable chunks whose passage *title* is an answer alias and whose text holds one — a chunk about the answer,
    not one that mentions it (50 read pairs: 23 right, 19 without the borderline ones; TriviaQA 22 of 41, NQ 1 of 9;
    ``precomputed/distant_supervision_title.json``); questions without one are dropped. The questions are those
    of the ``dpr`` sets, so their cached states serve unchanged. ``pooled``: :func:`usable_pool`'s chunk ids, texts
    and BM25."""
    pool, texts, bm25 = pooled
    titles = [index.chunks[i]["title"] for i in pool]
    out = []
    natural = [(q, c) for q, c in zip(sets, cached, strict=True) if q.name in NATURAL_SETS]
    for (q, c), questions in zip(natural, natural_questions([q for q, _ in natural]), strict=True):
        found = distant_positives(questions, texts, bm25, rule="title", titles=titles)
        keep = [i for i, f in enumerate(found) if f]
        out.append(StateSet(f"{q.name}:title", c.groups[keep], [[pool[j] for j in found[i]] for i in keep]))
    return out


def clean_ids(index, usable: torch.Tensor, q: TextSet, depth: int) -> list[int]:
    """The questions of ``q`` with a positive among BM25's top ``depth`` usable chunks (:func:`cleaner`'s rule)."""
    top = bm25_within(index, q.texts, usable).topk(depth, dim=1).indices.tolist()
    return [i for i, (t, p) in enumerate(zip(top, q.positives, strict=True)) if set(t) & set(p)]


C0_SOURCES = ("BM25 top-|C0| (the paper's; shipped)", "none (|C0| = 0)", "the head's own first pass, top-|C0|",
              "dense MiniLM top-|C0| (a second model)", "gold chunk + BM25 top-1 (upper bound)", "BM25 top-5")


def c0_ablation(head, backbone, index, sets: list[TextSet], usable: list[torch.Tensor], folder,
                log=print) -> list[dict]:
    """R@1 / R@10 of ``head`` on each set with C0 taken from each of :data:`C0_SOURCES` at query time (same
    trained weights; ``usable[i]`` marks set i's candidate chunks). Query states are cached per source."""
    from ..core.minilm import embed

    chunks = index.chunks
    keys = pool_of(index)[0]
    rows = []
    for s, mask in zip(sets, usable, strict=True):
        keys_s = keys[mask]
        remap = positions(mask)
        positives = [[int(remap[i]) for i in p if remap[i] >= 0] for p in s.positives]
        local = [i for i in range(len(chunks)) if mask[i]]
        bm_top = bm25_within(index, s.texts, mask).topk(5, dim=1).indices.tolist()
        n = head.config.n_context

        def texts(rows_: list[list[int]], k: int) -> list[list[str]]:
            return [[chunks[j]["text"] for j in r[:k]] for r in rows_]

        none = head.reshaped(n_context=0)
        g0 = cache_layer_groups(none, backbone, s.texts, [[] for _ in s.texts], folder)
        first = scores(none, g0, keys_s).topk(n, dim=1).indices.tolist()
        dn = embed(s.texts) @ _dense_vectors(index).T
        dn[:, ~mask] = float("-inf")
        contexts = {
            C0_SOURCES[0]: (head, texts(bm_top, n)),
            C0_SOURCES[2]: (head, texts([[local[j] for j in r] for r in first], n)),
            C0_SOURCES[3]: (head, texts(dn.topk(n, dim=1).indices.tolist(), n)),
            C0_SOURCES[4]: (head, [[chunks[p[0]]["text"], *[chunks[j]["text"] for j in r if j not in p][:n - 1]]
                                   for p, r in zip(s.positives, bm_top, strict=True)]),
            C0_SOURCES[5]: (head.reshaped(n_context=5), texts(bm_top, 5)),
        }
        results = {C0_SOURCES[1]: recall_from_scores(scores(none, g0, keys_s), positives)}
        for name, (h, ctx) in contexts.items():
            g = cache_layer_groups(h, backbone, s.texts, ctx, folder)
            results[name] = recall_from_scores(scores(h, g, keys_s), positives)
            log(s.name, name, results[name])
        rows += [{"set": s.name, "questions": len(s.texts), "C0": name} | results[name] for name in C0_SOURCES]
    return rows


def fit_fusion_on_dev(head, index, devs: list[TextSet], cached: list[StateSet], keys: torch.Tensor,
                      usable: torch.Tensor) -> float:
    """The score-fusion weight w of ``head`` (``w·z(UNREAL) + (1−w)·z(BM25)``, best MRR@10) refitted on the dev
    sets' cached states over the usable chunks (:func:`evaluation.retrieval.fit_fusion_weight`)."""
    from .retrieval import fit_fusion_weight

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
