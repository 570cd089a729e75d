"""The joint fine-tunes averaged into one head (a "model soup"): the mean of every trained value."""

from __future__ import annotations

import pytest
import torch

from experiments.joint_runs import average_heads
from unreal_demo.core.head import HeadError, untrained_head


class TestAverage:
    """:func:`average_heads`: the mean of fine-tunes of one head."""

    def test_mean_of_every_value(self, tiny):
        a, b = untrained_head(tiny, adapter_rank=2), untrained_head(tiny, adapter_rank=2)
        with torch.no_grad():
            for p in b.parameters():
                p.add_(torch.randn_like(p))
        mean = average_heads([a, b])
        for (name, x), y, m in zip(a.state_dict().items(), b.state_dict().values(), mean.state_dict().values(),
                                   strict=True):
            assert torch.allclose(m, (x + y) / 2), name
        assert mean.config.provenance == {"average of": [a.digest(), b.digest()]}
        assert mean.config.fusion_weight is None

    def test_a_head_averaged_with_itself_scores_as_itself(self, tiny):
        head = untrained_head(tiny)
        head.config.fusion_weight = 0.8  # a fitted weight does not stop averaging; the mean's is refitted
        mean = average_heads([head, head])
        queries, contexts = ["who wrote it?", "when?"], [["a passage"], []]
        groups = head.layer_groups(tiny, queries, contexts)  # (B, |α|, G, d)
        assert torch.equal(groups, mean.layer_groups(tiny, queries, contexts))
        assert torch.equal(head.from_layer_groups(groups), mean.from_layer_groups(groups))

    def test_different_settings_refused(self, tiny):
        with pytest.raises(HeadError, match="differ in n_context"):
            average_heads([untrained_head(tiny), untrained_head(tiny, n_context=5)])
        with pytest.raises(HeadError, match="at least two"):
            average_heads([untrained_head(tiny)])
