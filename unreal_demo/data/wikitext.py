"""Wikipedia XML dumps → plain-text articles, with a real wikitext parser (``mwparserfromhell``).

A dump page becomes one :class:`~unreal_demo.data.Passage` per article (redirects, non-article
namespaces and empty pages are skipped); the chunker then cuts it like any long document. The
text keeps the lead and every section's prose with its heading on a line of its own; it drops
templates (infoboxes, citations, navboxes), ``<ref>`` notes, tables, files and categories, and
the trailing reference sections; list items keep their text.

Example
-------
>>> wikitext_to_text("'''Ada''' was a [[mathematician|maths]] pioneer.{{cn}}<ref>x</ref>\\n== Life ==\\nShe wrote.")
'Ada was a maths pioneer.\\n\\nLife\\nShe wrote.'
"""

from __future__ import annotations

import bz2
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import BinaryIO

import mwparserfromhell as mw

DROP_SECTIONS = {"references", "external links", "see also", "further reading", "notes", "bibliography",
                 "sources", "citations", "footnotes", "notes and references", "works cited"}
DROP_LINK_PREFIXES = ("file:", "image:", "category:", "media:")
REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
LEFTOVER = re.compile(r"\[\[(?:file|image|category):.*$|\{\{.*?(\}\}|$)", re.I | re.M)
DROP_TAGS = {"ref", "table", "gallery", "math", "timeline", "references", "score", "syntaxhighlight"}


def _clean(code: mw.wikicode.Wikicode) -> str:
    for node in code.filter(recursive=False):
        if isinstance(node, mw.nodes.Template) or isinstance(node, mw.nodes.Comment):
            code.remove(node)
        elif isinstance(node, mw.nodes.Tag) and str(node.tag).lower() in DROP_TAGS:
            code.remove(node)
        elif isinstance(node, mw.nodes.Wikilink) and str(node.title).strip().lower().startswith(DROP_LINK_PREFIXES):
            code.remove(node)
    text = LEFTOVER.sub("", code.strip_code(normalize=True, collapse=True))  # markup the parser left as text
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("|", "!", "{|"))]  # no table debris
    return "\n".join(lines)


def wikitext_to_text(wikitext: str) -> str:
    """Plain prose of one article's wikitext: lead, then each kept section as ``heading\\nprose``."""
    parsed = mw.parse(REF.sub("", wikitext))  # refs first: the parser leaves some malformed ones as text
    out = []
    for section in parsed.get_sections(levels=None, flat=True, include_lead=True, include_headings=True):
        headings = section.filter_headings(recursive=False)
        heading = headings[0].title.strip_code().strip() if headings else ""
        if heading.lower() in DROP_SECTIONS:
            continue
        for h in headings:
            section.remove(h)
        body = _clean(section)
        if body:
            out.append(f"{heading}\n{body}" if heading else body)
    return "\n\n".join(out)


def iter_pages(stream: BinaryIO) -> Iterator[tuple[str, str]]:
    """``(title, wikitext)`` of every main-namespace, non-redirect page of a MediaWiki XML dump."""
    for _, el in ET.iterparse(stream):
        if el.tag.rsplit("}", 1)[-1] != "page":
            continue
        ns = el.findtext("{*}ns")
        title = el.findtext("{*}title") or ""
        text = el.findtext("{*}revision/{*}text") or ""
        redirect = el.find("{*}redirect") is not None or text.lstrip().lower().startswith("#redirect")
        el.clear()
        if ns == "0" and not redirect and text.strip():
            yield title, text


def read_dump(path: str) -> Iterator[tuple[str, str]]:
    """``(title, plain text)`` per article of a ``.xml`` or ``.xml.bz2`` dump."""
    opener = bz2.open if str(path).endswith(".bz2") else open
    with opener(path, "rb") as f:
        for title, text in iter_pages(f):
            plain = wikitext_to_text(text)
            if plain.strip():
                yield title, plain
