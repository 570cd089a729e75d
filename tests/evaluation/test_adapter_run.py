"""The adapter experiment's bookkeeping: global chunk ids → the usable pool, held-out chunks never candidates."""

from __future__ import annotations

import torch

from unreal_demo.core.head import HeadConfig, QueryHead
from unreal_demo.core.maxsim import normalize_chunks
from unreal_demo.core.state_training import StateSet, StateTrainConfig
from unreal_demo.evaluation.adapter_run import Variant, run_variants


def test_positives_are_global_ids_and_held_out_chunks_stay_out():
    torch.manual_seed(0)
    d, n = 8, 24
    head = QueryHead(HeadConfig(model="toy", hidden_size=d, n_layers=1, chunk_layer=1, n_ret=1, n_groups=1))
    base = torch.randn(n, d)
    keys = normalize_chunks(base.unsqueeze(1))  # (M, 1, d): chunk i is question i's positive
    usable = torch.ones(n, dtype=torch.bool)
    usable[:4] = False  # held out (New-Wiki): ranked only in the test
    train_mask = usable.clone()
    train_mask[20:] = False  # dev-only chunks
    groups = base.view(n, 1, 1, d)
    train = [StateSet("toy", groups[4:20], [[i] for i in range(4, 20)])]
    dev = [StateSet("toy", groups[20:], [[i] for i in range(20, n)])]
    test = StateSet("new_wiki", groups[:4], [[i] for i in range(4)])
    rows, heads = run_variants(head, train, dev, test, keys, usable, train_mask,
                               [Variant("r = 2", ("toy",), StateTrainConfig(rank=2, steps=4, batch=4, dev_every=2))],
                               log=lambda row: None)
    assert [r["variant"] for r in rows] == ["shipped head (no adapter)", "r = 2"]
    assert rows[0]["dev toy R@1"] == 1.0 and rows[0]["test new_wiki R@1"] == 1.0  # identity: each query = its key
    assert rows[1]["dev mean R@1"] >= rows[0]["dev mean R@1"]  # the best dev step is kept (step 0 included)
    assert set(heads) == {"r = 2"} and heads["r = 2"].config.adapter_rank == 2
