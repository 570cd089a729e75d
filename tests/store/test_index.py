"""The sharded index: brute-force equality, resume after a kill, checksums, settings clashes, hybrid fusion."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from unreal_demo.core.encoding import encode_chunks
from unreal_demo.core.head import untrained_head
from unreal_demo.core.maxsim import maxsim_reference, normalize_chunks
from unreal_demo.core.selection import reciprocal_rank_fusion
from unreal_demo.data.sources import Passage
from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.hits import search
from unreal_demo.retrieval.registry import RetrievalError, retrieve, unsupported
from unreal_demo.store import index as idx

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage {i} tells that item {i} weighs {i * 3} kilograms. " * (1 + i % 3),
                    "test") for i in range(23)]


@pytest.fixture()
def explorer(tiny):
    return Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3, n_context=1), None)


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
    hit = search(ix, explorer, "item 7 weighs", k=3, method="unreal")
    assert [h["rank"] for h in hit["hits"]] == [1, 2, 3] and set(hit["timings"]) >= {"query_encoding", "scan"}
    for h in hit["hits"]:  # Eq. 4 from the evidence view's G × L_p similarities: Σ_g max_p ⟨q_g, k_p⟩
        assert len(h["group_sims"]) == 2 and len(h["group_sims"][0]) == 7
        assert sum(max(row) for row in h["group_sims"]) == pytest.approx(h["score"], abs=1e-3)
    assert "group_sims" not in search(ix, explorer, "item 7 weighs", k=3, method="bm25")["hits"][0]
    pair = torch.stack([ix.vectors(ix.shards[1])[1], ix.vectors(ix.shards[0])[0]])  # chunks 6 and 0 (5 per shard)
    assert torch.equal(ix.chunk_vectors([6, 0]), pair) and ix.chunk_vectors([]).shape == (0, 7, 32)


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


def sparse_by_hand(queries, chunk_tokens, chunk_means, k, alpha):
    """The token channel computed directly, as the module docstring states it: μ the mean of every stored token
    state; each query token and each stored token minus μ, normalised; per query token its k best stored tokens;
    per chunk the best of its tokens among them, else the k-th (lowest) score; the mean over query tokens; then
    (1 − α)·that + α·the cosine of the mean query state with the chunk's mean pooled state."""
    mu = torch.cat(chunk_tokens).double().mean(0).float()
    unit = [torch.nn.functional.normalize(t - mu, dim=-1) for t in chunk_tokens]
    flat = [(c, v) for c, t in enumerate(unit) for v in t]
    out = torch.zeros(len(queries), len(chunk_tokens))
    for j, q in enumerate(queries):
        for qtok in torch.nn.functional.normalize(q - mu, dim=-1):
            sims = sorted(((float(qtok @ v), c) for c, v in flat), reverse=True)[:k]
            for c in range(len(chunk_tokens)):
                out[j, c] += max((s for s, o in sims if o == c), default=sims[-1][0]) / len(q)
        pooled = torch.nn.functional.cosine_similarity(q.mean(0)[None], chunk_means, dim=-1)
        out[j] = (1 - alpha) * out[j] + alpha * pooled
    return out


def test_the_token_mean_is_recorded_at_build_and_recomputed_for_an_older_index(tmp_path, tiny):
    """μ in the manifest is the mean of the stored token states (fp16 as stored), computed by hand; an index
    whose manifest predates the field gets the same μ from its token states."""
    idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, shard_size=5, token_states=True)
    ix = idx.Index(tmp_path / "ix")
    toks: list[torch.Tensor] = []
    encode_chunks(tiny, [c["text"] for c in ix.chunks], 3, 7, tokens_out=toks)
    by_hand = torch.cat([t.half().float() for t in toks]).mean(0)
    assert torch.allclose(torch.tensor(ix.manifest["token_mean"]), by_hand, atol=1e-4)
    assert torch.allclose(ix.token_mean(), by_hand, atol=1e-4)
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    del manifest["token_mean"]
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
    assert torch.allclose(idx.Index(tmp_path / "ix").token_mean(), by_hand, atol=1e-4)
    build(tmp_path / "plain", tiny)
    assert "token_mean" not in json.loads((tmp_path / "plain" / "ix" / "manifest.json").read_text())


def test_dense_and_sparse_methods_equal_brute_force(tmp_path, tiny, explorer):
    from unreal_demo.core import minilm as dense
    from unreal_demo.retrieval import sparse

    idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, shard_size=5, token_states=True, dense=True)
    ix = idx.Index(tmp_path / "ix")
    texts = [c["text"] for c in ix.chunks]
    toks: list[torch.Tensor] = []
    keys = encode_chunks(tiny, texts, 3, 7, tokens_out=toks)
    queries = ["item 7 weighs", "Passage 12 tells"]
    qt = sparse.query_token_states(tiny, queries, 3)
    ref = sparse_by_hand(qt, [t.float() for t in toks], keys.half().float().mean(1), sparse.K, sparse.ALPHA)
    scores, _ = sparse.SparseRetriever().top(ix, qt, k=4, alpha=sparse.ALPHA)  # fused, as for the default model
    assert torch.allclose(scores, ref.topk(4).values, atol=1e-3)
    alone = sparse_by_hand(qt, [t.float() for t in toks], keys.half().float().mean(1), sparse.K, 0.0)
    scores, ids = sparse.SparseRetriever().top(ix, qt, k=4, alpha=sparse.alpha_for(tiny.name))  # never fitted: alone
    assert torch.allclose(scores, alone.topk(4).values, atol=1e-3)
    ids_d = retrieve(ix, explorer, queries, k=3, method="dense").ids
    ref_d = (dense.embed(queries) @ dense.embed(texts).T).topk(3).indices
    assert ids_d == ref_d.tolist()
    found = retrieve(ix, explorer, queries, k=4, method="sparse")
    assert found.ids == ids.tolist() and set(found.timings) >= {"query_encoding", "scan"}


def test_product_quantised_dense_vectors_search_as_decoded(tmp_path, tiny, explorer):
    """`--dense-codec pq2`: the MiniLM vectors are stored as 96-byte codes and searched exactly as decoded."""
    from unreal_demo.core import minilm as dense

    idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, shard_size=5, dense=True)
    m = idx.compress_index(tmp_path / "ix", tmp_path / "pq", "rpq2", centroids=16, dense_codec="pq2")
    assert m["dense_dtype"] == "pq2" and not list((tmp_path / "pq").glob("dense_*[0-9].npy"))
    ix, full = idx.Index(tmp_path / "pq"), idx.Index(tmp_path / "ix")
    decoded = torch.from_numpy(np.concatenate([ix.dense_codec.decode({"codes": sh["dense_codes"]})[:, 0]
                                               for sh in ix.shards]))  # (M, 384)
    original = torch.cat([torch.from_numpy(sh["dense"]).float() for sh in full.shards])
    assert decoded.shape == original.shape
    assert (decoded - original).abs().max() <= float(ix.dense_codec.state["max_err"]) + 1e-3  # fp16 originals
    queries = ["item 7 weighs", "Passage 12 tells"]
    ref = (dense.embed(queries) @ decoded.T).topk(3).indices
    assert retrieve(ix, explorer, queries, k=3, method="dense").ids == ref.tolist()
    (tmp_path / "pq" / "dense_codec.npz").write_bytes(b"junk")
    with pytest.raises(idx.IndexStoreError, match="dense_codec.npz is missing or fails its checksum"):
        idx.Index(tmp_path / "pq")


def test_the_index_bm25_is_the_project_bm25_loaded_from_disk(tmp_path, tiny):
    """One BM25 type: the index's saved bm25s index comes back as a core.selection.BM25 scoring as one built anew."""
    from unreal_demo.core.selection import BM25

    build(tmp_path, tiny)
    ix = idx.Index(tmp_path / "ix")
    assert (tmp_path / "ix" / "bm25").is_dir() and isinstance(ix.bm25, BM25) and ix.bm25.size == len(ix)
    queries = ["item 7 weighs", "kilograms", "the of"]  # the last: stop words only, a row of zeros
    assert torch.equal(ix.bm25_scores(queries), BM25(ix.texts).scores(queries))
    assert ix.bm25_scores(queries)[2].abs().sum() == 0


def test_a_search_shows_bm25_beside_it_with_bm25_scored_once(tmp_path, tiny, explorer, monkeypatch):
    """The Wikipedia tab's search: the method's hits and BM25's top 100 from one BM25 scoring of the query (the
    method's own for bm25, unreal's C0 and the hybrids), equal to a separate BM25 search."""
    idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, shard_size=5, dense=True)
    ix = idx.Index(tmp_path / "ix")
    alone = search(ix, explorer, "item 7 weighs", 100, "bm25")["hits"]
    calls, real = [], ix.bm25_scores
    monkeypatch.setattr(ix, "bm25_scores", lambda queries: calls.append(queries) or real(queries))
    for method in ("unreal", "bm25", "hybrid-rrf", "dense"):
        calls.clear()
        got = search(ix, explorer, "item 7 weighs", 5, method, bm25_k=100)
        assert len(calls) == 1, method
        assert got["bm25_hits"] == alone and len(alone) == len(ix), method
    calls.clear()
    found = retrieve(ix, explorer, ["item 7 weighs"], 5, "hybrid-fusion", fusion_weight=0.5)
    assert len(calls) == 1 and torch.equal(found.bm25_scores, real(["item 7 weighs"]))


def test_methods_the_index_lacks_are_refused(tmp_path, tiny, explorer):
    build(tmp_path, tiny)
    ix = idx.Index(tmp_path / "ix")
    for method, flag in (("dense", "--dense"), ("sparse", "--token-states")):
        with pytest.raises(idx.IndexStoreError, match=flag):
            retrieve(ix, explorer, ["item 7"], k=3, method=method)
    with pytest.raises(RetrievalError, match="unknown retrieval method"):
        retrieve(ix, explorer, ["item 7"], k=3, method="colbert")


def test_two_process_accelerate_build_equals_one_process(tmp_path):
    """`accelerate launch` with 2 CPU processes (torchrun + gloo): each writes its own shards, the manifest
    merges them, and the index equals a one-process build."""
    import os
    import subprocess
    import sys

    import numpy as np
    from conftest import make_backbone

    bb = make_backbone()
    bb.model.save_pretrained(tmp_path / "tiny")
    bb.tokenizer.save_pretrained(tmp_path / "tiny")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n" for p in PASSAGES))
    flags = ["-m", "unreal_demo", "index", "build", "--model", str(tmp_path / "tiny"), "--corpus", str(corpus),
             "--chunk-layer", "2", "--n-pool", "3", "--shard-size", "4", "--no-dense", "--token-states", "--cpu"]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", "29517"]
    for cmd, out in ((launch + flags, "two"), ([sys.executable] + flags, "one")):
        run = subprocess.run(cmd + ["--out", str(tmp_path / out)], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
    two, one = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("two", "one"))
    assert two["build"]["processes"] == 2 and one["build"]["processes"] == 1
    assert {json.loads(p.read_text())["process"] for p in (tmp_path / "two").glob("shard_*.json")} == {0, 1}
    assert (tmp_path / "two" / "chunks.jsonl").read_text() == (tmp_path / "one" / "chunks.jsonl").read_text()
    assert [list(s["files"]) for s in two["shards"]] == [list(s["files"]) for s in one["shards"]]
    for s in two["shards"]:
        for name in s["files"]:
            assert np.allclose(np.load(tmp_path / "two" / name), np.load(tmp_path / "one" / name), atol=1e-3)
    assert len(idx.Index(tmp_path / "two")) == len(PASSAGES)


SHARDED = """
import sys, torch, torch.distributed as dist
from unreal_demo.store.index import Index, sharded_maxsim_topk
dist.init_process_group("gloo")
ix, q = Index(sys.argv[1]), torch.load(sys.argv[2])
scores, ids = sharded_maxsim_topk(ix, q, int(sys.argv[3]))
if dist.get_rank() == 0:
    torch.save((scores, ids), sys.argv[4])
dist.destroy_process_group()
"""


@pytest.mark.parametrize("k", [4, 40])  # k above the chunks one process holds, and above all chunks
def test_sharded_scan_over_two_processes_equals_one(tmp_path, tiny, k):
    import os
    import subprocess
    import sys

    build(tmp_path, tiny)
    ix = idx.Index(tmp_path / "ix")
    q = torch.nn.functional.normalize(torch.randn(3, 2, 32), dim=-1)
    torch.save(q, tmp_path / "q.pt")
    (tmp_path / "run.py").write_text(SHARDED)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29518",
           str(tmp_path / "run.py"), str(tmp_path / "ix"), str(tmp_path / "q.pt"), str(k), str(tmp_path / "o.pt")]
    run = subprocess.run(cmd, env=os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    scores, ids = torch.load(tmp_path / "o.pt")
    ref_s, ref_i = ix.maxsim_topk(q, k)
    assert torch.allclose(scores, ref_s, atol=1e-5) and torch.equal(ids, ref_i)


def test_methods_an_index_cannot_serve_are_known_before_any_work(tmp_path, tiny, capsys):
    from unreal_demo.cli.common import servable as _servable
    from unreal_demo.errors import InputError

    build(tmp_path, tiny, dense=False)
    ix = idx.Index(tmp_path / "ix")
    assert unsupported(ix, ["unreal", "bm25", "sparse", "dense"]) == {"sparse": "--token-states", "dense": "--dense"}
    explorer = SimpleNamespace(head=SimpleNamespace(config=SimpleNamespace(fusion_weight=None)), head_source="h.json")
    assert _servable(ix, explorer, ["bm25", "sparse", "unreal"], explicit=False) == ["bm25", "unreal"]
    assert "no data for sparse" in capsys.readouterr().err
    with pytest.raises(InputError, match="cannot serve sparse"):
        _servable(ix, explorer, ["sparse"], explicit=True)
    # score fusion needs the head's dev-fitted weight: left out of the default list, an error by name
    assert _servable(ix, explorer, ["unreal", "hybrid-fusion"], explicit=False) == ["unreal"]
    assert "no score-fusion weight" in capsys.readouterr().err
    with pytest.raises(InputError, match="eval heads --head h.json --save-fusion"):
        _servable(ix, explorer, ["hybrid-fusion"], explicit=True)
    explorer.head.config.fusion_weight = 0.6
    assert _servable(ix, explorer, ["unreal", "hybrid-fusion"], explicit=True) == ["unreal", "hybrid-fusion"]


def test_a_resumed_build_never_mixes_encoding_dtypes(tmp_path, tiny):
    import copy
    import dataclasses

    import torch

    folder = tmp_path / "ix"
    idx.build_index(folder, tiny, PASSAGES[:3], layer=3, n_pool=7, shard_size=8, dense=False)
    half = dataclasses.replace(tiny, model=copy.deepcopy(tiny.model).to(torch.bfloat16))
    with pytest.raises(idx.IndexStoreError, match="encoded_in"):
        idx.build_index(folder, half, PASSAGES[:3], layer=3, n_pool=7, shard_size=8, dense=False)
    idx.build_index(folder, tiny, PASSAGES[:3], layer=3, n_pool=7, shard_size=8, dense=False)  # same: resumes


def random_index(folder, chunks: int, shard_size: int, d: int = 48, seed: int = 0) -> idx.Index:
    """An fp16 index of random chunk keys (a few near-duplicates for near-ties), written without a model."""
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=(chunks, 7, d)).astype(np.float32) * rng.uniform(0.5, 3, size=(chunks, 7, 1))
    keys[1::97] = keys[::97][: len(keys[1::97])] + 1e-3 * rng.normal(size=keys[1::97].shape)
    folder.mkdir()
    shards = []
    for n, s in enumerate(range(0, chunks, shard_size)):
        np.save(folder / f"shard_{n:05d}.npy", keys[s : s + shard_size].astype(np.float16))
        shards.append({"n": len(keys[s : s + shard_size]), "files": {f"shard_{n:05d}.npy": ""}})
    (folder / "manifest.json").write_text(json.dumps({"chunks": chunks, "shard_size": shard_size, "shards": shards,
                                                      "dtype": "fp16", "n_pool": 7, "hidden_size": d}))
    return idx.Index(folder, verify=False)


def spy_paths(monkeypatch) -> list[str]:
    """The scan path of every shard scanned from now on, in order."""
    paths: list[str] = []
    scan = idx.maxsim
    monkeypatch.setattr(idx, "maxsim", lambda *a: paths.append(a[-1]) or scan(*a))
    return paths


@pytest.mark.parametrize("normalize", [True, False])
def test_every_scan_path_gives_the_reference_top_k(tmp_path, normalize):
    """numkong (query rounded to fp16, candidates re-scored in fp32), numba and torch return the ids of the fp32
    reference and its scores."""
    pytest.importorskip("numkong")
    pytest.importorskip("numba")
    ix = random_index(tmp_path / "ix", 2500, 1000)
    q = torch.randn(6, 4, 48)
    keys = ix.chunk_vectors(range(len(ix)))
    ref_s, ref_i = maxsim_reference(q, normalize_chunks(keys) if normalize else keys).topk(10, dim=1)
    for path in ("numba", "numkong", "torch"):
        scores, ids = ix.maxsim_topk(q, 10, normalize, path=path)
        assert torch.equal(ids, ref_i) and torch.allclose(scores, ref_s, rtol=1e-5, atol=1e-5), path


def test_numkong_scan_rescans_by_torch_when_a_chunk_could_be_missed(tmp_path, monkeypatch):
    """With no candidates beyond k the check cannot exclude a chunk left out: every query is scanned again by
    torch, and the result is still the reference top-k; so is a k above the number of chunks."""
    pytest.importorskip("numkong")
    ix = random_index(tmp_path / "ix", 900, 400)
    q = torch.randn(3, 4, 48)
    paths = spy_paths(monkeypatch)
    monkeypatch.setattr(idx, "RESCORE", 0)
    ref_s, ref_i = maxsim_reference(q, normalize_chunks(ix.chunk_vectors(range(len(ix))))).topk(10, dim=1)
    scores, ids = ix.maxsim_topk(q, 10, path="numkong")
    assert paths == ["numkong"] * 3 + ["torch"] * 3  # 3 shards scanned, then scanned again
    assert torch.equal(ids, ref_i) and torch.allclose(scores, ref_s, atol=1e-5)
    scores, ids = ix.maxsim_topk(q, 5000, path="numkong")
    assert ids.shape == (3, 900) and torch.equal(ids[:, :10], ref_i)
    for shards in ([], [2]):  # a process of a sharded scan holding no shard, or fewer chunks than k + RESCORE
        got, want = (ix.maxsim_topk(q, 10, False, shards=shards, path=p) for p in ("numkong", "torch"))
        assert torch.equal(got[1], want[1]) and torch.allclose(got[0], want[0], atol=1e-5)


def test_a_deep_top_k_is_scanned_by_torch_not_re_scored(tmp_path, monkeypatch):
    """Score fusion ranks every chunk (k = the index size): re-scoring that many candidates per query would gather
    every key once per query (32 GB for 100 queries over the shipped index), so such a scan goes to torch."""
    pytest.importorskip("numkong")
    ix = random_index(tmp_path / "ix", 900, 400)
    paths = spy_paths(monkeypatch)
    monkeypatch.setattr(idx, "RESCORE_BUDGET", 100)
    q = torch.randn(3, 4, 48)
    scores, ids = ix.maxsim_topk(q, 900, path="numkong")  # 3 × (900 + 32) pairs > 100
    assert paths == ["torch"] * 3 and ids.shape == (3, 900)
    paths.clear()
    ix.maxsim_topk(q[:1], 10, path="numkong")  # 1 × 42 pairs: the fast path
    assert paths == ["numkong"] * 3


def test_the_scan_follows_the_cpu_choice(tmp_path, monkeypatch):
    """$UNREAL_SCAN (or its package missing) picks the path every shard is scanned with."""
    ix = random_index(tmp_path / "ix", 300, 100)
    paths = spy_paths(monkeypatch)
    monkeypatch.setenv("UNREAL_SCAN", "torch")
    ix.maxsim_topk(torch.randn(1, 4, 48), 5)
    monkeypatch.setenv("UNREAL_SCAN", "numkong")
    monkeypatch.setattr("unreal_demo.core.cpu.numkong_available", lambda: False)
    monkeypatch.setattr("unreal_demo.core.cpu.numba_available", lambda: False)
    ix.maxsim_topk(torch.randn(1, 4, 48), 5)
    assert paths == ["torch"] * 6
    paths.clear()
    monkeypatch.setattr("unreal_demo.core.cpu.numba_available", lambda: True)
    monkeypatch.setenv("UNREAL_SCAN", "numba")
    ix.maxsim_topk(torch.randn(1, 4, 48), 5)
    assert paths == ["numba"] * 3
