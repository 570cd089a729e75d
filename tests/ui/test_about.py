"""The About tab's held-out tables: the loaded head's own rows beside the rows no head changes."""

from __future__ import annotations

from unreal_demo.evaluation.results import for_head, head_digest, head_free, question_set
from unreal_demo.settings import DEFAULT_HEADS, DEFAULT_MODEL, PRECOMPUTED
from unreal_demo.ui.tabs.about import EVALUATIONS, retrieval_results


def test_the_default_head_is_evaluated_on_every_set_the_about_tab_shows():
    """Making a head the default comes with its own rows on every held-out set (else the tab would warn)."""
    results = retrieval_results(PRECOMPUTED)
    digest = head_digest(DEFAULT_HEADS[DEFAULT_MODEL])
    assert set(results) == set(EVALUATIONS)
    for corpus, found in results.items():
        rows, sources = for_head(found, digest)
        assert sources[0]["provenance"]["head_digest"] == digest, corpus
        assert [r for r in rows if r["key"] == "unreal"] == [r for r in sources[0]["table"] if r["key"] == "unreal"]
        assert "bm25" in {r["key"] for r in rows}, corpus  # the baseline sits beside it
        for row in rows:  # every other row is a head-free baseline from a result on the same questions
            if row not in sources[0]["table"]:
                assert row["key"] in head_free()
        assert all(question_set(s) == question_set(sources[0]) for s in sources)


def test_the_head_free_rows_are_the_registrys_methods_that_no_head_changes():
    assert head_free() == {"bm25", "dense", "sparse", "untrained", "full"}


def test_another_heads_result_is_shown_whole_when_the_loaded_head_has_none():
    base = {"setting": "q; head a", "table": [{"key": "unreal"}, {"key": "bm25"}], "provenance": {"head_digest": "a"}}
    other = {"setting": "other q; head b", "table": [{"key": "unreal"}], "provenance": {"head_digest": "b"}}
    assert for_head([base, other], "c") == (base["table"], [base])
    rows, sources = for_head([base, other], "b")  # its own rows; the base's BM25 is on other questions: left out
    assert rows == other["table"] and sources == [other]


def test_the_second_backbones_head_shows_its_own_rows_and_no_other_models_token_matching():
    """With Qwen's head loaded the New-Wiki table is its own record's; with the default head, no row of Qwen's
    states (sparse) stands in for SmolLM2's."""
    found = retrieval_results(PRECOMPUTED)["new_wiki"]
    qwen = head_digest(DEFAULT_HEADS["qwen2.5-0.5b"])
    rows, sources = for_head(found, qwen)
    assert sources == [next(r for r in found if r["provenance"]["head_digest"] == qwen)]
    assert {r["key"] for r in rows} >= {"unreal", "bm25", "dense", "sparse", "hybrid-fusion"}
    rows, sources = for_head(found, head_digest(DEFAULT_HEADS[DEFAULT_MODEL]))
    shown = next(r for r in rows if r["key"] == "sparse")
    source = next(s for s in sources if any(r is shown for r in s["table"]))
    assert source["provenance"]["model"] == DEFAULT_MODEL
