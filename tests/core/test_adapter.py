"""The query adapter q′ = q + U Vᵀ q (rank r, or a full map W) and its training on cached query states."""

from __future__ import annotations

import pytest
import torch

from unreal_demo.core.head import HeadConfig, HeadError, QueryHead, untrained_head
from unreal_demo.core.maxsim import maxsim_reference, normalize_chunks
from unreal_demo.core.state_training import (
    StateSet,
    StateTrainConfig,
    cache_layer_groups,
    fit_states,
    recall,
    with_adapter,
)

QS, CTX = ["where is Paris?", "who wrote it?"], [["Paris is in France."], []]


def _randomise(head: QueryHead, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if name.startswith("adapter_"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


class TestAdapter:
    @pytest.mark.parametrize("rank", [4, 32])  # low rank, and the full d × d map (d = 32)
    def test_identity_at_initialisation_scores_as_no_adapter(self, tiny, rank):
        plain = untrained_head(tiny, n_ret=4, n_groups=2)
        adapted = with_adapter(plain, rank)
        assert torch.equal(adapted(tiny, QS, CTX), plain(tiny, QS, CTX))

    @pytest.mark.parametrize("rank", [4, 32])
    def test_adapter_equals_keys_mapped_by_its_transpose(self, tiny, rank):
        """⟨A q, k⟩ = ⟨q, Aᵀ k⟩: scoring with the adapter = scoring the keys mapped by Aᵀ, no key touched."""
        head = with_adapter(untrained_head(tiny, n_ret=4, n_groups=2, normalize=False), rank)
        _randomise(head)
        keys = torch.randn(5, 3, 32)  # (P, L_p, d)
        a = head.adapter_matrix()  # (d, d)
        plain = with_adapter(head, 0)
        with torch.no_grad():
            got = maxsim_reference(head(tiny, QS, CTX), keys)
            want = maxsim_reference(plain(tiny, QS, CTX), keys @ a)  # k ↦ Aᵀ k, row vectors: k @ A
        assert torch.allclose(got, want, atol=1e-4)

    def test_parameters_counted_and_bounded(self, tiny):
        head = untrained_head(tiny, n_ret=4, n_groups=2)
        assert with_adapter(head, 4).n_params() == head.n_params() + 2 * 4 * 32
        assert with_adapter(head, 32).n_params() == head.n_params() + 32 * 32
        with pytest.raises(HeadError, match="adapter rank"):
            with_adapter(head, 33)

    def test_round_trip_and_old_heads_load(self, tiny, tmp_path):
        head = with_adapter(untrained_head(tiny, n_ret=4, n_groups=2), 8)
        _randomise(head)
        head.save(tmp_path / "h")
        loaded = QueryHead.load(tmp_path / "h.json")
        assert torch.equal(loaded(tiny, QS, CTX), head(tiny, QS, CTX))
        old = untrained_head(tiny, n_ret=4, n_groups=2)  # a head file from before adapters: no adapter keys
        old.save(tmp_path / "old")
        assert not any(k.startswith("adapter_") for k in QueryHead.load(tmp_path / "old").state_dict())

    def test_layer_groups_reproduce_forward(self, tiny):
        head = with_adapter(untrained_head(tiny, n_ret=4, n_groups=2), 8)
        _randomise(head)
        with torch.no_grad():
            groups = head.layer_groups(tiny, QS, CTX)  # (B, |α|, G, d)
            assert groups.shape == (2, len(head.config.readout_layers), 2, 32)
            assert torch.allclose(head.from_layer_groups(groups), head(tiny, QS, CTX), atol=1e-5)


def test_cache_resumes_from_whole_parts(tiny, tmp_path):
    head = untrained_head(tiny, n_ret=4, n_groups=2)
    qs, ctx = [f"question {i}?" for i in range(5)], [[] for _ in range(5)]
    first = cache_layer_groups(head, tiny, qs, ctx, tmp_path, batch=2, part=2)
    (part,) = [p for p in tmp_path.rglob("part_00002.pt")]
    part.unlink()  # as if killed before the last part
    again = cache_layer_groups(head, tiny, qs, ctx, tmp_path, batch=2, part=2)
    assert first.shape == (5, len(head.config.readout_layers), 2, 32) and first.dtype == torch.float16
    assert torch.equal(first, again)


def test_fit_states_learns_a_map_the_head_lacks():
    """Keys are the queries rotated: only an adapter can align them, and training finds it (dev R@1 rises)."""
    torch.manual_seed(0)
    d, n = 16, 64
    head = QueryHead(HeadConfig(model="toy", hidden_size=d, n_layers=1, chunk_layer=1, n_ret=1, n_groups=1))
    base = torch.randn(n, d)
    rot = torch.linalg.qr(torch.randn(d, d)).Q
    keys = normalize_chunks((base @ rot).unsqueeze(1) + 0.05 * torch.randn(n, 1, d))  # (P, 1, d)
    groups = base.view(n, 1, 1, d)  # (N, |α|=1, G=1, d): question i's positive is chunk i
    train = StateSet("toy", groups[: n // 2], [[i] for i in range(n // 2)])
    dev = StateSet("dev", groups[n // 2 :], [[i] for i in range(n // 2, n)])
    before = recall(head, dev, keys)["R@1"]
    cfg = StateTrainConfig(rank=d, steps=150, batch=16, lr=2e-2, dev_every=25, weight_decay=0.0, train_alpha=False)
    model, log = fit_states(head, [train], [dev], keys, cfg)
    assert recall(model, dev, keys)["R@1"] > before + 0.3, (before, log[-1])
    assert log[0]["step"] == 0 and log[-1]["mean R@1"] <= 1.0
