"""Eq. 7 — generation: y = LLM([C_selected(x), x]).

The selected chunks' unchanged text, in original document order, then the
question, go into the model's own chat template (a plain "Context / Question /
Answer" prompt for models without one). Decoding is greedy, so an answer is
deterministic, and streamed token by token with a KV cache; prefill and
first-token times are measured separately. An :class:`AnswerRule` bounds the
answer: a budget of new tokens and, optionally, the end of its first sentence.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from .backbone import Backbone

INSTRUCTION = "Answer the question using the context. Reply with a short answer only."


@dataclass(frozen=True)
class Prompt:
    """An answering prompt: the instruction, and worked examples put before the real question as earlier
    user → assistant turns of the chat (each ``(context, question, answer)``)."""

    name: str
    instruction: str = INSTRUCTION
    shots: tuple[tuple[str, str, str], ...] = ()


# Two SQuAD v1.1 dev questions (ids 56be4db0acb8001400a502ec and 56ddde6b9a695914005b9628; their articles,
# Super Bowl 50 and Normans, are left out of the dev split that chooses the prompt) with a shortened context.
SHOTS = (
    ("Super Bowl 50 was an American football game to determine the champion of the National Football League (NFL) "
     "for the 2015 season. The American Football Conference (AFC) champion Denver Broncos defeated the National "
     "Football Conference (NFC) champion Carolina Panthers 24–10 to earn their third Super Bowl title.",
     "Which NFL team represented the AFC at Super Bowl 50?", "Denver Broncos"),
    ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region in "
     "France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway.",
     "In what country is Normandy located?", "France"),
)
SHOT_ARTICLES = ("Super_Bowl_50", "Normans")
EXTRACT = "Copy the shortest phrase of the context that answers the question. Reply with that phrase only."
PROMPTS = {p.name: p for p in (Prompt("instruction"), Prompt("two-shot", shots=SHOTS),
                               Prompt("two-shot-extract", instruction=EXTRACT, shots=SHOTS))}
# A sentence ends at . ! ? or … (closing quotes or brackets may follow) before white space and a next word that
# does not start in lower case, or at a blank line (a paragraph break). A single line break is not an end: licences,
# e-mails and Gutenberg texts are hard-wrapped, and an answer copied from them carries their line breaks.
_STOP = re.compile(r"[.!?…][\"'”’)\]]*(?=\s)|\n[ \t\r]*\n")
# A period after these is no sentence end: an initial or a dotted abbreviation (J. R. R., U.S., e.g., p.m.), a
# short abbreviation (Dr., etc.), or a number opening a line (a list item "1. ").
_NOT_AN_END = re.compile(r"(?:\b[A-Za-z]|\b(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|vs|etc|cf|al|approx|Inc|Ltd|Co|Corp|Mt|Gen|"
                         r"Col|Lt)|(?:^|\n)\s*\d{1,3})$")


def unwrap(text: str) -> str:
    """``text`` with its hard line breaks and runs of white space made single spaces.

    >>> unwrap("you must comply with the requirements of this\\nLicense.")
    'you must comply with the requirements of this License.'
    """
    return " ".join(text.split())


def first_sentence(text: str) -> str | None:
    """``text`` up to the end of its first sentence (unwrapped), or ``None`` while that end has not come.

    An end is sentence punctuation before white space and a word that does not start in lower case, or a blank
    line; a line break alone is not one, nor a period after an initial, a short abbreviation or a list number.
    Once a prefix of a text has a first sentence, every longer text has the same one, so a greedy answer
    stopped there is exactly its longer run cut here.

    >>> first_sentence("Denver Broncos won. They")
    'Denver Broncos won.'
    >>> first_sentence("you must comply with the requirements of this\\nLicense. Corresponding")
    'you must comply with the requirements of this License.'
    >>> first_sentence("It was signed by George W. Bush in 2001") is None
    True
    """
    text = text.lstrip()
    for end in _STOP.finditer(text):
        if end.group().isspace():  # a blank line
            return unwrap(text[:end.start()])
        if text[end.start()] == "." and _NOT_AN_END.search(text, 0, end.start()):
            continue
        rest = text[end.end():].lstrip()
        if not rest:
            return None  # the next word decides
        if not rest[0].islower():
            return unwrap(text[:end.end()])
    return None


def complete(text: str) -> bool:
    """Whether ``text`` ends as a sentence does (. ! ? or …, closing quotes or brackets allowed)."""
    return re.search(r"[.!?…][\"'”’)\]]*\s*$", text) is not None


@dataclass(frozen=True)
class AnswerRule:
    """How far a greedy answer grows: at most ``budget`` new tokens and, with ``first_sentence``, no
    further than the end of its first sentence (:func:`first_sentence`), its line breaks unwrapped."""

    budget: int = 48
    first_sentence: bool = True

    @property
    def name(self) -> str:
        return f"{self.budget} tokens" + (", first sentence by punctuation" if self.first_sentence else "")

    @property
    def limit(self) -> str:
        """The rule in words, for the screen: ``"one sentence, at most 48 tokens"``."""
        return ("one sentence, " if self.first_sentence else "") + f"at most {self.budget} tokens"

    def cut(self, text: str) -> str:
        """An answer that ran ``budget`` tokens without the stop, as this rule would have ended it."""
        return (first_sentence(text) or unwrap(text)) if self.first_sentence else text.strip()


# Both chosen together on SQuAD dev (F1, ties by "contained"): precomputed/prompt_choice.json, made by
# python -m unreal_demo eval prompt --sample 150 --budgets 16,24,32,48
DEFAULT_PROMPT = "two-shot"
ANSWER_RULE = AnswerRule(48, first_sentence=True)


@dataclass
class Generation:
    """A (partial) answer and its timings in seconds.

    Attributes
    ----------
    stop : why the answer ended (set on the last one): ``"sentence"`` (the first sentence ended), ``"eos"``
        (the model ended it) or ``"budget"`` (the token budget ran out; the text may end inside a sentence).
    """

    text: str = ""
    tokens: int = 0
    prompt_tokens: int = 0
    timings: dict = field(default_factory=dict)
    stop: str | None = None


def _user_turn(instruction: str, context: str, question: str) -> str:
    return f"{instruction}\n\nContext:\n{context}\n\nQuestion: {question.strip()}" if context else \
        f"{instruction}\n\nQuestion: {question.strip()}"


def prompt_ids(backbone: Backbone, passages: Sequence[str], question: str, prompt: str = DEFAULT_PROMPT) -> list[int]:
    """Token ids of the answering prompt: instruction, passages (in the order given), question.

    ``prompt`` names one of :data:`PROMPTS`; a few-shot prompt puts its examples first as earlier turns
    (chat models) or as earlier ``Answer:`` blocks (models without a chat template).

    Raises
    ------
    KeyError
        For an unknown prompt name.
    """
    spec = PROMPTS[prompt]
    context = "\n\n".join(p.strip() for p in passages if p.strip())
    turns = [(_user_turn(spec.instruction, c, q), a) for c, q, a in spec.shots]
    user = _user_turn(spec.instruction, context, question)
    tok = backbone.tokenizer
    if getattr(tok, "chat_template", None):
        messages = [m for u, a in turns for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})]
        ids = tok.apply_chat_template(messages + [{"role": "user", "content": user}], add_generation_prompt=True,
                                      tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    shots = "".join(f"{u}\nAnswer: {a}\n\n" for u, a in turns)
    return tok(f"{shots}{user}\nAnswer:", add_special_tokens=True)["input_ids"]


def fits_window(backbone: Backbone, n_prompt: int, max_new_tokens: int) -> bool:
    """Whether a prompt of ``n_prompt`` tokens plus the answer fits the model's context window."""
    return n_prompt + max_new_tokens <= backbone.max_positions


def _stop_ids(backbone: Backbone) -> set[int]:
    tok, ids = backbone.tokenizer, set()
    for t in (tok.eos_token_id, getattr(backbone.model.generation_config, "eos_token_id", None)):
        ids |= set(t) if isinstance(t, list) else ({t} if t is not None else set())
    return ids


@torch.inference_mode()
def stream_answer(backbone: Backbone, ids: list[int], max_new_tokens: int = ANSWER_RULE.budget,
                  first_sentence_only: bool = ANSWER_RULE.first_sentence) -> Iterator[Generation]:
    """Greedy decoding, yielding the growing answer after every token.

    With ``first_sentence_only`` decoding stops once the first sentence has ended (:func:`first_sentence`:
    punctuation or a blank line, not a line break); the answer is then that sentence, exactly
    :meth:`AnswerRule.cut` of the unstopped answer. The last :class:`Generation` says why it ended (``stop``).

    The first :class:`Generation` carries ``timings["prefill"]`` (forward over the prompt)
    and ``timings["first_token"]``; the last one ``timings["decode"]`` as well.
    """
    from transformers import DynamicCache

    model, dev = backbone.model, backbone.device
    stops = _stop_ids(backbone)
    cache = DynamicCache(config=model.config)
    t0 = time.perf_counter()
    logits = model(input_ids=torch.tensor([ids], device=dev), cache=cache, use_cache=True).logits
    out = Generation(prompt_tokens=len(ids))
    out.timings["prefill"] = time.perf_counter() - t0
    generated: list[int] = []
    out.stop = "budget"
    for _ in range(max_new_tokens):
        nxt = int(logits[0, -1].argmax())
        if nxt in stops:
            out.stop = "eos"
            break
        generated.append(nxt)
        if len(generated) == 1:
            out.timings["first_token"] = time.perf_counter() - t0
        out.text, out.tokens = backbone.tokenizer.decode(generated, skip_special_tokens=True), len(generated)
        if first_sentence_only and first_sentence(out.text) is not None:
            out.stop = "sentence"
            break
        yield out
        logits = model(input_ids=torch.tensor([[nxt]], device=dev), cache=cache, use_cache=True).logits
    out.timings.setdefault("first_token", time.perf_counter() - t0)
    out.timings["decode"] = time.perf_counter() - t0
    out.text = AnswerRule(max_new_tokens, first_sentence_only).cut(out.text)
    yield out
