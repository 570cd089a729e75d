"""The judged sets: natural questions whose positives were read, not matched by the ``dpr`` rule.

Their verdicts are kept in ``precomputed/judged/{dev,train,more}.json.gz`` (written by the judged-questions
experiment); a question's positives are its ``yes`` chunks. The default head's joint stage trains on the judged
train side and keeps the dev check of the judged dev side (``train --stage joint --positives judged --dev judged``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

from ..core.head import QueryHead
from ..core.joint_training import TextSet
from ..core.state_training import StateSet
from ..errors import InputError
from ..pipeline import Explorer
from ..settings import PRECOMPUTED, cache_dir, display_path
from ..store.index import Index, IndexStoreError, default_folder, shipped_folder
from .sets import NATURAL_SETS, cached_sets, more_train_sets, natural_questions


def judged_path(side: str = "dev") -> Path:
    """Where the judged ``side`` is kept: ``precomputed/judged/{dev,train,more}.json.gz``."""
    return PRECOMPUTED / "judged" / f"{side}.json.gz"


def judged_digest(sides: tuple[str, ...] = ("dev", "train")) -> str:
    """8 hex digits of the SHA-1 of the judged files of ``sides``: runs and grid variants built on them are kept
    apart from those built on other verdicts."""
    h = hashlib.sha1()
    for side in sides:
        path = judged_path(side)
        h.update(gzip.decompress(path.read_bytes()) if path.exists() else b"")
    return h.hexdigest()[:8]


def load_judged(side: str = "dev") -> dict:
    """The judged ``side`` (:func:`collect`'s output)."""
    return json.loads(gzip.decompress(judged_path(side).read_bytes()))


def natural_sets(index, n_context: int, side: str) -> list:
    """The grid's natural (NQ, TriviaQA) :class:`TextSet` of ``side`` (``more``: the train questions it left out,
    :func:`sets.more_train_sets`)."""
    if side == "more":
        return more_train_sets(index, n_context, cache_dir() / "adapter_sets")
    trains, devs, _ = cached_sets(index, n_context, cache_dir() / "adapter_sets")
    return [d for d in (devs if side == "dev" else trains) if d.name in NATURAL_SETS]


def judged_sets(side: str, sets: list, states: list[StateSet] | None = None) -> tuple[list, list[StateSet]]:
    """The natural sets of ``side`` reduced to their questions with a ``yes`` chunk, those chunks (global ids) as
    positives, named ``nq:judged`` / ``tqa:judged``: (:class:`TextSet` list, :class:`StateSet` list, empty without
    ``states``). The questions are the grid's, so the StateSets are slices of their cached states (a joint run,
    which passes none, caches the reduced sets' states anew)."""
    verdicts = {q["id"]: q for q in load_judged(side)["questions"]}
    texts, cached = [], []
    natural = [(i, t) for i, t in enumerate(sets) if t.name in NATURAL_SETS]
    for (j, t), qs in zip(natural, natural_questions([t for _, t in natural]), strict=True):
        keep = [i for i, q in enumerate(qs) if verdicts.get(q.id, {}).get("yes")]
        positives = [list(verdicts[qs[i].id]["yes"]) for i in keep]
        texts.append(TextSet(f"{t.name}:judged", [t.texts[i] for i in keep], [t.contexts[i] for i in keep], positives))
        if states is not None:
            cached.append(StateSet(f"{t.name}:judged", states[j].groups[keep], positives))
    return texts, cached


def with_more(trains: list, index, n_context: int) -> list:
    """The judged train sets ``trains`` (:func:`with_judged`) with the judged questions of the ``more`` side
    (:func:`sets.more_train_sets`) added to the set of their source, so ``nq:judged`` / ``tqa:judged`` hold
    every train question read as answered by a chunk."""
    more = {t.name: t for t in judged_sets("more", natural_sets(index, n_context, "more"))[0]}
    return [TextSet(t.name, t.texts + more[t.name].texts, t.contexts + more[t.name].contexts,
                    t.positives + more[t.name].positives) if t.name in more else t for t in trains]


def with_judged(side: str, sets: list, states: list[StateSet] | None = None) -> tuple[list, list[StateSet]]:
    """``sets`` (and ``states``) with each natural set replaced by its judged set (:func:`judged_sets`), the
    others kept after them."""
    texts, cached = judged_sets(side, sets, states)
    return (texts + [t for t in sets if t.name not in NATURAL_SETS],
            cached + [s for s in states or [] if s.name not in NATURAL_SETS])


JUDGED_ON = PRECOMPUTED / "index" / "smollm2-135m-instruct-l25-all"
"""The index whose chunks the verdicts were read on (their chunk ids are its own)."""


def read_on(index) -> bool:
    """Whether ``index`` cuts the passages as :data:`JUDGED_ON` does (same model's tokenizer, chunk length and
    corpus), so the verdicts' chunk ids are its own."""
    fields = ("model", "target", "chunks", "passages")
    shipped = json.loads((JUDGED_ON / "manifest.json").read_text())
    return all(index.manifest.get(k) == shipped[k] for k in fields)


def require_read_on(index) -> None:
    """Raise :class:`InputError` unless the verdicts' chunk ids are ``index``'s own (:func:`read_on`)."""
    if not read_on(index):
        raise InputError(f"the judged verdicts were read on the chunks of {display_path(JUDGED_ON)}; "
                         f"{display_path(index.folder)} cuts the passages elsewhere: use --positives cleaner --dev dpr")


def stage_index(explorer) -> Index:
    """The index the α and joint stages draw their pool from: the shipped one of the head's model and ℓc, else the
    one built in the cache (``index build --model M``; a second backbone's index is built, not shipped).

    Raises
    ------
    IndexStoreError
        Neither is there (the message says how to build it), or the build is incomplete.
    """
    shipped = shipped_folder(explorer)
    folder = shipped if (shipped / "manifest.json").exists() else default_folder(explorer, "all")
    if not (folder / "manifest.json").exists():
        raise IndexStoreError(f"no index of {explorer.backbone.name} at ℓc = {explorer.head.config.chunk_layer} to "
                              f"train on: build it with `python -m unreal_demo index build --model "
                              f"{explorer.backbone.name} --out {folder}`")
    index = Index(folder)
    index.check_backbone(explorer.backbone, explorer.head.config.chunk_layer)
    return index


POSITIVES = {"cleaner": "the dpr rule's positives at BM25 rank ≤ 3", "judged": "judged positives",
             "judged-more": "judged positives with the more side"}  # the natural train sets' positives


def open_sets(head_path: str, n_context: int | None, positives: str, dev: str) -> tuple:
    """(the :class:`pipeline.Explorer` of ``head_path``, its head reading ``n_context`` passages (default: its
    own |C0|), its model's index (:func:`stage_index`), (train sets, dev sets, New-Wiki test)) of the α and joint
    stages, with the judged sets in place where ``positives`` (:data:`POSITIVES`) and ``dev`` (``dpr`` or
    ``judged``) ask for them.

    Raises
    ------
    ValueError
        An unknown ``positives`` or ``dev``.
    InputError
        ``judged-more`` without the judged more side (``precomputed/judged/more.json.gz``), or judged sets asked
        for on an index that cuts the passages elsewhere than :data:`JUDGED_ON`.
    IndexStoreError
        No index of the head's model and ℓc (:func:`stage_index`).
    """
    if positives not in POSITIVES or dev not in ("dpr", "judged"):
        raise ValueError(f"positives must be one of {', '.join(POSITIVES)} and dev 'dpr' or 'judged', not "
                         f"{positives!r}, {dev!r}")
    if positives == "judged-more" and not judged_path("more").exists():
        raise InputError(f"no judged more side ({display_path(judged_path('more'))}): the judged "
                         "natural-questions study writes it once its candidates on the more side are read")
    explorer = Explorer.load(QueryHead.load(head_path).config.model, head=head_path, require_head=True)
    head = explorer.head
    if n_context is not None and n_context != head.config.n_context:
        head = head.reshaped(n_context=n_context)
    index = stage_index(explorer)
    if positives != "cleaner" or dev == "judged":
        require_read_on(index)
    trains, devs, test = cached_sets(index, head.config.n_context, cache_dir() / "adapter_sets")
    if positives != "cleaner":
        trains = with_judged("train", trains)[0]
    if positives == "judged-more":
        trains = with_more(trains, index, head.config.n_context)
    if dev == "judged":
        devs = with_judged("dev", devs)[0]
    return explorer, head, index, (trains, devs, test)
