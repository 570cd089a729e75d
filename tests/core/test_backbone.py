"""The GGUF → safetensors conversion on first start, including two processes converting at once."""

from __future__ import annotations

import threading

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
