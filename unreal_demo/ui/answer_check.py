"""What is shown with every answer: the model that wrote it and its size, a one-line caveat, how the answer rule
ended it, and the faithfulness check (:func:`evaluation.faithfulness.answer_support`) sentence by sentence."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from ..core.generation import ANSWER_RULE, Generation, complete
from ..evaluation.faithfulness import SentenceSupport, Support, answer_support
from ..pipeline import AnswerStep, Explorer
from ..settings import PRECOMPUTED

SMALL = 3e9  # parameters below which a model is called small in the caveat
ANSWER_LABEL = f"Answer ({ANSWER_RULE.limit}; streamed)"
PLACEHOLDER = ("<p class='unreal-placeholder'>With the answer: the model that wrote it, and whether each of its "
               "sentences is stated by a sentence of the evidence it was given (quoted), or not found there.</p>")


def model_line(explorer: Explorer) -> str:
    """``smollm2-135m-instruct (135M parameters) wrote this answer …``: who answered, and the caveat."""
    params = sum(p.numel() for p in explorer.backbone.model.parameters())
    size = f"{params / 1e9:.1f}B" if params >= 1e9 else f"{params / 1e6:.0f}M"
    caveat = ("a model this small often states wrong answers fluently" if params < SMALL else
              "language models can state wrong answers fluently")
    return (f"Written by <code>{html.escape(explorer.backbone.name)}</code> ({size} parameters) from the evidence "
            f"below, under the answer rule ({ANSWER_RULE.limit}); {caveat}: check it against that evidence.")


def _measured() -> str:
    """What the check was measured to do (``precomputed/answer_check.json``), in one clause; empty if missing."""
    try:
        r = json.loads((PRECOMPUTED / "answer_check.json").read_text())
        after = r["after"]
        return (f" Measured on {r['answers']} answers this app's model gave to held-out questions: "
                f"{after['precision']:.0%} of the answers it marked supported were right, and it marked "
                f"{r['wrong_marked_supported']:.1%} of the wrong answers supported.")
    except (OSError, ValueError, KeyError, TypeError):
        return ""


CHECK_NOTE = ("<p class='unreal-check-note'><b>What the check does:</b> each sentence of the answer is looked "
              "up in the evidence it was given, and marked <i>supported</i> only when one evidence sentence "
              "(or two adjacent ones) holds its names, numbers and other content words together with the "
              "question's, quoting that sentence; otherwise it is <i>not found in the evidence</i>. It compares "
              "words, not meaning: a small model's answer can be wrong even when it quotes the evidence (it may "
              "copy a true sentence that answers another question), and a right answer in other words is "
              "not found.{measured}</p>")


def _sentence(s: SentenceSupport) -> str:
    said = f"“{html.escape(s.sentence)}”"
    if s.supported:
        return (f"<span class='unreal-verdict unreal-supported'>supported</span> {said}: the evidence says "
                f"<q class='unreal-quote'>{html.escape(s.evidence or '')}</q>")
    why = f" ({html.escape(s.reason)})" if s.reason else ""
    return f"<span class='unreal-verdict unreal-not-found'>not found in the evidence</span> {said}{why}"


Spans = dict[int, list[tuple[int, int]]]  # passage or chunk id -> (start, end) character spans


def checked(answer: str, passages: Sequence[str], ids: Sequence[int] | None = None,
            question: str | None = None) -> tuple[Support, Spans]:
    """The check of ``answer`` against the passages it was given (:func:`evaluation.faithfulness.answer_support`,
    with the question when known), and the character spans it copies from each passage, keyed by ``ids[j]`` for
    the j-th passage (a chunk id; default its position), as the evidence views mark them."""
    support = answer_support(answer, passages, question)
    copied: Spans = {}
    for j, start, end in support.copied:
        copied.setdefault(j if ids is None else ids[j], []).append((start, end))
    return support, copied


def check_html(explorer: Explorer, gen: Generation | AnswerStep, support: Support) -> str:
    """The model line, how the answer ended if the token limit cut it, what the check does, and its verdict
    sentence by sentence: *supported* (with the quoted evidence sentence) or *not found in the evidence*."""
    parts = [f"<div class='unreal-model'>{model_line(explorer)}</div>"]
    if gen.stop == "budget" and not complete(gen.text):
        parts.append(f"<div class='unreal-notice'>The answer reached the limit of {ANSWER_RULE.budget} tokens before "
                     "its sentence ended: it is shown as far as it got.</div>")
    if support.sentences:
        items = "".join(f"<li>{_sentence(s)}</li>" for s in support.sentences)
        whole = ("every sentence is supported" if support.supported else
                 "not found in the evidence" if not any(s.supported for s in support.sentences) else
                 "not every sentence is found in the evidence")
        marked = " The words it copies are <mark class='unreal-copy'>marked</mark> in the evidence." \
            if support.copied else ""
        parts.append(f"<div class='unreal-check'><b>Answer check: {whole}.</b><ul>{items}</ul>"
                     f"{CHECK_NOTE.format(measured=_measured())}{marked}</div>")
    return "".join(parts)


def verdict(support: Support) -> str:
    """One cell for a table of answers: ``supported`` or ``not found in the evidence``."""
    return support.verdict


def prefill_html(tokens: int, passages: int, explorer: Explorer, what: str = "selected chunk") -> str:
    """The state between the ranking and the first answer token: the prompt being read."""
    return (f"<p class='unreal-wait' id='unreal-prefill'>⏳ Prefilling {tokens:,} tokens ({passages} {what}"
            f"{'s' * (passages != 1)} and the question) on {explorer.backbone.device}: the model reads the whole "
            "prompt before it writes the first token …</p>")
