"""The adapter experiment's bookkeeping: global chunk ids → the usable pool, held-out chunks never candidates."""

from __future__ import annotations

import torch

from unreal_demo.core.head import HeadConfig, QueryHead
from unreal_demo.core.maxsim import normalize_chunks
from unreal_demo.core.state_training import StateSet, StateTrainConfig
from unreal_demo.evaluation.adapter_run import Variant, centred_keys, run_variants


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


class _Index:
    """The two things :func:`centred_keys` reads from an index: its shards and each shard's raw keys."""

    def __init__(self, parts: list[torch.Tensor]) -> None:
        self.shards = parts

    def vectors(self, shard: torch.Tensor) -> torch.Tensor:
        return shard


def test_centred_keys_subtract_the_index_mean_before_the_norm():
    gen = torch.Generator().manual_seed(0)
    raw = torch.randn(6, 3, 8, generator=gen) + torch.tensor([9.0] + [0.0] * 7)  # one outlier dimension
    keys, mu = centred_keys(_Index([raw[:4], raw[4:]]))
    assert torch.allclose(mu, raw.reshape(-1, 8).mean(0))
    assert torch.allclose(keys, normalize_chunks(raw - raw.reshape(-1, 8).mean(0)))
    assert keys.shape == raw.shape and torch.allclose(keys.norm(dim=-1), torch.ones(6, 3))


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


def test_the_centring_check_scores_every_finished_variant_of_the_head_s_c0(tmp_path):
    """grid_heads reads the adapter grid's keep folder: every finished variant whose head reads the same |C0|,
    with whether it trained on centred keys (its row says so); a |C0| = 5 variant is left out."""
    import json

    from unreal_demo.evaluation.centring_check import grid_heads

    for slot, (label, n_context, centred) in enumerate([("α alone, mix", 2, False), ("α alone, mix", 5, False),
                                                        ("r = 64, mix, keys centred", 2, True)]):
        head = QueryHead(HeadConfig(model="toy", hidden_size=4, n_layers=1, chunk_layer=1, n_ret=1, n_groups=1,
                                    n_context=n_context))
        head.save(tmp_path / f"slot{slot}" / "head")
        row = {"variant": label} | ({"keys": "centred on the index mean"} if centred else {})
        (tmp_path / f"slot{slot}" / "row.json").write_text(json.dumps(row))
    found = grid_heads(tmp_path, 2)
    assert [(label, centre) for label, _, centre in found] == [("r = 64, mix, keys centred", True),
                                                                ("α alone, mix", False)]
    assert all(h.config.n_context == 2 for _, h, _ in found)


def test_title_sets_keep_the_questions_whose_answer_titles_a_chunk(monkeypatch):
    from types import SimpleNamespace

    from unreal_demo.core.joint_training import TextSet
    from unreal_demo.core.selection import BM25
    from unreal_demo.core.state_training import StateSet
    from unreal_demo.data.natural import NaturalQuestion
    from unreal_demo.evaluation import adapter_run

    texts = ["George Washington was the first president of the United States.",
             "Barack Obama was the 44th president; Washington hosted his inauguration.",
             "Washington, D.C. is the capital of the United States."]
    index = SimpleNamespace(chunks=[{"title": "New-Wiki held out", "text": "x"}]  # chunk 0: not usable
                            + [{"title": t, "text": x} for t, x in zip(["George Washington", "Barack Obama",
                                                                          "Washington, D.C."], texts, strict=True)])
    questions = [NaturalQuestion("a", "who was the first president of the united states", ("George Washington",)),
                 NaturalQuestion("b", "where was obama inaugurated", ("Washington",))]  # no chunk titled so
    monkeypatch.setattr(adapter_run, "load_natural", lambda source: questions)
    sets = [TextSet("nq", [q.text for q in questions], [[], []], [[2], [2]]),
            TextSet("squad", ["q"], [[]], [[3]])]
    cached = [StateSet("nq", torch.arange(2.0).reshape(2, 1, 1, 1), [[2], [2]]),
              StateSet("squad", torch.zeros(1, 1, 1, 1), [[3]])]
    (out,) = adapter_run.titled(index, ([1, 2, 3], texts, BM25(texts)), sets, cached)
    assert out.name == "nq:title" and out.positives == [[1]]  # the index id of the George Washington chunk
    assert out.groups.flatten().tolist() == [0.0]  # the first question's cached states, unchanged


def test_more_train_sets_leave_out_the_grid_s_sample_and_every_dev_text(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from unreal_demo.core.joint_training import TextSet
    from unreal_demo.core.selection import BM25
    from unreal_demo.data.natural import NaturalQuestion
    from unreal_demo.evaluation import adapter_run

    texts = ["George Washington was the first president.", "Paris is the capital of France.",
             "Mount Everest is the highest mountain."]
    train = [NaturalQuestion("t:0", "who was the first president", ("George Washington",)),  # the grid's sample
             NaturalQuestion("t:1", "capital of france", ("Paris",)),                        # left out: kept
             NaturalQuestion("t:2", "highest mountain", ("Everest",)),                       # a dev text: dropped
             NaturalQuestion("t:3", "longest river", ("Nile",))]                             # no positive: dropped
    dev = [NaturalQuestion("d:0", "highest mountain", ("Everest",))]
    monkeypatch.setattr(adapter_run, "load_natural", lambda source: train + dev)
    monkeypatch.setattr(adapter_run, "question_split", lambda qs: (train, dev))
    monkeypatch.setattr(adapter_run, "usable_pool", lambda index: ([7, 8, 9], texts, BM25(texts)))
    monkeypatch.setattr(adapter_run, "cached_sets", lambda index, n, folder: (
        [TextSet("nq", [train[0].text], [[]], [[7]]), TextSet("squad", ["q"], [[]], [[9]])], [], None))
    (out,) = adapter_run.more_train_sets(SimpleNamespace(), 1, tmp_path)
    assert (out.name, out.texts, out.positives) == ("nq", ["capital of france"], [[8]])  # pool id of chunk 1
    assert out.contexts == [[texts[1]]]  # C0: BM25's top 1 over the pool
    assert adapter_run.more_train_sets(SimpleNamespace(), 1, tmp_path) == [out]  # read back from its JSON
