"""The ChunkStore contract: every store serves the same data for the same chunks.

The retrievers (retrieval/) read a store only through :class:`store.base.ChunkStore`, so a store is right when its
data access is: texts, BM25 (one type, the same scores), keys, token states, chunk means, and the exact scans
(MaxSim, Eq. 4; dense) give what the chunks themselves give. Each store is checked against the chunks' own data,
computed here directly, not against another store.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from unreal_demo.core import minilm
from unreal_demo.core.encoding import encode_chunks
from unreal_demo.core.maxsim import maxsim_reference, normalize_chunks
from unreal_demo.core.selection import BM25
from unreal_demo.data.sources import Passage
from unreal_demo.store import index as idx
from unreal_demo.store.base import ChunkStore, topk
from unreal_demo.store.memory import MemoryStore

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage {i} tells that item {i} weighs {i * 3} kilograms. " * (1 + i % 3),
                    "test") for i in range(23)]
LAYER, L_P, D = 3, 7, 32
QUERIES = ["item 7 weighs", "Passage 12 tells", "kilograms", "the of"]  # the last: stop words only


def embed(texts: list[str]) -> torch.Tensor:
    """A MiniLM stand-in: a unit vector ``(16,)`` per text, seeded by the text (no ties, no download)."""
    return torch.stack([torch.nn.functional.normalize(torch.randn(16, generator=torch.Generator().manual_seed(
        zlib.crc32(t.encode()))), dim=0) for t in texts])


@pytest.fixture(scope="module")
def chunks(tiny, tmp_path_factory) -> dict:
    """The chunks of PASSAGES as the index chunks them, with their own data computed directly, and an index folder
    built from them with every optional part (token states, dense vectors)."""
    folder = tmp_path_factory.mktemp("contract") / "ix"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(minilm, "embed", embed)
        idx.build_index(folder, tiny, PASSAGES, layer=LAYER, n_pool=L_P, shard_size=5, token_states=True, dense=True)
    texts = idx.Index(folder).texts
    tokens: list[torch.Tensor] = []
    keys = encode_chunks(tiny, texts, LAYER, L_P, tokens_out=tokens)  # (M, L_p, d) float32
    return {"folder": folder, "texts": texts, "keys": keys, "tokens": torch.cat(tokens),
            "lengths": torch.tensor([len(t) for t in tokens])}


STORES = {
    "memory": lambda c: MemoryStore(c["texts"], c["keys"], [(c["tokens"], c["lengths"])]),
    "index": lambda c: idx.Index(c["folder"]),
}


@pytest.fixture(params=list(STORES))
def store(request, chunks, monkeypatch) -> ChunkStore:
    monkeypatch.setattr(minilm, "embed", embed)
    return STORES[request.param](chunks)


def test_a_store_is_a_chunk_store_with_every_part(store, chunks, tiny):
    assert isinstance(store, ChunkStore)
    assert len(store) == len(chunks["texts"]) and store.texts == chunks["texts"]
    assert [store.lacks(role) for role in ("keys", "dense", "token_states")] == [None, None, None]
    store.check_backbone(tiny, LAYER)  # the chunks were encoded by this model at this ℓc: no error


def test_bm25_is_one_type_with_the_same_scores(store, chunks):
    assert isinstance(store.bm25, BM25)
    want = BM25(chunks["texts"]).scores(QUERIES)  # (Q, M)
    assert torch.equal(store.bm25_scores(QUERIES), want) and want[-1].abs().sum() == 0
    scores, ids = store.bm25_topk(QUERIES, 5)
    w_scores, w_ids = topk(want, 5)
    assert torch.equal(ids, w_ids) and torch.equal(scores, w_scores)
    assert store.bm25_topk(QUERIES, 10_000)[1].shape == (len(QUERIES), len(store))  # k clamped to M


def test_exact_maxsim_top_k_is_the_chunks_own(store, chunks):
    q = torch.nn.functional.normalize(torch.randn(3, 2, D, generator=torch.Generator().manual_seed(1)), dim=-1)
    want = maxsim_reference(q, normalize_chunks(chunks["keys"]))  # (Q, M)
    for k in (1, 5, len(store)):
        scores, ids = store.maxsim_topk(q, k)
        w_scores, w_ids = topk(want, k)
        assert torch.equal(ids, w_ids), k
        assert torch.allclose(scores, w_scores, atol=2e-3), k  # an index keeps fp16 keys


def test_dense_top_k_is_the_chunks_own(store, chunks):
    qv = embed(QUERIES)  # (Q, 16)
    scores, ids = store.dense_topk(qv, 5)
    w_scores, w_ids = topk(qv @ embed(chunks["texts"]).T, 5)
    assert torch.equal(ids, w_ids) and torch.allclose(scores, w_scores, atol=2e-3)


def test_token_states_and_chunk_means_are_the_chunks_own(store, chunks):
    parts = store.token_parts
    assert torch.equal(torch.cat([lengths for _, lengths in parts]), chunks["lengths"])
    assert torch.allclose(torch.cat([t for t, _ in parts]).float(), chunks["tokens"].float(), atol=2e-3)
    assert torch.allclose(store.chunk_means(), chunks["keys"].mean(1), atol=2e-2, rtol=1e-3)
