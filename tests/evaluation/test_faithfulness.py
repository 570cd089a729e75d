"""The answer check: a claim is supported only by one evidence sentence (or two adjacent) stating it."""

from __future__ import annotations

import json

from unreal_demo.evaluation.faithfulness import NOT_FOUND, SUPPORTED, answer_support, split_sentences
from unreal_demo.settings import PRECOMPUTED

EVIDENCE = ["George Washington was the first president of the United States, from 1789 to 1797.",
            "Dwight David Eisenhower was the 34th president of the United States."]
# UNREAL's top 5 for the question on the shipped index (Wikipedia tab), as the issue found them
FIRST_PRESIDENT = "Who was the first president of the United States?"
TOP5 = [
    "Barack Hussein Obama II is an American former politician who served as the 44th president of the United "
    "States from 2009 to 2017. A member of the Democratic Party, he was the first African American to serve as "
    "president. Obama represented Illinois in the United States Senate from 2005 to 2008 and served as an Illinois "
    "state senator from 1997 to 2004.",
    "Thomas Woodrow Wilson was the 28th president of the United States, serving from 1913 to 1921. He was the only "
    "Democrat to serve as president during the Progressive Era, when Republicans dominated the presidency and "
    "legislative branches.",
    "Theodore Roosevelt Jr. was the 26th president of the United States, serving from 1901 to 1909. Previously "
    "serving for six months as vice president under William McKinley, Roosevelt became president after "
    "McKinley's assassination in 1901. He was 42 years old upon his first inauguration, making him the youngest "
    "person to hold the office.",
    "George Walker Bush is an American former politician, businessman, and former United States Air Force officer "
    "who was the 43rd president of the United States, serving from 2001 to 2009. He is the eldest son of George "
    "H. W. Bush, the 41st president of the United States.",
    "John Fitzgerald Kennedy, also known as JFK, was the 35th president of the United States, serving from 1961 "
    "until his assassination in 1963. He was the youngest person elected president, at 43 years, and the first "
    "Catholic president. Kennedy served at the height of the Cold War.",
]


def test_the_first_president_answer_from_unreals_top5_is_not_supported():
    answer = "John F. Kennedy, also known as JFK, was the first president of the United States."
    for question in (FIRST_PRESIDENT, None):
        support = answer_support(answer, TOP5, question)
        assert len(support.sentences) == 1  # "John F." is no sentence
        assert not support.supported and support.verdict == NOT_FOUND and support.sentences[0].evidence is None
    for wrong in ("Theodore Roosevelt Jr.", "Abraham Lincoln was the first president of the United States."):
        assert not answer_support(wrong, TOP5, FIRST_PRESIDENT).supported


def test_a_sentence_stated_by_one_evidence_sentence_is_supported_and_quoted():
    support = answer_support("Eisenhower was the 34th president of the United States.", EVIDENCE)
    assert support.supported and support.verdict == SUPPORTED
    assert support.sentences[0].evidence == EVIDENCE[1] and support.sentences[0].passage == 1
    # the same words, one from each passage: not together in one sentence
    scattered = answer_support("Dwight David Eisenhower was the first president.", EVIDENCE)
    assert not scattered.supported and scattered.sentences[0].missing == ("first",)


def test_every_sentence_must_be_supported():
    support = answer_support("Washington was the first president. He served from 1953 to 1961.", EVIDENCE)
    first, second = support.sentences
    assert first.supported and not second.supported and not support.supported
    assert second.missing == ("served", "1953", "1961")


def test_a_number_not_in_the_sentence_is_not_found():
    (sentence,) = answer_support("Washington was president in 1792.", EVIDENCE).sentences
    assert (sentence.verdict, sentence.missing) == (NOT_FOUND, ("1792",))


def test_two_adjacent_sentences_support_only_a_name_added_to_a_stated_relation():
    assert answer_support("Kennedy was the first Catholic president.", TOP5).supported  # "He" is Kennedy
    # "known" and "35th" in one sentence, "first" in the next: the relation is not stated
    assert not answer_support("Kennedy, known as JFK, was the first president.", TOP5).supported


def test_the_question_must_be_in_the_quoted_sentence():
    true_but_beside = "Woodrow Wilson was the 28th president of the United States."
    assert answer_support(true_but_beside, TOP5).supported
    assert not answer_support(true_but_beside, TOP5, FIRST_PRESIDENT).supported
    assert answer_support("George Washington.", EVIDENCE, FIRST_PRESIDENT).supported
    restated = answer_support("The first president of the United States.", EVIDENCE, FIRST_PRESIDENT)
    assert not restated.supported and restated.sentences[0].reason == "it only restates the question"


def test_sentences_are_not_split_at_initials_or_abbreviations():
    text = "John F. Kennedy visited the U.S. Navy in 1961. Dr. Smith met him at St. Louis. It rained!"
    assert [text[s:e] for s, e in split_sentences(text)] == [
        "John F. Kennedy visited the U.S. Navy in 1961.", "Dr. Smith met him at St. Louis.", "It rained!"]


def test_copies_one_word_answers_and_never_stop_words_alone():
    assert [(i, EVIDENCE[i][s:e]) for i, s, e in answer_support("Washington", EVIDENCE).copied] == [
        (0, "Washington")]
    assert [(i, EVIDENCE[i][s:e]) for i, s, e in answer_support("It is part of the United States.", EVIDENCE)
            .copied] == [(0, "the United States"), (1, "the United States")]  # "of the" alone is no copy
    yes = answer_support("Yes.", EVIDENCE)
    assert not yes.supported and yes.sentences[0].reason
    assert answer_support("", EVIDENCE).sentences == [] and not answer_support("", EVIDENCE).supported


def test_the_measurement_record():
    record = json.loads((PRECOMPUTED / "answer_check.json").read_text())
    assert record["answers"] == 200 and record["command"].startswith("python -m experiments.answer_check")
    assert record["wrong_marked_supported"] <= 0.05 < record["before"]["wrong_marked_supported"]
