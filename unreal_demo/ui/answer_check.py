"""What is shown with every answer: the model that wrote it and its size, a one-line caveat, how the answer rule
ended it, and the faithfulness check (:func:`evaluation.faithfulness.answer_support`) sentence by sentence."""

from __future__ import annotations

import html
from collections.abc import Sequence

from ..core.generation import ANSWER_RULE, Generation, complete
from ..evaluation.faithfulness import SentenceSupport, Support, answer_support
from ..pipeline import AnswerStep, Explorer

SMALL = 3e9  # parameters below which a model is called small in the caveat
ANSWER_LABEL = f"Answer ({ANSWER_RULE.limit}; streamed)"
PLACEHOLDER = ("<p class='unreal-placeholder'>With the answer: the model that wrote it, and whether each of its "
               "sentences is supported by the evidence it was given.</p>")


def model_line(explorer: Explorer) -> str:
    """``smollm2-135m-instruct (135M parameters) wrote this answer …``: who answered, and the caveat."""
    params = sum(p.numel() for p in explorer.backbone.model.parameters())
    size = f"{params / 1e9:.1f}B" if params >= 1e9 else f"{params / 1e6:.0f}M"
    caveat = ("a model this small often states wrong answers fluently" if params < SMALL else
              "language models can state wrong answers fluently")
    return (f"Written by <code>{html.escape(explorer.backbone.name)}</code> ({size} parameters) from the evidence "
            f"below, under the answer rule ({ANSWER_RULE.limit}); {caveat}: check it against that evidence.")


def _sentence(s: SentenceSupport) -> str:
    said = f"“{html.escape(s.sentence)}”"
    if s.verdict == "supported":
        return f"✓ {said}: every content word occurs in the evidence"
    if s.verdict == "no words":
        return f"· {said}: no content words to check"
    missing = ", ".join(html.escape(w) for w in s.missing)
    if s.verdict == "partly":
        return f"◐ {said}: not in the evidence: <b>{missing}</b>"
    return f"✗ {said}: none of its content words occur in the evidence ({missing})"


Spans = dict[int, list[tuple[int, int]]]  # passage or chunk id -> (start, end) character spans


def checked(answer: str, passages: Sequence[str], ids: Sequence[int] | None = None) -> tuple[Support, Spans]:
    """The check of ``answer`` against the passages it was given (:func:`evaluation.faithfulness.answer_support`),
    and the character spans it copies from each passage, keyed by ``ids[j]`` for the j-th passage (a chunk id;
    default its position), as the evidence views mark them."""
    support = answer_support(answer, passages)
    copied: Spans = {}
    for j, start, end in support.copied:
        copied.setdefault(j if ids is None else ids[j], []).append((start, end))
    return support, copied


def check_html(explorer: Explorer, gen: Generation | AnswerStep, support: Support) -> str:
    """The model line, how the answer ended if the token limit cut it, and the per-sentence check."""
    parts = [f"<div class='unreal-model'>{model_line(explorer)}</div>"]
    if gen.stop == "budget" and not complete(gen.text):
        parts.append(f"<div class='unreal-notice'>The answer reached the limit of {ANSWER_RULE.budget} tokens before "
                     "its sentence ended: it is shown as far as it got.</div>")
    if support.unsupported:
        parts.append("<div class='unreal-notice unreal-unsupported'>⚠ None of the answer's content words occur in "
                     "the evidence it was given: nothing there supports it.</div>")
    if support.sentences:
        items = "".join(f"<li>{_sentence(s)}</li>" for s in support.sentences)
        marked = " · the words it copies are <mark class='unreal-copy'>marked</mark> in the evidence" \
            if support.copied else ""
        parts.append(f"<div class='unreal-check'>Answer check, by words, not meaning (a sentence can reuse the "
                     f"evidence's words and still be wrong){marked}<ul>{items}</ul></div>")
    return "".join(parts)


def verdict(support: Support) -> str:
    """One cell for a table of answers: ``supported``, ``partly (not in the evidence: 1892)``, ``unsupported``."""
    missing = sorted({w for s in support.sentences for w in s.missing})
    if support.unsupported:
        return "unsupported: no content word in its evidence"
    return f"partly (not in its evidence: {', '.join(missing)})" if missing else "supported"


def prefill_html(tokens: int, passages: int, explorer: Explorer, what: str = "selected chunk") -> str:
    """The state between the ranking and the first answer token: the prompt being read."""
    return (f"<p class='unreal-wait' id='unreal-prefill'>⏳ Prefilling {tokens:,} tokens ({passages} {what}"
            f"{'s' * (passages != 1)} and the question) on {explorer.backbone.device}: the model reads the whole "
            "prompt before it writes the first token …</p>")
