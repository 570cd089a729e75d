"""The answer check measured on 200 answers the app's pipeline produced for New-Wiki questions.

Command (writes ``precomputed/answer_check.json``, which the app's answer note quotes)::

    python -m experiments.answer_check

The answers are the real generated ones of ``precomputed/qa.json`` (the default model, two-shot prompt, the answer
rule, the default head): the first 100 of its 300 held-out questions, each answered from UNREAL's and from BM25's
top 3 chunks of the shipped New-Wiki index (the passages the model was given, read from the index's chunks), 200
answers. Each answer is judged by its gold answers ("contained": a gold answer occurs in it, SQuAD-normalised).
Both checks are run on the same answers and passages:

- before: the word-overlap check the app showed until issue 57 (an answer ✓ when every content word of each of
  its sentences occurs somewhere in the passages);
- after: :func:`unreal_demo.evaluation.faithfulness.answer_support` with the question (every sentence stated by
  one evidence sentence or two adjacent ones, quoted).

The new check's one setting, the share of the question's content words the quoted evidence must hold, is all of
them (2/3 and 3/4 were tried on these answers too: more wrong answers pass, and "Theodore Roosevelt Jr." answering
the first-president question is marked supported); the record also scores both checks on the other 400 answers of
``qa.json`` (its other 200 questions). Reported per check: how many answers it marks supported, the
precision of "supported" (the fraction of those that are correct), its recall of the correct answers, and the
fraction of wrong answers it marks supported.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

from unreal_demo.core.selection import STEMMER
from unreal_demo.data.sources import load_squad
from unreal_demo.evaluation.faithfulness import _STOP, _WORD, answer_support
from unreal_demo.evaluation.metrics import contained
from unreal_demo.settings import PRECOMPUTED

QA = PRECOMPUTED / "qa.json"
OUT = PRECOMPUTED / "answer_check.json"
METHODS = ("unreal@3", "bm25@3")
QUESTIONS = 100
COMMAND = "python -m experiments.answer_check"


_OLD_SENTENCE = re.compile(r"(?<=[.!?…])\s+")  # the old check's split (it split "John F." off)
_OLD_STOP = _STOP - {"typically", "usually", "often", "generally", "actually", "approximately", "roughly", "nearly",
                     "almost"}  # the old check's stop words


def _old_content(text: str) -> set[str]:
    words = [w.lower() for w in _WORD.findall(text)]
    words = [w for w in words if w not in _OLD_STOP and (len(w) > 1 or w.isdigit())]
    return {w if w.isdigit() else s for w, s in zip(words, STEMMER.stemWords(words), strict=True)}


def old_supported(answer: str, passages: list[str]) -> bool:
    """The check before issue 57, as the app marked it: every sentence ✓ (every content word of it occurs
    somewhere in the passages)."""
    present = {key for p in passages for key in _old_content(p)}
    sentences = [s for s in _OLD_SENTENCE.split(answer.strip()) if s]
    return bool(sentences) and all(_old_content(s) <= present for s in sentences)


def _chunks(index_name: str) -> list[str]:
    folder = PRECOMPUTED / "index" / index_name
    with gzip.open(folder / "chunks.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def _scores(rows: list[dict], key: str) -> dict:
    correct = [r for r in rows if r["correct"]]
    wrong = [r for r in rows if not r["correct"]]
    marked = [r for r in rows if r[key]]
    return {"marked_supported": len(marked),
            "precision": round(sum(r["correct"] for r in marked) / len(marked), 4) if marked else None,
            "correct_marked_supported": round(sum(r[key] for r in correct) / len(correct), 4),
            "wrong_marked_supported": round(sum(r[key] for r in wrong) / len(wrong), 4),
            "wrong_marked_supported_count": sum(r[key] for r in wrong)}


def _judge(qa: dict, chunks: list[str], by_id: dict, first: int, last: int | None) -> list[dict]:
    rows = []
    for method in METHODS:
        for a in qa["answers"][method][first:last]:
            q = by_id[a["id"]]
            passages = [chunks[i] for i in a["chunks"]]
            new = answer_support(a["answer"], passages, q.text)
            rows.append({"id": q.id, "method": method, "question": q.text, "gold": list(q.answers),
                         "answer": a["answer"], "correct": bool(contained(a["answer"], q.answers)),
                         "old": old_supported(a["answer"], passages), "new": new.supported,
                         "evidence": [s.evidence for s in new.sentences]})
    return rows


def run() -> dict:
    qa = json.loads(QA.read_text())
    chunks = _chunks(f"{qa['provenance']['model']}-l25-all")
    _, questions = load_squad("new_wiki")
    by_id = {q.id: q for q in questions}
    rows = _judge(qa, chunks, by_id, 0, QUESTIONS)
    rest = _judge(qa, chunks, by_id, QUESTIONS, None)
    correct = sum(r["correct"] for r in rows)
    return {
        "setting": f"{len(rows)} answers of precomputed/qa.json ({', '.join(METHODS)}; its first {QUESTIONS} "
                   "held-out New-Wiki questions), judged by the gold answers (contained)",
        "command": COMMAND, "answers": len(rows), "correct": correct, "wrong": len(rows) - correct,
        "before": _scores(rows, "old"), "after": _scores(rows, "new"),
        "wrong_marked_supported": _scores(rows, "new")["wrong_marked_supported"],
        "other_questions": {"answers": len(rest), "correct": sum(r["correct"] for r in rest),
                            "note": f"the {len(rest)} answers to the other {len(rest) // len(METHODS)} questions of "
                                    "qa.json, a second sample",
                            "before": _scores(rest, "old"), "after": _scores(rest, "new")},
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else OUT
    result = run()
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
