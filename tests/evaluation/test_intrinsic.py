"""Intrinsic retrieval: captured keys equal the model's KV cache; GQA grouping; both readings."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import DynamicCache

from unreal_demo.core.backbone import BackboneError
from unreal_demo.evaluation.intrinsic import capture, gold_rank, intrinsic_scores


def test_post_rotary_keys_equal_the_kv_cache(tiny):
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    cap = capture(tiny, ids)
    cache = DynamicCache(config=tiny.model.config)
    with torch.inference_mode():
        tiny.base(input_ids=ids, cache=cache, use_cache=True)
    for layer in range(tiny.n_layers):
        cached = cache.layers[layer].keys  # (B, KV, T, hd), after rotary
        assert torch.allclose(cap.k_post[layer].transpose(1, 2), cached, atol=1e-5)
    assert cap.q_pre[0].shape == (1, 6, 4, 8) and cap.k_pre[0].shape == (1, 6, 2, 8)  # H = 4, KV = 2, hd = 8


def test_pre_rotary_queries_are_the_projection(tiny):
    ids = torch.tensor([[1, 5, 9]])
    cap = capture(tiny, ids)
    with torch.inference_mode():
        h0 = tiny.base.embed_tokens(ids)
        q = tiny.blocks[0].self_attn.q_proj(tiny.blocks[0].input_layernorm(h0))
    assert torch.allclose(cap.q_pre[0].reshape(1, 3, -1), q, atol=1e-5)


@pytest.mark.parametrize("mode", ["separate", "joint"])
def test_scores_by_hand(tiny, mode):
    chunks = ["Paris is the capital of France.", "The quick brown fox.", "The answer is forty two."]
    s = intrinsic_scores(tiny, chunks, "What is the capital of France?", mode)
    assert s.qk_pre.shape == (4, 4, 3) and s.qk_post.shape == (4, 4, 3) and s.resid.shape == (4, 3)
    if mode == "separate":  # recompute one cell by hand: layer 1, head 3 (KV group 1)
        tok = tiny.tokenizer
        c_ids = torch.tensor([[tiny.sink_id, *tok(chunks[2], add_special_tokens=False)["input_ids"]]])
        q_ids = torch.tensor([[tiny.sink_id, *tok("Question: What is the capital of France?",
                                                  add_special_tokens=False)["input_ids"]]])
        k = capture(tiny, c_ids).k_post[1][0, 1:, 1].mean(0)
        q = capture(tiny, q_ids).q_post[1][0, 1:, 3].mean(0)
        assert torch.allclose(s.qk_post[1, 3, 2], q @ k, atol=1e-4)


def test_gold_rank():
    scores = torch.tensor([[0.1, 0.9, 0.5], [0.7, 0.2, 0.3]])
    assert gold_rank(scores, {2}).tolist() == [2, 2]
    assert gold_rank(scores, {0, 2}).tolist() == [2, 1]


def test_unhookable_architecture(tiny):
    class Fake:
        blocks = [torch.nn.Linear(2, 2)]

    with pytest.raises(BackboneError, match="no self_attn"):
        capture(Fake(), torch.tensor([[1]]))


def test_random_recall():
    from unreal_demo.evaluation.intrinsic import random_recall

    assert random_recall(10, 1, 1) == pytest.approx(0.1)
    assert random_recall(10, 2, 5) == pytest.approx(1 - 56 / 252)  # 1 - C(8,5)/C(10,5)
    assert random_recall(3, 1, 5) == 1.0


def test_benchmark_on_tiny_model(tiny, monkeypatch):
    from unreal_demo.core.head import untrained_head
    from unreal_demo.evaluation import intrinsic
    from unreal_demo.pipeline import Explorer

    items = [{"question": "capital of France?", "gold_doc": 1,
              "docs": ["The fox jumps.", "Paris is the capital of France.", "The answer is forty two."]}] * 2
    monkeypatch.setattr(intrinsic, "benchmark_contexts", lambda sample, seed: items)
    ex = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3), None)
    r = intrinsic.run_intrinsic_eval(ex, sample=2)
    assert len(r["curves"]["separate/qk_post"]["R@1 best head"]) == tiny.n_layers
    assert r["references"]["bm25"]["R@1"] == 1.0  # "capital France" matches only the gold
    assert r["references"]["random"]["R@1"] == pytest.approx(1 / 3)
    by_head = r["curves"]["joint/qk_pre"]["R@1 by head"]
    assert len(by_head) == tiny.n_layers and len(by_head[0]) == 4


def test_live_scores_follow_a_chunk_and_refuse_what_the_view_cannot_take(tiny):
    """The Intrinsic tab's live run: BM25's top chunk by default, ranks (L, H) and z (L, M) of one pass; a chunk id
    out of range and too many chunks are one-line input errors."""
    from unreal_demo.core.head import untrained_head
    from unreal_demo.errors import InputError
    from unreal_demo.evaluation.intrinsic import LIVE_CHUNKS, live_scores
    from unreal_demo.pipeline import Explorer

    ex = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3), None)
    doc = "The fox jumps over the dog. " * 30 + "Paris is the capital of France. " * 6
    s = live_scores(ex, doc, "capital of France?")
    assert "Paris" in s.chunks[s.chunk] and len(s.ranks) == len(s.resid) == len(s.z) == tiny.n_layers
    assert len(s.ranks[0]) == 4 and len(s.z[0]) == len(s.chunks) and min(min(r) for r in s.ranks) >= 1
    with pytest.raises(InputError, match=rf"chunk id {len(s.chunks)} does not exist"):
        live_scores(ex, doc, "capital of France?", chunk=len(s.chunks))
    assert live_scores(ex, doc, "capital of France?", chunk=float(s.chunk)).chunk == s.chunk  # a number box's 3.0
    for empty in (None, float("nan"), "", 2.5):  # an empty or NaN box: one line, not TypeError or ValueError
        with pytest.raises(InputError, match=r"^the answer chunk id must be a whole number \(-1: BM25's top chunk; "
                                             rf"got {re.escape(repr(empty))}\)$"):
            live_scores(ex, doc, "capital of France?", chunk=empty)
    with pytest.raises(InputError, match=f"the live view takes at most {LIVE_CHUNKS}"):
        live_scores(ex, "A sentence about a town and its mills. " * 1_500, "q?")  # 58,500 characters
