"""Distant supervision of natural questions (DPR's rule) on hand-made passages, and the question split."""

from __future__ import annotations

import pytest

from unreal_demo.core.selection import BM25
from unreal_demo.data.natural import NaturalQuestion, distant_positives, question_split
from unreal_demo.data.sources import DataError

TEXTS = [
    "George Washington was the first president of the United States, from 1789 to 1797.",  # 0
    "Barack Obama was the 44th president of the United States; the first African American president.",  # 1
    "The United States Capitol hosts Congress. Washington, D.C. is the capital.",  # 2
    "Washingtonia is a genus of palms.",  # 3
]
TITLES = ["George Washington", "Barack Obama", "United States Capitol", "Washingtonia"]
FIRST = NaturalQuestion("q1", "who was the first president of the united states", ("George Washington",))


def test_dpr_rule_takes_the_best_ranked_passage_holding_an_alias():
    bm25 = BM25(TEXTS)
    assert distant_positives([FIRST], TEXTS, bm25, depth=4) == [[0]]
    city = NaturalQuestion("q2", "capital of the united states", ("Washington",))
    # whole words only: "Washingtonia" (3) never matches "Washington"; 0 and 2 both hold the word
    assert set(distant_positives([city], TEXTS, bm25, depth=4, per_question=3)[0]) == {0, 2}


def test_alias_outside_bm25_depth_gives_no_positive():
    bm25 = BM25(TEXTS)
    palms = NaturalQuestion("q3", "first president united states", ("genus of palms",))
    assert distant_positives([palms], TEXTS, bm25, depth=2) == [[]]


def test_title_rule_needs_the_answer_as_title():
    bm25 = BM25(TEXTS)
    city = NaturalQuestion("q2", "capital of the united states", ("Washington",))
    assert distant_positives([FIRST, city], TEXTS, bm25, depth=4, rule="title", titles=TITLES) == [[0], []]
    with pytest.raises(DataError):
        distant_positives([FIRST], TEXTS, bm25, rule="title")


def test_question_split_is_deterministic_and_disjoint():
    qs = [NaturalQuestion(f"nq_open:{i}", f"q{i}", ("a b",)) for i in range(1000)]
    train, dev = question_split(qs)
    again_train, again_dev = question_split(list(reversed(qs)))  # by id, not by position
    assert {q.id for q in again_dev} == {q.id for q in dev} and len(again_train) == len(train)
    assert not {q.id for q in train} & {q.id for q in dev}
    assert 150 < len(dev) < 250
