"""The answer-faithfulness check against a hand-made example."""

from __future__ import annotations

from unreal_demo.evaluation.faithfulness import answer_support

EVIDENCE = ["George Washington was the first president of the United States, from 1789 to 1797.",
            "Dwight David Eisenhower was the 34th president of the United States."]


def test_each_sentence_is_checked_and_the_copied_spans_are_found():
    answer = "Dwight David Eisenhower was the first president. He served from 1953 to 1961."
    support = answer_support(answer, EVIDENCE)
    first, second = support.sentences
    assert first.sentence == "Dwight David Eisenhower was the first president."
    assert first.found == ("dwight", "david", "eisenhower", "first", "president") and first.missing == ()
    assert first.verdict == "supported"  # every word occurs, though not together: a lexical check only
    assert second.sentence == "He served from 1953 to 1961."
    assert (second.found, second.missing, second.verdict) == ((), ("served", "1953", "1961"), "unsupported")
    assert not support.unsupported  # the first sentence's words occur
    copied = [(i, EVIDENCE[i][s:e]) for i, s, e in support.copied]
    assert copied == [(0, "the first president"), (1, "Dwight David Eisenhower was")]


def test_an_answer_with_no_word_in_the_evidence_is_flagged():
    support = answer_support("Abraham Lincoln.", EVIDENCE)
    assert support.unsupported and support.copied == []
    assert support.sentences[0].missing == ("abraham", "lincoln") and support.sentences[0].verdict == "unsupported"


def test_a_year_not_in_the_evidence_makes_a_sentence_partly_supported():
    (sentence,) = answer_support("Washington was president in 1792.", EVIDENCE).sentences
    assert (sentence.found, sentence.missing, sentence.verdict) == (("washington", "president"), ("1792",), "partly")


def test_copies_one_word_answers_and_never_stop_words_alone():
    assert [(i, EVIDENCE[i][s:e]) for i, s, e in answer_support("Washington", EVIDENCE).copied] == [
        (0, "Washington")]
    assert [(i, EVIDENCE[i][s:e]) for i, s, e in answer_support("It is part of the United States.", EVIDENCE)
            .copied] == [(0, "the United States"), (1, "the United States")]  # "of the" alone is no copy
    yes = answer_support("Yes.", EVIDENCE)
    assert yes.sentences[0].verdict == "no words" and not yes.unsupported
    assert answer_support("", EVIDENCE).sentences == []
