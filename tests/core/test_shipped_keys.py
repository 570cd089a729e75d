"""Training keys kept compressed in the repository: written once, used where the local cache lacks them."""

from __future__ import annotations

import numpy as np
import torch

from unreal_demo.core import codec
from unreal_demo.core import shipped_keys as sk
from unreal_demo.core.encoding import cache_folder, cached_encode

TEXTS = [f"Paragraph {i} is about the number {i * 7} and the colour {c}." for i, c in
         enumerate(["red", "green", "blue", "cyan", "amber", "violet"] * 6)]


def test_a_fresh_cache_uses_the_repositorys_copy(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sk, "PRECOMPUTED", tmp_path / "precomputed")
    first = sk.training_keys(tiny, TEXTS, 3, 7, 64, keep=True)  # encodes, then keeps a copy
    shipped = sk.shipped_path(cache_folder(tiny, TEXTS, 3, 7, 64).name)
    assert shipped.exists() and torch.equal(first, cached_encode(tiny, TEXTS, 3, 7, 64))

    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "fresh"))  # another machine: empty cache

    def no_encoding(*args, **kwargs):
        raise AssertionError("the repository's copy must be used")

    monkeypatch.setattr(sk, "cached_encode", no_encoding)
    again = sk.training_keys(tiny, TEXTS, 3, 7, 64)
    assert again.shape == first.shape
    want = codec.normalize(first.numpy())  # (n, L_p, d) unit vectors, as training uses them
    with np.load(shipped) as z:
        fitted = codec.Codec("res2", {k[6:]: z[k] for k in z.files if k.startswith("codec_")})
    assert float(np.abs(again.numpy() - want).max()) <= codec.error_bound(fitted, want)


def test_other_texts_never_use_the_copy(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sk, "PRECOMPUTED", tmp_path / "precomputed")
    sk.training_keys(tiny, TEXTS, 3, 7, 64, keep=True)
    other = TEXTS[:-1] + ["another paragraph"]
    assert not sk.shipped_path(cache_folder(tiny, other, 3, 7, 64).name).exists()
    assert torch.equal(sk.training_keys(tiny, other, 3, 7, 64), cached_encode(tiny, other, 3, 7, 64))


def test_without_keep_nothing_is_written(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sk, "PRECOMPUTED", tmp_path / "precomputed")
    sk.training_keys(tiny, TEXTS, 3, 7, 64)
    assert not (tmp_path / "precomputed").exists()


def test_a_run_adding_a_source_encodes_only_the_new_one(tiny, tmp_path, monkeypatch):
    from unreal_demo.core.training import TrainConfig, _keys

    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sk, "PRECOMPUTED", tmp_path / "precomputed")
    old, new = TEXTS[:30], [f"Claim {i}: the sky is {c}." for i, c in enumerate(["blue", "grey", "red"] * 2)]
    sk.training_keys(tiny, old, 3, 7, 64, keep=True)  # the shipped run's sources
    assert sk.split_at_shipped(tiny, old + new, [10, 30, 36], 3, 7, 64) == 30
    assert sk.split_at_shipped(tiny, old + new, [10, 36], 3, 7, 64) == 0  # no whole-source prefix is shipped

    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "fresh"))  # another machine
    encoded = []
    real = sk.cached_encode

    def counting(bb, texts, *args, **kwargs):
        encoded.append(len(texts))
        return real(bb, texts, *args, **kwargs)

    monkeypatch.setattr(sk, "cached_encode", counting)
    cfg = TrainConfig(chunk_layer=3, n_pool=7, chunk_tokens=64)
    keys = _keys(cfg, tiny, old + new, bounds=[30, 36])
    assert encoded == [len(new)] and keys.shape[0] == len(old) + len(new)
    assert torch.allclose(keys[30:], cached_encode(tiny, new, 3, 7, 64))
