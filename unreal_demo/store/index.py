"""A sharded, memory-mapped corpus index of pooled chunk vectors (Eq. 1), searched by exact MaxSim (Eq. 4).

Layout of an index folder::

    manifest.json        model id + revision, ℓc, L_p, d, codec ("dtype"), counts, per-shard SHA-256, settings
    chunks.jsonl[.gz]    one line per chunk: id, passage id, title, source, text
    shard_00000.npy      (n, L_p, d) float16 — or int8 with shard_00000.scale.npy (n, L_p) float16
    shard_00000.codes.npy, shard_00000.cid.npy   the codes of a compressed index (:mod:`codec`)
    codec.npz            the fitted codec of a compressed index (centroids, buckets or PQ codebooks, ranges)
    dense_00000.npy      (n, 384) MiniLM vectors: fp16, int8 with dense_00000.dscale.npy, or pq2 codes
                         dense_00000.pq.npy with their codebooks in dense_codec.npz
    bm25/                the bm25s index over the same chunks (rebuilt in memory when absent)

The index depends only on the backbone and ℓc, never on the trained ρ/α, so a retrained head
searches the same index (``"head_independent": true`` in the manifest). A build writes each shard
to a temporary name, renames it, then records its checksum in the manifest: a killed build resumes
after the last recorded shard and search never reads a half-written one.

A compressed index (``sq4``, ``pq2``, ``rpq2``, ``rpq3``, ``res3``, ``res2``, ``res1``) is made from a built one by
:func:`compress_index` without re-encoding any chunk; its shards are decoded once per opened index (kept as fp16, the
size of an fp16 index in memory) and scanned exactly as an fp16 index.
"""

from __future__ import annotations

import functools
import gzip
import json
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from ..core.backbone import Backbone
from ..core.chunking import chunk_documents, tokenizer_counters
from ..core.codec import CODECS, DENSE_CODECS, LOSSY, Codec, quantize_int8
from ..core.codec import fit as fit_codec
from ..core.codec import load as load_codec
from ..core.cpu import choose
from ..core.encoding import encode_chunks
from ..core.maxsim import inverse_norms, maxsim, scan_error_bound
from ..core.selection import BM25
from ..data.sources import Passage, sha256_file
from ..errors import UserError
from ..settings import CHUNK_TOKENS, cache_dir
from .base import TextStore, backbone_mismatch, token_mean

RESCORE = 32  # candidates beyond k that a scan with rounded query scores re-scores in fp32 (Index.maxsim_topk)
RESCORE_BUDGET = 16_384  # most (query, candidate) pairs one re-scoring gathers (~264 MB of fp32 keys at 7 × 576);
# a deeper top-k (score fusion ranks every chunk) is scanned by torch, whose scores need no re-scoring


class IndexStoreError(UserError, RuntimeError):
    """An index that is missing, corrupted, or built for another model or ℓc."""


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
    target: int = CHUNK_TOKENS,
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
        If ``out`` holds an index of another model, revision, ℓc, L_p, dtype, encoding dtype or corpus.
    """
    if dtype not in ("fp16", "int8"):
        raise IndexStoreError(f"an index is encoded as fp16 or int8 (got {dtype!r}); "
                              "compress it afterwards with `index compress --codec`")
    state = state or _Single()
    out = Path(out)
    identity = {"model": backbone.name, "revision": backbone.revision, "chunk_layer": layer, "n_pool": n_pool,
                "dtype": dtype, "hidden_size": backbone.hidden_size, "shard_size": shard_size, "target": target,
                "token_states": token_states, "dense": dense,
                "encoded_in": str(backbone.encoding_dtype).removeprefix("torch.")}  # a resumed build never mixes dtypes
    manifest_path = out / "manifest.json"
    count, offsets = tokenizer_counters(backbone.tokenizer)
    chunks = chunk_documents([p.text for p in passages], count, offsets, target)
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
        if manifest is not None:
            before = {"encoded_in": "float32"} | manifest  # manifests older than the field were built in fp32
            clash = {k: (before.get(k), v) for k, v in identity.items() if before.get(k) != v}
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
            BM25([c.text for c in chunks]).save(out / "bm25")
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
            from ..core.minilm import embed

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
        if token_states:  # μ, on which sparse centres query and stored tokens (Index.token_mean)
            manifest["token_mean"] = token_mean([(torch.from_numpy(np.load(out / f"tokens_{n:05d}.npy")), None)
                                                 for n in range(len(starts))]).tolist()
        _write_json(manifest_path, manifest)
    state.wait_for_everyone()
    return json.loads(manifest_path.read_text())


def compress_index(src: str | Path, out: str | Path, codec: str, centroids: int = 4096, sample: int = 262144,
                   dense: bool = True, bm25: bool = False, seed: int = 0, dense_codec: str = "int8") -> dict:
    """Write a compressed copy of the index in ``src`` to ``out`` without re-encoding any chunk.

    The codec is fitted on (a seeded sample of at most ``sample``) stored vectors; every shard is
    decoded from ``src`` and re-encoded. The chunk texts are gzipped; the MiniLM vectors (``dense``)
    are kept as int8 with a per-chunk scale (384 + 2 B), or with ``dense_codec="pq2"`` product-quantised
    (96 B; the codebooks in ``dense_codec.npz``); token states are left out; the BM25 index is copied only
    with ``bm25`` (else rebuilt in memory at load). Returns the manifest.

    Raises
    ------
    IndexStoreError
        ``src`` is not a complete index, or ``out`` holds something else.
    """
    if codec not in CODECS:
        raise IndexStoreError(f"unknown codec {codec!r}; use one of {', '.join(CODECS)}")
    if dense_codec not in DENSE_CODECS:
        raise IndexStoreError(f"unknown dense codec {dense_codec!r}; use one of {', '.join(DENSE_CODECS)}")
    source, out = Index(src), Path(out)
    if (out / "manifest.json").exists():
        raise IndexStoreError(f"{out} already holds an index; use another folder")
    out.mkdir(parents=True, exist_ok=True)
    vectors = [source.vectors(sh).numpy() for sh in source.shards]  # (n, L_p, d) each
    flat = np.concatenate([v.reshape(-1, v.shape[-1]) for v in vectors])
    pick = np.random.default_rng(seed).permutation(len(flat))[:sample]
    t0 = time.perf_counter()
    fitted = fit_codec(codec, flat[np.sort(pick)], centroids, seed)
    fit_seconds = time.perf_counter() - t0
    m = dict(source.manifest)
    if codec in LOSSY:
        fitted.save(out / "codec.npz")
        m["codec_sha256"] = sha256_file(out / "codec.npz")
    dense = bool(dense and m.get("dense"))
    dense_vectors = [source.dense_vectors(sh) for sh in source.shards] if dense else []  # (n, 384) each
    dense_fit = None
    if dense and dense_codec != "int8":
        dense_fit = fit_codec(dense_codec, np.concatenate(dense_vectors), seed=seed)
        dense_fit.save(out / "dense_codec.npz")
        m["dense_codec_sha256"] = sha256_file(out / "dense_codec.npz")
    shards = []
    for n, v in enumerate(vectors):
        files = {f"shard_{n:05d}" + ("" if role == "keys" else f".{role}") + ".npy": arr
                 for role, arr in fitted.encode(v).items()}
        if dense_fit is not None:
            files[f"dense_{n:05d}.pq.npy"] = dense_fit.encode(dense_vectors[n][:, None])["codes"]
        elif dense:
            q, scale = quantize_int8(dense_vectors[n])
            files |= {f"dense_{n:05d}.npy": q, f"dense_{n:05d}.dscale.npy": scale}
        shards.append({"n": int(len(v)), "files": {name: _save(out, name, arr) for name, arr in files.items()}})
    with (source.folder / "chunks.jsonl").open("rb") as f, gzip.open(out / "chunks.jsonl.gz", "wb", 9) as g:
        shutil.copyfileobj(f, g)
    if bm25:
        shutil.copytree(source.folder / "bm25", out / "bm25")
    m |= {"dtype": codec, "shards": shards, "token_states": False, "dense": dense,
          "dense_dtype": dense_codec if dense else None,
          "compressed": {"from_codec": source.manifest["dtype"], "centroids": int(fitted.state["centroids"].shape[0])
                         if "centroids" in fitted.state else None, "fit_vectors": int(min(sample, len(flat))),
                         "fit_seconds": round(fit_seconds, 1)}}
    _write_json(out / "manifest.json", m)
    return m


ROLES = (("scale", ".scale.npy"), ("codes", ".codes.npy"), ("cid", ".cid.npy"), ("dense_scale", ".dscale.npy"),
         ("dense_codes", ".pq.npy"),
         ("tokens", "tokens_"), ("lengths", "lengths_"), ("dense", "dense_"), ("keys", "shard_"))


def _role(name: str) -> str:
    return next(role for role, mark in ROLES if mark in name)


def shards_built(folder: str | Path, manifest: dict) -> tuple[int, int]:
    """(shards built, shards in all) of the index in ``folder`` whose manifest is ``manifest``. A build under way
    records each finished shard in ``shard_NNNNN.json`` and lists them in the manifest once every shard is done, so
    the index is whole only then: until the manifest lists them, at most ``all − 1`` count as built."""
    total = -(-manifest["chunks"] // manifest["shard_size"])
    if len(manifest["shards"]) >= total:
        return total, total
    return min(len(list(Path(folder).glob("shard_*.json"))), total - 1), total


def build_state(folder: str | Path) -> tuple[int, int] | None:
    """:func:`shards_built` of the index in ``folder`` from its manifest; None where there is no manifest or it is
    damaged."""
    try:
        return shards_built(folder, json.loads((Path(folder) / "manifest.json").read_text()))
    except (OSError, ValueError, KeyError):
        return None


class Index(TextStore):
    """A built index opened for search: shards memory-mapped, checksums verified on open.

    Parameters
    ----------
    folder : the index folder.
    verify : check every shard's SHA-256 against the manifest.
    decode_budget : bytes of decoded keys (fp16) and dense vectors a compressed index keeps in memory (default 4 GiB).
    """

    def __init__(self, folder: str | Path, verify: bool = True, decode_budget: int = 4 << 30) -> None:
        self.folder, self.decode_budget, self._decoded_bytes = Path(folder), decode_budget, 0
        try:
            self.manifest = json.loads((self.folder / "manifest.json").read_text())
        except FileNotFoundError:
            raise IndexStoreError(f"{self.folder}: no index here (manifest.json missing)") from None
        except json.JSONDecodeError as exc:
            raise IndexStoreError(f"{self.folder}/manifest.json is corrupted: {exc}") from None
        done, n_shards = shards_built(self.folder, self.manifest)
        if done < n_shards:
            raise IndexStoreError(f"{self.folder}: build incomplete ({done}/{n_shards} shards); "
                                  "run the build again to resume")
        self.codec = Codec(self.manifest["dtype"])
        if self.codec.name in LOSSY:
            self.codec = self._codec_file("codec", verify)
        self.dense_codec = self._codec_file("dense_codec", verify) if "dense_codec_sha256" in self.manifest else None
        self.shards: list[dict] = []  # per shard: keys or codes, and scale / tokens / lengths / dense
        for entry in self.manifest["shards"]:
            arrays = {}
            for name, digest in entry["files"].items():
                path = self.folder / name
                if not path.exists() or (verify and sha256_file(path) != digest):
                    raise IndexStoreError(f"{path} is missing or fails its checksum; rebuild that shard")
                arrays[_role(name)] = np.load(path, mmap_mode="c")  # copy-on-write: never written
            self.shards.append(arrays)
        self._chunks: list[dict] | None = None
        self._bm25: BM25 | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._token_mean: torch.Tensor | None = None

    def _codec_file(self, name: str, verify: bool) -> Codec:
        """The fitted codec in ``<name>.npz``, checked against the manifest's ``<name>_sha256``."""
        path = self.folder / f"{name}.npz"
        if not path.exists() or (verify and sha256_file(path) != self.manifest.get(f"{name}_sha256")):
            raise IndexStoreError(f"{path} is missing or fails its checksum; compress the index again")
        return load_codec(path)

    def __len__(self) -> int:
        return self.manifest["chunks"]

    @property
    def chunks(self) -> list[dict]:
        if self._chunks is None:
            plain = self.folder / "chunks.jsonl"
            with (plain.open(encoding="utf-8") if plain.exists()
                  else gzip.open(self.folder / "chunks.jsonl.gz", "rt", encoding="utf-8")) as f:
                self._chunks = [json.loads(line) for line in f]
        return self._chunks

    def keys(self, shard: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A shard's stored keys as the scan reads them, and the int8 scale (or None). A compressed shard
        is decoded to fp16 (unit vectors) and kept while the decoded shards fit ``decode_budget`` bytes;
        beyond it, every scan decodes it again (memory stays bounded for any index size)."""
        keys = self._kept(shard, "keys", lambda: self.codec.decode(shard).astype(np.float16))  # (n, L_p, d)
        scale = shard.get("scale")
        return torch.from_numpy(keys), None if scale is None else torch.from_numpy(scale)

    def dense_vectors(self, shard: dict) -> np.ndarray:
        """A shard's MiniLM vectors ``(n, 384)`` float32: stored fp16, int8 times its per-chunk scale, or
        pq2 codes decoded (kept within ``decode_budget``, as decoded keys are)."""
        if "dense_codes" in shard:
            return self._kept(shard, "dense", lambda: self.dense_codec.decode({"codes": shard["dense_codes"]})[:, 0])
        vectors = np.asarray(shard["dense"], dtype=np.float32)
        return vectors * shard["dense_scale"].astype(np.float32)[:, None] if "dense_scale" in shard else vectors

    def _kept(self, shard: dict, role: str, decode: Callable[[], np.ndarray]) -> np.ndarray:
        """``shard[role]``, else ``decode()``, kept in the shard while all decoded arrays fit ``decode_budget``
        bytes; beyond it, every call decodes again (memory stays bounded for any index size)."""
        if role in shard:
            return shard[role]
        out = decode()
        if self._decoded_bytes + out.nbytes <= self.decode_budget:
            shard[role], self._decoded_bytes = out, self._decoded_bytes + out.nbytes
        return out

    def vectors(self, shard: dict) -> torch.Tensor:
        """A shard's chunk vectors ``(n, L_p, d)`` float32 (dequantised or decoded)."""
        keys, scale = self.keys(shard)
        return keys.float() if scale is None else keys.float() * scale.float()[..., None]

    @functools.cached_property
    def starts(self) -> np.ndarray:
        """The first chunk id of each shard, and the number of chunks at the end ``(shards + 1,)``."""
        return np.cumsum([0] + [e["n"] for e in self.manifest["shards"]])

    def chunk_vectors(self, ids: Sequence[int]) -> torch.Tensor:
        """The keys ``(k, L_p, d)`` float32 of chunks ``ids`` (dequantised or decoded, like the scan reads them)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = torch.zeros(len(ids), *self.chunk_shape)
        owner = np.searchsorted(self.starts, ids, side="right") - 1  # the shard holding each chunk
        for n in np.unique(owner):
            rows = np.flatnonzero(owner == n)
            local = torch.from_numpy(ids[rows] - int(self.starts[n]))
            keys, scale = self.keys(self.shards[n])
            part = keys[local].float()
            out[torch.from_numpy(rows)] = part if scale is None else part * scale[local].float()[..., None]
        return out

    def check_backbone(self, backbone: Backbone, layer: int) -> None:
        """:class:`IndexStoreError` unless the index was built with this model, revision and ℓc."""
        if why := backbone_mismatch(self.manifest, backbone, layer, "index"):
            raise IndexStoreError(why)

    @property
    def bm25(self) -> BM25:
        """BM25 over the chunk texts: loaded from ``bm25/``, or built in memory from them (seconds)."""
        if self._bm25 is None:
            folder = self.folder / "bm25"
            self._bm25 = BM25.load(folder, len(self)) if folder.exists() else BM25(self.texts)
        return self._bm25

    @functools.cached_property
    def texts(self) -> list[str]:
        """Every chunk's text, in chunk-id order."""
        return [c["text"] for c in self.chunks]

    def _stream_topk(self, k: int, b: int, score: Callable[[dict], torch.Tensor],
                     shards: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        k = min(k, len(self))
        best_s = torch.full((b, k), -float("inf"))
        best_i = torch.zeros((b, k), dtype=torch.long)
        starts = self.starts
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

    def maxsim_topk(self, q: torch.Tensor, k: int, normalize: bool = True, block: int | None = None,
                    shards: Sequence[int] | None = None, path: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact MaxSim (Eq. 4) over every chunk, shard by shard (:func:`maxsim.maxsim`), with a running top-k merge.

        Shards are scored ``torch.get_num_threads()`` at a time by worker threads (the skinny per-block
        matmuls gain more from one shard per core than from intra-op threads), then merged in order.
        The ``numba`` and ``torch`` paths sum in fp32 over the keys as stored, so their top-k is final.
        On the ``numkong`` path (fp16 keys; the query rounded to fp16) the scan keeps the best
        ``k +`` :data:`RESCORE` candidates, re-scores them in fp32 exactly as the ``torch`` path does, and
        checks that no chunk left out can reach the k-th score (its scan score plus
        :func:`maxsim.scan_error_bound`); a query that fails the check (near-ties) is scanned again by torch.
        A top-k too deep to re-score within :data:`RESCORE_BUDGET` pairs goes to the torch path.
        Every path returns the ids of the fp32 scan (scores within fp32 summation rounding).

        Parameters
        ----------
        q : ``(B, G, d)`` query vectors.
        k : hits per query (clamped to the number of chunks).
        block : chunks per block of the scan (default per path, :data:`maxsim.BLOCKS`).
        shards : scan only these shards (one process's part of a sharded scan); all by default.
        path : ``"numba"``, ``"numkong"`` or ``"torch"``; default the CPU's choice (:func:`cpu.choose`).

        Returns
        -------
        scores ``(B, k)`` and chunk ids ``(B, k)``, best first.
        """
        path = path or choose().scan
        fast = path == "numkong" and bool(self.shards) and self.keys(self.shards[0])[0].dtype == torch.float16
        fast &= q.shape[0] * (min(k, len(self)) + RESCORE) <= RESCORE_BUDGET
        scan = "numkong" if fast else "torch" if path == "numkong" else path  # numba and torch sum in fp32

        def score(shard: dict) -> torch.Tensor:
            keys, scale = self.keys(shard)
            if (normalize or fast) and "inv_norm" not in shard:
                shard["inv_norm"] = inverse_norms(keys)  # (n, L_p), once per opened index
            return maxsim(q, keys, block, normalize, scale, shard.get("inv_norm"), scan)

        if not fast:
            return self._stream_topk(k, q.shape[0], score, shards)
        scan_s, ids = self._stream_topk(k + RESCORE, q.shape[0], score, shards)
        exact = self._rescore(q, ids, normalize).masked_fill(scan_s == -float("inf"), -float("inf"))  # (B, k')
        exact, order = exact.sort(dim=1, descending=True)
        ids = ids.gather(1, order)
        k = min(k, ids.shape[1])
        scanned = range(len(self.shards)) if shards is None else shards
        max_norm = 1.0 if normalize else max((float(1.0 / self.shards[n]["inv_norm"].min()) for n in scanned
                                              if len(self.shards[n]["inv_norm"])), default=1.0)
        bound = scan_error_bound(q, max_norm, "numkong", torch.float16)  # (B,)
        missed = scan_s[:, -1] + bound >= exact[:, k - 1]  # a chunk outside the candidates might reach the k-th
        missed &= scan_s[:, -1] > -float("inf")  # every chunk of the scanned shards was a candidate
        if missed.any():
            again = missed.nonzero()[:, 0]
            exact[again, :k], ids[again, :k] = self.maxsim_topk(q[again], k, normalize, None, shards, "torch")
        return exact[:, :k], ids[:, :k]

    def _rescore(self, q: torch.Tensor, ids: torch.Tensor, normalize: bool) -> torch.Tensor:
        """fp32 MaxSim ``(B, k)`` of query ``b`` against chunks ``ids[b]``, as the torch scan computes it."""
        keys = self.chunk_vectors(ids.reshape(-1).tolist()).view(*ids.shape, *self.chunk_shape)  # (B, k, L_p, d)
        if normalize:
            keys = keys / torch.linalg.vector_norm(keys, dim=-1, keepdim=True).clamp_min(1e-12)
        return torch.einsum("bgd,bmpd->bmgp", q.float(), keys).amax(-1).sum(-1)

    @property
    def chunk_shape(self) -> tuple[int, int]:
        """``(L_p, d)`` of every stored chunk."""
        return self.manifest["n_pool"], self.manifest["hidden_size"]

    ROLES = {"token_states": "--token-states", "dense": "--dense"}  # optional data: the build flag that keeps it

    def lacks(self, role: str) -> str | None:
        """The build flag this index lacks for ``role`` (``keys``, ``dense``, ``token_states``), or None."""
        return self.ROLES[role] if role in self.ROLES and not self.manifest.get(role) else None

    def _need(self, role: str) -> None:
        if self.lacks(role):
            raise IndexStoreError(f"{self.folder} was built without {role.replace('_', ' ')}; "
                                  f"rebuild it with `index build {self.ROLES[role]}` to use this method")

    def dense_topk(self, qv: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosine of MiniLM query embeddings ``(B, 384)`` with the stored chunk embeddings, top-k."""
        self._need("dense")

        return self._stream_topk(k, qv.shape[0], lambda sh: qv @ torch.from_numpy(self.dense_vectors(sh)).T)

    @property
    def token_parts(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every chunk's normalised token states ``(tokens (N_p, d), lengths (m_p,))`` per shard (sparse)."""
        self._need("token_states")
        return [(torch.from_numpy(sh["tokens"]), torch.from_numpy(sh["lengths"])) for sh in self.shards]

    def token_mean(self) -> torch.Tensor:
        """μ ``(d,)``, the stored token states' mean on which sparse centres query and stored tokens: the one
        recorded in the manifest at build time, else (an index built before it was recorded) computed from the
        token states once, on first use."""
        self._need("token_states")
        if self._token_mean is None:
            recorded = self.manifest.get("token_mean")
            self._token_mean = (torch.tensor(recorded, dtype=torch.float32) if recorded is not None
                                else token_mean(self.token_parts))
        return self._token_mean

    def chunk_means(self) -> torch.Tensor:
        """Each chunk's mean pooled state ``(M, d)`` (dequantised or decoded as the scan reads them)."""
        return torch.cat([self.vectors(sh).mean(1) for sh in self.shards])


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


def _index_name(explorer, corpus: str) -> str:
    return f"{explorer.backbone.name.replace('/', '_')}-l{explorer.head.config.chunk_layer}-{corpus}"


def default_folder(explorer, corpus: str) -> Path:
    """Where the app and the CLI build the index of a built-in corpus for this model and ℓc (the cache)."""
    return cache_dir() / "indexes" / _index_name(explorer, corpus)


def shipped_folder(explorer, corpus: str = "all") -> Path:
    """Where the repository ships a compressed index for this model, ℓc and corpus (it may not exist)."""
    from ..settings import PRECOMPUTED

    return PRECOMPUTED / "index" / _index_name(explorer, corpus)


def default_index(explorer, corpus: str = "all") -> Path:
    """The index to open by default: one built in the cache, else the shipped one, else the cache folder
    (where a build would go; opening it says that nothing is built yet)."""
    built, shipped = default_folder(explorer, corpus), shipped_folder(explorer, corpus)
    if not (built / "manifest.json").exists() and (shipped / "manifest.json").exists():
        return shipped
    return built
