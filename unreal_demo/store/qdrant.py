"""The corpus index in Qdrant: one point per chunk, searched by Qdrant's exact MaxSim (Eq. 4), with add, delete
and payload filters.

A :class:`QdrantStore` answers the calls :func:`retrieval.registry.retrieve` makes of an :class:`index.Index`
(``bm25_scores / bm25_topk / maxsim_topk / dense_topk``, ``texts``, ``chunks``, ``check_backbone``, ``lacks``,
``len``), so UNREAL, BM25, dense and the hybrids run over it unchanged. Each point holds

- ``keys``: the chunk's L_p pooled vectors k_{i,1..L_p} at ℓc (Eq. 1), L2-normalised, as a multi-vector with Qdrant's
  MaxSim comparator and dot product, so that Qdrant's score Σ_g max_p ⟨q_g, k_{i,p}⟩ is Eq. 4 as
  :func:`core.maxsim.maxsim` computes it with ``normalize=True``;
- ``dense``: its MiniLM vector (stores made from an index with dense vectors), compared by dot product as
  :meth:`index.Index.dense_topk` does;
- a payload: ``chunk`` (the point id, stable across adds and deletes), ``passage``, ``title``, ``source``, ``text``,
  ``tokens``.

BM25 is kept beside it in memory over the chunk texts, as :class:`index.Index` does without a saved ``bm25/``.
Chunk ids on the store interface are positions ``0..len-1`` in point-id order (what ``retrieve`` and the hybrids'
fusion index by); ``chunks[i]["id"]`` is the point id.

Two backends behind the one class, named by a store string:

- ``qdrant-edge:PATH`` — Qdrant Edge (``qdrant-edge-py``), the Qdrant engine in process: the shard in
  ``PATH/shard``, the store's manifest in ``PATH/unreal.json``;
- ``qdrant:URL[/COLLECTION]`` — a Qdrant server or cluster through ``qdrant-client`` (``URL`` is
  ``http(s)://HOST[:PORT]``; ``:memory:`` is qdrant-client's in-process mode, one per Python process; the
  collection defaults to ``unreal``), the manifest in the collection's metadata. Upserts go in batches with
  retries.

Search is exact by default; ``ef`` asks for Qdrant's HNSW search with that beam width instead (approximate: a graph
built by the server, or by ``export_index(..., hnsw=True)`` on Edge).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import torch

from ..core.selection import BM25
from ..data.sources import Passage
from .base import TextStore, backbone_mismatch
from .index import Index, IndexStoreError

EDGE, SERVER = "qdrant-edge:", "qdrant:"
KEYS, DENSE = "keys", "dense"
DATATYPES = ("float32", "float16")  # Qdrant's uint8 stores integers 0..255 as given (no scale): not offered
IDENTITY = ("model", "revision", "chunk_layer", "n_pool", "hidden_size", "target", "dense", "encoded_in")
DEFAULT_COLLECTION = "unreal"
PAGE = 1024  # points per scroll page and per export batch on Edge
STORE_HELP = "qdrant-edge:PATH (embedded) or qdrant:URL[/COLLECTION] (http(s)://HOST[:PORT], or :memory:)"

Point = tuple[int, dict[str, list], dict[str, Any]]  # id, named vectors, payload


def is_spec(text: str) -> bool:
    """Whether ``text`` names a Qdrant store (``qdrant-edge:...`` or ``qdrant:...``) rather than an index folder."""
    return text.startswith((EDGE, SERVER))


@dataclass(frozen=True)
class Where:
    """A payload filter: chunks of one source, one exact title, and/or titles starting with a prefix."""

    source: str | None = None
    title: str | None = None
    title_prefix: str | None = None

    @classmethod
    def parse(cls, terms: Sequence[str]) -> Where | None:
        """``source=NAME``, ``title=TITLE`` or ``title^=PREFIX`` terms (all must hold); None for no terms.

        Raises
        ------
        IndexStoreError
            A term of another form.
        """
        fields: dict[str, str] = {}
        for term in terms:
            op = "^=" if "^=" in term else "="
            name, _, value = term.partition(op)
            key = {("source", "="): "source", ("title", "="): "title", ("title", "^="): "title_prefix"}.get(
                (name.strip(), op))
            if key is None or not value:
                raise IndexStoreError(f"--where {term!r}: use source=NAME, title=TITLE or title^=PREFIX")
            fields[key] = value
        return cls(**fields) if fields else None

    def matches(self, payload: dict) -> bool:
        """Whether a chunk's payload passes the filter (the same test Qdrant applies)."""
        return ((self.source is None or payload.get("source") == self.source)
                and (self.title is None or payload.get("title") == self.title)
                and (self.title_prefix is None or str(payload.get("title", "")).startswith(self.title_prefix)))

    def terms(self) -> list[tuple[str, str, str]]:
        """``(field, "value" | "prefix", text)`` per condition."""
        return [(f, kind, v) for f, kind, v in (("source", "value", self.source), ("title", "value", self.title),
                                                 ("title", "prefix", self.title_prefix)) if v is not None]


class _Edge:
    """An embedded Qdrant Edge shard in ``folder/shard`` with the store's manifest in ``folder/unreal.json``."""

    def __init__(self, folder: str) -> None:
        import qdrant_edge as qe

        self.qe, self.folder = qe, Path(folder)
        self.meta_path, self.shard_path = self.folder / "unreal.json", self.folder / "shard"
        self._shard = None
        self.where = str(self.folder)

    @property
    def shard(self):
        if self._shard is None:
            self._shard = self.qe.EdgeShard.load(str(self.shard_path))
        return self._shard

    def meta(self) -> dict | None:
        if not self.meta_path.exists() or not self.shard_path.exists():
            return None
        return json.loads(self.meta_path.read_text())

    def write_meta(self, meta: dict) -> None:
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.rename(self.meta_path)

    def create(self, meta: dict, datatype: str) -> None:
        qe = self.qe
        kind = {"float32": qe.VectorStorageDatatype.Float32, "float16": qe.VectorStorageDatatype.Float16}[datatype]
        vectors = {KEYS: qe.EdgeVectorParams(meta["hidden_size"], qe.Distance.Dot, datatype=kind,
                                             multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim))}
        if meta["dense"]:
            vectors[DENSE] = qe.EdgeVectorParams(meta["dense_size"], qe.Distance.Dot, datatype=kind)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._shard = qe.EdgeShard.create(str(self.shard_path), qe.EdgeConfig(vectors=vectors))
        for field in ("source", "title", "passage"):
            self._shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
        self.write_meta(meta)

    def upsert(self, points: Sequence[Point]) -> None:
        self.shard.update(self.qe.UpdateOperation.upsert_points([self.qe.Point(i, v, p) for i, v, p in points]))

    def present(self, ids: Sequence[int]) -> set[int]:
        return {r.id for r in self.shard.retrieve(list(ids), with_payload=False, with_vector=False)}

    def delete(self, ids: Sequence[int]) -> None:
        self.shard.update(self.qe.UpdateOperation.delete_points(list(ids)))

    def payloads(self) -> Iterable[tuple[int, dict]]:
        offset = None
        while True:
            records, offset = self.shard.scroll(self.qe.ScrollRequest(offset=offset, limit=PAGE, with_payload=True))
            yield from ((r.id, r.payload) for r in records)
            if offset is None:
                return

    def _filter(self, where: Where | None):
        qe = self.qe
        if where is None:
            return None
        return qe.Filter(must=[qe.FieldCondition(f, match=qe.MatchValue(v) if kind == "value" else qe.MatchPrefix(v))
                               for f, kind, v in where.terms()])

    def search(self, using: str, queries: list[list], limit: int, where: Where | None,
               ef: int | None) -> list[list[tuple[int, float]]]:
        qe = self.qe
        params = qe.SearchParams(exact=True) if ef is None else qe.SearchParams(hnsw_ef=ef)
        flt = self._filter(where)
        batch = qe.QueryBatchRequest([qe.QueryRequest(limit=limit, query=qe.Query.Nearest(q, using=using),
                                                      filter=flt, params=params, with_payload=False)
                                      for q in queries])
        return [[(p.id, p.score) for p in row] for row in self.shard.query_batch(batch)]

    def vectors(self, ids: Sequence[int], using: str) -> dict[int, list]:
        return {r.id: r.vector[using] for r in self.shard.retrieve(list(ids), with_payload=False, with_vector=[using])}

    def optimize(self) -> None:
        self.shard.optimize()

    def close(self) -> None:
        if self._shard is not None:
            self._shard.close()
            self._shard = None


_MEMORY: dict[str, Any] = {}  # the ":memory:" client of this process: one in-process "server" shared by every store


class _Server:
    """A collection of a Qdrant server or cluster (or qdrant-client's ``:memory:`` mode) through qdrant-client."""

    def __init__(self, location: str, collection: str, retries: int = 4, backoff: float = 1.0,
                 batch: int = 64) -> None:
        from qdrant_client import QdrantClient, models

        self.models, self.collection, self.local = models, collection, location == ":memory:"
        self.retries, self.backoff, self.batch = retries, backoff, batch
        self.where = f"{location}/{collection}"
        if self.local:
            if location not in _MEMORY:
                _MEMORY[location] = QdrantClient(location)
            self.client = _MEMORY[location]
        else:
            self.client = QdrantClient(url=location, timeout=60, check_compatibility=False)

    def _call(self, what: str, fn: Callable[[], Any], retries: int = 1) -> Any:
        """``fn()``, tried ``retries`` times with exponential back-off; one-line :class:`IndexStoreError` at last."""
        from qdrant_client.http.exceptions import ApiException

        for attempt in range(retries):
            try:
                return fn()
            except (ApiException, OSError) as exc:
                if attempt + 1 < retries:
                    time.sleep(self.backoff * 2**attempt)
                    continue
                why = " ".join(str(exc).split())[:300]
                raise IndexStoreError(f"Qdrant at {self.where}: {what} failed: {why}") from None

    def meta(self) -> dict | None:
        if not self._call("connecting", lambda: self.client.collection_exists(self.collection)):
            return None
        info = self._call("reading the collection", lambda: self.client.get_collection(self.collection))
        meta = (info.config.metadata or {}).get("unreal")
        vectors = info.config.params.vectors
        if meta is None or not isinstance(vectors, dict) or KEYS not in vectors:
            raise IndexStoreError(f"collection {self.where} holds no UNREAL store (no 'unreal' metadata or no "
                                  f"'{KEYS}' multi-vector); export into another collection")
        if vectors[KEYS].size != meta["hidden_size"] or vectors[KEYS].multivector_config is None:
            raise IndexStoreError(f"collection {self.where}: its '{KEYS}' vectors ({vectors[KEYS].size}-d) do not "
                                  f"match its manifest (hidden size {meta['hidden_size']}, MaxSim multi-vector)")
        return meta

    def write_meta(self, meta: dict) -> None:
        self._call("writing the manifest", lambda: self.client.update_collection(self.collection,
                                                                                  metadata={"unreal": meta}))

    def create(self, meta: dict, datatype: str) -> None:
        m = self.models
        kind = {"float32": m.Datatype.FLOAT32, "float16": m.Datatype.FLOAT16}[datatype]
        vectors = {KEYS: m.VectorParams(size=meta["hidden_size"], distance=m.Distance.DOT, datatype=kind,
                                        multivector_config=m.MultiVectorConfig(comparator=m.MultiVectorComparator.MAX_SIM))}
        if meta["dense"]:
            vectors[DENSE] = m.VectorParams(size=meta["dense_size"], distance=m.Distance.DOT, datatype=kind)
        self._call("creating the collection", lambda: self.client.create_collection(
            self.collection, vectors_config=vectors, metadata={"unreal": meta}))
        if not self.local:  # payload indexes have no effect in qdrant-client's local mode
            for field in ("source", "title", "passage"):
                self._call("indexing the payload", lambda f=field: self.client.create_payload_index(
                    self.collection, f, m.PayloadSchemaType.KEYWORD))

    def upsert(self, points: Sequence[Point]) -> None:
        for s in range(0, len(points), self.batch):
            part = [self.models.PointStruct(id=i, vector=v, payload=p) for i, v, p in points[s : s + self.batch]]
            self._call("upserting points", lambda part=part: self.client.upsert(self.collection, part, wait=True),
                       self.retries)

    def present(self, ids: Sequence[int]) -> set[int]:
        return {r.id for r in self._call("reading points", lambda: self.client.retrieve(
            self.collection, list(ids), with_payload=False), self.retries)}

    def delete(self, ids: Sequence[int]) -> None:
        self._call("deleting points", lambda: self.client.delete(
            self.collection, points_selector=self.models.PointIdsList(points=list(ids))), self.retries)

    def payloads(self) -> Iterable[tuple[int, dict]]:
        offset = None
        while True:
            records, offset = self._call("reading payloads", lambda o=offset: self.client.scroll(
                self.collection, limit=PAGE, offset=o, with_payload=True), self.retries)
            yield from ((r.id, r.payload) for r in records)
            if offset is None:
                return

    def search(self, using: str, queries: list[list], limit: int, where: Where | None,
               ef: int | None) -> list[list[tuple[int, float]]]:
        m = self.models
        flt = None if where is None else m.Filter(must=[
            m.FieldCondition(key=f, match=m.MatchValue(value=v) if kind == "value" else m.MatchPrefix(prefix=v))
            for f, kind, v in where.terms()])
        params = None if self.local else m.SearchParams(exact=True) if ef is None else m.SearchParams(hnsw_ef=ef)
        requests = [m.QueryRequest(query=q, using=using, limit=limit, filter=flt, params=params, with_payload=False)
                    for q in queries]  # local mode is always exact (it warns on search params)
        found = self._call("searching", lambda: self.client.query_batch_points(self.collection, requests))
        return [[(p.id, p.score) for p in row.points] for row in found]

    def vectors(self, ids: Sequence[int], using: str) -> dict[int, list]:
        return {r.id: r.vector[using] for r in self._call("reading vectors", lambda: self.client.retrieve(
            self.collection, list(ids), with_payload=False, with_vectors=[using]))}

    def optimize(self) -> None:
        """Nothing to do: a server builds its HNSW graphs itself."""

    def close(self) -> None:
        if not self.local:
            self.client.close()


def _backend(spec: str) -> _Edge | _Server:
    """The backend a store string names; a one-line :class:`IndexStoreError` for anything else."""
    if spec.startswith(EDGE) and spec[len(EDGE):].strip():
        try:
            return _Edge(spec[len(EDGE):])
        except ImportError:
            raise IndexStoreError("qdrant-edge:PATH needs the qdrant-edge-py package "
                                  "(pip install qdrant-edge-py==0.9.0)") from None
    if spec.startswith(SERVER):
        rest = spec[len(SERVER):]
        if rest.startswith(":memory:"):
            location, path = ":memory:", rest[len(":memory:"):]
            ok = not path or path.startswith("/")
        else:
            url = urlsplit(rest)
            location, path = f"{url.scheme}://{url.netloc}", url.path
            ok = url.scheme in ("http", "https") and bool(url.netloc)
        collection = path.strip("/") or DEFAULT_COLLECTION
        if ok and "/" not in collection:
            return _Server(location, collection)
    raise IndexStoreError(f"store {spec!r} not understood: use {STORE_HELP}")


class QdrantStore(TextStore):
    """A chunk store in Qdrant, searched as an :class:`index.Index` is (see the module docstring).

    Parameters
    ----------
    spec : ``qdrant-edge:PATH`` or ``qdrant:URL[/COLLECTION]``.
    ef : search with Qdrant's HNSW index at this beam width (approximate); exact search when None.
    where : restrict the store to the chunks passing this payload filter (every method, BM25 included).

    Raises
    ------
    IndexStoreError
        An unreadable store string, no store there, or a server that cannot be reached.
    """

    def __init__(self, spec: str, ef: int | None = None, where: Where | None = None) -> None:
        self.spec, self.ef, self.where = spec, ef, where
        self._db = _backend(spec)
        meta = self._db.meta()
        if meta is None:
            raise IndexStoreError(f"no Qdrant store at {self._db.where}; make one with "
                                  f"`python -m unreal_demo index export --to {spec}`")
        self._meta = meta
        self.folder = Path(self._db.where)  # where the store lives, for messages
        self.refresh()

    @classmethod
    def create(cls, spec: str, identity: dict, datatype: str = "float32") -> QdrantStore:
        """Open the store at ``spec``, creating it with this identity (model, revision, ℓc, L_p, d, ...) if absent.

        Raises
        ------
        IndexStoreError
            ``spec`` holds a store of another identity or storage type.
        """
        if datatype not in DATATYPES:
            raise IndexStoreError(f"unknown storage type {datatype!r}; use {', '.join(DATATYPES)}")
        db = _backend(spec)
        meta = db.meta()
        if meta is None:
            db.create(identity | {"datatype": datatype, "next_id": 0, "distance": "dot", "keys": "L2-normalised"},
                      datatype)
        else:
            want = {k: identity.get(k) for k in IDENTITY} | {"datatype": datatype}
            clash = {k: (meta.get(k), v) for k, v in want.items() if meta.get(k) != v}
            if clash:
                db.close()
                raise IndexStoreError(f"{db.where} holds a store of another index {clash}; use another one")
        db.close()
        return cls(spec)

    def refresh(self) -> None:
        """Read every point's payload (ids in order; the filter applied) and reset the derived state (BM25).

        A store is what was there when it was opened or last refreshed: points another client adds later are
        left out of its results until then."""
        rows = sorted((i, p) for i, p in self._db.payloads() if self.where is None or self.where.matches(p))
        self.ids = np.array([i for i, _ in rows], dtype=np.int64)  # point id of each position
        self._chunks = [{"id": i} | {k: v for k, v in p.items() if k != "chunk"} for i, p in rows]
        self.texts = [c["text"] for c in self._chunks]
        self._bm25: BM25 | None = None

    def filtered(self, where: Where | None) -> QdrantStore:
        """This store restricted to the chunks passing ``where`` (None: every chunk), sharing its shard or connection.

        An Edge shard can be opened once per process (its write-ahead log is locked), so a program that searches
        one store under several filters (the Wikipedia tab) opens it once and takes a view per filter. Close the
        store the views came from, not a view."""
        view = copy.copy(self)
        view.where = where
        view.refresh()
        return view

    def close(self) -> None:
        """Release the shard (Edge) or the connection (server)."""
        self._db.close()

    def __enter__(self) -> QdrantStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def chunks(self) -> list[dict]:
        """Each chunk's ``id`` (point id), ``passage``, ``title``, ``source``, ``text``, ``tokens``, by position."""
        return self._chunks

    @property
    def manifest(self) -> dict:
        """The source index's identity with this store's live counts (chunks, passages, tokens)."""
        return self._meta | {"chunks": len(self), "passages": len({c["passage"] for c in self._chunks}),
                             "tokens": sum(c.get("tokens", 0) for c in self._chunks)}

    def check_backbone(self, backbone, layer: int) -> None:
        """:class:`IndexStoreError` unless the store was made with this model, revision and ℓc."""
        if why := backbone_mismatch(self._meta, backbone, layer, "store"):
            raise IndexStoreError(why)

    def lacks(self, role: str) -> str | None:
        """What this store lacks for ``role`` (``keys``, ``dense``, ``token_states``), or None when it serves it."""
        if role == "token_states":
            return "--token-states (not kept in a Qdrant store: search the index folder)"
        return "--dense" if role == "dense" and not self._meta["dense"] else None

    def _topk(self, using: str, queries: list[list], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Qdrant's top-``k`` per query as scores and positions ``(B, k)``."""
        k = min(k, len(self))
        rows = self._db.search(using, queries, k, self.where, self.ef) if k else [[] for _ in queries]
        scores = torch.full((len(queries), k), -float("inf"))
        ids = torch.zeros((len(queries), k), dtype=torch.long)
        for b, row in enumerate(rows):
            got = np.array([i for i, _ in row], dtype=np.int64)
            pos = np.minimum(np.searchsorted(self.ids, got), len(self) - 1)
            known = self.ids[pos] == got  # points added by another client since this store was read: left out
            ids[b, : known.sum()] = torch.from_numpy(pos[known])
            scores[b, : known.sum()] = torch.tensor([s for (_, s), keep in zip(row, known, strict=True) if keep])
        return scores, ids

    def maxsim_topk(self, q: torch.Tensor, k: int, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact MaxSim (Eq. 4), s_i = Σ_g max_p ⟨q_g, k_{i,p}/‖k_{i,p}‖⟩, by Qdrant over every chunk; top-k.

        Parameters
        ----------
        q : ``(B, G, d)`` query vectors.
        k : hits per query (clamped to the number of chunks).
        normalize : must be True: the store holds L2-normalised keys (a head with ``normalize=False`` scores raw
            keys, which only an index folder keeps).

        Returns
        -------
        scores ``(B, k)`` and chunk positions ``(B, k)``, best first.
        """
        if not normalize:
            raise IndexStoreError("a Qdrant store holds L2-normalised keys; a head with normalize=False needs the "
                                  "index folder")
        if q.shape[-1] != self._meta["hidden_size"]:
            raise IndexStoreError(f"query vectors of size {q.shape[-1]} against a store of "
                                  f"{self._meta['hidden_size']}-d keys ({self._meta['model']})")
        return self._topk(KEYS, q.float().tolist(), k)

    def dense_topk(self, qv: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dot product of MiniLM query embeddings ``(B, 384)`` with the stored chunk embeddings, top-k."""
        if not self._meta["dense"]:
            raise IndexStoreError(f"{self._db.where} holds no MiniLM vectors (its index was built without --dense)")
        return self._topk(DENSE, qv.float().tolist(), k)

    @property
    def token_parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Not served: a Qdrant store keeps no token states."""
        raise IndexStoreError("a Qdrant store keeps no token states; search sparse on the index folder")

    def token_mean(self) -> torch.Tensor:
        """Not served: a Qdrant store keeps no token states."""
        return self.token_parts  # raises

    def chunk_means(self) -> torch.Tensor:
        """Each chunk's mean pooled (L2-normalised) key ``(M, d)``, read from Qdrant."""
        return self.chunk_vectors(range(len(self))).mean(1)

    def chunk_vectors(self, ids: Sequence[int]) -> torch.Tensor:
        """The stored (L2-normalised) keys ``(k, L_p, d)`` float32 of the chunks at positions ``ids``."""
        points = [int(self.ids[i]) for i in ids]
        if not points:
            return torch.zeros(0, self._meta["n_pool"], self._meta["hidden_size"])
        got = self._db.vectors(points, KEYS)
        return torch.tensor([got[p] for p in points], dtype=torch.float32)

    def upsert(self, keys: np.ndarray, payloads: Sequence[dict], dense: np.ndarray | None = None,
               ids: Sequence[int] | None = None) -> list[int]:
        """Write chunks: keys ``(n, L_p, d)`` (normalised here), payloads, MiniLM vectors ``(n, 384)``.

        New point ids follow the largest ever given (kept in the manifest) unless ``ids`` are given. The store's
        own view (positions, texts, BM25) changes at the next :meth:`refresh`. Returns the point ids written.
        """
        if ids is None:
            start = self._meta["next_id"]
            ids = list(range(start, start + len(keys)))
        keys = keys.astype(np.float32)
        keys = keys / np.maximum(np.linalg.norm(keys, axis=-1, keepdims=True), 1e-12)
        points = [(int(i), {KEYS: keys[j].tolist()} | ({} if dense is None else {DENSE: dense[j].tolist()}),
                   {"chunk": int(i)} | dict(payloads[j])) for j, i in enumerate(ids)]
        self._db.upsert(points)
        if ids and max(ids) + 1 > self._meta["next_id"]:
            self._meta["next_id"] = int(max(ids)) + 1
            self._db.write_meta(self._meta)
        return [int(i) for i in ids]

    def delete_passages(self, passages: Sequence[str]) -> int:
        """Delete every chunk of these passage ids; returns the number of chunks deleted."""
        wanted = set(passages)
        ids = [i for i, p in self._db.payloads() if p["passage"] in wanted]  # every point, whatever the filter
        if ids:
            self._db.delete(ids)
            self.refresh()
        return len(ids)


def open_store(where: str | Path, ef: int | None = None, filter_: Where | None = None) -> Index | QdrantStore:
    """A :class:`QdrantStore` for a store string (``qdrant-edge:...``, ``qdrant:...``), else the index folder
    (opened without checking its checksums, as the evaluations open it)."""
    if isinstance(where, str) and is_spec(where):
        return QdrantStore(where, ef, filter_)
    if filter_ is not None or ef is not None:
        raise IndexStoreError("--where and --ef apply to a Qdrant store (--store qdrant-edge:PATH or qdrant:URL)")
    return Index(where, verify=False)


def export_index(index: Index, spec: str, datatype: str = "float32",
                 progress: Callable[[int, int], None] | None = None, hnsw: bool = False) -> dict:
    """Copy every chunk of ``index`` into the Qdrant store ``spec`` (point id = chunk id); returns its manifest.

    Compressed keys are decoded (:meth:`index.Index.vectors`), then L2-normalised; a batch whose points are all
    present already is skipped, so a killed export resumes. ``hnsw`` builds Edge's HNSW graphs afterwards (a
    server builds its own).

    Raises
    ------
    IndexStoreError
        ``spec`` holds a store made from another index (model, revision, ℓc, L_p, d, ...) or another storage type.
    """
    m = index.manifest
    dense = bool(m.get("dense"))
    identity = {k: m.get(k) for k in IDENTITY} | {"dense": dense, "dtype": m["dtype"], "head_independent": True,
                                                  "dense_size": index.dense_vectors(index.shards[0]).shape[1]
                                                  if dense else None}
    store = QdrantStore.create(spec, identity, datatype)
    try:
        chunks, starts, done = index.chunks, index.starts, 0
        for n, shard in enumerate(index.shards):
            lo, hi = int(starts[n]), int(starts[n + 1])
            for s in range(lo, hi, PAGE):
                ids = list(range(s, min(s + PAGE, hi)))
                have = store._db.present(ids)
                todo = [i for i in ids if i not in have]
                if todo:
                    keys = index.vectors(shard).numpy()[np.array(todo) - lo]
                    vecs = index.dense_vectors(shard)[np.array(todo) - lo] if dense else None
                    store.upsert(keys, [{k: chunks[i][k] for k in ("passage", "title", "source", "text", "tokens")
                                         if k in chunks[i]} for i in todo], vecs, todo)
                done += len(ids)
                if progress is not None:
                    progress(done, len(index))
        if hnsw:
            store._db.optimize()
        store.refresh()
        return store.manifest
    finally:
        store.close()


def add_passages(store: QdrantStore, backbone, passages: Sequence[Passage],
                 progress: Callable[[int, int], None] | None = None) -> list[int]:
    """Chunk and encode ``passages`` as :func:`index.build_index` does (its tokenizer counters, chunker, ℓc
    encoder and MiniLM embedder) and add them to ``store``; returns the new point ids.

    Raises
    ------
    IndexStoreError
        ``backbone`` is not the model the store was made with, or a passage id is in the store already.
    """
    from ..core.chunking import chunk_documents, tokenizer_counters
    from ..core.encoding import encode_chunks

    m = store._meta
    store.check_backbone(backbone, m["chunk_layer"])
    if store.where is not None:
        raise IndexStoreError("add passages to the whole store (no --where)")
    held = {c["passage"] for c in store.chunks} & {p.id for p in passages}
    if held:
        raise IndexStoreError(f"passage(s) {', '.join(sorted(held)[:5])} are in the store already; "
                              "delete them first to replace them")
    count, offsets = tokenizer_counters(backbone.tokenizer)
    chunks = chunk_documents([p.text for p in passages], count, offsets, m["target"])
    texts = [c.text for c in chunks]
    keys = encode_chunks(backbone, texts, m["chunk_layer"], m["n_pool"], progress=progress).numpy()
    dense = None
    if m["dense"]:
        from ..core.minilm import embed

        dense = embed(texts).numpy()
    payloads = [{"passage": passages[c.doc].id, "title": passages[c.doc].title, "source": passages[c.doc].source,
                 "text": c.text, "tokens": c.tokens} for c in chunks]
    added = store.upsert(keys, payloads, dense)
    store.refresh()
    return added
