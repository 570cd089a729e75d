"""The judged dev set: read verdicts merged strictly, positives re-based on the usable chunks, recall and the
count of unread alias chunks against hand-worked answers."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from experiments.judged_dev import collect, judged_positives, recall_row, top_ids, unread
from unreal_demo.data.natural import NaturalQuestion


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
    from unreal_demo.training.sets import grid_columns, grid_markdown

    row = {"variant": "v", "dev nq:judged R@1": 0.5, "dev nq:judged R@10": 0.8, "dev squad R@1": 0.7,
           "dev squad R@10": 0.9, "dev mean R@1": 0.6, "test new_wiki R@1": 0.69, "test new_wiki R@10": 0.88}
    assert grid_columns([row]) == ["dev nq:judged R@1", "dev nq:judged R@10", "dev squad R@1", "dev squad R@10",
                                   "dev mean R@1", "test new_wiki R@1", "test new_wiki R@10"]
    line = "| v | — | — | 0.500 | 0.800 | 0.700 | 0.900 | 0.600 | 0.690 | 0.880 |"
    assert grid_markdown([row]).splitlines()[2] == line


def test_judged_sets_keep_texts_contexts_states_and_positives_aligned(monkeypatch):
    from unreal_demo.core.joint_training import TextSet
    from unreal_demo.core.state_training import StateSet
    from unreal_demo.training import judged as judged_dev

    qs = [NaturalQuestion(f"nq_open:{i}", f"q{i}?", ("a",)) for i in range(4)]
    monkeypatch.setattr(judged_dev, "natural_questions", lambda sets: [qs for _ in sets])
    monkeypatch.setattr(judged_dev, "load_judged", lambda side: {"questions": [
        {"id": "nq_open:1", "yes": [7, 3], "partial": [], "no": []},
        {"id": "nq_open:2", "yes": [], "partial": [5], "no": []},
        {"id": "nq_open:3", "yes": [9], "partial": [], "no": [2]}]})
    texts = TextSet("nq", [q.text for q in qs], [[f"c{i}"] for i in range(4)], [[i] for i in range(4)])
    squad = TextSet("squad", ["s?"], [["c"]], [[0]])
    groups = torch.arange(4.0).view(4, 1, 1, 1)  # question i's states hold the number i
    sets, states = judged_dev.judged_sets("dev", [texts, squad], [StateSet("nq", groups, []),
                                                                  StateSet("squad", groups[:1], [])])
    assert [s.name for s in sets] == ["nq:judged"] and sets[0].texts == ["q1?", "q3?"]
    assert sets[0].contexts == [["c1"], ["c3"]] and sets[0].positives == [[7, 3], [9]]
    assert states[0].groups.flatten().tolist() == [1.0, 3.0] and states[0].positives == [[7, 3], [9]]
    assert judged_dev.judged_sets("dev", [texts])[1] == []  # no states given: the text sets alone


@pytest.mark.parametrize("line, message", [
    ('{"id": "q:0", "chunk": 5}', "not a verdict line"),
    ("[1, 2]", "not a verdict line"),
    ('{"id": "q:0", "chunk": 5, "verdict": "no"}\n{"id": "q:0", "chunk": 5, "verdict": "yes"}', "read both"),
])
def test_collect_names_the_bad_line(tmp_path, line, message):
    path = tmp_path / "v.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message) as err:
        collect(_candidates(tmp_path, ROWS), [path], "a reader", tmp_path / "j.json")
    assert "v.jsonl:" in str(err.value)


@pytest.mark.parametrize("args, match", [
    (["judged-dev", "score", "--side", "train"], "not on the train side"),
    (["judged-dev", "collect"], "needs --verdicts"),
    (["joint-runs", "--average", "a.json"], "two or more"),
    (["joint-runs", "--average", "a.json,b.json", "--head", "c.json"], "not with --head"),
    (["joint-runs", "--distil", "nan"], "finite number"),
    (["groups-check", "4,x"], "comma-separated whole numbers"),
    (["groups-check", "0,4"], "at least 1"),
    (["groups-check", "5", "--head", "precomputed/heads/smollm2-135m-mix-joint-seed1/head.json"],
     "does not divide the head's R = 32"),
    (["adapter-grid", "--variants", "no such variant"], "unknown variant"),
    (["adapter-grid", "--n-context", "17"], "from 0 to 16"),
])
def test_bad_experiment_flags_are_one_line(capsys, args, match):
    from experiments.__main__ import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_collect_before_candidates_is_one_line(capsys, tmp_path, monkeypatch):
    from experiments import judged_dev
    from experiments.__main__ import main

    monkeypatch.setattr(judged_dev, "candidates_path", lambda side: tmp_path / "none.jsonl")
    verdicts = _verdicts(tmp_path, [("q:0", 5, "no")])
    assert main(["judged-dev", "collect", "--verdicts", str(verdicts), "--judged-by", "me"]) == 2
    assert "run `judged-dev candidates" in capsys.readouterr().err
