"""Eq. 4: MaxSim against a plain Python loop."""

from __future__ import annotations

import torch

from unreal_demo.core.maxsim import inverse_norms, maxsim, maxsim_reference


def loop_maxsim(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(q.shape[0], k.shape[0])
    for b in range(q.shape[0]):
        for i in range(k.shape[0]):
            out[b, i] = sum(max(float(q[b, g] @ k[i, p]) for p in range(k.shape[1])) for g in range(q.shape[1]))
    return out


class TestMaxSim:
    def test_reference_equals_loop(self):
        torch.manual_seed(0)
        q, k = torch.randn(2, 4, 8), torch.randn(13, 7, 8)
        assert torch.allclose(maxsim_reference(q, k), loop_maxsim(q, k), atol=1e-4)

    def test_blocked_equals_reference_ragged(self):
        torch.manual_seed(1)
        q, k = torch.randn(3, 4, 16), torch.randn(1001, 5, 16)
        assert torch.allclose(maxsim(q, k, block=128), maxsim_reference(q, k), atol=1e-4)

    def test_fp16_storage(self):
        torch.manual_seed(2)
        q, k = torch.randn(4, 32), torch.randn(50, 7, 32).half()
        got = maxsim(q, k, block=16)
        assert got.shape == (50,) and got.dtype == torch.float32
        assert torch.allclose(got, maxsim_reference(q[None], k.float())[0], atol=1e-3)

    def test_normalized_scan_scales_similarities_not_keys(self):
        """normalize=True (per block, or with precomputed 1/‖k‖) equals scoring L2-normalised keys, for fp16
        and for int8 (whose scale cancels)."""
        from unreal_demo.store.codec import quantize_int8

        torch.manual_seed(3)
        q, k = torch.randn(2, 4, 24), torch.randn(300, 7, 24) * torch.rand(300, 7, 1) * 5
        ref = maxsim_reference(q, torch.nn.functional.normalize(k, dim=-1))
        kh = k.half()
        assert torch.allclose(maxsim(q, kh, 64, normalize=True), ref, atol=2e-3)
        assert torch.allclose(maxsim(q, kh, 64, normalize=True, inv_norm=inverse_norms(kh, 50)), ref, atol=2e-3)
        qi, scale = (torch.from_numpy(a) for a in quantize_int8(k.numpy()))
        ref_i = maxsim_reference(q, torch.nn.functional.normalize(qi.float() * scale.float()[..., None], dim=-1))
        assert torch.allclose(maxsim(q, qi, 64, normalize=True, scale=scale), ref_i, atol=1e-4)
        assert torch.allclose(maxsim(q, qi, 64, True, scale, inverse_norms(qi)), ref_i, atol=1e-4)
        assert torch.allclose(ref_i, ref, atol=0.1)  # int8 stays close to the fp32 scores


def test_sparse_token_matching_against_a_loop():
    """Sparse scores equal a direct computation: per query token, top-k over all stored tokens."""
    from unreal_demo.retrieval.sparse import sparse_scores

    torch.manual_seed(3)
    lengths = torch.tensor([3, 1, 5, 2])
    store = torch.nn.functional.normalize(torch.randn(int(lengths.sum()), 8), dim=-1).half()
    owner = torch.repeat_interleave(torch.arange(4), lengths)
    q = torch.nn.functional.normalize(torch.randn(3, 8), dim=-1)
    k = 4
    sims = q @ store.float().T  # (T_q, N)
    expected = torch.zeros(4)
    for t in range(3):
        v, i = torch.topk(sims[t], k)
        for m in range(4):
            hits = [float(v[j]) for j in range(k) if owner[i[j]] == m]
            expected[m] += max(hits) if hits else float(v[-1])
    got = sparse_scores([q], [(store[:4], lengths[:2]), (store[4:], lengths[2:])], k=k, block=3)
    assert torch.allclose(got[0], expected / 3, atol=1e-5)
