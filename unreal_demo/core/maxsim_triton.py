"""Eq. 4 on a GPU: a fused Triton MaxSim kernel, s_i = Σ_g max_p ⟨q_g, k_{i,p}⟩ (optionally ⟨q_g, k_{i,p}⟩/‖k_{i,p}‖).

One program scores ``BLOCK_M`` chunks for a tile of up to ``QB`` queries: the tile's ``QB·G`` query
vectors are the columns of one ``(BLOCK_D, BLOCK_Q)`` operand, so each key block is read from memory
once per tile rather than once per query. For each pooled position p it forms the ``(BLOCK_M, BLOCK_Q)``
similarities with ``tl.dot`` over d in ``BLOCK_D`` slices (fp16/bf16 inputs, fp32 accumulation), keeps
the running max over p in registers, then sums each query's G columns and writes only the ``(B, M)``
scores: the ``(B, M, G, L_p)`` similarity tensor never exists. Any B, d, G and L_p (columns are padded
to 16 for ``tl.dot`` and masked). For a normalised scan (the shipped head, the index) each position's
similarities are scaled by a precomputed 1/‖k‖ before the max, as on the CPU path. The top-k is a
second pass (``torch.topk``) over the scores, which are ``G·L_p·d`` times smaller than the keys.

Import this module only where ``triton`` is installed; :func:`unreal_demo.maxsim.maxsim` does so
for CUDA tensors. With ``TRITON_INTERPRET=1`` the kernel runs on CPU tensors (how the tests check it
without a GPU).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_COLS = 64  # query vectors (QB·G) one program holds: (BLOCK_M, 64) fp32 accumulators fit in registers


@triton.jit
def _maxsim_kernel(q_ptr, k_ptr, n_ptr, out_ptr, M, B, G, D,
                   stride_qb, stride_qg, stride_km, stride_kp, stride_nm, stride_ob,
                   LP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, QB: tl.constexpr,
                   BLOCK_D: tl.constexpr, HAS_NORM: tl.constexpr):
    pid_m, pid_q = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) chunk ids
    cols = tl.arange(0, BLOCK_Q)  # (BLOCK_Q,) (query, group) pairs of this tile
    local = cols // G  # (BLOCK_Q,) query of each column within the tile
    qs = pid_q * QB + local  # (BLOCK_Q,) query ids
    valid = (local < QB) & (qs < B)
    best = tl.full((BLOCK_M, BLOCK_Q), float("-inf"), dtype=tl.float32)
    for p in range(LP):
        acc = tl.zeros((BLOCK_M, BLOCK_Q), dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            ds = d0 + tl.arange(0, BLOCK_D)
            k = tl.load(k_ptr + rows[:, None] * stride_km + p * stride_kp + ds[None, :],
                        mask=(rows[:, None] < M) & (ds[None, :] < D), other=0.0)  # (BLOCK_M, BLOCK_D)
            q = tl.load(q_ptr + qs[None, :] * stride_qb + (cols % G)[None, :] * stride_qg + ds[:, None],
                        mask=valid[None, :] & (ds[:, None] < D), other=0.0)  # (BLOCK_D, BLOCK_Q)
            acc += tl.dot(k, q.to(k.dtype), out_dtype=tl.float32)
        if HAS_NORM:
            w = tl.load(n_ptr + rows * stride_nm + p, mask=rows < M, other=0.0)  # (BLOCK_M,) 1/‖k_{i,p}‖
            acc = acc * w[:, None]
        best = tl.maximum(best, acc)
    for j in tl.static_range(QB):  # each query's score: the sum of its G columns
        score = tl.sum(tl.where((local == j)[None, :], best, 0.0), axis=1)  # (BLOCK_M,)
        b = pid_q * QB + j
        # the query test is broadcast over rows: Triton's interpreter refuses a scalar term in a store mask
        tl.store(out_ptr + b * stride_ob + rows, score, mask=(rows < M) & (rows * 0 + b < B))


def maxsim_scores(q: torch.Tensor, k: torch.Tensor, inv_norm: torch.Tensor | None = None, block_m: int = 64,
                  block_d: int = 64) -> torch.Tensor:
    """Exact MaxSim scores ``(B, M)`` (float32) from queries ``(B, G, d)`` and chunks ``(M, L_p, d)``.

    ``k`` stays in its storage dtype (fp16/bf16/fp32); ``q`` is cast to it inside the kernel.
    ``inv_norm`` ``(M, L_p)``: 1/‖k‖ per stored vector, to score against normalised chunk vectors.
    Up to ``MAX_COLS // G`` queries share one read of each key block.
    """
    b, g, d = q.shape
    m, lp, _ = k.shape
    q, k = q.contiguous(), k.contiguous()
    out = torch.empty(b, m, device=k.device, dtype=torch.float32)
    if m == 0 or b == 0:
        return out
    norm = out if inv_norm is None else inv_norm.to(device=k.device, dtype=torch.float32).contiguous()
    block_q = max(16, triton.next_power_of_2(min(b * g, max(MAX_COLS, g))))  # columns of the q operand
    qb = block_q // g  # queries per program
    grid = (triton.cdiv(m, block_m), triton.cdiv(b, qb))
    _maxsim_kernel[grid](q, k, norm, out, m, b, g, d, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                         norm.stride(0), out.stride(0), LP=lp, BLOCK_M=block_m, BLOCK_Q=block_q, QB=qb,
                         BLOCK_D=block_d, HAS_NORM=inv_norm is not None)
    return out
