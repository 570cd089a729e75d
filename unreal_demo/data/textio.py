"""Reading user documents: plain text only, in a known encoding, within a size limit.

Example
-------
>>> decode_text("café".encode("cp1252"), "a.txt")
'café'
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..settings import MAX_CHARS

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text", ".rst", ""}
_ENCODINGS = ("utf-8-sig", "cp1252")


def decode_text(raw: bytes, name: str = "document") -> str:
    """Decode ``raw`` as UTF-8 (with or without BOM), UTF-16 with BOM, or Windows-1252.

    Raises
    ------
    InputError
        For binary content (NUL bytes without a UTF-16 BOM) or bytes no encoding accepts.
    """
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError:
            raise InputError(f"{name}: not valid UTF-16 text") from None
    if raw.startswith(b"%PDF"):
        raise InputError(f"{name}: PDF files are not supported; paste or upload the text (.txt, .md)")
    if b"\x00" in raw[:65536]:
        raise InputError(f"{name}: looks binary (NUL bytes), not text")
    for enc in _ENCODINGS:
        try:
            return raw.decode(enc)
        except UnicodeDecodeError:
            continue
    raise InputError(f"{name}: not UTF-8 or Windows-1252 text")


def read_document(path: str | Path, max_chars: int = MAX_CHARS) -> str:
    """Read a text document from disk, refusing unsupported types, binary files and huge files."""
    path = Path(path)
    if path.suffix.lower() not in TEXT_SUFFIXES:
        raise InputError(f"{path.name}: unsupported file type {path.suffix!r}; use .txt or .md")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    size = path.stat().st_size
    if size > 4 * max_chars:  # no encoding needs more than 4 bytes a character
        raise InputError(f"{path.name}: {size:,} bytes is over the limit of {max_chars:,} characters")
    text = decode_text(path.read_bytes(), path.name)
    if len(text) > max_chars:
        raise InputError(f"{path.name}: {len(text):,} characters; the limit is {max_chars:,}")
    return text
