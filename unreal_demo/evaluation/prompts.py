"""Choosing the answering prompt (Eq. 7's template) on a dev split, never on the evaluated questions.

Every prompt of :data:`core.generation.PROMPTS` answers the same seeded SQuAD v1.1 dev questions from
their gold paragraph alone (the oracle bound, where retrieval plays no part), greedily with the QA
budget of new tokens. Questions of the articles the few-shot examples come from are left out. The
prompt with the highest "answer contained" (ties: F1) is the choice; the evaluations record the prompt
they used in their provenance. SQuAD dev is not an evaluated set here (held-out evaluation is
SQuAD-Shifts New-Wiki), so the choice cannot leak into any reported number.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.generation import PROMPTS, SHOT_ARTICLES, prompt_ids
from ..data.sources import load_squad
from ..errors import UserError
from .answers import MAX_NEW_TOKENS, answer_cache
from .metrics import contained, exact_match, f1
from .results import write_result
from .retrieval import mean_ci, wilson


def dev_questions(sample: int, seed: int = 0) -> tuple[list, dict[str, str]]:
    """A seeded sample of SQuAD v1.1 dev questions outside the few-shot examples' articles, and gold texts."""
    passages, qs = load_squad("squad_dev")
    shot_titles = {t.replace("_", " ") for t in SHOT_ARTICLES}
    pool = [q for q in qs if q.title not in shot_titles]
    chosen = random.Random(seed).sample(pool, min(sample, len(pool)))
    return chosen, {p.id: p.text for p in passages}


def check_prompts(prompts: Sequence[str] | None) -> list[str]:
    """The prompt names asked for (all of :data:`PROMPTS` by default); :class:`UserError` for an unknown one."""
    names = [p.strip() for p in prompts or PROMPTS if p.strip()]
    bad = [p for p in names if p not in PROMPTS]
    if bad or not names:
        raise UserError(f"unknown prompt {', '.join(bad) or '(none)'}; use {', '.join(PROMPTS)}")
    return names


def run_prompt_choice(explorer, sample: int = 200, prompts: Sequence[str] | None = None, seed: int = 0,
                      out: str | Path | None = None, progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Oracle-bound EM, F1 and "contained" of each prompt on the same dev questions, and the choice.

    Raises
    ------
    UserError
        For an unknown prompt name.
    """
    names = check_prompts(prompts)
    qs, gold = dev_questions(sample, seed)
    answers = answer_cache("qa")
    table = []
    for name in names:
        t0, rows = time.perf_counter(), []
        for j, q in enumerate(qs):
            ids = prompt_ids(explorer.backbone, [gold[q.passage_id]], q.text, name)
            reply = answers.get(explorer.backbone, ids)
            rows.append({"em": exact_match(reply, q.answers), "f1": f1(reply, q.answers),
                         "contained": contained(reply, q.answers), "tokens": len(ids)})
            if progress is not None:
                progress(name, j + 1, len(qs))
        em = statistics.fmean(r["em"] for r in rows)
        share = statistics.fmean(r["contained"] for r in rows)
        table.append({"prompt": name, "shots": len(PROMPTS[name].shots), "questions": len(rows),
                      "em": round(em, 4), "em_ci": wilson(em, len(rows)), "f1": mean_ci([r["f1"] for r in rows]),
                      "contained": round(share, 4), "contained_ci": wilson(share, len(rows)),
                      "prompt_tokens": round(statistics.fmean(r["tokens"] for r in rows)),
                      "seconds": round(time.perf_counter() - t0, 1)})
    best = max(table, key=lambda r: (r["contained"], r["f1"][0]))
    lines = ["| prompt | shots | EM | F1 (95% CI) | answer contained (95% CI) | prompt tokens |", "|---" * 6 + "|"]
    lines += [f"| {r['prompt']} | {r['shots']} | {r['em']:.3f} | {r['f1'][0]:.3f} ({r['f1'][1]:.2f}–{r['f1'][2]:.2f}) "
              f"| {r['contained']:.3f} ({r['contained_ci'][0]:.2f}–{r['contained_ci'][1]:.2f}) | "
              f"{r['prompt_tokens']} |" for r in table]
    result = {"setting": f"{len(qs)} SQuAD v1.1 dev questions (seed {seed}; not the few-shot examples' articles), "
                         f"each answered from its gold paragraph alone, greedy, {MAX_NEW_TOKENS} new tokens; model "
                         f"{explorer.backbone.name}",
              "chosen": best["prompt"], "table": table, "markdown": "\n".join(lines)}
    return write_result(result, out, explorer, prompt="each row's own")
