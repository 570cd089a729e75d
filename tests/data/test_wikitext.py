"""Wikitext → plain text with mwparserfromhell, and the real enwiki dump of the gensim wheel."""

from __future__ import annotations

import bz2

from unreal_demo.data.wikitext import iter_pages, read_dump, wikitext_to_text

ARTICLE = """{{Infobox person|name=Ada Lovelace|born=1815}}
'''Ada Lovelace''' was an English [[mathematician]] and [[Writer|writer]].<ref>{{cite book|title=X}}</ref>
[[File:Ada.jpg|thumb|A portrait of Ada]]
<!-- a hidden comment -->
== Life ==
She worked with [[Charles Babbage]] on the ''Analytical Engine''.
{| class="wikitable"
|-
| cell || cell
|}
* a bullet list item
=== Notes on the engine ===
Her notes include an algorithm.
== References ==
{{reflist}}
* Some book
[[Category:Mathematicians]]
"""


def test_wikitext_keeps_prose_and_headings_and_drops_markup():
    text = wikitext_to_text(ARTICLE)
    assert text == ("Ada Lovelace was an English mathematician and writer.\n\n"
                    "Life\nShe worked with Charles Babbage on the Analytical Engine.\na bullet list item\n\n"
                    "Notes on the engine\nHer notes include an algorithm.")


def test_dump_pages_skip_redirects_and_other_namespaces(tmp_path):
    page = "<page><title>{t}</title><ns>{ns}</ns><revision><text>{x}</text></revision></page>"
    xml = ("<mediawiki xmlns='http://www.mediawiki.org/xml/export-0.10/'>"
           + page.format(t="Ada", ns=0, x="'''Ada''' wrote notes.")
           + page.format(t="AdaL", ns=0, x="#REDIRECT [[Ada]]")
           + page.format(t="Talk:Ada", ns=1, x="chat")
           + "</mediawiki>")
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(xml.encode()))
    assert list(read_dump(str(path))) == [("Ada", "Ada wrote notes.")]
    with bz2.open(path) as f:
        assert [t for t, _ in iter_pages(f)] == ["Ada"]


def test_the_gensim_enwiki_dump_gives_106_clean_articles():
    from unreal_demo.data.sources import load_enwiki

    articles = load_enwiki()
    assert len(articles) == 106 and articles[0].title == "Anarchism"
    assert all(p.source == "enwiki" and p.id == f"enwiki:{p.title}" for p in articles)
    body = "\n".join(p.text for p in articles)
    assert "{{" not in body and "[[" not in body and "<ref" not in body
    assert sum(len(p.text) for p in articles) > 2_000_000
