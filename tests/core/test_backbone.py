"""The GGUF → safetensors conversion on first start, including two processes converting at once."""

from __future__ import annotations

import threading

import pytest
import transformers

from tests.conftest import make_backbone
from unreal_demo.core import backbone as bb


def _fake_gguf(monkeypatch):
    """Auto classes that hand out a tiny model instead of reading a GGUF file; calls counted."""
    tiny, calls = make_backbone(n_layers=1), []

    class Model:
        @staticmethod
        def from_pretrained(folder, gguf_file, dtype):
            calls.append(gguf_file)
            return tiny.model

    class Tok:
        @staticmethod
        def from_pretrained(folder, gguf_file):
            return tiny.tokenizer

    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Model)
    monkeypatch.setattr(transformers, "AutoTokenizer", Tok)
    return calls


def test_two_conversions_at_once_leave_one_complete_copy(tmp_path, monkeypatch):
    calls = _fake_gguf(monkeypatch)
    out = tmp_path / "models" / "m"
    errors = []

    def convert():
        try:
            bb._convert_gguf(tmp_path, "m.gguf", out)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=convert) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(calls) == 2
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]  # no temporary folder left behind


def test_a_stale_incomplete_copy_is_replaced(tmp_path, monkeypatch):
    _fake_gguf(monkeypatch)
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").write_text("{}")  # a conversion killed before the weights were written
    bb._convert_gguf(tmp_path, "m.gguf", out)
    assert (out / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_random_backbone_has_the_folders_shape_and_tokenizer(tmp_path):
    """A config and tokenizer without weights (what travels to a lent GPU) give a model of that shape."""
    tiny = make_backbone(n_layers=3)
    tiny.model.config.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    got = bb.random_backbone(tmp_path, device="cpu", dtype="fp32", seed=1)
    assert (got.n_layers, got.hidden_size) == (3, tiny.hidden_size)
    assert got.tokenizer("Paris is the capital")["input_ids"] == tiny.tokenizer("Paris is the capital")["input_ids"]
    assert got.revision == "random:1" and not any(p.requires_grad for p in got.model.parameters())
    again = bb.random_backbone(tmp_path, device="cpu", dtype="fp32", seed=1)  # the seed fixes the weights
    assert all(bool((a == b).all()) for a, b in zip(got.model.parameters(), again.model.parameters(), strict=True))


def test_random_backbone_without_a_config_is_one_clear_error(tmp_path):
    with pytest.raises(bb.BackboneError, match="cannot read a config and tokenizer"):
        bb.random_backbone(tmp_path, device="cpu")
