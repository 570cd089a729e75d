"""Query vectors re-cut into G groups: pooling cached per-token states equals the head reading with G groups."""

from __future__ import annotations

import pytest
import torch

from experiments.groups_check import pool_groups
from unreal_demo.core.head import HeadError, untrained_head


class TestRegrouping:
    def test_pooled_per_token_states_equal_the_regrouped_head_s_own(self, tiny):
        head = untrained_head(tiny)  # R retrieval tokens in G groups
        queries, contexts = ["who wrote it?", "when was it built?"], [["a passage"], []]
        fine = head.reshaped(n_groups=head.config.n_ret).layer_groups(tiny, queries, contexts)  # (B, |α|, R, d)
        assert fine.shape[2] == head.config.n_ret
        for g in (1, head.config.n_groups, head.config.n_ret):
            own = head.reshaped(n_groups=g).layer_groups(tiny, queries, contexts)  # (B, |α|, g, d)
            assert own.shape == (*fine.shape[:2], g, fine.shape[3])
            assert torch.allclose(pool_groups(fine, g), own, atol=1e-5)

    def test_a_g_that_does_not_divide_r_is_refused(self, tiny):
        head = untrained_head(tiny)
        with pytest.raises(HeadError, match="multiple of G"):
            head.reshaped(n_groups=head.config.n_ret + 1)
