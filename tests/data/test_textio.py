"""Reading documents: encodings, binary, PDF, unsupported types."""

from __future__ import annotations

import pytest

from unreal_demo.data.textio import check_text, decode_text, read_document
from unreal_demo.errors import InputError


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


BINARY = "\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x03\x00>\x00\x01\x00\x00\x00@\x10\x00\x00"


@pytest.mark.parametrize("text,match", [
    (BINARY, r"looks binary or damaged \(control character U\+007F at line 1, column 1\)"),
    ("A line.\nAnother\x1b[31m red one.", r"control character U\+001B at line 2, column 8"),
    ("A quote \x93like this\x94.", r"control character U\+0093"),  # C1: Windows-1252 quotes read as Latin-1
    ("Caf\ufffd au lait", r"not valid text in its encoding \(U\+FFFD at line 1, column 4\)"),
    ("bad \udcff byte", r"U\+DCFF"),  # a command-line argument that was not UTF-8
    ("It\u00e2\u20ac\u2122s here", "“â€™” at line 1, column 3 is UTF-8 read as Windows-1252 .*“’”"),
])
def test_pasted_text_gets_the_uploads_checks(text, match):
    with pytest.raises(InputError, match=match):
        check_text(text, "the document")


@pytest.mark.parametrize("text", [
    "Plain ASCII.\tTabs,\r\nline breaks\fand form feeds.",
    "Café, naïve, Ærøskøbing, “quotes” – dashes… São Paulo, Ãgua? no: Água.",
    "Ελληνικά, русский, 中文, emoji 🙂",
])
def test_real_text_passes(text):
    check_text(text)


def test_a_file_gets_the_same_checks(tmp_path):
    (tmp_path / "mojibake.txt").write_text("caf\u00c3\u00a9", encoding="utf-8")  # saved after a wrong decoding
    with pytest.raises(InputError, match="mojibake.txt: .* UTF-8 read as Windows-1252"):
        read_document(tmp_path / "mojibake.txt")
