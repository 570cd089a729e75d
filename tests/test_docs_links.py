"""Every relative link and image in README.md and docs/*.md points to a file that exists and, for
``file.md#anchor``, to a heading of that file (anchors made as GitHub makes them). Run as a script it
prints the broken links."""
import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code spans blanked."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", lambda m: m.group(0).strip("`"), line)
                         if line.lstrip().startswith("#") else re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: rendered text, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"[*_]{1,2}(\S[^*_]*?)[*_]{1,2}", r"\1", text)  # emphasis markers go
    keep = (c for c in text.lower() if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return "".join(keep).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    count: dict[str, int] = {}
    for line in prose(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:  # a repeated heading gets -1, -2, ...
            base = slug(m.group(1))
            n = count[base] = count.get(base, -1) + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links() -> list[str]:
    problems = []
    for doc in docs():
        for line in prose(doc.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = (doc.parent / path).resolve() if path else doc
                where = f"{doc.relative_to(ROOT)}: {target}"
                if not dest.exists():
                    problems.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where} (no such heading)")
    return problems


def test_every_relative_link_in_readme_and_docs_resolves():
    assert (ROOT / "docs").is_dir()
    assert broken_links() == []


def test_slug_follows_github():
    assert slug("`ask` on a 6,777-token haystack (48 chunks)") == "ask-on-a-6777-token-haystack-48-chunks"
    assert slug("Long context: 2K–128K tokens") == "long-context-2k128k-tokens"
    assert slug("Ablations (dev split)") == "ablations-dev-split"


if __name__ == "__main__":
    print("\n".join(broken_links()) or "all links resolve")
