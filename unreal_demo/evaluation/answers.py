"""Greedy answers (Eq. 7) cached on disk by prompt, so a stopped evaluation resumes without re-answering."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..core.generation import answer_ids

MAX_NEW_TOKENS = 16


class AnswerCache:
    """Greedy answers keyed by (model revision, prompt ids), appended to a JSONL file as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.known = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a killed run
                    continue
                self.known[row["key"]] = row["answer"]

    def get(self, backbone, ids: list[int]) -> str:
        key = hashlib.sha1(json.dumps([backbone.revision, MAX_NEW_TOKENS, ids]).encode()).hexdigest()
        if key not in self.known:
            text = answer_ids(backbone, ids, MAX_NEW_TOKENS).text
            self.known[key] = text
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "answer": text}) + "\n")
        return self.known[key]
