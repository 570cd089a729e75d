"""The index in Qdrant: exact MaxSim (Eq. 4) and dense top-k equal ours, filters, add and delete, export round trip.

Every test runs on qdrant-client's in-process ``:memory:`` mode (the server API) and on an embedded Qdrant Edge
shard (skipped where ``qdrant_edge`` cannot be imported).
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import torch

from unreal_demo.core.encoding import encode_chunks
from unreal_demo.core.head import untrained_head
from unreal_demo.core.maxsim import maxsim_reference, normalize_chunks
from unreal_demo.data.sources import Passage
from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.hits import search
from unreal_demo.retrieval.registry import retrieve, unsupported
from unreal_demo.store import index as idx
from unreal_demo.store import qdrant

M, L_P, D, D_DENSE = 50, 7, 32, 16
IDENTITY = {"model": "tiny-llama", "revision": "tiny", "chunk_layer": 3, "n_pool": L_P, "hidden_size": D,
            "target": 141, "dense": True, "dense_size": D_DENSE, "encoded_in": "float32", "dtype": "fp16"}
PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage {i} tells that item {i} weighs {i * 3} kilograms. " * (1 + i % 3),
                    "test") for i in range(23)]


def _edge_or_skip() -> None:
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed")


@pytest.fixture(params=["memory", "edge"])
def spec(request, tmp_path) -> str:
    """A fresh store string: a new collection of this process's ``:memory:`` client, or a new Edge folder."""
    if request.param == "edge":
        _edge_or_skip()
        return f"qdrant-edge:{tmp_path / 'edge'}"
    return f"qdrant::memory:/t{uuid.uuid4().hex}"


@pytest.fixture()
def chunks(spec):
    """50 random chunks written to ``spec``: keys ``(M, L_p, d)``, MiniLM-like vectors ``(M, 16)``, payloads."""
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((M, L_P, D)).astype(np.float32)
    dense = rng.standard_normal((M, D_DENSE)).astype(np.float32)
    payloads = [{"passage": f"p{i // 2}", "title": f"Title {i}", "source": "summaries" if i % 3 else "new_wiki",
                 "text": f"chunk {i} about topic {i % 7}", "tokens": 5} for i in range(M)]
    with qdrant.QdrantStore.create(spec, IDENTITY) as store:
        assert store.upsert(keys, payloads, dense) == list(range(M))
    return keys, dense, payloads


def _ours(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.topk(scores, k, dim=1)


def test_maxsim_and_dense_equal_ours(spec, chunks):
    keys, dense, _ = chunks
    q = torch.randn(3, 2, D, generator=torch.Generator().manual_seed(1))
    qv = torch.randn(3, D_DENSE, generator=torch.Generator().manual_seed(2))
    with qdrant.QdrantStore(spec) as store:
        assert len(store) == M and store.manifest["passages"] == 25
        ref_s, ref_i = _ours(maxsim_reference(q, normalize_chunks(torch.from_numpy(keys))), 10)  # Eq. 4
        scores, ids = store.maxsim_topk(q, 10)
        assert torch.equal(ids, ref_i) and torch.allclose(scores, ref_s, atol=1e-5)
        d_s, d_i = _ours(qv @ torch.from_numpy(dense).T, 10)
        scores, ids = store.dense_topk(qv, 10)
        assert torch.equal(ids, d_i) and torch.allclose(scores, d_s, atol=1e-5)
        assert torch.allclose(store.chunk_vectors([4, 0]), normalize_chunks(torch.from_numpy(keys[[4, 0]])),
                              atol=1e-6)
        with pytest.raises(idx.IndexStoreError, match="normalize=False"):
            store.maxsim_topk(q, 10, normalize=False)
        with pytest.raises(idx.IndexStoreError, match="size 8 against a store of 32-d"):
            store.maxsim_topk(q[..., :8], 10)


@pytest.mark.parametrize("terms,test", [
    (["source=summaries"], lambda p: p["source"] == "summaries"),
    (["title^=Title 1"], lambda p: p["title"].startswith("Title 1")),
    (["source=new_wiki", "title^=Title 1"], lambda p: p["source"] == "new_wiki" and p["title"].startswith("Title 1")),
])
def test_filter_restricts_every_method(spec, chunks, terms, test):
    keys, dense, payloads = chunks
    keep = [i for i, p in enumerate(payloads) if test(p)]
    q = torch.randn(2, 2, D, generator=torch.Generator().manual_seed(3))
    with qdrant.QdrantStore(spec, where=qdrant.Where.parse(terms)) as store:
        assert len(store) == len(keep) and [c["id"] for c in store.chunks] == keep
        ref_s, ref_i = _ours(maxsim_reference(q, normalize_chunks(torch.from_numpy(keys[keep]))), min(5, len(keep)))
        scores, ids = store.maxsim_topk(q, 5)  # positions among the kept chunks; k clamped to their number
        assert torch.equal(ids, ref_i) and torch.allclose(scores, ref_s, atol=1e-5)
        found = retrieve(store, None, ["topic 3 chunk"], 5, "bm25")
        assert all(test(store.chunks[i]) for i in found.ids[0])
        assert all(test(store.chunks[i]) for i in store.dense_topk(torch.randn(1, D_DENSE), len(keep))[1][0].tolist())


def test_a_filtered_view_shares_the_open_store(spec, chunks):
    """A view per filter over one open store (an Edge shard opens once per process) searches as a store opened
    with that filter does; the store itself is unchanged."""
    q = torch.randn(2, 2, D, generator=torch.Generator().manual_seed(5))
    where = qdrant.Where(source="summaries", title_prefix="Title 1")
    with qdrant.QdrantStore(spec) as store:
        view = store.filtered(where)
        assert view._db is store._db and len(store) == M and store.where is None
        keep = [i for i, p in enumerate(chunks[2]) if where.matches(p)]
        assert [c["id"] for c in view.chunks] == keep and view.texts == [chunks[2][i]["text"] for i in keep]
        ref_s, ref_i = _ours(maxsim_reference(q, normalize_chunks(torch.from_numpy(chunks[0][keep]))), 3)
        scores, ids = view.maxsim_topk(q, 3)
        assert torch.equal(ids, ref_i) and torch.allclose(scores, ref_s, atol=1e-5)
        assert store.filtered(None).texts == store.texts


def test_where_terms_are_checked():
    assert qdrant.Where.parse([]) is None
    assert qdrant.Where.parse(["title=Paris"]) == qdrant.Where(title="Paris")
    for bad in ("colour=red", "source", "title^=", "source^=x"):
        with pytest.raises(idx.IndexStoreError, match="use source=NAME"):
            qdrant.Where.parse([bad])


def test_delete_removes_a_passage(spec, chunks):
    q = normalize_chunks(torch.from_numpy(chunks[0][[4, 5]]))  # chunks 4 and 5 (passage p2) as queries find themselves
    with qdrant.QdrantStore(spec) as store:
        assert store.maxsim_topk(q, 1)[1].flatten().tolist() == [4, 5]
        assert store.delete_passages(["p2"]) == 2 and store.delete_passages(["p2"]) == 0
        assert len(store) == M - 2 and "p2" not in {c["passage"] for c in store.chunks}
        hits = store.maxsim_topk(q, M)[1]
        assert hits.shape == (2, M - 2) and not {4, 5} & {store.chunks[i]["id"] for i in hits.flatten().tolist()}
    with qdrant.QdrantStore(spec) as store:  # deleted for good, and the next new id is still after 49
        assert len(store) == M - 2
        assert store.upsert(chunks[0][:1], [chunks[2][0]]) == [M]


def test_another_identity_is_refused(spec, chunks):
    with pytest.raises(idx.IndexStoreError, match="another index"):
        qdrant.QdrantStore.create(spec, IDENTITY | {"n_pool": 5})
    with pytest.raises(idx.IndexStoreError, match="another index"):
        qdrant.QdrantStore.create(spec, IDENTITY, "float16")


@pytest.fixture()
def explorer(tiny):
    return Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3, n_context=1), None)


def test_export_round_trip_add_and_delete(tmp_path, tiny, explorer, spec):
    idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, n_pool=7, shard_size=5)
    ix = idx.Index(tmp_path / "ix")
    seen: list[int] = []
    manifest = qdrant.export_index(ix, spec, progress=lambda d, t: seen.append(d))
    assert manifest["chunks"] == len(ix) and seen[-1] == len(ix)
    assert qdrant.export_index(ix, spec)["chunks"] == len(ix)  # resumes: every point present, nothing added
    q = torch.nn.functional.normalize(torch.randn(2, 2, 32, generator=torch.Generator().manual_seed(4)), dim=-1)
    with qdrant.QdrantStore(spec) as store:
        assert store.texts == ix.texts and set(unsupported(store, ["dense", "sparse", "unreal"])) == {"dense", "sparse"}
        ref_s, ref_i = ix.maxsim_topk(q, 10)
        scores, ids = store.maxsim_topk(q, 10)
        assert torch.equal(ids, ref_i) and torch.allclose(scores, ref_s, atol=1e-5)
        for method in ("unreal", "bm25", "hybrid-rrf"):  # the one query path, unchanged, over both stores
            ours, theirs = (retrieve(s, explorer, ["item 7 weighs", "item 12"], 5, method) for s in (ix, store))
            assert ours.ids == theirs.ids and np.allclose(ours.scores, theirs.scores, atol=1e-5)
        hit = search(store, explorer, "item 7 weighs", k=3)
        assert sum(max(row) for row in hit["hits"][0]["group_sims"]) == pytest.approx(hit["hits"][0]["score"], abs=1e-4)

        new = Passage("zz", "Zanzibar", "Zanzibar exports cloves and nutmeg to every harbour.", "added")
        added = qdrant.add_passages(store, tiny, [new])
        assert added == [len(ix)] and len(store) == len(ix) + 1 and store.chunks[-1]["title"] == "Zanzibar"
        expected = normalize_chunks(encode_chunks(tiny, [new.text], 3, 7))  # encoded as the build does
        assert torch.allclose(store.chunk_vectors([len(ix)]), expected, atol=1e-5)
        top = retrieve(store, explorer, ["Zanzibar cloves"], 1, "bm25").ids[0]
        assert store.chunks[top[0]]["passage"] == "zz"
        assert store.maxsim_topk(expected.mean(1, keepdim=True), 1)[1].item() == len(ix)  # UNREAL finds it too
        with pytest.raises(idx.IndexStoreError, match="in the store already"):
            qdrant.add_passages(store, tiny, [new])
        assert store.delete_passages(["zz"]) == 1 and len(store) == len(ix)
        assert "zz" not in {store.chunks[i]["passage"] for i in store.maxsim_topk(q, len(ix))[1].flatten().tolist()}


@pytest.mark.parametrize("bad", ["qdrant-edge:", "qdrant:", "qdrant:ftp://host", "qdrant:http://", "qdrant::memory:x",
                                 "qdrant:http://h:6333/a/b", "/some/folder", "qdrant-cloud:x"])
def test_bad_store_strings(bad):
    with pytest.raises(idx.IndexStoreError, match=r"not understood: use qdrant-edge:PATH \(embedded\) or qdrant:URL"):
        qdrant.QdrantStore(bad)


def test_open_store_and_missing_stores(tmp_path):
    with pytest.raises(idx.IndexStoreError, match="no Qdrant store at :memory:/nothing-here"):
        qdrant.open_store("qdrant::memory:/nothing-here")
    with pytest.raises(idx.IndexStoreError, match="manifest.json missing"):
        qdrant.open_store(str(tmp_path))  # a folder: an index, as before
    with pytest.raises(idx.IndexStoreError, match="apply to a Qdrant store"):
        qdrant.open_store(str(tmp_path), filter_=qdrant.Where(source="x"))
    with pytest.raises(idx.IndexStoreError, match="Qdrant at http://127.0.0.1:9/unreal: connecting failed"):
        qdrant.open_store("qdrant:http://127.0.0.1:9")  # nothing listens on the discard port
    _edge_or_skip()
    with pytest.raises(idx.IndexStoreError, match="no Qdrant store at"):
        qdrant.open_store(f"qdrant-edge:{tmp_path / 'none'}")


def test_upserts_retry(monkeypatch):
    from qdrant_client.http.exceptions import ResponseHandlingException

    with qdrant.QdrantStore.create(f"qdrant::memory:/t{uuid.uuid4().hex}", IDENTITY) as store:
        db, calls = store._db, {"n": 0}
        db.backoff, db.batch, real = 0.0, 2, db.client.upsert

        def flaky(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] % 2:  # every batch fails once, then goes through
                raise ResponseHandlingException(ConnectionError("connection reset"))
            return real(*args, **kwargs)

        monkeypatch.setattr(db.client, "upsert", flaky)
        rng = np.random.default_rng(0)
        store.upsert(rng.standard_normal((3, L_P, D)), [{"passage": "p", "title": "t", "source": "s", "text": "x"}] * 3,
                     rng.standard_normal((3, D_DENSE)))
        store.refresh()
        assert len(store) == 3 and calls["n"] == 4  # two batches, each tried twice
        db.retries = 1
        with pytest.raises(idx.IndexStoreError, match="upserting points failed: connection reset"):
            store.upsert(rng.standard_normal((1, L_P, D)), [{"passage": "p"}], rng.standard_normal((1, D_DENSE)))
