"""The α and joint stages' bookkeeping: global chunk ids → the usable pool, held-out chunks never candidates."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from unreal_demo.core.head import HeadConfig, QueryHead
from unreal_demo.core.maxsim import normalize_chunks
from unreal_demo.core.state_training import StateSet, StateTrainConfig
from unreal_demo.training.alpha import Variant, run_variants


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


def test_a_centred_variant_trains_and_scores_on_the_centred_keys():
    torch.manual_seed(0)
    d, n = 8, 24
    head = QueryHead(HeadConfig(model="toy", hidden_size=d, n_layers=1, chunk_layer=1, n_ret=1, n_groups=1))
    base = torch.randn(n, d)
    keys = normalize_chunks(base.unsqueeze(1))
    usable = torch.ones(n, dtype=torch.bool)
    groups = base.view(n, 1, 1, d)
    train = [StateSet("toy", groups[:16], [[i] for i in range(16)])]
    dev = [StateSet("toy", groups[16:], [[i] for i in range(16, n)])]
    centred = -keys  # every query now points away from its own chunk: R@1 on these keys is 0
    rows, _ = run_variants(head, train, dev, dev[0], keys, usable, usable,
                           [Variant("c", ("toy",), StateTrainConfig(rank=0, steps=2, batch=4, dev_every=2), True)],
                           log=lambda row: None, centred=centred)
    assert [r["variant"] for r in rows] == ["shipped head (no adapter)", "shipped head (no adapter), keys centred", "c"]
    assert rows[0]["dev toy R@1"] == 1.0 and rows[1]["dev toy R@1"] == 0.0 and rows[2]["keys"].startswith("centred")


INDEX = SimpleNamespace(manifest={"model": "m", "target": 141, "chunks": 3})  # what the sets' cache is keyed by


def test_more_train_sets_leave_out_the_grid_s_sample_and_every_dev_text(monkeypatch, tmp_path):

    from unreal_demo.core.joint_training import TextSet
    from unreal_demo.core.selection import BM25
    from unreal_demo.data.natural import NaturalQuestion
    from unreal_demo.training import sets

    texts = ["George Washington was the first president.", "Paris is the capital of France.",
             "Mount Everest is the highest mountain."]
    train = [NaturalQuestion("t:0", "who was the first president", ("George Washington",)),  # the grid's sample
             NaturalQuestion("t:1", "capital of france", ("Paris",)),                        # left out: kept
             NaturalQuestion("t:2", "highest mountain", ("Everest",)),                       # a dev text: dropped
             NaturalQuestion("t:3", "longest river", ("Nile",))]                             # no positive: dropped
    dev = [NaturalQuestion("d:0", "highest mountain", ("Everest",))]
    monkeypatch.setattr(sets, "load_natural", lambda source: train + dev)
    monkeypatch.setattr(sets, "question_split", lambda qs: (train, dev))
    monkeypatch.setattr(sets, "usable_pool", lambda index: ([7, 8, 9], texts, BM25(texts)))
    monkeypatch.setattr(sets, "cached_sets", lambda index, n, folder: (
        [TextSet("nq", [train[0].text], [[]], [[7]]), TextSet("squad", ["q"], [[]], [[9]])], [], None))
    (out,) = sets.more_train_sets(INDEX, 1, tmp_path)
    assert (out.name, out.texts, out.positives) == ("nq", ["capital of france"], [[8]])  # pool id of chunk 1
    assert out.contexts == [[texts[1]]]  # C0: BM25's top 1 over the pool
    assert sets.more_train_sets(INDEX, 1, tmp_path) == [out]  # read back from its JSON
