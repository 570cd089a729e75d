"""Eq. 4: MaxSim against a plain Python loop; every CPU scan path against the reference."""

from __future__ import annotations

import pytest
import torch

from unreal_demo.core import maxsim as maxsim_module
from unreal_demo.core.maxsim import inverse_norms, maxsim, maxsim_reference, scan_error_bound


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
        from unreal_demo.core.codec import quantize_int8

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


class TestScanPaths:
    """The numkong path (fp16 keys as stored, query rounded to fp16) stays within its stated bound of the
    fp32 reference; the numba path equals it within fp32 rounding for fp16, int8 and fp32 keys; threads over
    blocks change nothing; without the package (or for int8 keys on numkong) the torch path runs."""

    def test_numkong_within_its_bound(self):
        pytest.importorskip("numkong")
        torch.manual_seed(4)
        q, k = torch.randn(3, 4, 40), (torch.randn(777, 7, 40) * torch.rand(777, 7, 1) * 3).half()
        for normalize in (False, True):
            keys = torch.nn.functional.normalize(k.float(), dim=-1) if normalize else k.float()
            ref = maxsim_reference(q, keys)
            got = maxsim(q, k, 100, normalize, path="numkong", threads=2)  # ragged last block
            norm = 1.0 if normalize else float(keys.norm(dim=-1).max())
            bound = scan_error_bound(q, norm, "numkong", torch.float16)  # (B,)
            assert got.dtype == torch.float32 and got.shape == ref.shape
            assert bool(((got - ref).abs() <= bound[:, None]).all())
            assert 0 < float(bound.max()) < 2e-3 * float(ref.abs().max())  # q is rounded, so the bound is not 0

    def test_fp32_keys_through_numkong_are_exact(self):
        pytest.importorskip("numkong")
        torch.manual_seed(5)
        q, k = torch.randn(2, 4, 24), torch.randn(300, 7, 24)
        assert torch.allclose(maxsim(q, k, 64, path="numkong"), maxsim_reference(q, k), atol=1e-4)

    def test_threads_over_blocks_equal_one_thread(self):
        torch.manual_seed(6)
        q, k = torch.randn(2, 4, 16), torch.randn(1001, 5, 16).half()
        assert torch.equal(maxsim(q, k, 64, True, threads=3), maxsim(q, k, 64, True))

    def test_without_numkong_or_for_int8_the_torch_path_runs(self, monkeypatch):
        from unreal_demo.core.codec import quantize_int8

        torch.manual_seed(7)
        q, k = torch.randn(2, 4, 16), torch.randn(200, 7, 16)
        qi, scale = (torch.from_numpy(a) for a in quantize_int8(k.numpy()))
        assert torch.equal(maxsim(q, qi, 64, scale=scale, path="numkong"), maxsim(q, qi, 64, scale=scale))
        monkeypatch.setattr(maxsim_module, "_numkong", lambda: None)  # a machine without the package
        assert torch.equal(maxsim(q, k.half(), 64, True, path="numkong"), maxsim(q, k.half(), 64, True))

    @pytest.mark.parametrize("dtype", [torch.float16, torch.int8, torch.float32])
    @pytest.mark.parametrize("groups", [1, 4, 5])  # G padded to a multiple of 4 with zero vectors
    def test_numba_equals_the_reference(self, dtype, groups):
        """The compiled kernel over the keys as stored: fp32 sums, no query rounding, so within fp32 rounding
        of the reference over the same keys (int8 with its per-vector scale, or normalised)."""
        pytest.importorskip("numba")
        from unreal_demo.core.codec import quantize_int8

        torch.manual_seed(8)
        q, kf = torch.randn(3, groups, 40), torch.randn(777, 7, 40) * torch.rand(777, 7, 1) * 3
        scale = None
        if dtype == torch.int8:
            k, scale = (torch.from_numpy(a) for a in quantize_int8(kf.numpy()))
            stored = k.float() * scale.float()[..., None]
        else:
            k = kf.to(dtype)
            stored = k.float()
        for normalize in (False, True):
            keys = torch.nn.functional.normalize(stored, dim=-1) if normalize else stored
            ref = maxsim_reference(q, keys)
            got = maxsim(q, k, 100, normalize, scale, path="numba", threads=2)  # ragged last block
            assert got.dtype == torch.float32 and got.shape == ref.shape == (3, 777)
            assert torch.allclose(got, ref, rtol=1e-5, atol=1e-4 * float(ref.abs().max()))
            assert torch.equal(got.topk(10).indices, ref.topk(10).indices)

    def test_numba_on_a_single_query_and_without_the_package(self, monkeypatch):
        pytest.importorskip("numba")
        torch.manual_seed(9)
        q, k = torch.randn(4, 16), torch.randn(50, 3, 16).half()  # (G, d): one query
        assert maxsim(q, k, path="numba").shape == (50,)
        assert torch.allclose(maxsim(q, k, path="numba"), maxsim_reference(q[None], k.float())[0], atol=1e-4)
        assert maxsim(q, k[:0], path="numba").shape == (0,)
        qg = q.clone().requires_grad_()
        maxsim(qg, k, path="numba").sum().backward()  # a query that needs gradients goes through torch
        assert qg.grad is not None and qg.grad.abs().sum() > 0
        monkeypatch.setattr(maxsim_module, "_numba", lambda: None)  # a machine without the package
        assert torch.equal(maxsim(q, k, 16, path="numba"), maxsim(q, k, 16))


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
