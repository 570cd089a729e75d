"""A sharded, memory-mapped corpus index of pooled chunk vectors (Eq. 1), searched by exact MaxSim (Eq. 4).

Layout of an index folder::

    manifest.json        model id + revision, ℓc, L_p, d, dtype, counts, per-shard SHA-256, settings
    chunks.jsonl         one line per chunk: id, passage id, title, source, text
    shard_00000.npy      (n, L_p, d) float16 — or int8 with shard_00000.scale.npy (n, L_p) float16
    bm25/                the bm25s index over the same chunks

The index depends only on the backbone and ℓc, never on the trained ρ/α, so a retrained head
searches the same index (``"head_independent": true`` in the manifest). A build writes each shard
to a temporary name, renames it, then records its checksum in the manifest: a killed build resumes
after the last recorded shard and search never reads a half-written one.

Example
-------
>>> x = np.array([[[0.5, -1.0]]], dtype=np.float32)
>>> q, s = quantize_int8(x)
>>> q.tolist(), round(float(s[0, 0]) * 127, 3)
([[[64, -127]]], 1.0)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from .backbone import Backbone
from .chunking import chunk_documents, tokenizer_counters
from .data import Passage, sha256_file
from .encoding import encode_chunks
from .maxsim import maxsim
from .selection import BM25


class IndexStoreError(RuntimeError):
    """An index that is missing, corrupted, or built for another model or ℓc."""


def quantize_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-vector int8 scalar quantisation: ``x ≈ q · scale`` (scale = max|x| / 127)."""
    scale = np.maximum(np.abs(x).max(-1), 1e-12) / 127.0  # (n, L_p)
    return np.round(x / scale[..., None]).astype(np.int8), scale.astype(np.float16)


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.rename(path)


def build_index(
    out: str | Path,
    backbone: Backbone,
    passages: Sequence[Passage],
    layer: int,
    n_pool: int = 7,
    dtype: str = "fp16",
    shard_size: int = 4096,
    target: int = 141,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Chunk, encode to ℓc and write a resumable sharded index; returns the manifest.

    Raises
    ------
    IndexStoreError
        If ``out`` holds an index of another model, revision, ℓc, L_p or dtype.
    """
    if dtype not in ("fp16", "int8"):
        raise ValueError(f"dtype must be fp16 or int8, got {dtype!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    identity = {"model": backbone.name, "revision": backbone.revision, "chunk_layer": layer, "n_pool": n_pool,
                "dtype": dtype, "hidden_size": backbone.hidden_size, "shard_size": shard_size, "target": target}
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
    if manifest is not None:
        clash = {k: (manifest.get(k), v) for k, v in identity.items() if manifest.get(k) != v}
        if clash:
            raise IndexStoreError(f"{out} holds an index built with other settings {clash}; use another folder")
    count, offsets = tokenizer_counters(backbone.tokenizer)
    chunks = chunk_documents([p.text for p in passages], count, offsets, target)
    if manifest is None:
        with (out / "chunks.jsonl").open("w", encoding="utf-8") as f:
            for c in chunks:
                p = passages[c.doc]
                f.write(json.dumps({"id": c.id, "passage": p.id, "title": p.title, "source": p.source,
                                    "text": c.text, "tokens": c.tokens}) + "\n")
        BM25([c.text for c in chunks]).retriever.save(str(out / "bm25"))
        manifest = identity | {"head_independent": True, "chunks": len(chunks), "passages": len(passages),
                               "tokens": sum(c.tokens for c in chunks), "shards": []}
        _write_json(manifest_path, manifest)
    elif manifest["chunks"] != len(chunks):
        raise IndexStoreError(f"{out} was started on another corpus ({manifest['chunks']} chunks, now {len(chunks)})")
    for n, s in enumerate(range(0, len(chunks), shard_size)):
        if n < len(manifest["shards"]):
            continue  # complete and recorded
        keys = encode_chunks(backbone, [c.text for c in chunks[s : s + shard_size]], layer, n_pool).numpy()
        files = {f"shard_{n:05d}.npy": keys.astype(np.float16)}
        if dtype == "int8":
            q, scale = quantize_int8(keys)
            files = {f"shard_{n:05d}.npy": q, f"shard_{n:05d}.scale.npy": scale}
        entry = {"n": len(keys), "files": {}}
        for name, arr in files.items():
            tmp = out / (name + ".tmp")
            with tmp.open("wb") as f:
                np.save(f, arr)
            tmp.rename(out / name)
            entry["files"][name] = sha256_file(out / name)
        manifest["shards"].append(entry)
        _write_json(manifest_path, manifest)
        if progress is not None:
            progress(min(s + shard_size, len(chunks)), len(chunks))
    return manifest


class Index:
    """A built index opened for search: shards memory-mapped, checksums verified on open.

    Parameters
    ----------
    folder : the index folder.
    verify : check every shard's SHA-256 against the manifest.
    """

    def __init__(self, folder: str | Path, verify: bool = True) -> None:
        self.folder = Path(folder)
        try:
            self.manifest = json.loads((self.folder / "manifest.json").read_text())
        except FileNotFoundError:
            raise IndexStoreError(f"{self.folder}: no index here (manifest.json missing)") from None
        except json.JSONDecodeError as exc:
            raise IndexStoreError(f"{self.folder}/manifest.json is corrupted: {exc}") from None
        n_shards = -(-self.manifest["chunks"] // self.manifest["shard_size"])
        if len(self.manifest["shards"]) < n_shards:
            done = len(self.manifest["shards"])
            raise IndexStoreError(f"{self.folder}: build incomplete ({done}/{n_shards} shards); "
                                  "run the build again to resume")
        self.shards: list[tuple[np.ndarray, np.ndarray | None]] = []
        for entry in self.manifest["shards"]:
            arrays = []
            for name, digest in entry["files"].items():
                path = self.folder / name
                if not path.exists() or (verify and sha256_file(path) != digest):
                    raise IndexStoreError(f"{path} is missing or fails its checksum; rebuild that shard")
                arrays.append(np.load(path, mmap_mode="c"))  # copy-on-write: never written
            self.shards.append((arrays[0], arrays[1] if len(arrays) > 1 else None))
        self._chunks: list[dict] | None = None
        self._bm25 = None

    @property
    def chunks(self) -> list[dict]:
        if self._chunks is None:
            with (self.folder / "chunks.jsonl").open(encoding="utf-8") as f:
                self._chunks = [json.loads(line) for line in f]
        return self._chunks

    def check_backbone(self, backbone: Backbone, layer: int) -> None:
        m = self.manifest
        if (m["model"], m["revision"], m["chunk_layer"]) != (backbone.name, backbone.revision, layer):
            raise IndexStoreError(f"index built with {m['model']} ({m['revision']}) at ℓc={m['chunk_layer']}; "
                              f"the loaded model is {backbone.name} ({backbone.revision}) with ℓc={layer}")

    def bm25(self):
        if self._bm25 is None:
            import bm25s

            self._bm25 = bm25s.BM25.load(str(self.folder / "bm25"))
        return self._bm25

    def maxsim_topk(self, q: torch.Tensor, k: int, normalize: bool = True,
                    block: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact MaxSim over every chunk, shard by shard (:func:`maxsim.maxsim`), with a running top-k merge.

        Parameters
        ----------
        q : ``(B, G, d)`` query vectors.
        k : hits per query (clamped to the number of chunks).

        Returns
        -------
        scores ``(B, k)`` and chunk ids ``(B, k)``, best first.
        """
        b = q.shape[0]
        k = min(k, self.manifest["chunks"])
        best_s = torch.full((b, k), -float("inf"))
        best_i = torch.zeros((b, k), dtype=torch.long)
        base = 0
        for keys, scale in self.shards:
            scores = maxsim(q, torch.from_numpy(keys), block, normalize,
                            None if scale is None else torch.from_numpy(scale))  # (B, n)
            ids = torch.arange(base, base + len(keys)).expand(b, -1)
            best_s, pick = torch.topk(torch.cat([best_s, scores], 1), k, dim=1)
            best_i = torch.cat([best_i, ids], 1).gather(1, pick)
            base += len(keys)
        return best_s, best_i


def search(index: Index, explorer, query: str, k: int = 10, method: str = "unreal") -> dict:
    """Top-``k`` chunks for a query: ``unreal`` (exact MaxSim), ``bm25``, or ``hybrid`` (RRF of both).

    Returns rank, chunk id, passage id, title, score and text per hit, with timings split into
    query encoding and scan.
    """
    import time

    from .selection import reciprocal_rank_fusion

    if method not in ("unreal", "bm25", "hybrid"):
        raise ValueError(f"unknown method {method!r}; use unreal, bm25 or hybrid")
    chunks, timings = index.chunks, {}
    bm25 = index.bm25()
    t0 = time.perf_counter()
    depth = max(k, 100) if method == "hybrid" else k
    b_ids, b_scores = bm25.retrieve(BM25._tokenize([query]), k=min(depth, len(chunks)), show_progress=False)
    timings["bm25"] = time.perf_counter() - t0
    hits: list[tuple[int, float]] = list(zip(b_ids[0].tolist(), b_scores[0].tolist(), strict=True))
    if method in ("unreal", "hybrid"):
        c = explorer.head.config
        index.check_backbone(explorer.backbone, c.chunk_layer)
        t1 = time.perf_counter()
        context = [chunks[i]["text"] for i in b_ids[0][: c.n_context].tolist()]
        with torch.inference_mode():
            q = explorer.head(explorer.backbone, [query], [context]).cpu()  # (1, G, d)
        timings["query_encoding"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        u_scores, u_ids = index.maxsim_topk(q, depth, normalize=c.normalize)
        timings["scan"] = time.perf_counter() - t2
        unreal_hits = list(zip(u_ids[0].tolist(), u_scores[0].tolist(), strict=True))
        if method == "unreal":
            hits = unreal_hits
        else:
            hits = reciprocal_rank_fusion([[i for i, _ in unreal_hits], [i for i, _ in hits]])
    return {"query": query, "method": method, "timings": {k_: round(v, 5) for k_, v in timings.items()},
            "hits": [{"rank": r + 1, "id": i, "passage": chunks[i]["passage"], "title": chunks[i]["title"],
                      "score": round(float(s), 6), "text": chunks[i]["text"]} for r, (i, s) in enumerate(hits[:k])]}
