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
