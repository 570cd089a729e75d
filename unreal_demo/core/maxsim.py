"""Eq. 4 — MaxSim late interaction: s_i(x) = Σ_g max_p ⟨q_g, k_{i,p}⟩.

Exact implementations: :func:`maxsim_reference` (one einsum, for tests and
small inputs) and :func:`maxsim` (blocked over chunks, so the similarity tensor
never exceeds one block, with fp16 storage converted block by block). On CUDA
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

import torch


def maxsim_reference(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scores ``(B, M)`` from queries ``(B, G, d)`` and chunks ``(M, L_p, d)``; full similarity tensor."""
    sim = torch.einsum("bgd,mpd->bmgp", q.float(), k.float())  # (B, M, G, L_p)
    return sim.max(-1).values.sum(-1)


def maxsim(q: torch.Tensor, k: torch.Tensor, block: int = 256, normalize: bool = False,
           scale: torch.Tensor | None = None, inv_norm: torch.Tensor | None = None) -> torch.Tensor:
    """Exact MaxSim scores ``(B, M)``, computed ``block`` chunks at a time.

    Parameters
    ----------
    q : ``(B, G, d)`` or ``(G, d)`` query vectors.
    k : ``(M, L_p, d)`` pooled chunk vectors, any float dtype or int8 (converted per block, so a
        memory-mapped fp16/int8 store is read once and its fp32 copy of one block stays in cache).
    block : chunks per matmul.
    normalize : score against L2-normalised chunk vectors. Since ⟨q, k/‖k‖⟩ = ⟨q, k⟩/‖k‖, the scan scales
        the (B, G, m_b, L_p) similarities by 1/‖k‖ instead of rewriting the (m_b, L_p, d) block; for an
        int8 store the per-vector scale cancels.
    scale : ``(M, L_p)`` per-vector scales of an int8 store (``k ≈ k_int8 · scale``).
    inv_norm : ``(M, L_p)`` precomputed 1/‖k‖ of the vectors as stored (used when ``normalize``;
        computed per block otherwise).

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
    b, g, d = q.shape
    m, p, _ = k.shape
    qf = q.float().reshape(b * g, d).to(k.device)  # (B·G, d)
    out = torch.empty(b, m, device=k.device)
    for s in range(0, m, block):
        kb = k[s : s + block].float()  # (m_b, L_p, d)
        sim = (qf @ kb.reshape(-1, d).T).view(b, g, -1, p)  # (B, G, m_b, L_p)
        if normalize:
            sim = sim * (inv_norm[s : s + block].float() if inv_norm is not None else
                         1.0 / torch.linalg.vector_norm(kb, dim=-1).clamp_min(1e-12))  # (m_b, L_p)
        elif scale is not None:
            sim = sim * scale[s : s + block].float()
        out[:, s : s + block] = sim.amax(-1).sum(1)
    return out[0] if single else out


def inverse_norms(k: torch.Tensor, block: int = 4096) -> torch.Tensor:
    """``(M, L_p)`` 1/‖k‖ of every stored vector (fp16/int8 converted a block at a time), for :func:`maxsim`."""
    return torch.cat([1.0 / torch.linalg.vector_norm(k[s : s + block].float(), dim=-1).clamp_min(1e-12)
                      for s in range(0, len(k), block)]) if len(k) else torch.zeros(0, k.shape[1])


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
