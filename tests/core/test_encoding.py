"""Eq. 1: truncated encoding equals the full model's hidden states; pooling ignores padding."""

from __future__ import annotations

import pytest
import torch

from unreal_demo.core.encoding import (
    encode_chunks,
    group_weights,
    pool_groups,
    run_blocks,
    token_batches,
    tokenize_chunks,
)


class TestPooling:
    def test_shape_and_contiguous_groups(self):
        w = group_weights(torch.tensor([6, 3]), 3, 8)  # (B=2, G=3, W=8)
        assert w.shape == (2, 3, 8)
        assert torch.allclose(w[0, 0, :2], torch.tensor([0.5, 0.5]))
        assert w[0, :, 6:].abs().sum() == 0 and w[1, :, 3:].abs().sum() == 0  # padding ignored
        assert torch.allclose(w.sum(-1), torch.ones(2, 3))

    def test_shorter_than_groups(self):
        h = torch.arange(6.0).view(1, 3, 2)  # (B=1, T=3, d=2) but only 2 real tokens
        out = pool_groups(h, torch.tensor([2]), 4)  # 4 groups from 2 tokens: repeat
        assert out.shape == (1, 4, 2)
        assert torch.equal(out[0, 0], h[0, 0]) and torch.equal(out[0, -1], h[0, 1])

    def test_padding_does_not_change_pooling(self):
        h = torch.randn(1, 5, 4)
        padded = torch.cat([h, torch.randn(1, 3, 4) * 100], 1)
        assert torch.allclose(pool_groups(h, torch.tensor([5]), 2), pool_groups(padded, torch.tensor([5]), 2))


def test_token_batches_respect_budget():
    lengths = [5, 100, 7, 50, 51, 3]
    batches = token_batches(lengths, token_budget=110)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * max(lengths[i] for i in b) <= 110 or len(b) == 1 for b in batches)


class TestTruncatedEncoder:
    def test_equals_output_hidden_states(self, tiny):
        ids = torch.tensor([tokenize_chunks(tiny, ["Paris is the capital of France."], 64)[0]])
        full = tiny.base(input_ids=ids, output_hidden_states=True).hidden_states
        for layer in (1, 2, 3):
            got = run_blocks(tiny, [layer], input_ids=ids)[layer]
            assert torch.allclose(got, full[layer], atol=1e-5)

    def test_blocks_above_lc_never_run(self, tiny):
        calls = []
        handle = tiny.blocks[2].register_forward_hook(lambda *a: calls.append(1))
        try:
            encode_chunks(tiny, ["One sentence.", "Another one here."], layer=2, n_pool=3)
        finally:
            handle.remove()
        assert calls == []

    def test_batched_equals_alone(self, tiny):
        texts = ["Short.", "A much longer chunk of text that needs padding in a batch with the short one."]
        together = encode_chunks(tiny, texts, layer=3, n_pool=7)
        alone = torch.cat([encode_chunks(tiny, [t], layer=3, n_pool=7) for t in texts])
        assert together.shape == (2, 7, 32)
        assert torch.allclose(together, alone, atol=1e-5)

    def test_layer_out_of_range(self, tiny):
        with pytest.raises(ValueError):
            run_blocks(tiny, [9], input_ids=torch.tensor([[1, 2]]))


def test_warm_cache_fills_every_setting_in_one_pass(tiny, monkeypatch, tmp_path):
    """After warm_cache, cached_encode for each (ℓc, L_p) reads what encode_chunks computes (fp16 storage)."""
    from unreal_demo.core.encoding import cached_encode, encode_chunks, warm_cache

    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
    texts = [f"Sentence {i} about cats and dogs. " * (1 + i % 4) for i in range(11)]
    settings = [(2, 3), (3, 1), (3, 3)]
    warm_cache(tiny, texts, settings, max_tokens=64, part_size=4)
    calls = []
    monkeypatch.setattr("unreal_demo.core.encoding.encode_chunks", lambda *a, **k: calls.append(a))
    cached = {st: cached_encode(tiny, texts, st[0], st[1], 64, part_size=4) for st in settings}
    assert not calls  # every part came from the cache
    for (layer, n_pool), keys in cached.items():
        direct = encode_chunks(tiny, texts, layer, n_pool, 64)
        torch.testing.assert_close(keys, direct.half().float(), atol=1e-3, rtol=0)


def test_caches_are_keyed_by_dtype_too(tiny, tmp_path, monkeypatch):
    import copy
    import dataclasses

    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
    half = dataclasses.replace(tiny, model=copy.deepcopy(tiny.model).to(torch.bfloat16))
    assert tiny.numerics == tiny.revision  # fp32 keys are what they always were
    assert half.numerics == f"{tiny.revision}:bfloat16"
    from unreal_demo.core.encoding import cache_folder

    assert cache_folder(tiny, ["a"], 2, 7, 64) != cache_folder(half, ["a"], 2, 7, 64)
