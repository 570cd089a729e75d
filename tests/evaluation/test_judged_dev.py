"""The judged dev set: read verdicts merged strictly, positives re-based on the usable chunks, recall and the
count of unread alias chunks against hand-worked answers."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from unreal_demo.data.natural import NaturalQuestion
from unreal_demo.evaluation.judged_dev import collect, judged_positives, recall_row, top_ids, unread


def _candidates(tmp_path, rows):
    path = tmp_path / "candidates.jsonl"
    path.write_text("".join(json.dumps(r | {"heads": ["h"]}) + "\n" for r in rows))
    return path


ROWS = [{"id": "q:0", "question": "who?", "answers": ["Ada"], "chunks": [{"chunk": 5}, {"chunk": 2}]},
        {"id": "q:1", "question": "what?", "answers": ["Lovelace"], "chunks": [{"chunk": 7}]}]


def _verdicts(tmp_path, pairs):
    path = tmp_path / "verdicts.jsonl"
    path.write_text("".join(json.dumps({"id": i, "chunk": c, "verdict": v}) + "\n" for i, c, v in pairs))
    return path


def test_collect_groups_verdicts_per_question(tmp_path):
    v = _verdicts(tmp_path, [("q:0", 5, "no"), ("q:0", 2, "yes"), ("q:1", 7, "partial")])
    judged = collect(_candidates(tmp_path, ROWS), [v], "a reader", tmp_path / "judged.json")
    assert judged["questions"] == [{"id": "q:0", "yes": [2], "partial": [], "no": [5]},
                                   {"id": "q:1", "yes": [], "partial": [7], "no": []}]
    assert json.loads(gzip.decompress((tmp_path / "judged.json").read_bytes())) == judged and judged["heads"] == ["h"]


@pytest.mark.parametrize("pairs, message", [
    ([("q:0", 5, "no"), ("q:0", 2, "yes")], "have no verdict"),  # q:1's chunk unread
    ([("q:0", 5, "no"), ("q:0", 2, "yes"), ("q:1", 7, "no"), ("q:1", 9, "no")], "for no candidate"),
    ([("q:0", 5, "no"), ("q:0", 2, "maybe"), ("q:1", 7, "no")], "unknown verdict"),
])
def test_collect_refuses_an_incomplete_or_foreign_reading(tmp_path, pairs, message):
    with pytest.raises(ValueError, match=message):
        collect(_candidates(tmp_path, ROWS), [_verdicts(tmp_path, pairs)], "a reader", tmp_path / "j.json")


def test_positives_recall_and_unread_by_hand():
    # six chunks, chunk 1 held out (New-Wiki): positions among the usable ones are 0, -, 1, 2, 3, 4
    usable = torch.tensor([True, False, True, True, True, True])
    pool = torch.nonzero(usable).squeeze(1)
    qs = [NaturalQuestion("q:0", "who?", ("Ada",)), NaturalQuestion("q:1", "what?", ("Lovelace",)),
          NaturalQuestion("q:2", "when?", ("1815",))]
    judged = {"questions": [{"id": "q:0", "yes": [3], "partial": [], "no": [0]},
                            {"id": "q:1", "yes": [], "partial": [2], "no": []},  # no yes: left out
                            {"id": "q:2", "yes": [5, 2], "partial": [], "no": []}]}
    keep, positives = judged_positives(qs, judged, usable)
    assert keep == [0, 2] and positives == [[2], [4, 1]]
    scores = torch.tensor([[0.9, 0.1, 0.8, 0.2, 0.0],   # q:0 ranks chunk 0 (no) first, chunk 3 second
                           [0.0, 0.0, 0.0, 0.0, 1.0],
                           [0.1, 0.2, 0.3, 0.4, 0.5]])  # q:2 ranks chunk 5 (yes) first
    row = recall_row("toy", [scores], ["s"], [qs], judged, usable)
    assert row["s R@1"] == 0.5 and row["s R@10"] == 1.0 and row["mean R@1"] == 0.5
    texts = {0: "Ada wrote", 2: "Ada again, 1815", 3: "Ada Lovelace", 4: "notes on Ada", 5: "born 1815"}

    class _Index:
        chunks = [{"text": texts.get(i, "")} for i in range(6)]

    # q:0's top 2 are chunks 0 and 3, both read; its top 3 adds chunk 4, which holds "Ada" and was never read
    assert unread(top_ids(scores[[0]], 2), [qs[0]], judged, _Index, pool) == 0
    assert unread(top_ids(scores[[0]], 3), [qs[0]], judged, _Index, pool) == 1
    # q:2's top 3 are chunks 5 (read), 4 and 3 (no "1815" in either): nothing unread
    assert unread(top_ids(scores[[2]], 3), [qs[2]], judged, _Index, pool) == 0


def test_grid_table_follows_the_dev_sets_it_was_scored_on():
    from unreal_demo.evaluation.adapter_run import grid_columns, grid_markdown

    row = {"variant": "v", "dev nq:judged R@1": 0.5, "dev nq:judged R@10": 0.8, "dev squad R@1": 0.7,
           "dev squad R@10": 0.9, "dev mean R@1": 0.6, "test new_wiki R@1": 0.69, "test new_wiki R@10": 0.88}
    assert grid_columns([row]) == ["dev nq:judged R@1", "dev nq:judged R@10", "dev squad R@1", "dev squad R@10",
                                   "dev mean R@1", "test new_wiki R@1", "test new_wiki R@10"]
    line = "| v | — | — | 0.500 | 0.800 | 0.700 | 0.900 | 0.600 | 0.690 | 0.880 |"
    assert grid_markdown([row]).splitlines()[2] == line
