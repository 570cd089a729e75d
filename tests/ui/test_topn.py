"""The Top-n tab's precomputed runs: each names its file, its distractor setting and the command that makes it."""

from __future__ import annotations

import json

from unreal_demo.evaluation.longcontext.contexts import DISTRACTORS
from unreal_demo.ui.tabs import topn


def test_a_missing_run_says_which_command_makes_it(monkeypatch, tmp_path):
    monkeypatch.setattr(topn, "PRECOMPUTED", tmp_path)
    for name, (file, distractors, _) in topn.RESULTS.items():
        assert distractors in DISTRACTORS
        assert topn.load_results(name) is None
        assert f"--distractors {distractors} --out precomputed/{file}" in topn.describe_result(None, name, None)


def test_a_present_run_is_loaded_from_its_own_file(monkeypatch, tmp_path):
    monkeypatch.setattr(topn, "PRECOMPUTED", tmp_path)
    for k, (file, _, _) in enumerate(topn.RESULTS.values()):
        (tmp_path / file).write_text(json.dumps({"table": [], "marker": k}))
    assert [topn.load_results(name)["marker"] for name in topn.RESULTS] == list(range(len(topn.RESULTS)))


def test_the_cells_table_shows_what_each_cell_cost():
    row = {"method": "unreal", "label": "8K", "n": 5, "questions": 60, "fits": True, "em": 0.1,
           "f1": [0.2, 0.1, 0.3], "contained": 0.3, "recall": 0.9, "prompt_tokens": 700, "answer_cpu_s": 6.5,
           "timed": 60, "retrieval_cpu_s": 0.4}
    bound = {"method": "oracle", "label": "8K", "n": None, "questions": 60, "fits": True}
    frame = topn.summary_frame([bound, row | {"method": "bm25"}, bound | {"method": "full"}, row])
    assert frame.loc[0, "CPU s / answer"] == 6.5 and frame.loc[0, "selection CPU s"] == 0.4
    assert list(frame["method"]) == ["unreal", "bm25", "full", "oracle"]  # the registry's order, bounds last
    assert list(frame["n"]) == [5, 5, "all", "—"]  # a bound selects nothing; full context takes every chunk


def test_an_earlier_heads_result_points_to_the_loaded_heads_own_evidence(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from unreal_demo.evaluation.results import head_digest
    from unreal_demo.settings import PRECOMPUTED

    head = PRECOMPUTED / "heads" / "smollm2-135m-mix-alpha" / "head.json"
    loader = SimpleNamespace(head_path=head, head_source="the α head")
    monkeypatch.setattr(topn, "PRECOMPUTED", tmp_path)
    rows = [{"id": q, "length": 2000, "method": "unreal"} for q in ("a", "b")]
    answered = {"setting": "s", "table": [], "rows": rows,
                "provenance": {"head": "old", "head_digest": "0" * 12, "command": "c"}}
    cell = {"n": 1, "recall": 0.5, "length": 2000}
    evidence = {"complete": True, "rows": rows,
                "table": [cell | {"method": "unreal", "recall": 0.98}, cell | {"method": "bm25"},
                          cell | {"method": "unreal", "n": 3, "recall": 1.0}],
                "provenance": {"head_digest": head_digest(head), "command": "bench longcontext --evidence-only"}}

    def note(changed: dict | None = None) -> str:
        (tmp_path / topn.EVIDENCE["pool"]).write_text(json.dumps(evidence | (changed or {})))
        return topn.describe_result(answered, "pool", loader)

    assert "own selection" not in topn.describe_result(answered, "pool", loader)  # no evidence run yet
    text = note()
    assert "⚠ this result was made with head old" in text
    assert "evidence recall@1 at 2K tokens: UNREAL 0.98; BM25 0.50" in text and "--evidence-only" in text
    for changed in ({"provenance": {"head_digest": "1" * 12}},  # a third head's run
                    {"complete": False},  # a run still going
                    {"rows": rows[:1]},  # other questions
                    {"table": evidence["table"][2:]}):  # no n = 1 cell
        assert "own selection" not in note(changed), changed


def test_the_caption_says_where_full_context_fits_from_the_data():
    from unreal_demo.ui.tabs.topn import full_context_fit

    rows = [{"method": "full", "length": x, "fits": x <= 2000} for x in (2000, 8000, 32000)]
    assert full_context_fit(rows) == ": in these data it fits the window only up to 2K tokens"
    assert "none of the lengths" in full_context_fit([{"method": "full", "length": 8000, "fits": False}])
    assert full_context_fit([]) == ""


def test_the_empty_live_table_has_the_result_columns():
    from unreal_demo.ui.tabs.topn import SUMMARY_COLUMNS, summary_frame

    assert list(summary_frame([]).columns) == SUMMARY_COLUMNS
