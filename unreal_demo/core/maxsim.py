"""Eq. 4 — MaxSim late interaction: s_i(x) = Σ_g max_p ⟨q_g, k_{i,p}⟩.

Exact implementations: :func:`maxsim_reference` (one einsum, for tests and
small inputs) and :func:`maxsim` (blocked over chunks, so the similarity tensor
never exceeds one block, with fp16 storage converted block by block; threads over
blocks). On a CPU :func:`maxsim` has three paths (:mod:`cpu` picks one): ``numba`` (one compiled
kernel over the keys as stored, fp32 accumulation, :mod:`maxsim_numba`), ``torch``
(each block converted to fp32, one GEMM) and ``numkong`` (SIMD dot products over the
fp16 keys as stored, the query rounded to fp16; :func:`scan_error_bound` bounds the
difference, which the index's top-k re-scoring removes). On CUDA
tensors of a float dtype :func:`maxsim` runs the fused Triton kernel of :mod:`unreal_demo.maxsim_triton`
(plain or normalised scans) when Triton is installed (import-guarded: CPU machines never need it). The cost
is 2·d·G·L_p FLOPs per chunk.

Example
-------
>>> q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])          # (B=1, G=2, d=2)
>>> k = torch.tensor([[[1.0, 0.0], [0.5, 0.5]],             # chunk 0
...                   [[0.0, 2.0], [0.0, 0.0]]])            # chunk 1; (M=2, L_p=2, d=2)
>>> maxsim_reference(q, k)
tensor([[1.5000, 2.0000]])
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch


def maxsim_reference(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scores ``(B, M)`` from queries ``(B, G, d)`` and chunks ``(M, L_p, d)``; full similarity tensor."""
    sim = torch.einsum("bgd,mpd->bmgp", q.float(), k.float())  # (B, M, G, L_p)
    return sim.max(-1).values.sum(-1)


BLOCKS = {"torch": 128, "numkong": 1024, "numba": 2048}  # chunks per block of each scan path (benchmarks/maxsim.py)
_POOLS: dict[int, ThreadPoolExecutor] = {}


def maxsim(q: torch.Tensor, k: torch.Tensor, block: int | None = None, normalize: bool = False,
           scale: torch.Tensor | None = None, inv_norm: torch.Tensor | None = None, path: str = "torch",
           threads: int = 1) -> torch.Tensor:
    """MaxSim scores ``(B, M)`` (Eq. 4), computed ``block`` chunks at a time: exact in fp32 on the torch path,
    within :func:`scan_error_bound` of it on the numkong path.

    Parameters
    ----------
    q : ``(B, G, d)`` or ``(G, d)`` query vectors.
    k : ``(M, L_p, d)`` pooled chunk vectors, any float dtype or int8 (converted per block, so a
        memory-mapped fp16/int8 store is read once and its fp32 copy of one block stays in cache).
    block : chunks per matmul (default :data:`BLOCKS` of the path).
    normalize : score against L2-normalised chunk vectors. Since ⟨q, k/‖k‖⟩ = ⟨q, k⟩/‖k‖, the scan scales
        the (B, G, m_b, L_p) similarities by 1/‖k‖ instead of rewriting the (m_b, L_p, d) block; for an
        int8 store the per-vector scale cancels.
    scale : ``(M, L_p)`` per-vector scales of an int8 store (``k ≈ k_int8 · scale``).
    inv_norm : ``(M, L_p)`` precomputed 1/‖k‖ of the vectors as stored (used when ``normalize``;
        computed per block otherwise).
    path : ``"numba"`` (fp16/int8/fp32 keys on CPU, with ``numba`` installed; else the torch path): one
        compiled kernel reads each stored key once for four query vectors and accumulates in fp32
        (:mod:`maxsim_numba`), exact as the torch path is. ``"torch"``: each block converted to fp32, one
        GEMM ``(B·G, d) × (d, m_b·L_p)``. ``"numkong"``
        (fp16/fp32 keys without ``scale``, on CPU; else the torch path): numkong's runtime-dispatched dot
        kernels read the stored keys as they are, against the query rounded to the keys' dtype — for fp16
        keys each score is then off by at most :func:`scan_error_bound`, which :meth:`Index.maxsim_topk
        <unreal_demo.store.index.Index.maxsim_topk>` removes by re-scoring its candidates in fp32.
    threads : worker threads over blocks (torch ops and numkong release the GIL).

    Returns
    -------
    Tensor ``(B, M)`` (or ``(M,)`` for a 2-D query), float32.
    """
    single = q.dim() == 2
    q = q.unsqueeze(0) if single else q
    if k.is_cuda and k.is_floating_point() and scale is None and _triton() is not None:
        norms = (inv_norm if inv_norm is not None else inverse_norms(k)) if normalize else None
        out = _triton().maxsim_scores(q.to(k.device), k, norms)
        return out[0] if single else out
    if path == "numba" and (k.is_cuda or k.dtype not in (torch.float16, torch.float32, torch.int8)
                            or q.requires_grad or _numba() is None):  # the kernel has no backward
        path = "torch"
    if path == "numkong" and (scale is not None or k.is_cuda or k.dtype not in (torch.float16, torch.float32)
                              or _numkong() is None):
        path = "torch"
    block = block or BLOCKS[path]
    if path != "torch" and normalize and inv_norm is None:  # the torch path computes 1/‖k‖ per block
        inv_norm = inverse_norms(k)
    out = torch.empty(q.shape[0], k.shape[0], device=k.device)
    if path == "numba":
        kernel = _numba()
        q4, weight = kernel.pad_queries(q), inv_norm if normalize else scale

        def one(s: int) -> None:
            e = min(s + block, k.shape[0])
            kernel.scan(k[s:e], q4, None if weight is None else weight[s:e], out, s)
    else:
        run = (_numkong_blocks(q, k, normalize, inv_norm) if path == "numkong"
               else _torch_blocks(q, k, normalize, scale, inv_norm))

        def one(s: int) -> None:
            out[:, s : s + block] = run(s, min(s + block, k.shape[0]))

    starts = range(0, k.shape[0], block)

    if threads > 1 and len(starts) > 1:
        pool = _POOLS.get(threads) or _POOLS.setdefault(threads, ThreadPoolExecutor(threads))
        list(pool.map(one, starts))
    else:
        for s in starts:
            one(s)
    return out[0] if single else out


def _torch_blocks(q: torch.Tensor, k: torch.Tensor, normalize: bool, scale: torch.Tensor | None,
                  inv_norm: torch.Tensor | None) -> Callable[[int, int], torch.Tensor]:
    """Scores ``(B, e - s)`` of chunks ``s:e``: the block converted to fp32, one GEMM, max over L_p, sum over G."""
    b, g, d = q.shape
    p = k.shape[1]
    qf = q.float().reshape(b * g, d).to(k.device)  # (B·G, d)

    def run(s: int, e: int) -> torch.Tensor:
        kb = k[s:e].float()  # (m_b, L_p, d)
        sim = (qf @ kb.reshape(-1, d).T).view(b, g, -1, p)  # (B, G, m_b, L_p)
        if normalize:
            sim = sim * (inv_norm[s:e].float() if inv_norm is not None else
                         1.0 / torch.linalg.vector_norm(kb, dim=-1).clamp_min(1e-12))  # (m_b, L_p)
        elif scale is not None:
            sim = sim * scale[s:e].float()
        return sim.amax(-1).sum(1)

    return run


def _numkong_blocks(q: torch.Tensor, k: torch.Tensor, normalize: bool,
                    inv_norm: torch.Tensor | None) -> Callable[[int, int], torch.Tensor]:
    """Scores ``(B, e - s)`` of chunks ``s:e`` by numkong: the B·G query vectors are packed once in the keys'
    dtype, the block's ``(m_b·L_p, d)`` keys are read as stored (no fp32 copy), one ``dots_packed`` call."""
    nk = _numkong()
    b, g, d = q.shape
    p = k.shape[1]
    kind = "f16" if k.dtype == torch.float16 else "f32"
    packed = nk.dots_pack(q.reshape(b * g, d).to(k.dtype).contiguous().numpy(), dtype=kind)
    flat = k.contiguous().numpy().reshape(-1, d)  # (M·L_p, d), a view of the stored keys

    def run(s: int, e: int) -> torch.Tensor:
        sim = torch.from_numpy(np.asarray(nk.dots_packed(flat[s * p : e * p], packed)))  # (m_b·L_p, B·G) fp32
        sim = sim.view(e - s, p, b, g)  # (m_b, L_p, B, G)
        if normalize:
            sim = sim * inv_norm[s:e].float()[:, :, None, None]
        return sim.amax(1).sum(-1).T

    return run


def scan_error_bound(q: torch.Tensor, key_norm: float, path: str, key_dtype: torch.dtype) -> torch.Tensor:
    """``(B,)`` bound on |score of ``path`` − exact score| per query, for keys of norm ≤ ``key_norm``.

    The numkong path scores fp16 keys against q̃ = fp16(q): by Cauchy–Schwarz each max over L_p moves by at most
    ‖q̃_g − q_g‖·max‖k‖, so the sum over G (Eq. 4) by Σ_g ‖q̃_g − q_g‖·max‖k‖. Both paths accumulate in fp32
    (a dot of length d is within d·2⁻²⁴·‖q‖‖k‖ of exact); that is added for the two scans compared.
    """
    q = q.unsqueeze(0) if q.dim() == 2 else q
    qf = q.float()
    d = q.shape[-1]
    rounding = (qf - qf.to(key_dtype).float()).norm(dim=-1).sum(-1) if path == "numkong" else torch.zeros(len(q))
    accumulation = 2 * d * 2.0**-24 * qf.norm(dim=-1).sum(-1)
    return (rounding + accumulation) * key_norm


def inverse_norms(k: torch.Tensor, block: int = 4096) -> torch.Tensor:
    """``(M, L_p)`` 1/‖k‖ of every stored vector (fp16/int8 converted a block at a time), for :func:`maxsim`."""
    return torch.cat([1.0 / torch.linalg.vector_norm(k[s : s + block].float(), dim=-1).clamp_min(1e-12)
                      for s in range(0, len(k), block)]) if len(k) else torch.zeros(0, k.shape[1])


@functools.cache
def _numkong():
    """The numkong module, or None where it is not installed (the scan then runs through torch)."""
    try:
        import numkong
    except ImportError:
        return None
    return numkong


@functools.cache
def _numba():
    """The compiled-kernel module (:mod:`maxsim_numba`), or None where ``numba`` is not installed."""
    try:
        from . import maxsim_numba
    except ImportError:
        return None
    return maxsim_numba


@functools.cache
def _triton():
    """The Triton kernel module, or None where Triton (or a GPU for it) is missing."""
    try:
        from . import maxsim_triton
    except ImportError:
        return None
    return maxsim_triton


def normalize_chunks(k: torch.Tensor) -> torch.Tensor:
    """L2-normalise each pooled vector (the chunk side of a head with ``normalize=True``)."""
    return torch.nn.functional.normalize(k.float(), dim=-1)
