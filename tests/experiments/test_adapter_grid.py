"""The adapter grid's helpers: centred keys, the finished variants, title positives."""

from __future__ import annotations

import torch

from experiments.common import centred_keys
from unreal_demo.core.head import HeadConfig, QueryHead
from unreal_demo.core.maxsim import normalize_chunks


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


def test_the_centring_check_scores_every_finished_variant_of_the_head_s_c0(tmp_path):
    """grid_heads reads the adapter grid's keep folder: every finished variant whose head reads the same |C0|,
    with whether it trained on centred keys (its row says so); a |C0| = 5 variant is left out."""
    import json

    from experiments.common import grid_heads

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

    from experiments import adapter_grid
    from unreal_demo.core.joint_training import TextSet
    from unreal_demo.core.selection import BM25
    from unreal_demo.core.state_training import StateSet
    from unreal_demo.data.natural import NaturalQuestion
    from unreal_demo.training import sets as training_sets

    texts = ["George Washington was the first president of the United States.",
             "Barack Obama was the 44th president; Washington hosted his inauguration.",
             "Washington, D.C. is the capital of the United States."]
    index = SimpleNamespace(chunks=[{"title": "New-Wiki held out", "text": "x"}]  # chunk 0: not usable
                            + [{"title": t, "text": x} for t, x in zip(["George Washington", "Barack Obama",
                                                                          "Washington, D.C."], texts, strict=True)])
    questions = [NaturalQuestion("a", "who was the first president of the united states", ("George Washington",)),
                 NaturalQuestion("b", "where was obama inaugurated", ("Washington",))]  # no chunk titled so
    monkeypatch.setattr(training_sets, "load_natural", lambda source: questions)
    sets = [TextSet("nq", [q.text for q in questions], [[], []], [[2], [2]]),
            TextSet("squad", ["q"], [[]], [[3]])]
    cached = [StateSet("nq", torch.arange(2.0).reshape(2, 1, 1, 1), [[2], [2]]),
              StateSet("squad", torch.zeros(1, 1, 1, 1), [[3]])]
    (out,) = adapter_grid.titled(index, ([1, 2, 3], texts, BM25(texts)), sets, cached)
    assert out.name == "nq:title" and out.positives == [[1]]  # the index id of the George Washington chunk
    assert out.groups.flatten().tolist() == [0.0]  # the first question's cached states, unchanged
