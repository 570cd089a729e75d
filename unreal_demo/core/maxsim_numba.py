"""Eq. 4 on a CPU at the hardware's limit: one compiled MaxSim kernel over the keys as stored (fp16, int8, fp32).

:func:`maxsim.maxsim <unreal_demo.core.maxsim.maxsim>` calls :func:`scan` block by block (``path="numba"``).
For each chunk the kernel loads every stored key vector once, converts it to fp32 in registers (``vcvtph2ps``
for fp16 via an LLVM ``fpext``, a sign extension for int8) and multiplies it with **four** query vectors at
a time (four independent fp32 accumulators, so one key load feeds four FMAs), scales by the vector's weight
(1/‖k‖ of a normalised scan, or an int8 store's scale), keeps the max over L_p and sums over G. Nothing is
rounded on the query side: the result is the fp32 MaxSim of the stored keys, within summation-order rounding
of :func:`maxsim.maxsim_reference <unreal_demo.core.maxsim.maxsim_reference>`, so an index scan needs no
re-scoring. Measured against the numkong and torch paths in ``benchmarks/maxsim.py``.

Compiled by Numba (LLVM) for the machine it runs on (AVX2, AVX-512, NEON: whatever LLVM targets), cached
on disk after the first call (~1.3 s). Import-guarded: without ``numba`` this module does not import and the
scan runs through numkong or torch (:mod:`cpu` decides). The kernel releases the GIL, so the caller's worker
threads scan blocks in parallel.

Example
-------
>>> q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])                       # (B=1, G=2, d=2)
>>> k = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 2.0], [0.0, 0.0]]]).half()  # (M=2, L_p=2, d=2)
>>> out = torch.zeros(1, 2)
>>> scan(k, pad_queries(q), None, out, 0)
>>> out
tensor([[1.5000, 2.0000]])
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

STEP = 4  # query vectors per accumulator set in the kernel: G is padded to a multiple of this with zero vectors
_FLAGS = {"reassoc", "contract", "nsz"}  # lets LLVM vectorise the dot products; keeps inf / nan semantics


@intrinsic
def _half_to_float(typingctx, bits):
    """fp16 bits (uint16) → fp32, as one LLVM ``fpext`` (``vcvtph2ps`` on x86 with F16C)."""
    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


def _load(x):  # replaced in compiled code by the overload below
    raise NotImplementedError


@overload(_load)
def _load_impl(x):
    if x == types.uint16:  # fp16 keys, viewed as their bits
        return lambda x: _half_to_float(x)
    return lambda x: np.float32(x)  # int8 or fp32 keys


@numba.njit(nogil=True, fastmath=_FLAGS, cache=True, boundscheck=False)
def _scan(k, q, w, out, start):  # pragma: no cover - compiled
    """k (m, L_p, d) stored keys · q (B, G4, d) fp32, G4 % 4 == 0 · w (m, L_p) fp32 or (0, 0) · out (B, M)."""
    m, n_pool, d = k.shape
    weighted = w.shape[0] > 0
    for c in range(m):
        for b in range(q.shape[0]):
            total = np.float32(0.0)
            for g in range(0, q.shape[1], 4):
                m0 = m1 = m2 = m3 = np.float32(-np.inf)
                for p in range(n_pool):
                    a0 = a1 = a2 = a3 = np.float32(0.0)
                    for j in range(d):
                        x = _load(k[c, p, j])
                        a0 += x * q[b, g, j]
                        a1 += x * q[b, g + 1, j]
                        a2 += x * q[b, g + 2, j]
                        a3 += x * q[b, g + 3, j]
                    if weighted:
                        s = w[c, p]
                        a0, a1, a2, a3 = a0 * s, a1 * s, a2 * s, a3 * s
                    m0, m1, m2, m3 = max(m0, a0), max(m1, a1), max(m2, a2), max(m3, a3)
                total += (m0 + m1) + (m2 + m3)
            out[b, start + c] = total


def pad_queries(q: torch.Tensor) -> np.ndarray:
    """``(B, G, d)`` query vectors as fp32 ``(B, ⌈G/4⌉·4, d)``, padded with zero vectors (each adds
    max_p 0 = 0 to a score)."""
    b, g, d = q.shape
    out = np.zeros((b, -(-g // STEP) * STEP, d), np.float32)
    out[:, :g] = q.detach().float().cpu().numpy()
    return out


def scan(k: torch.Tensor, q4: np.ndarray, weight: torch.Tensor | None, out: torch.Tensor, start: int) -> None:
    """Write MaxSim scores of chunks ``k`` into ``out[:, start : start + len(k)]`` (Eq. 4).

    Parameters
    ----------
    k : ``(m, L_p, d)`` keys, float16, int8 or float32, contiguous (a block of a store; not copied).
    q4 : ``(B, G4, d)`` fp32 query vectors from :func:`pad_queries`.
    weight : ``(m, L_p)`` per-vector factor applied to each dot product before the max (1/‖k‖ of a
        normalised scan, or an int8 store's scale), or None.
    out : ``(B, M)`` float32 CPU tensor, written in place.
    start : column of ``out`` for the block's first chunk.
    """
    keys = k.contiguous().numpy()
    keys = keys.view(np.uint16) if keys.dtype == np.float16 else keys
    w = (weight.float().contiguous().numpy() if weight is not None else np.zeros((0, 0), np.float32))
    _scan(keys, q4, w, out.numpy(), start)
