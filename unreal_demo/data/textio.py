"""Reading user documents: plain text only, in a known encoding, within a size limit; the same checks
(:func:`check_text`) for text that is pasted or typed as for a file's.

Example
-------
>>> decode_text("café".encode("cp1252"), "a.txt")
'café'
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InputError
from ..settings import MAX_CHARS

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".text", ".rst", ""}
_ENCODINGS = ("utf-8-sig", "cp1252")
# Control characters other than tab, line feed, vertical tab, form feed and carriage return (C0, DEL, C1), the
# replacement character a wrong decoding leaves, and lone surrogates (bytes that were not UTF-8, as argv keeps them).
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_DAMAGED = re.compile(r"[\ufffd\ud800-\udfff]")
# UTF-8 read as Windows-1252 ("cafÃ©" for "café"): a lead byte's character, then its continuation bytes'.
_CONTINUATION = bytes(range(0x80, 0xC0)).decode("cp1252", errors="ignore")
_MOJIBAKE = re.compile(f"[\u00c2-\u00f4][{re.escape(_CONTINUATION)}]{{1,3}}")


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


def _where(text: str, at: int) -> str:
    line = text.count("\n", 0, at) + 1
    return f"line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1}"


def check_text(text: str, name: str = "the text") -> None:
    """Refuse text that is binary, damaged or in the wrong encoding, however it came (file, paste, argument).

    Parameters
    ----------
    text
        The decoded text (a document or a question).
    name
        What to call it in the message (``"the document"``, ``"a.txt"``).

    Raises
    ------
    InputError
        One line naming the first offending character and where it is: a control character (binary or damaged
        text), a replacement character or a lone surrogate (decoded with the wrong encoding), or UTF-8 read as
        Windows-1252 ("Ã©").

    Examples
    --------
    >>> check_text("Plain text,\\ttabs and\\nline breaks are fine.")
    >>> check_text("caf\\u00c3\\u00a9 au lait", "the question")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    unreal_demo.errors.InputError: the question: “Ã©” at line 1, column 4 is UTF-8 read as Windows-1252 (...“é”)...
    """
    if found := _CONTROL.search(text):
        raise InputError(f"{name}: looks binary or damaged (control character U+{ord(found.group()):04X} at "
                         f"{_where(text, found.start())}); paste or upload plain text")
    if found := _DAMAGED.search(text):
        raise InputError(f"{name}: holds characters that were not valid text in its encoding (U+"
                         f"{ord(found.group()):04X} at {_where(text, found.start())}); paste or save the text as UTF-8")
    for found in _MOJIBAKE.finditer(text):
        try:
            meant = found.group().encode("cp1252").decode("utf-8")
        except UnicodeError:
            continue
        raise InputError(f"{name}: “{found.group()}” at {_where(text, found.start())} is UTF-8 read as "
                         f"Windows-1252 (it should be “{meant}”): paste or save the text as UTF-8")


def read_document(path: str | Path, max_chars: int = MAX_CHARS) -> str:
    """Read a text document from disk, refusing unsupported types, binary, damaged or mis-encoded text
    (:func:`check_text`) and huge files."""
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
    check_text(text, path.name)
    return text
