"""The answering prompts (Eq. 7's template) and their choice on a dev split."""

from __future__ import annotations

import json

import pytest

from experiments import prompt_choice as prompts
from experiments.common import RECORDS
from unreal_demo.core.generation import ANSWER_RULE, DEFAULT_PROMPT, PROMPTS, SHOTS, AnswerRule, prompt_ids
from unreal_demo.core.head import untrained_head
from unreal_demo.data.sources import Question
from unreal_demo.pipeline import Explorer

CONTEXT = "Item 5 weighs 15 kilograms."
QUESTION = "How much does item 5 weigh?"


class TestPromptIds:
    def test_plain_model_prompt_puts_the_shots_first_and_the_question_last(self, tiny):
        text = tiny.tokenizer.decode(prompt_ids(tiny, [CONTEXT], QUESTION, "two-shot"), skip_special_tokens=True)
        positions = [text.index(q) for _, q, _ in SHOTS] + [text.index(QUESTION)]
        assert positions == sorted(positions) and text.rstrip().endswith("Answer:")
        for _, _, answer in SHOTS:
            assert f"Answer: {answer}" in text

    def test_instruction_prompt_has_no_examples(self, tiny):
        text = tiny.tokenizer.decode(prompt_ids(tiny, [CONTEXT], QUESTION, "instruction"), skip_special_tokens=True)
        assert all(q not in text for _, q, _ in SHOTS) and CONTEXT in text and QUESTION in text

    def test_chat_model_gets_the_shots_as_earlier_turns(self, tiny):
        chat = type(tiny)(model=tiny.model, tokenizer=tiny.tokenizer, name="chat", revision="r")
        saved = getattr(chat.tokenizer, "chat_template", None)
        chat.tokenizer.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                                        "{% if add_generation_prompt %}<assistant>{% endif %}")
        try:
            text = chat.tokenizer.decode(prompt_ids(chat, [CONTEXT], QUESTION, "two-shot"))
        finally:
            chat.tokenizer.chat_template = saved
        assert text.count("<user>") == 3 and text.count("<assistant>") == 3  # 2 shots answered + the open turn
        assert f"<assistant>{SHOTS[0][2]}" in text and text.endswith("<assistant>")

    def test_unknown_prompt(self, tiny):
        with pytest.raises(KeyError):
            prompt_ids(tiny, [CONTEXT], QUESTION, "nope")


def _dev(monkeypatch, n: int) -> None:
    qs = [Question(f"q{i}", f"How much does item {i} weigh?", (f"{i * 3} kilograms",), f"p{i}", "T") for i in range(n)]
    monkeypatch.setattr(prompts, "dev_questions",
                        lambda sample, seed: (qs[:sample], {f"p{i}": f"Item {i} weighs {i * 3} kilograms."
                                                            for i in range(n)}))


def test_choice_runs_every_prompt_on_the_same_dev_questions(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
    _dev(monkeypatch, 4)
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3), None)
    result = prompts.run_prompt_choice(explorer, sample=3, out=tmp_path / "choice.json", budgets=(3,))
    assert [(r["prompt"], r["first_sentence"]) for r in result["table"]] == [
        (p, s) for p in PROMPTS for s in (False, True)]
    assert all(r["questions"] == 3 for r in result["table"])
    few, plain = (next(r for r in result["table"] if r["prompt"] == n) for n in ("two-shot", "instruction"))
    assert few["prompt_tokens"] > plain["prompt_tokens"] and few["shots"] == 2
    best = max(result["table"], key=lambda r: (round(r["f1"][0], 2), r["contained"]))
    assert result["chosen"] == best["prompt"] and result["provenance"]["prompt"]
    assert result["chosen_rule"] == {"budget": best["budget"], "first_sentence": best["first_sentence"]}
    assert (tmp_path / "choice.json").exists()


def test_shorter_budgets_are_prefixes_of_one_answer(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
    _dev(monkeypatch, 3)
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3), None)
    result = prompts.run_prompt_choice(explorer, sample=3, prompts=["instruction"], budgets=(4, 1))
    plain = [r for r in result["table"] if not r["first_sentence"]]
    assert [r["budget"] for r in plain] == [1, 4]
    assert plain[0]["contained"] <= plain[1]["contained"]  # a prefix finds no more
    with pytest.raises(prompts.UserError):
        prompts.run_prompt_choice(explorer, sample=3, prompts=["instruction"], budgets=(0,))


def test_the_shipped_choice_is_what_the_evaluations_use():
    shipped = json.loads((RECORDS / "prompt_choice" / "prompt_choice.json").read_text())
    assert shipped["chosen"] == DEFAULT_PROMPT
    assert AnswerRule(**shipped["chosen_rule"]) == ANSWER_RULE


@pytest.mark.parametrize("args, match", [
    (["prompt-choice", "--methods", "nope"], "unknown prompt nope"),
    (["prompt-choice", "--budgets", "0"], "must be at least 1"),
])
def test_bad_prompt_flags_are_one_line_before_any_model(capsys, args, match):
    from experiments.__main__ import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err
