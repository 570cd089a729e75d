"""The real offline default model (SmolLM2-135M-Instruct) end to end; ~1 minute on 2 CPU cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unreal_demo.__main__ import main
from unreal_demo.core.generation import AnswerRule

EXAMPLES = Path(__file__).resolve().parents[1] / "assets" / "examples"
NEEDLE = EXAMPLES / "needle_haystack.txt"
QUESTION = "What is the secret ingredient of the best pizza in Oakland?"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def explorer():
    from unreal_demo.pipeline import Explorer

    return Explorer.load()


def test_ask_json_on_a_6000_token_haystack(capsys):
    assert main(["ask", "--doc", str(NEEDLE), "--question", QUESTION, "--method", "bm25", "--json",
                 "--max-new-tokens", "24"]) == 0
    r = json.loads(capsys.readouterr().out)
    doc = NEEDLE.read_text()
    assert "".join(doc[c["start"] : c["end"]] for c in r["chunks"]) == doc  # exact cover
    assert sum(c["tokens"] for c in r["chunks"]) > 5500
    assert len(r["selected"]) == 5 and r["selected"] == sorted(r["selected"])
    assert "paprika" in r["answer"].lower()
    assert r["model"] == "smollm2-135m-instruct"
    assert {"encode", "retrieval", "prefill", "first_token", "total"} - set(r["timings"]) == {"encode"}


def test_shipped_head_is_trained_and_finds_the_needle(explorer):
    assert explorer.trained, "the shipped head (settings.DEFAULT_HEADS) should be trained"
    doc = NEEDLE.read_text()
    ranking = explorer.rank([doc], QUESTION, 5, "unreal")
    assert any("paprika" in ranking.chunks[i].text for i in ranking.selected)
    answer = "".join(g.text for g in list(explorer.stream(ranking, QUESTION, AnswerRule(24)))[-1:])
    assert "paprika" in answer.lower()


def test_wikipedia_example(explorer):
    spec = json.loads((EXAMPLES / "examples.json").read_text())[1]
    doc = (EXAMPLES / spec["file"]).read_text()
    ranking = explorer.rank([doc], spec["question"], 5, "unreal")
    assert any(spec["answer"] in ranking.chunks[i].text for i in ranking.selected)


def test_shipped_index_answers_without_a_build(explorer):
    """The compressed index of the "all" corpus in precomputed/index opens with its checksums and finds a
    New-Wiki paragraph among its 20,354 chunks."""
    from unreal_demo.core.codec import DENSE_CODECS, LOSSY
    from unreal_demo.data.sources import load_squad
    from unreal_demo.retrieval.hits import search
    from unreal_demo.store import index as ix

    shipped = ix.shipped_folder(explorer, "all")
    if not (shipped / "manifest.json").exists():
        pytest.skip("no shipped index for this head's ℓc")
    index = ix.Index(shipped)  # verifies every shard and the codec file
    passages, questions = load_squad("new_wiki")
    q = next(q for q in questions if q.passage_id == passages[100].id)
    hits = search(index, explorer, q.text, 10, "unreal")["hits"]
    bm25 = search(index, explorer, q.text, 10, "bm25")["hits"]
    assert len(hits) == 10 and any(h["passage"] == q.passage_id for h in hits + bm25)
    assert index.manifest["dtype"] in LOSSY and index.manifest["chunks"] == 20_354
    assert index.manifest.get("dense_dtype") in (None, *DENSE_CODECS)
    assert ix.default_index(explorer) == shipped or (ix.default_folder(explorer, "all") / "manifest.json").exists()
