"""Eq. 4: MaxSim against a plain Python loop."""

from __future__ import annotations

import torch

from unreal_demo.maxsim import maxsim, maxsim_reference


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


def test_sparse_token_matching_against_a_loop():
    """Sparse scores equal a direct computation: per query token, top-k over all stored tokens."""
    from unreal_demo.sparse import sparse_scores

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
