"""Greedy answers (Eq. 7) cached on disk by prompt, so a stopped evaluation resumes without re-answering.

Answers depend only on the model revision (and dtype) and the prompt's token ids, so the cache is valid on
any machine; each answer keeps the process CPU seconds its generation took (``cpu_s``), so a benchmark
resumed from the cache still reports what its answers cost. Each benchmark's answers are also kept in the
repository as a gzipped JSON-lines file under ``precomputed/answers/`` (:meth:`AnswerCache.export`), read
before the local cache, so a run stopped on one machine continues on another without answering anything twice.

Example
-------
>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> cache = AnswerCache(folder / "answers.jsonl", shipped=folder / "shipped.jsonl.gz")
>>> cache.known["k1"] = "Paris"
>>> cache.export()
1
>>> AnswerCache(folder / "other.jsonl", shipped=folder / "shipped.jsonl.gz").known
{'k1': 'Paris'}
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..core.generation import ANSWER_RULE, AnswerRule, stream_answer
from ..settings import PRECOMPUTED, cache_dir, in_precomputed

EXPORT_EVERY = 50  # new answers between two exports of a run that keeps its answers in the repository


def _read_shipped(path: Path) -> tuple[dict[str, str], dict[str, float]]:
    """The answers (and their CPU seconds) of a shipped file; none (with a warning) if it is missing or damaged."""
    if not path.exists():
        return {}, {}
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return _rows(f.read().splitlines())
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        warnings.warn(f"{path.name} is damaged ({exc}); its answers are not used", stacklevel=3)
        return {}, {}


def _rows(lines: list[str]) -> tuple[dict[str, str], dict[str, float]]:
    """Answers by key, and the CPU seconds of those whose generation was timed (rows since ``cpu_s`` was added)."""
    out, cpu = {}, {}
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a killed run
            continue
        out[row["key"]] = row["answer"]
        if "cpu_s" in row:
            cpu[row["key"]] = row["cpu_s"]
    return out, cpu


def _line(key: str, answer: str, cpu: float | None) -> str:
    return json.dumps({"key": key, "answer": answer} | ({} if cpu is None else {"cpu_s": cpu})) + "\n"


class AnswerCache:
    """Greedy answers keyed by (model revision and dtype, prompt ids), appended to a JSONL file as they come.

    Parameters
    ----------
    path
        The local cache (JSON lines, appended to).
    shipped
        A gzipped JSON-lines file of answers kept in the repository, read first (optional).
    export_every
        With ``shipped``: write it again after this many new answers (0: only on :meth:`export`).
    """

    def __init__(self, path: Path, shipped: Path | None = None, export_every: int = 0) -> None:
        self.path, self.shipped, self.export_every, self.fresh = path, shipped, export_every, 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.known: dict[str, str] = {}
        self.cpu: dict[str, float] = {}  # process CPU seconds of the generation behind an answer, where timed
        for known, cpu in ([_read_shipped(shipped)] if shipped is not None else []) + (
                [_rows(path.read_text(encoding="utf-8").splitlines())] if path.exists() else []):
            self.known |= known
            self.cpu |= cpu

    @staticmethod
    def key(backbone, ids: list[int], rule: AnswerRule | None = None) -> str:
        """The cache key of the greedy answer to the prompt ``ids`` under ``rule`` (default :data:`ANSWER_RULE`)."""
        rule = rule or ANSWER_RULE
        # a first-sentence answer is keyed by its rule's name, so that answers an earlier rule cut (at any line
        # break, before 2026-12-05) are not taken for this rule's
        parts = [backbone.numerics, rule.budget, ids] if not rule.first_sentence else \
            [backbone.numerics, rule.budget, rule.name, ids]
        return hashlib.sha1(json.dumps(parts).encode()).hexdigest()

    def get(self, backbone, ids: list[int], rule: AnswerRule | None = None) -> str:
        """The greedy answer under ``rule`` (default :data:`ANSWER_RULE`; generated once, then cached)."""
        rule = rule or ANSWER_RULE
        return self.get_rules(backbone, ids, (rule,))[rule]

    def get_rules(self, backbone, ids: list[int], rules: Sequence[AnswerRule]) -> dict[AnswerRule, str]:
        """The answers under several rules from one greedy run at the largest budget.

        Greedy decoding makes the answer at budget b the first b tokens of any longer one (or the
        whole answer, where it stopped before b), and a first-sentence answer that sentence of it
        (:meth:`AnswerRule.cut`), so every rule is cached from a single generation; that run stops at
        the first sentence itself when every rule asked for does.
        """
        keys = {r: self.key(backbone, ids, r) for r in rules}
        for r in rules:  # a first-sentence answer is its sentence of the plain answer at the same budget
            if r.first_sentence and keys[r] not in self.known:
                plain = self.key(backbone, ids, AnswerRule(r.budget, first_sentence=False))
                if plain in self.known:
                    self.known[keys[r]] = r.cut(self.known[plain])
                    if plain in self.cpu:
                        self.cpu[keys[r]] = self.cpu[plain]
        missing = [r for r, k in keys.items() if k not in self.known]
        if missing:
            budgets, at, last = {r.budget for r in missing}, {}, ""
            stop = all(r.first_sentence for r in missing)
            c0 = time.process_time()
            for gen in stream_answer(backbone, ids, max(budgets), first_sentence_only=stop):
                last = gen.text
                if gen.tokens in budgets and gen.tokens not in at:
                    at[gen.tokens] = gen.text
            cpu = round(time.process_time() - c0, 3)  # one generation serves every rule asked for
            rows = {keys[r]: r.cut(at.get(r.budget, last)) for r in missing}
            self.known |= rows
            self.cpu |= dict.fromkeys(rows, cpu)
            with self.path.open("a", encoding="utf-8") as f:
                f.write("".join(_line(k, a, cpu) for k, a in rows.items()))
            self.fresh += 1
            if self.export_every and self.fresh >= self.export_every:
                self.export()
        return {r: self.known[k] for r, k in keys.items()}

    def cost(self, backbone, ids: list[int], rule: AnswerRule | None = None) -> float | None:
        """CPU seconds of the generation behind the cached answer to ``ids`` under ``rule`` (None: not timed or not
        cached); one generation serving several rules (:meth:`get_rules`) is charged in full to each."""
        return self.cpu.get(self.key(backbone, ids, rule))

    def export(self) -> int:
        """Write every known answer to :attr:`shipped` (sorted, gzipped, reproducible); the count written.

        What the file already holds is merged in first, so two runs sharing it (the pool and same-topic
        benchmarks) do not drop each other's answers; each writes through its own temporary file."""
        if self.shipped is None:
            raise ValueError("this cache has no shipped file to export to")
        self.shipped.parent.mkdir(parents=True, exist_ok=True)
        known, cpu = _read_shipped(self.shipped)
        self.known, self.cpu = known | self.known, cpu | self.cpu
        tmp = self.shipped.with_name(f"{self.shipped.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write("".join(_line(k, self.known[k], self.cpu.get(k)) for k in sorted(self.known)).encode())
        tmp.replace(self.shipped)
        self.fresh = 0
        return len(self.known)


def answer_cache(name: str, keep: bool = False) -> AnswerCache:
    """The answers of one benchmark (``"longcontext"``, ``"qa"``): ``<cache>/<name>/answers.jsonl`` over the
    repository's ``precomputed/answers/<name>.jsonl.gz``; ``keep`` (a run writing into ``precomputed/``)
    exports to the latter every :data:`EXPORT_EVERY` new answers and at the end."""
    return AnswerCache(cache_dir() / name / "answers.jsonl", PRECOMPUTED / "answers" / f"{name}.jsonl.gz",
                       EXPORT_EVERY if keep else 0)


def keeps(out: str | Path | None) -> bool:
    """Whether a result written to ``out`` is a precomputed one (its answers are then kept too)."""
    return in_precomputed(out)
