"""Downstream QA (Table 1): same questions and prompt template for every method, the oracle row, caching."""

from __future__ import annotations

import pytest

from unreal_demo.core.generation import prompt_ids
from unreal_demo.core.head import untrained_head
from unreal_demo.data.sources import Passage, Question
from unreal_demo.evaluation import qa as qa_eval
from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.registry import names
from unreal_demo.store import index as idx

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Item {i} weighs {i * 3} kilograms. It is kept in room {i + 100}.",
                    "test") for i in range(12)]
QS = [Question(f"q{i}", f"How much does item {i} weigh?", (f"{i * 3} kilograms",), f"p{i}", f"Title {i}")
      for i in (2, 5, 9)]
GOLD = {p.id: p.text for p in PASSAGES}


@pytest.fixture()
def setup(tmp_path, tiny, monkeypatch):
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path / "cache"))
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3, n_context=1,
                                             fusion_weight=0.5), None)
    idx.build_index(tmp_path / "ix", tiny, PASSAGES, layer=3, shard_size=5, token_states=True, dense=True)
    return explorer, idx.Index(tmp_path / "ix")


def test_every_method_sees_the_same_questions_and_prompt(setup):
    explorer, ix = setup
    runs = {m: qa_eval.run_method(ix, explorer, m, QS, GOLD, k=3) for m in [*qa_eval.BOUNDS, *names("index")]}
    for m, r in runs.items():
        assert [x["id"] for x in r["rows"]] == [q.id for q in QS], m
    for j in range(len(QS)):
        templates = {runs[m]["rows"][j]["template"] for m in [*qa_eval.BOUNDS, *names("index")] if m != "none"}
        assert len(templates) == 1  # the prompts differ only in their passages
        assert runs["none"]["rows"][j]["prompt_tokens"] == len(prompt_ids(explorer.backbone, [], QS[j].text))
    for m in ("bm25", "dense", "sparse", "hybrid-rrf", "hybrid-fusion", "unreal"):
        for x in runs[m]["rows"]:
            assert len(x["chunks"]) == 3 and x["chunks"] == sorted(x["chunks"])  # k chunks, index order


def test_oracle_uses_exactly_the_gold_paragraph(setup):
    explorer, ix = setup
    rows = qa_eval.run_method(ix, explorer, "oracle", QS, GOLD, k=3)["rows"]
    for q, x in zip(QS, rows, strict=True):
        want = prompt_ids(explorer.backbone, [GOLD[q.passage_id]], q.text)
        assert x["prompt_tokens"] == len(want) and x["recall"] == 1.0 and x["chunks"] == []
        assert x["template"] == qa_eval.template_hash(explorer.backbone, want, [GOLD[q.passage_id]])


def test_results_are_cached_per_method(setup, monkeypatch):
    explorer, ix = setup
    first = qa_eval.run_method(ix, explorer, "bm25", QS, GOLD, k=3)

    def no_retrieval(*args, **kwargs):
        raise AssertionError("a cached method must not retrieve again")

    monkeypatch.setattr(qa_eval, "retrieve", no_retrieval)
    assert qa_eval.run_method(ix, explorer, "bm25", QS, GOLD, k=3) == first
    with pytest.raises(AssertionError, match="retrieve again"):
        qa_eval.run_method(ix, explorer, "bm25", QS, GOLD, k=2)  # another k is another result


def test_recall_counts_chunks_of_the_gold_paragraph(setup):
    explorer, ix = setup
    for x, q in zip(qa_eval.run_method(ix, explorer, "bm25", QS, GOLD, k=3)["rows"], QS, strict=True):
        assert x["recall"] == float(any(ix.chunks[i]["passage"] == q.passage_id for i in x["chunks"]))


def test_summary_by_hand():
    def rows(em, f1):
        return [{"em": e, "f1": f, "contained": e, "recall": 1.0, "prompt_tokens": 10} for e, f in zip(em, f1,
                                                                                                      strict=True)]

    table = qa_eval.summarize([{"method": "none", "k": 1, "seconds": 1, "rows": rows([0, 0], [0.0, 0.2])},
                               {"method": "oracle", "k": 1, "seconds": 1, "rows": rows([1, 1], [1.0, 0.6])},
                               {"method": "bm25", "k": 1, "seconds": 1, "rows": rows([1, 0], [0.5, 0.3])},
                               {"method": "bm25", "k": 3, "seconds": 1, "rows": rows([1, 1], [0.8, 0.8])}])
    by = {(r["key"], r["k"]): r for r in table}
    assert set(by) == {("none", None), ("oracle", None), ("bm25", 1), ("bm25", 3)}
    assert by["bm25", 1]["f1"][0] == 0.4 and by["bm25", 1]["em"] == 0.5
    assert by["bm25", 1]["f1_gap_closed"] == pytest.approx((0.4 - 0.1) / (0.8 - 0.1), abs=1e-4)
    assert by["bm25", 3]["f1_gap_closed"] == pytest.approx((0.8 - 0.1) / (0.8 - 0.1), abs=1e-4)
    assert by["bm25", 1]["em_gap_closed"] == 0.5 and by["none", None]["recall"] is None
    assert by["bm25", 1]["contained_ci"] == qa_eval.wilson(0.5, 2)
    md = qa_eval.markdown(table)
    assert "| BM25 (bm25s, stemmed) | 1 | 0.500 |" in md and "| BM25 (bm25s, stemmed) | 3 | 1.000 |" in md
    assert "| no context (question alone) | — | 0.000 |" in md


def test_several_k_in_one_run_bounds_once(setup, monkeypatch):
    explorer, ix = setup
    monkeypatch.setattr(qa_eval, "questions", lambda sample, seed: (QS[:sample], GOLD))
    calls = []
    real = qa_eval.run_method
    monkeypatch.setattr(qa_eval, "run_method", lambda ix_, ex, m, qs, gold, k, *a, **kw: (
        calls.append((m, k)), real(ix_, ex, m, qs, gold, k, *a, **kw))[1])
    result = qa_eval.run_qa_eval(explorer, ix, 3, ["none", "oracle", "bm25"], ks=(1, 3))
    assert calls == [("none", 1), ("oracle", 1), ("bm25", 1), ("bm25", 3)]
    assert [(r["key"], r["k"]) for r in result["table"]] == [("none", None), ("oracle", None), ("bm25", 1),
                                                             ("bm25", 3)]
    assert all(len(x["chunks"]) == 3 for x in result["answers"]["bm25@3"])
    assert result["k"] == [1, 3] and result["prompt"] == qa_eval.DEFAULT_PROMPT
    with pytest.raises(qa_eval.UserError, match="at least 1"):
        qa_eval.run_qa_eval(explorer, ix, 3, ["bm25"], ks=(0,))


def test_methods_without_keys_run_with_another_backbone(setup, tiny, monkeypatch):
    """BM25, dense and the bounds read no keys, so any LLM answers from an index built with another (a second
    backbone's QA rows from the shipped index); a method that reads keys is still refused."""
    _, ix = setup
    monkeypatch.setattr(qa_eval, "questions", lambda sample, seed: (QS, GOLD))
    other = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=2, n_context=1), None)
    result = qa_eval.run_qa_eval(other, ix, methods=["none", "oracle", "bm25", "dense"], ks=[1])
    assert [row["key"] for row in result["table"]] == ["none", "oracle", "bm25", "dense"]
    with pytest.raises(idx.IndexStoreError):
        qa_eval.run_qa_eval(other, ix, methods=["bm25", "unreal"], ks=[1])
