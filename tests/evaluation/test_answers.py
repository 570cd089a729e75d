"""The answer cache: keyed by model revision and prompt, resumable, kept in the repository across machines."""

from __future__ import annotations

import gzip
import json

import pytest

from unreal_demo.core.generation import AnswerRule, Generation, stream_answer
from unreal_demo.evaluation import answers as ans
from unreal_demo.settings import PRECOMPUTED


class _Backbone:
    numerics = "rev-1"


def test_a_shipped_file_answers_without_generating(tmp_path, monkeypatch):
    calls = []

    def fake_stream(backbone, ids, n, first_sentence_only=False):
        calls.append(ids)
        yield Generation(text="Paris", tokens=1)

    monkeypatch.setattr(ans, "stream_answer", fake_stream)
    first = ans.AnswerCache(tmp_path / "a" / "answers.jsonl", tmp_path / "shipped.jsonl.gz", export_every=2)
    assert first.get(_Backbone(), [1, 2]) == "Paris" and calls == [[1, 2]]
    assert not (tmp_path / "shipped.jsonl.gz").exists()  # one new answer: not exported yet
    first.get(_Backbone(), [3])
    with gzip.open(tmp_path / "shipped.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 2 and rows == sorted(rows, key=lambda r: r["key"])
    other_machine = ans.AnswerCache(tmp_path / "b" / "answers.jsonl", tmp_path / "shipped.jsonl.gz")
    assert other_machine.get(_Backbone(), [1, 2]) == "Paris" and len(calls) == 2  # answered from the file


def test_each_answer_keeps_its_generation_cpu_time(tmp_path, monkeypatch):
    def slow_stream(backbone, ids, n, first_sentence_only=False):
        sum(i * i for i in range(200_000))  # some CPU work inside the timed generation
        yield Generation(text="Paris", tokens=1)

    monkeypatch.setattr(ans, "stream_answer", slow_stream)
    cache = ans.AnswerCache(tmp_path / "answers.jsonl", tmp_path / "s.jsonl.gz")
    assert cache.cost(_Backbone(), [1]) is None  # not cached yet
    cache.get(_Backbone(), [1])
    spent = cache.cost(_Backbone(), [1])
    assert spent is not None and spent > 0
    cache.export()
    local = ans.AnswerCache(tmp_path / "answers.jsonl")
    shipped = ans.AnswerCache(tmp_path / "o.jsonl", tmp_path / "s.jsonl.gz")
    for reread in (local, shipped):
        assert reread.cost(_Backbone(), [1]) == spent  # from the local file and from the shipped one


def test_answers_from_before_timing_have_no_cost(tmp_path):
    (tmp_path / "answers.jsonl").write_text('{"key": "a", "answer": "1"}\n{"key": "b", "answer": "2", "cpu_s": 1.5}\n')
    cache = ans.AnswerCache(tmp_path / "answers.jsonl")
    assert cache.known == {"a": "1", "b": "2"} and cache.cpu == {"b": 1.5}


def test_export_is_reproducible(tmp_path):
    a = ans.AnswerCache(tmp_path / "x.jsonl", tmp_path / "s.jsonl.gz")
    a.known = {"b": "2", "a": "1"}
    a.export()
    first = (tmp_path / "s.jsonl.gz").read_bytes()
    a.export()
    assert (tmp_path / "s.jsonl.gz").read_bytes() == first


def test_only_precomputed_results_keep_their_answers(tmp_path):
    assert ans.keeps(PRECOMPUTED / "longcontext.json")
    assert not ans.keeps(tmp_path / "longcontext.json") and not ans.keeps(None)
    assert ans.answer_cache("qa").export_every == 0
    assert ans.answer_cache("qa", keep=True).shipped == PRECOMPUTED / "answers" / "qa.jsonl.gz"


def test_a_cut_line_is_skipped(tmp_path):
    (tmp_path / "answers.jsonl").write_text('{"key": "a", "answer": "1"}\n{"key": "b", "ans')
    assert ans.AnswerCache(tmp_path / "answers.jsonl").known == {"a": "1"}


def test_two_runs_sharing_the_file_keep_each_others_answers(tmp_path):
    shipped = tmp_path / "s.jsonl.gz"
    a = ans.AnswerCache(tmp_path / "a.jsonl", shipped)
    b = ans.AnswerCache(tmp_path / "b.jsonl", shipped)
    a.known["x"], b.known["y"] = "1", "2"
    a.export()
    b.export()  # merges what a wrote
    assert ans.AnswerCache(tmp_path / "c.jsonl", shipped).known == {"x": "1", "y": "2"}


def test_a_damaged_shipped_file_is_left_out_with_a_warning(tmp_path):
    (tmp_path / "s.jsonl.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.warns(UserWarning, match="damaged"):
        assert ans.AnswerCache(tmp_path / "a.jsonl", tmp_path / "s.jsonl.gz").known == {}


class TestRules:
    RULES = (AnswerRule(1, False), AnswerRule(3, False), AnswerRule(6, False), AnswerRule(6, True))

    def test_one_generation_serves_every_rule_as_separate_runs_would(self, tiny, tmp_path):
        ids = tiny.tokenizer("the quick brown fox", add_special_tokens=True)["input_ids"]
        cache = ans.AnswerCache(tmp_path / "answers.jsonl")
        got = cache.get_rules(tiny, ids, self.RULES)
        for rule in self.RULES:  # reference: an independent greedy run under each rule
            *_, last = stream_answer(tiny, ids, rule.budget, rule.first_sentence)
            assert got[rule] == last.text
        assert len(cache.known) == 4 and cache.get(tiny, ids, self.RULES[1]) == got[self.RULES[1]]
        assert ans.AnswerCache(tmp_path / "answers.jsonl").known == cache.known  # all on disk

    def test_a_first_sentence_answer_comes_from_a_cached_plain_one(self, tmp_path, monkeypatch):
        monkeypatch.setattr(ans, "stream_answer", lambda *a, **k: pytest.fail("nothing should be generated"))
        cache = ans.AnswerCache(tmp_path / "answers.jsonl")
        cache.known[cache.key(_Backbone(), [1], AnswerRule(48, False))] = "Denver won. Then it rained"
        assert cache.get(_Backbone(), [1], AnswerRule(48, True)) == "Denver won."

    def test_the_rules_have_their_own_keys(self):
        keys = {ans.AnswerCache.key(_Backbone(), [1], r) for r in self.RULES}
        assert len(keys) == 4


@pytest.mark.parametrize(("text", "cut"), [("The answer is 1990. Then", "The answer is 1990."),
                                           ("The answer is:\n\nParis", "The answer is:"),
                                           ("  Paris, France", "Paris, France"), ("U.S. Army", "U.S. Army")])
def test_the_first_sentence_cut(text, cut):
    assert AnswerRule(48, True).cut(text) == cut and AnswerRule(48, False).cut(text) == text.strip()
