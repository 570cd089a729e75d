"""The answer rule on real text: sentence ends from punctuation, never from the line breaks of hard-wrapped text."""

from __future__ import annotations

import pytest

from unreal_demo.core.generation import AnswerRule, complete, first_sentence, stream_answer

# Hard-wrapped at 72 columns, as the licence, the e-book and the mail are; an answer copied from them carries the
# line breaks.
GPL = """If you convey an object code work under this section in, or with, or
specifically for use in, a User Product, and the conveying occurs as part of
a transaction in which the right of possession and use of the User Product is
transferred to the recipient in perpetuity or for a fixed term, the
Corresponding Source conveyed under this section must be accompanied by the
Installation Information. But this requirement does not apply if neither you
nor any third party retains the ability to install modified object code."""
GUTENBERG = """It is a truth universally acknowledged, that a single man in possession
of a good fortune, must be in want of a wife.

However little known the feelings or views of such a man may be on his
first entering a neighbourhood, this truth is so well fixed in the minds
of the surrounding families, that he is considered the rightful property
of some one or other of their daughters."""
EMAIL = """Hi Ana,

the build server moves to the new rack on Friday, so please push your
branches before 5 p.m. on Thursday. Mr. Okafor from facilities will
switch it off at six.

Thanks,
Jo"""


@pytest.mark.parametrize(("text", "sentence"), [
    (GPL, " ".join(GPL.split(". ")[0].split()) + "."),
    (GUTENBERG, "It is a truth universally acknowledged, that a single man in possession of a good fortune, must "
                "be in want of a wife."),
    (EMAIL.split("\n\n", 1)[1], "the build server moves to the new rack on Friday, so please push your branches "
                                "before 5 p.m. on Thursday."),
    ("If you convey object code, you must comply with the requirements of this\nLicense, as set out below. More",
     "If you convey object code, you must comply with the requirements of this License, as set out below."),
])
def test_a_hard_wrapped_sentence_is_whole_and_unwrapped(text, sentence):
    assert first_sentence(text) == sentence
    assert AnswerRule(48, True).cut(text) == sentence


@pytest.mark.parametrize(("text", "sentence"), [
    ("The answer is 1990. Then", "The answer is 1990."),
    ("Paris\n\nQuestion: what", "Paris"),  # a blank line is a paragraph's end
    ("“Stop!” she said. He", "“Stop!” she said."),
    ("He said “it is over.” Then", "He said “it is over.”"),
    ("U.S. Army units arrived. Later", "U.S. Army units arrived."),
    ("Signed by George W. Bush. It", "Signed by George W. Bush."),
    ("Bring fruit, e.g. apples. Or", "Bring fruit, e.g. apples."),
    ("Ask Dr. Smith. She", "Ask Dr. Smith."),
    ("1. Butter\n2. Flour. Then", "1. Butter 2. Flour."),
    ("Why? Because", "Why?"),
])
def test_sentence_ends(text, sentence):
    assert first_sentence(text) == sentence


@pytest.mark.parametrize("text", [
    "If you convey object code, you must comply with the requirements of this\n",  # a line break: not an end
    "January 29, 19",
    "The answer is 1990. ",  # the next word decides
    "the version 3. of the licence",  # a lower-case word follows: no end yet
])
def test_no_end_yet(text):
    assert first_sentence(text) is None


def test_an_answer_that_never_ends_its_sentence_is_kept_whole_unwrapped():
    assert AnswerRule(48, True).cut("you must comply with\nthe requirements") == "you must comply with the requirements"
    assert AnswerRule(48, False).cut(" a\nb ") == "a\nb"  # the plain rule keeps the text as generated
    assert AnswerRule(48, True).limit == "one sentence, at most 48 tokens"
    assert complete("it ends.”") and not complete("it goes on")


@pytest.mark.parametrize(("words", "answer", "stop"), [
    (["The answer is", " of the", "\n", "fox", ". The", " dog"], "The answer is of the fox.", "sentence"),
    (["The answer is", " of the", "\n", "fox"], "The answer is of the fox", "eos"),
    (["The answer is", " of the", "\n", "fox", " and the", " dog and"], "The answer is of the fox and the", "budget"),
])
def test_the_stream_stops_at_punctuation_not_at_a_line_break(tiny, saying, words, answer, stop):
    said = [len(tiny.tokenizer(w, add_special_tokens=False)["input_ids"]) for w in words]
    budget = sum(said[:5]) if stop == "budget" else 48  # the budget runs out after " and the"
    steps = list(stream_answer(saying(words), [1, 2, 3], budget, first_sentence_only=True))
    assert steps[-1].text == answer and steps[-1].stop == stop
