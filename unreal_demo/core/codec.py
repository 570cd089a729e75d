"""Compressed chunk keys for the index: what a stored vector costs, and how it is decoded for exact MaxSim.

Every codec turns pooled chunk vectors ``(n, L_p, d)`` into arrays stored per shard and back
into float vectors; the index scan always scores exact MaxSim (Eq. 4) over the decoded vectors.

| codec | per vector (d = 576) | what |
|---|---|---|
| ``fp16`` | 2·d = 1,152 B | half precision |
| ``int8`` | d + 2 = 578 B | symmetric per-vector scale |
| ``sq4`` | d/2 = 288 B | per-dimension 4-bit scalar quantisation over the 0.1–99.9 percentile range
  (codes by ``faiss.ScalarQuantizer``, range computed in NumPy; the sibling paper's Table 12) |
| ``res3`` / ``res2`` / ``res1`` | 2 + b·d/8 = 218 / 146 / 74 B | ColBERTv2-style residual codes: a k-means centroid id
  (``faiss.Kmeans``) and a b-bit code per dimension of the residual; per dimension, the 2^b buckets
  are cut at residual quantiles and decoded to each bucket's median |
| ``pq2`` | d/4 = 144 B | product quantisation (``faiss.ProductQuantizer``): one 8-bit code per 4-dimension
  sub-vector, 2 bits per dimension, codebooks fitted by k-means per sub-space |
| ``rpq2`` / ``rpq3`` | 2 + d/4 = 146 B / 2 + d/3 = 194 B | the same centroid id as ``res2``, and the residual
  product-quantised (IVF-PQ's code) with 4- / 3-dimension sub-vectors (2 / 2.7 bits per dimension) |

A dimension that the sub-vector size does not divide is padded with zeros (they cost one code).

The lossy codecs (all but ``fp16`` and ``int8``) store L2-normalised vectors:
the UNREAL head scores normalised keys, so the norm is not worth bits. Written here rather than taken from faiss: the
b-bit residual codes (faiss has no 1-, 2- or 3-bit per-dimension residual quantiser; its
``ResidualQuantizer`` is additive quantisation, a different code) — about 40 lines of NumPy. The product
quantisers' codes come from faiss; their decoding is one NumPy lookup, so a shipped index opens without it.

Example
-------
>>> x = np.random.default_rng(0).normal(size=(200, 3, 16)).astype(np.float32)
>>> codec = fit("res2", x.reshape(-1, 16), centroids=8)
>>> arrays = codec.encode(x)
>>> sorted(arrays), arrays["codes"].shape, arrays["cid"].dtype.name
(['cid', 'codes'], (200, 3, 4), 'uint16')
>>> bool(np.abs(codec.decode(arrays) - normalize(x)).mean() < 0.2)
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UserError

CODECS = ("fp16", "int8", "sq4", "pq2", "rpq2", "rpq3", "res3", "res2", "res1")
LOSSY = CODECS[2:]
PQ_DSUB = {"pq2": 4, "rpq2": 4, "rpq3": 3}  # dimensions per 8-bit product-quantiser code
DENSE_CODECS = ("int8", "pq2")  # the codecs a compressed index may keep its MiniLM vectors in


class CodecError(UserError):
    """An unknown codec or a codec file that does not fit the index."""


def normalize(x: np.ndarray) -> np.ndarray:
    """Unit vectors along the last axis (float32)."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def quantize_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-vector int8 scalar quantisation: ``x ≈ q · scale`` (scale = max|x| / 127).

    >>> q, s = quantize_int8(np.array([[[0.5, -1.0]]], dtype=np.float32))
    >>> q.tolist(), round(float(s[0, 0]) * 127, 3)
    ([[[64, -127]]], 1.0)
    """
    scale = np.maximum(np.abs(x).max(-1), 1e-12) / 127.0  # (n, L_p)
    return np.round(x / scale[..., None]).astype(np.int8), scale.astype(np.float16)


@dataclass
class Codec:
    """A fitted codec: its name and the arrays it was trained to (saved in the index's ``codec.npz``)."""

    name: str
    state: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def bits(self) -> int:
        return {"res3": 3, "res2": 2, "res1": 1}.get(self.name, 0)

    def encode(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Arrays to store for vectors ``x`` ``(n, L_p, d)``; ``keys`` (+ ``scale``) or ``codes`` (+ ``cid``)."""
        n, p, d = x.shape
        if self.name == "fp16":
            return {"keys": x.astype(np.float16)}
        if self.name == "int8":
            q, scale = quantize_int8(x)
            return {"keys": q, "scale": scale}
        flat = normalize(x).reshape(-1, d)
        if self.name == "sq4":
            return {"codes": self._sq().compute_codes(flat).reshape(n, p, -1)}
        if self.name == "pq2":
            return {"codes": self._pq_codes(flat).reshape(n, p, -1)}
        cid = self._assign(flat)
        residual = flat - self.state["centroids"].astype(np.float32)[cid]  # (N, d)
        if self.name in PQ_DSUB:
            return {"cid": cid.astype(np.uint16).reshape(n, p), "codes": self._pq_codes(residual).reshape(n, p, -1)}
        codes = (residual[:, :, None] > self.state["cutoffs"][None]).sum(-1).astype(np.uint8)  # (N, d)
        bits = ((codes[:, :, None] >> np.arange(self.bits)[::-1]) & 1).astype(np.uint8)  # (N, d, b), MSB first
        return {"cid": cid.astype(np.uint16).reshape(n, p), "codes": np.packbits(bits.reshape(len(flat), -1),
                                                                                 axis=1).reshape(n, p, -1)}

    def decode(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """Float32 vectors ``(n, L_p, d)`` from stored arrays (normalised for the lossy codecs)."""
        if self.name in ("fp16", "int8"):
            keys = np.asarray(arrays["keys"], dtype=np.float32)
            return keys * np.asarray(arrays["scale"], dtype=np.float32)[..., None] if "scale" in arrays else keys
        codes = np.asarray(arrays["codes"])
        n, p, _ = codes.shape
        if self.name == "sq4":
            return self._sq().decode(codes.reshape(n * p, -1)).reshape(n, p, -1)
        if self.name == "pq2":
            return self._pq_decode(codes.reshape(n * p, -1)).reshape(n, p, -1)
        cid = np.asarray(arrays["cid"]).reshape(-1).astype(np.intp)
        d = self.state["centroids"].shape[1]
        if self.name in PQ_DSUB:
            decoded = self.state["centroids"][cid].astype(np.float32) + self._pq_decode(codes.reshape(n * p, -1))
            return decoded.reshape(n, p, d)
        bits = np.unpackbits(codes.reshape(n * p, -1), axis=1, count=d * self.bits).reshape(n * p, d, self.bits)
        code = (bits * (1 << np.arange(self.bits)[::-1]).astype(np.uint8)).sum(-1)  # (N, d)
        residual = np.take_along_axis(self.state["weights"][None], code[:, :, None].astype(np.intp), 2)[..., 0]
        return (self.state["centroids"][cid].astype(np.float32) + residual).reshape(n, p, d)

    def bytes_per_vector(self, d: int) -> float:
        if self.name in PQ_DSUB:
            return -(-d // PQ_DSUB[self.name]) + (0 if self.name == "pq2" else 2)  # one byte per sub-vector
        return {"fp16": 2 * d, "int8": d + 2, "sq4": d / 2}.get(self.name, 2 + self.bits * d / 8)

    def _pq_codes(self, flat: np.ndarray) -> np.ndarray:
        """The nearest sub-centroid of every sub-vector ``(N, M)`` uint8 (faiss ``ProductQuantizer``)."""
        import faiss

        book = self.state["pq"]  # (M, K, d' / M), d' = d padded to a multiple of the sub-vector size
        m, _, dsub = book.shape
        pq = faiss.ProductQuantizer(m * dsub, m, 8)
        faiss.copy_array_to_vector(book.astype(np.float32).ravel(), pq.centroids)
        return pq.compute_codes(_pad(flat, m * dsub))

    def _pq_decode(self, codes: np.ndarray) -> np.ndarray:
        """Sub-vectors looked up in the codebooks ``(N, d)`` float32 (NumPy; faiss is not needed to decode)."""
        book = self.state["pq"]  # (M, K, d' / M)
        d = self.state["centroids"].shape[1] if "centroids" in self.state else int(self.state["dim"])
        return book[np.arange(book.shape[0]), codes.astype(np.intp)].reshape(len(codes), -1)[:, :d].astype(np.float32)

    def _sq(self):
        import faiss

        sq = faiss.ScalarQuantizer(len(self.state["trained"]) // 2, faiss.ScalarQuantizer.QT_4bit)
        faiss.copy_array_to_vector(self.state["trained"].astype(np.float32), sq.trained)
        return sq

    def _assign(self, flat: np.ndarray) -> np.ndarray:
        import faiss

        index = faiss.IndexFlatIP(flat.shape[1])  # unit vectors: nearest centroid = largest inner product
        index.add(self.state["centroids"].astype(np.float32))
        return np.concatenate([index.search(flat[s : s + 65536], 1)[1][:, 0] for s in range(0, len(flat), 65536)])

    def save(self, path: Path) -> None:
        np.savez(path, name=np.array(self.name), **self.state)


def fit(name: str, sample: np.ndarray, centroids: int = 4096, seed: int = 0) -> Codec:
    """Train a codec on sample vectors ``(N, d)`` (raw pooled chunk vectors).

    Parameters
    ----------
    centroids : k-means centroids of the residual codecs (capped at N / 8).
    """
    if name not in CODECS:
        raise CodecError(f"unknown codec {name!r}; use one of {', '.join(CODECS)}")
    if name in ("fp16", "int8"):
        return Codec(name)
    import faiss

    flat = normalize(sample)
    d = flat.shape[1]
    if name == "sq4":  # faiss's RS_quantiles range (0.1–99.9 percentile per dimension), computed here because
        # faiss's own training gave different ranges for the same vectors after other work in the process
        s, o = np.sort(flat, axis=0), int(0.001 * len(flat))  # (N, d)
        return Codec(name, {"trained": np.concatenate([s[o], s[len(flat) - 1 - o] - s[o]]).astype(np.float32)})
    if name == "pq2":
        return Codec(name, _fit_pq(flat, PQ_DSUB[name], seed) | {"dim": np.array(d)})
    k = int(max(1, min(centroids, len(flat) // 8)))
    km = faiss.Kmeans(d, k, niter=20, seed=seed, spherical=True, max_points_per_centroid=64, verbose=False)
    km.train(flat)
    codec = Codec(name, {"centroids": km.centroids.astype(np.float16)})
    residual = flat - codec.state["centroids"].astype(np.float32)[codec._assign(flat)]  # (N, d)
    if name in PQ_DSUB:
        codec.state |= _fit_pq(residual, PQ_DSUB[name], seed)
        return codec
    buckets = 1 << codec.bits
    codec.state["cutoffs"] = np.quantile(residual, np.arange(1, buckets) / buckets, axis=0).T.astype(np.float32)
    codec.state["weights"] = np.quantile(residual, (np.arange(buckets) + 0.5) / buckets, axis=0).T.astype(np.float32)
    codec.state["range"] = np.stack([residual.min(0), residual.max(0)], 1).astype(np.float32)  # (d, 2)
    return codec


def _pad(flat: np.ndarray, width: int) -> np.ndarray:
    """``(N, d)`` float32, zero-padded on the right to ``(N, width)``, contiguous (faiss's input)."""
    out = np.zeros((len(flat), width), dtype=np.float32)
    out[:, : flat.shape[1]] = flat
    return out


def _fit_pq(flat: np.ndarray, dsub: int, seed: int) -> dict[str, np.ndarray]:
    """Product-quantiser codebooks ``pq`` ``(d' / dsub, 256, dsub)`` trained by faiss (k-means per
    sub-space; d' = d padded to a multiple of ``dsub``; a sample under 256 vectors is repeated), and
    ``max_err``, the largest per-component error on the vectors it was fitted on (its stated bound)."""
    import faiss

    n, d = flat.shape
    m = -(-d // dsub)  # sub-vectors
    x = _pad(flat, m * dsub)  # (N, d')
    pq = faiss.ProductQuantizer(m * dsub, m, 8)
    pq.cp.seed, pq.cp.niter = seed, 25
    pq.train(np.resize(x, (max(n, 256), m * dsub)))
    book = faiss.vector_to_array(pq.centroids).reshape(m, 256, dsub)
    err = np.abs(pq.decode(pq.compute_codes(x)) - x).max()
    return {"pq": book.astype(np.float32), "max_err": np.array(err, dtype=np.float32)}


def load(path: Path) -> Codec:
    """A codec saved with :meth:`Codec.save`."""
    with np.load(path) as z:
        return Codec(str(z["name"]), {k: z[k] for k in z.files if k != "name"})


def error_bound(codec: Codec, x: np.ndarray) -> float:
    """The stated worst-case per-component error of ``codec`` on vectors ``x`` (as stored: raw for fp16/int8,
    normalised for the lossy codecs). For ``sq4``, components inside its 0.1–99.9 percentile range; for the
    residual codecs, residuals inside the range seen in training (each bucket decodes to its median, so
    the error is at most the distance from the median to the farther edge of the bucket)."""
    if codec.name == "fp16":
        return float(np.abs(x).max()) * 2.0 ** -11
    if codec.name == "int8":
        return float(np.abs(x).max(-1).max()) / 127.0 / 2 + 1e-3
    if codec.name in PQ_DSUB:
        return float(codec.state["max_err"]) + 1e-6
    if codec.name == "sq4":
        t = codec.state["trained"]
        return float(t[len(t) // 2 :].max()) / 15 / 2 + 1e-6  # half a step of the widest dimension
    w, c, r = codec.state["weights"], codec.state["cutoffs"], codec.state["range"]
    edges = np.concatenate([r[:, :1], c, r[:, 1:]], 1)  # (d, B + 1)
    return float(np.maximum(w - edges[:, :-1], edges[:, 1:] - w).max()) + 1e-6
