"""Eqs. 2–3: the query head's shapes, save/load, the KV-cached path, and mismatch errors."""

from __future__ import annotations

import json

import pytest
import torch

from unreal_demo.core.encoding import run_blocks
from unreal_demo.core.head import HeadError, QueryHead, untrained_head


class TestShapes:
    def test_output_and_params(self, tiny):
        head = untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3)
        q = head(tiny, ["what is it?", "where is Paris?"], [["Paris is in France."], ["ctx"]])
        assert q.shape == (2, 4, 32)
        assert torch.allclose(q.norm(dim=-1), torch.ones(2, 4), atol=1e-5)
        assert head.n_params() == 8 * 32 + 4  # R·d + |α|, no P
        head.config.use_prompt = True
        assert head.n_params() == (8 + 1) * 32 + 4  # (R + 1)·d + |α|

    def test_r_must_divide_by_g(self, tiny):
        with pytest.raises(HeadError):
            untrained_head(tiny, n_ret=6, n_groups=4)
        for g in (0, -2):  # 6 % -2 == 0, but no head has a negative number of query vectors
            with pytest.raises(HeadError, match="at least one query vector"):
                untrained_head(tiny, n_ret=6, n_groups=g)


@pytest.mark.parametrize("use_prompt", [True, False])
def test_batch_equals_single(tiny, use_prompt):
    head = untrained_head(tiny, n_ret=4, n_groups=2, use_prompt=use_prompt)
    qs, ctx = ["short?", "a much longer question with many more words in it?"], [["a"], ["b c d e f"]]
    together = head(tiny, qs, ctx)
    alone = torch.cat([head(tiny, [q], [c]) for q, c in zip(qs, ctx, strict=True)])
    assert torch.allclose(together, alone, atol=1e-5)


def test_cached_prefix_equals_one_pass(tiny):
    """Without P, x_ret runs as prefix (KV cache) + ρ; the ρ states equal a single forward pass."""
    head = untrained_head(tiny, n_ret=4, n_groups=2, use_prompt=False)
    got = head.retrieval_states(tiny, ["where is Paris?"], [["Paris is in France."]])
    prefix, mask = head.build_prefix(tiny, ["where is Paris?"], [["Paris is in France."]])
    full = run_blocks(tiny, head.config.readout_layers, inputs_embeds=torch.cat([prefix, head.rho[None]], 1))
    for layer in head.config.readout_layers:
        assert torch.allclose(got[layer], full[layer][:, -4:], atol=1e-5)


def test_gradients_reach_only_head(tiny):
    head = untrained_head(tiny, n_ret=4, n_groups=2, use_prompt=True)
    head(tiny, ["q?"], [["c."]]).sum().backward()
    assert head.rho.grad is not None and head.prompt.grad is not None and head.alpha.grad is not None
    assert all(p.grad is None for p in tiny.model.parameters())


class TestSaveLoad:
    def test_round_trip(self, tiny, tmp_path):
        head = untrained_head(tiny, n_ret=8, n_groups=2)
        head.save(tmp_path / "h")
        loaded = QueryHead.load(tmp_path / "h.json")
        assert loaded.config == head.config
        for a, b in zip(head.state_dict().values(), loaded.state_dict().values(), strict=True):
            assert torch.equal(a, b)
        assert torch.equal(head(tiny, ["q?"], [[]]), loaded(tiny, ["q?"], [[]]))

    def test_missing_and_corrupted(self, tiny, tmp_path):
        with pytest.raises(HeadError, match="missing"):
            QueryHead.load(tmp_path / "nothing")
        untrained_head(tiny).save(tmp_path / "h")
        raw = (tmp_path / "h.safetensors").read_bytes()
        (tmp_path / "h.safetensors").write_bytes(raw[: len(raw) // 2])
        with pytest.raises(HeadError, match="corrupted"):
            QueryHead.load(tmp_path / "h")

    def test_wrong_model(self, tiny, tmp_path):
        head = untrained_head(tiny)
        head.save(tmp_path / "h")
        cfg = json.loads((tmp_path / "h.json").read_text())
        cfg["n_layers"] = 30
        (tmp_path / "h.json").write_text(json.dumps(cfg))
        with pytest.raises(HeadError):
            QueryHead.load(tmp_path / "h").check_backbone(tiny)


class TestReshaped:
    """:meth:`QueryHead.reshaped`: the same trained values under another |C0|, G or a new adapter."""

    def test_a_new_adapter_scores_as_none_until_trained(self, tiny):
        head = untrained_head(tiny, n_ret=8, n_groups=4)
        wide = head.reshaped(adapter_rank=3)
        assert wide.n_params() == head.n_params() + 2 * 3 * head.config.hidden_size  # U and V, d × r each
        queries, contexts = ["who wrote it?", "when?"], [["a passage"], []]
        assert torch.equal(head(tiny, queries, contexts), wide(tiny, queries, contexts))

    def test_more_groups_pool_fewer_tokens_each(self, tiny):
        head = untrained_head(tiny, n_ret=8, n_groups=2)
        fine = head.reshaped(n_groups=8)
        assert torch.equal(fine.rho, head.rho) and torch.equal(fine.alpha, head.alpha)
        queries, contexts = ["who wrote it?"], [["a passage"]]
        fine_groups, coarse = fine.layer_groups(tiny, queries, contexts), head.layer_groups(tiny, queries, contexts)
        assert fine_groups.shape[2] == 8 and coarse.shape[2] == 2  # (B, |α|, G, d)
        assert torch.allclose(fine_groups.reshape(1, -1, 2, 4, fine_groups.shape[-1]).mean(3), coarse, atol=1e-5)

    def test_what_the_values_cannot_carry_is_refused(self, tiny):
        head = untrained_head(tiny, n_ret=8, n_groups=4, adapter_rank=2)
        with pytest.raises(HeadError, match="cannot become r = 4"):
            head.reshaped(adapter_rank=4)
        with pytest.raises(HeadError, match="multiple of G"):
            head.reshaped(n_groups=3)
        assert head.reshaped(n_context=5).adapter_matrix().equal(head.adapter_matrix())
        with pytest.raises(HeadError, match="another n_ret"):
            head.reshaped(n_ret=4)

    def test_a_full_map_starts_as_the_identity(self, tiny):
        head = untrained_head(tiny)
        d = head.config.hidden_size
        full = head.reshaped(adapter_rank=d)
        assert full.n_params() == head.n_params() + d * d
        assert torch.equal(full.adapter_matrix(), torch.eye(d))
