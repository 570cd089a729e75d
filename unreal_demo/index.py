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

import functools
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from .backbone import Backbone
from .chunking import chunk_documents, tokenizer_counters
from .data import Passage, sha256_file
from .encoding import encode_chunks
from .errors import UserError
from .maxsim import inverse_norms, maxsim
from .selection import BM25, bm25s_tokens


class IndexStoreError(UserError, RuntimeError):
    """An index that is missing, corrupted, or built for another model or ℓc."""


def quantize_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-vector int8 scalar quantisation: ``x ≈ q · scale`` (scale = max|x| / 127)."""
    scale = np.maximum(np.abs(x).max(-1), 1e-12) / 127.0  # (n, L_p)
    return np.round(x / scale[..., None]).astype(np.int8), scale.astype(np.float16)


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.rename(path)


class _Single:
    """The process layout of a plain (not ``accelerate launch``-ed) build: one process."""

    process_index, num_processes, is_main_process = 0, 1, True

    def wait_for_everyone(self) -> None:
        pass


def _save(folder: Path, name: str, arr: np.ndarray) -> str:
    tmp = folder / (name + ".tmp")
    with tmp.open("wb") as f:
        np.save(f, arr)
    tmp.rename(folder / name)
    return sha256_file(folder / name)


def build_index(
    out: str | Path,
    backbone: Backbone,
    passages: Sequence[Passage],
    layer: int,
    n_pool: int = 7,
    dtype: str = "fp16",
    shard_size: int = 1024,
    target: int = 141,
    progress: Callable[[int, int], None] | None = None,
    token_states: bool = False,
    dense: bool = False,
    state=None,
) -> dict:
    """Chunk, encode to ℓc and write a resumable sharded index; returns the manifest.

    Shard ``n`` is encoded by process ``n mod P`` of ``state`` (an ``accelerate.PartialState`` under
    ``accelerate launch``; one process otherwise). Each shard is written under a temporary name,
    renamed, then recorded in ``shard_NNNNN.json`` with its checksums and timing; once every
    process is done, the main one merges the records into the manifest. A killed build resumes
    from the recorded shards, whatever the number of processes.

    Parameters
    ----------
    token_states : also store every chunk's normalised token states (for sparse token matching).
    dense : also store the MiniLM embedding of every chunk (for the dense baseline).
    state : process layout with ``process_index``, ``num_processes``, ``is_main_process`` and
        ``wait_for_everyone()``.

    Raises
    ------
    IndexStoreError
        If ``out`` holds an index of another model, revision, ℓc, L_p, dtype or corpus.
    """
    if dtype not in ("fp16", "int8"):
        raise ValueError(f"dtype must be fp16 or int8, got {dtype!r}")
    state = state or _Single()
    out = Path(out)
    identity = {"model": backbone.name, "revision": backbone.revision, "chunk_layer": layer, "n_pool": n_pool,
                "dtype": dtype, "hidden_size": backbone.hidden_size, "shard_size": shard_size, "target": target,
                "token_states": token_states, "dense": dense}
    manifest_path = out / "manifest.json"
    count, offsets = tokenizer_counters(backbone.tokenizer)
    chunks = chunk_documents([p.text for p in passages], count, offsets, target)
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
        if manifest is not None:
            clash = {k: (manifest.get(k), v) for k, v in identity.items() if manifest.get(k) != v}
            if clash:
                raise IndexStoreError(f"{out} holds an index built with other settings {clash}; use another folder")
            if manifest["chunks"] != len(chunks):
                raise IndexStoreError(f"{out} was started on another corpus "
                                      f"({manifest['chunks']} chunks, now {len(chunks)})")
        else:
            with (out / "chunks.jsonl").open("w", encoding="utf-8") as f:
                for c in chunks:
                    p = passages[c.doc]
                    f.write(json.dumps({"id": c.id, "passage": p.id, "title": p.title, "source": p.source,
                                        "text": c.text, "tokens": c.tokens}) + "\n")
            BM25([c.text for c in chunks]).retriever.save(str(out / "bm25"))
            _write_json(manifest_path, identity | {
                "head_independent": True, "chunks": len(chunks), "passages": len(passages),
                "tokens": sum(c.tokens for c in chunks), "shards": []})
    state.wait_for_everyone()
    starts = list(range(0, len(chunks), shard_size))
    mine = [n for n in range(len(starts)) if n % state.num_processes == state.process_index]
    todo = [n for n in mine if not (out / f"shard_{n:05d}.json").exists()]
    total, done = sum(min(shard_size, len(chunks) - starts[n]) for n in todo), 0
    for n in todo:
        t0 = time.perf_counter()
        part = chunks[starts[n] : starts[n] + shard_size]
        toks: list[torch.Tensor] | None = [] if token_states else None
        report = None if progress is None else (lambda d, _t, base=done: progress(base + d, total))
        keys = encode_chunks(backbone, [c.text for c in part], layer, n_pool, progress=report,
                             tokens_out=toks).numpy()  # (n, L_p, d)
        files = {f"shard_{n:05d}.npy": keys.astype(np.float16)}
        if dtype == "int8":
            q, scale = quantize_int8(keys)
            files = {f"shard_{n:05d}.npy": q, f"shard_{n:05d}.scale.npy": scale}
        if toks is not None:
            files[f"tokens_{n:05d}.npy"] = torch.cat(toks).numpy()  # (ΣT, d) fp16
            files[f"lengths_{n:05d}.npy"] = np.array([len(t) for t in toks], dtype=np.int64)
        if dense:
            from .dense import embed

            files[f"dense_{n:05d}.npy"] = embed([c.text for c in part]).half().numpy()  # (n, 384)
        saved = {name: _save(out, name, arr) for name, arr in files.items()}
        _write_json(out / f"shard_{n:05d}.json", {"n": len(part), "tokens": sum(c.tokens for c in part),
                                                  "process": state.process_index,
                                                  "seconds": round(time.perf_counter() - t0, 3), "files": saved})
        done += len(part)
    state.wait_for_everyone()
    manifest = json.loads(manifest_path.read_text())
    if state.is_main_process and len(manifest["shards"]) < len(starts):
        records = [json.loads((out / f"shard_{n:05d}.json").read_text()) for n in range(len(starts))]
        manifest["shards"] = [{"n": r["n"], "files": r["files"]} for r in records]
        seconds = sum(r["seconds"] for r in records)
        procs = len({r["process"] for r in records})
        manifest["build"] = {"processes": procs, "encode_seconds": round(seconds, 1),
                             "chunks_per_s": round(len(chunks) * procs / max(seconds, 1e-9), 2),
                             "tokens_per_s": round(manifest["tokens"] * procs / max(seconds, 1e-9), 1)}
        _write_json(manifest_path, manifest)
    state.wait_for_everyone()
    return json.loads(manifest_path.read_text())


ROLES = (("scale", ".scale.npy"), ("tokens", "tokens_"), ("lengths", "lengths_"), ("dense", "dense_"),
         ("keys", "shard_"))


def _role(name: str) -> str:
    return next(role for role, mark in ROLES if mark in name)


def _dequantize(shard: dict) -> torch.Tensor:
    keys = torch.from_numpy(shard["keys"]).float()  # (n, L_p, d)
    return keys if "scale" not in shard else keys * torch.from_numpy(shard["scale"]).float()[..., None]


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
            done = len(list(self.folder.glob("shard_*.json")))
            raise IndexStoreError(f"{self.folder}: build incomplete ({done}/{n_shards} shards); "
                                  "run the build again to resume")
        self.shards: list[dict] = []  # per shard: keys, and scale / tokens / lengths / dense
        for entry in self.manifest["shards"]:
            arrays = {}
            for name, digest in entry["files"].items():
                path = self.folder / name
                if not path.exists() or (verify and sha256_file(path) != digest):
                    raise IndexStoreError(f"{path} is missing or fails its checksum; rebuild that shard")
                arrays[_role(name)] = np.load(path, mmap_mode="c")  # copy-on-write: never written
            self.shards.append(arrays)
        self._chunks: list[dict] | None = None
        self._bm25 = None
        self._pool: ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return self.manifest["chunks"]

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

    @functools.cached_property
    def texts(self) -> list[str]:
        """Every chunk's text, in chunk-id order."""
        return [c["text"] for c in self.chunks]

    def bm25_scores(self, queries: Sequence[str]) -> torch.Tensor:
        """BM25 score of every chunk, ``(Q, M)``."""
        bm25 = self.bm25()
        rows = []
        for tokens in bm25s_tokens(queries):
            rows.append(torch.as_tensor(bm25.get_scores(tokens), dtype=torch.float32) if tokens
                        else torch.zeros(len(self)))
        return torch.stack(rows)

    def bm25_topk(self, queries: Sequence[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """BM25 scores and chunk ids ``(B, k)``, best first (ties broken as for an in-memory store)."""
        return torch.topk(self.bm25_scores(queries), min(k, len(self)), dim=1)

    def _stream_topk(self, k: int, b: int, score: Callable[[dict], torch.Tensor],
                     shards: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        k = min(k, len(self))
        best_s = torch.full((b, k), -float("inf"))
        best_i = torch.zeros((b, k), dtype=torch.long)
        starts = np.cumsum([0] + [e["n"] for e in self.manifest["shards"]])
        order = list(range(len(self.shards)) if shards is None else shards)
        workers = max(1, min(torch.get_num_threads(), len(order)))
        if self._pool is None and workers > 1:
            self._pool = ThreadPoolExecutor(workers)  # torch ops release the GIL: shards scan in parallel
        for w in range(0, len(order), workers):  # a window of shards at a time: memory stays bounded
            window = order[w : w + workers]
            parts = (self._pool.map(lambda n: score(self.shards[n]), window) if workers > 1
                     else [score(self.shards[n]) for n in window])
            for n, scores in zip(window, parts, strict=True):  # (B, n) each
                ids = torch.arange(int(starts[n]), int(starts[n]) + scores.shape[1]).expand(b, -1)
                best_s, pick = torch.topk(torch.cat([best_s, scores], 1), k, dim=1)
                best_i = torch.cat([best_i, ids], 1).gather(1, pick)
        return best_s, best_i

    def maxsim_topk(self, q: torch.Tensor, k: int, normalize: bool = True, block: int = 128,
                    shards: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact MaxSim over every chunk, shard by shard (:func:`maxsim.maxsim`), with a running top-k merge.

        Shards are scored ``torch.get_num_threads()`` at a time by worker threads (the skinny per-block
        matmuls gain more from one shard per core than from intra-op threads), then merged in order.

        Parameters
        ----------
        q : ``(B, G, d)`` query vectors.
        k : hits per query (clamped to the number of chunks).
        shards : scan only these shards (one process's part of a sharded scan); all by default.

        Returns
        -------
        scores ``(B, k)`` and chunk ids ``(B, k)``, best first.
        """
        def score(shard: dict) -> torch.Tensor:
            keys, scale = torch.from_numpy(shard["keys"]), shard.get("scale")
            if normalize and "inv_norm" not in shard:
                shard["inv_norm"] = inverse_norms(keys)  # (n, L_p), once per opened index
            return maxsim(q, keys, block, normalize, None if scale is None else torch.from_numpy(scale),
                          shard.get("inv_norm"))

        return self._stream_topk(k, q.shape[0], score, shards)

    def _need(self, role: str, flag: str) -> None:
        if not self.manifest.get(role):
            raise IndexStoreError(f"{self.folder} was built without {role.replace('_', ' ')}; "
                                  f"rebuild it with `index build {flag}` to use this method")

    def dense_topk(self, qv: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosine of MiniLM query embeddings ``(B, 384)`` with the stored chunk embeddings, top-k."""
        self._need("dense", "--dense")
        return self._stream_topk(k, qv.shape[0], lambda sh: qv @ torch.from_numpy(sh["dense"]).float().T)

    def sparse_topk(self, query_tokens: Sequence[torch.Tensor], k: int,
                    alpha: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
        """Sparse token matching (:mod:`sparse`, k = 64 tokens per query token) over every stored token,
        fused with the pooled cosine at weight ``alpha``; top-k chunks."""
        from . import sparse

        self._need("token_states", "--token-states")
        parts = [(torch.from_numpy(sh["tokens"]), torch.from_numpy(sh["lengths"])) for sh in self.shards]
        local = sparse.sparse_scores(query_tokens, parts)  # (B, M)
        means = torch.cat([_dequantize(sh).mean(1) for sh in self.shards])  # (M, d)
        fused = sparse.fuse(local, sparse.pooled_scores(query_tokens, means), alpha)
        return torch.topk(fused, min(k, len(self)), dim=1)


def sharded_maxsim_topk(index: Index, q: torch.Tensor, k: int, normalize: bool = True) -> tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """Exact MaxSim top-k split across the processes of a ``torch.distributed`` group (``torchrun``,
    ``accelerate launch``): process r scans the shards n ≡ r (mod P) — the shards it built — and the P
    local top-k lists are all-gathered and merged. Equal to :meth:`Index.maxsim_topk` on one process.
    """
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    scores, ids = index.maxsim_topk(q, k, normalize, shards=range(rank, len(index.shards), world))  # (B, k)
    all_s, all_i = [torch.empty_like(scores) for _ in range(world)], [torch.empty_like(ids) for _ in range(world)]
    dist.all_gather(all_s, scores)
    dist.all_gather(all_i, ids)
    best, pick = torch.cat(all_s, 1).topk(scores.shape[1], dim=1)
    return best, torch.cat(all_i, 1).gather(1, pick)


def default_folder(explorer, corpus: str) -> Path:
    """Where the app and the CLI keep the index of a built-in corpus for this model and ℓc."""
    from .backbone import cache_dir

    name = explorer.backbone.name.replace("/", "_")
    return cache_dir() / "indexes" / f"{name}-l{explorer.head.config.chunk_layer}-{corpus}"


def search(index: Index, explorer, query: str, k: int = 10, method: str = "unreal") -> dict:
    """Top-``k`` chunks for one query (:func:`retrieval.retrieve`): rank, chunk id, passage id, title, score
    and text per hit, with timings split into BM25, query encoding and scan."""
    from .retrieval import canonical, retrieve

    method = canonical(method)
    found = retrieve(index, explorer, [query], k, method)
    ids, scores, timings = found.ids, found.scores, found.timings
    chunks = index.chunks
    return {"query": query, "method": method, "timings": {k_: round(v, 5) for k_, v in timings.items()},
            "hits": [{"rank": r + 1, "id": i, "passage": chunks[i]["passage"], "title": chunks[i]["title"],
                      "score": round(float(s), 6), "text": chunks[i]["text"]}
                     for r, (i, s) in enumerate(zip(ids[0], scores[0], strict=True))]}
