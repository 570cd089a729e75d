"""Reading documents: encodings, binary, PDF, unsupported types."""

from __future__ import annotations

import pytest

from unreal_demo.data.textio import decode_text, read_document
from unreal_demo.pipeline import InputError


@pytest.mark.parametrize("raw,text", [
    ("héllo".encode(), "héllo"),
    ("\ufeffhéllo".encode(), "héllo"),
    ("héllo".encode("utf-16"), "héllo"),
    ("caf\xe9 \u2019".encode("cp1252"), "caf\xe9 \u2019"),
])
def test_decodes(raw, text):
    assert decode_text(raw) == text


@pytest.mark.parametrize("raw,match", [
    (b"\x00\x01\x02binary", "binary"),
    (b"%PDF-1.7 ...", "PDF"),
    (bytes([0x81, 0x8d, 0x8f]), "not UTF-8"),
])
def test_refuses(raw, match):
    with pytest.raises(InputError, match=match):
        decode_text(raw)


def test_read_document(tmp_path):
    (tmp_path / "a.txt").write_text("Some text.", encoding="utf-8")
    assert read_document(tmp_path / "a.txt") == "Some text."
    (tmp_path / "a.exe").write_bytes(b"MZ")
    with pytest.raises(InputError, match="unsupported"):
        read_document(tmp_path / "a.exe")
    with pytest.raises(InputError, match="no such file"):
        read_document(tmp_path / "missing.txt")
    (tmp_path / "big.txt").write_text("x" * 101)
    with pytest.raises(InputError, match="limit"):
        read_document(tmp_path / "big.txt", max_chars=100)
