"""Compressed keys: each codec within its stated error, compressed search equal to brute force over the
decoded vectors, `index compress` equal to `index build --codec`, a corrupted shard caught by its checksum."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from unreal_demo.__main__ import main
from unreal_demo.core import codec as cd
from unreal_demo.core.maxsim import maxsim_reference
from unreal_demo.data.sources import Passage
from unreal_demo.store import index as idx

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage {i} says item {i} weighs {i * 3} kilograms. " * (1 + i % 3),
                    "test") for i in range(40)]
RNG = np.random.default_rng(0)
X = (RNG.normal(size=(300, 7, 32)) * RNG.uniform(0.5, 3, size=(1, 1, 32))).astype(np.float32)


@pytest.mark.parametrize("name", cd.CODECS)
def test_decode_within_the_stated_bound(name):
    codec = cd.fit(name, X.reshape(-1, 32), centroids=16)
    stored = X if name in ("fp16", "int8") else cd.normalize(X)
    err = np.abs(codec.decode(codec.encode(X)) - stored)  # (n, L_p, d)
    bound = cd.error_bound(codec, stored)
    if name == "sq4":  # components outside faiss's trained (quantile) range are clipped: under 1% of them
        t = codec.state["trained"]
        inside = (stored >= t[:32] - 1e-6) & (stored <= t[:32] + t[32:] + 1e-6)
        assert inside.mean() > 0.99
        err = err[inside]
    assert err.max() <= bound, (name, err.max(), bound)
    assert codec.bytes_per_vector(32) == {"fp16": 64, "int8": 34, "sq4": 16, "pq2": 8, "rpq2": 10, "rpq3": 13,
                                          "res3": 14, "res2": 10, "res1": 6}[name]
    sizes = sum(a.nbytes for a in codec.encode(X).values()) / (300 * 7)
    assert sizes == pytest.approx(codec.bytes_per_vector(32), abs=0.01)


def test_residual_codes_beat_their_centroids():
    """The residual codes add information: decoded vectors are closer than their centroids alone."""
    flat = cd.normalize(X).reshape(-1, 32)
    for name in ("res1", "res2", "res3", "rpq2", "rpq3"):
        codec = cd.fit(name, flat, centroids=16)
        arrays = codec.encode(X)
        centroid_only = codec.state["centroids"].astype(np.float32)[arrays["cid"].reshape(-1).astype(int)]
        decoded = codec.decode(arrays).reshape(-1, 32)
        assert np.abs(decoded - flat).mean() < 0.75 * np.abs(centroid_only - flat).mean(), name


@pytest.fixture()
def built(tmp_path, tiny):
    idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, n_pool=7, shard_size=8, dense=False)
    return tmp_path / "ix"


@pytest.mark.parametrize("name", ["sq4", "pq2", "rpq2", "rpq3", "res3", "res2", "res1", "int8"])
def test_compressed_search_equals_brute_force_over_decoded(tmp_path, built, name):
    m = idx.compress_index(built, tmp_path / name, name, centroids=16)
    assert m["dtype"] == name and (tmp_path / name / "chunks.jsonl.gz").exists()
    assert not (tmp_path / name / "bm25").exists()  # rebuilt in memory
    ix = idx.Index(tmp_path / name)
    decoded = torch.cat([ix.vectors(sh) for sh in ix.shards])  # (M, L_p, d)
    q = torch.nn.functional.normalize(torch.randn(3, 2, 32, generator=torch.Generator().manual_seed(1)), dim=-1)
    ref = maxsim_reference(q, torch.nn.functional.normalize(decoded, dim=-1))
    scores, ids = ix.maxsim_topk(q, k=10, block=3)
    # the same top-10 up to float rounding: each hit's reference score is the reference's value at that rank
    assert torch.allclose(ref.gather(1, ids), ref.topk(10).values, atol=1e-5)
    assert torch.allclose(scores, ref.topk(10).values, atol=1e-4)
    assert ix.texts == idx.Index(built).texts
    bounded = idx.Index(tmp_path / name, decode_budget=0)  # nothing kept: every scan decodes again
    assert torch.equal(bounded.maxsim_topk(q, k=10, block=3)[1], ids) and bounded._decoded_bytes == 0
    query = ["item 7 weighs"]
    assert ix.bm25_topk(query, 3)[1].tolist() == idx.Index(built).bm25_topk(query, 3)[1].tolist()


def test_compress_equals_build_with_codec(tmp_path, tiny):
    """`index build --codec res2` (through the CLI, on a tiny model saved to a folder) equals
    `index build` + `index compress` on the same chunks."""
    folder = tmp_path / "model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n" for p in PASSAGES))
    common = ["--model", str(folder), "--corpus", str(corpus), "--chunk-layer", "3", "--shard-size", "8",
              "--no-dense"]
    assert main(["index", "build", "--out", str(tmp_path / "a"), "--codec", "res2", "--centroids", "16", *common]) == 0
    assert not (tmp_path / "a.fp16-build").exists()
    assert main(["index", "build", "--out", str(tmp_path / "f"), *common]) == 0
    assert main(["index", "compress", "--from", str(tmp_path / "f"), "--out", str(tmp_path / "b"), "--codec",
                 "res2", "--centroids", "16"]) == 0
    a, b = (json.loads((tmp_path / x / "manifest.json").read_text()) for x in "ab")
    assert a["shards"] == b["shards"] and a["codec_sha256"] == b["codec_sha256"]  # byte-identical shards
    assert main(["index", "compress", "--from", str(tmp_path / "f"), "--out", str(tmp_path / "b"),
                 "--codec", "res2"]) == 2  # never over an existing index


def test_corrupted_shard_is_caught(tmp_path, built, capsys):
    idx.compress_index(built, tmp_path / "c", "res2", centroids=16)
    shard = tmp_path / "c" / "shard_00001.codes.npy"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(idx.IndexStoreError, match="shard_00001.codes.npy is missing or fails its checksum"):
        idx.Index(tmp_path / "c")
    (tmp_path / "c" / "codec.npz").write_bytes(b"junk")
    with pytest.raises(idx.IndexStoreError, match="codec.npz is missing or fails its checksum"):
        idx.Index(tmp_path / "c")
