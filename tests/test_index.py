"""The sharded index: brute-force equality, resume after a kill, checksums, settings clashes, hybrid fusion."""

from __future__ import annotations

import json

import pytest
import torch

from unreal_demo import index as idx
from unreal_demo.data import Passage
from unreal_demo.encoding import encode_chunks
from unreal_demo.head import untrained_head
from unreal_demo.maxsim import maxsim_reference, normalize_chunks
from unreal_demo.pipeline import Explorer
from unreal_demo.selection import reciprocal_rank_fusion

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage {i} tells that item {i} weighs {i * 3} kilograms. " * (1 + i % 3),
                    "test") for i in range(23)]


@pytest.fixture()
def explorer(tiny):
    return Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3, n_context=1), "untrained")


def build(tmp_path, tiny, **kw):
    return idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, n_pool=7, shard_size=5, **kw)


def test_search_equals_brute_force(tmp_path, tiny, explorer):
    manifest = build(tmp_path, tiny)
    ix = idx.Index(tmp_path / "ix")
    texts = [c["text"] for c in ix.chunks]
    assert manifest["head_independent"] and len(manifest["shards"]) == -(-len(texts) // 5)
    q = torch.nn.functional.normalize(torch.randn(2, 2, 32), dim=-1)
    keys = normalize_chunks(encode_chunks(tiny, texts, 3, 7).half().float())
    ref = maxsim_reference(q, keys)
    scores, ids = ix.maxsim_topk(q, k=50, block=3)  # k > number of chunks: clamped
    assert ids.shape == (2, len(texts))
    assert torch.allclose(scores, ref.sort(dim=1, descending=True).values, atol=1e-4)
    hit = idx.search(ix, explorer, "item 7 weighs", k=3, method="unreal")
    assert [h["rank"] for h in hit["hits"]] == [1, 2, 3] and set(hit["timings"]) >= {"query_encoding", "scan"}


def test_int8_is_close_to_fp16(tmp_path, tiny):
    build(tmp_path, tiny, dtype="int8")
    ix = idx.Index(tmp_path / "ix")
    q = torch.nn.functional.normalize(torch.randn(1, 2, 32), dim=-1)
    texts = [c["text"] for c in ix.chunks]
    ref = maxsim_reference(q, normalize_chunks(encode_chunks(tiny, texts, 3, 7)))
    scores, _ = ix.maxsim_topk(q, k=5)
    assert torch.allclose(scores[0], ref[0].topk(5).values, atol=2e-2)


def test_killed_build_resumes_to_the_same_index(tmp_path, tiny, monkeypatch):
    full = idx.build_index(tmp_path / "a", tiny, PASSAGES, layer=3, shard_size=5)
    calls = {"n": 0}
    real = idx.encode_chunks

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the build is killed while encoding its third shard
        return real(*args, **kwargs)

    monkeypatch.setattr(idx, "encode_chunks", dying)
    with pytest.raises(KeyboardInterrupt):
        idx.build_index(tmp_path / "b", tiny, PASSAGES, layer=3, shard_size=5)
    with pytest.raises(idx.IndexStoreError, match="incomplete"):
        idx.Index(tmp_path / "b")
    monkeypatch.setattr(idx, "encode_chunks", real)
    resumed = idx.build_index(tmp_path / "b", tiny, PASSAGES, layer=3, shard_size=5)
    assert [s["files"] for s in resumed["shards"]] == [s["files"] for s in full["shards"]]


def test_corrupted_shard_and_clashes(tmp_path, tiny):
    build(tmp_path, tiny)
    shard = tmp_path / "ix" / "shard_00001.npy"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(idx.IndexStoreError, match="checksum"):
        idx.Index(tmp_path / "ix")
    with pytest.raises(idx.IndexStoreError, match="other settings"):
        idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=2, shard_size=5)
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    ix = idx.Index(tmp_path / "ix", verify=False)
    with pytest.raises(idx.IndexStoreError, match="ℓc"):
        ix.check_backbone(tiny, m["chunk_layer"] + 1)


def test_hybrid_rrf_by_hand():
    ranked = reciprocal_rank_fusion([[3, 1, 2], [1, 4]], k=60)
    fused = dict(ranked)
    assert fused[1] == pytest.approx(1 / 62 + 1 / 61)
    assert fused[3] == pytest.approx(1 / 61) and fused[4] == pytest.approx(1 / 62)
    assert ranked[0][0] == 1 and [s for _, s in ranked] == sorted(fused.values(), reverse=True)
