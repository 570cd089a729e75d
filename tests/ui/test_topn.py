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
