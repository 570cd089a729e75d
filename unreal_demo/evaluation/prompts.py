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

KNEE = 0.95  # a budget is long enough once it finds this share of the longest budget's answers


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


def chosen_budget(rows: Sequence[dict], share: float = KNEE) -> int:
    """The smallest budget of new tokens whose "contained" reaches ``share`` of the best budget's.

    Greedy answers only grow with the budget, so "contained" never falls as it rises; the knee keeps
    the decoding cost (linear in the budget) where a longer answer stops adding answers.
    """
    top = max(r["contained"] for r in rows)
    return min(r["budget"] for r in rows if r["contained"] >= share * top)


def run_prompt_choice(explorer, sample: int = 200, prompts: Sequence[str] | None = None, seed: int = 0,
                      out: str | Path | None = None, progress: Callable[[str, int, int], None] | None = None,
                      budgets: Sequence[int] = (MAX_NEW_TOKENS,)) -> dict:
    """Oracle-bound EM, F1 and "contained" of each prompt at each answer budget on the same dev questions.

    Each question is answered once per prompt at the largest budget; the smaller budgets are its
    greedy prefixes (:meth:`AnswerCache.get_budgets`). The prompt chosen is the one with the highest
    "contained" (ties: F1) at the largest budget; the budget chosen is its :func:`chosen_budget`.

    Raises
    ------
    UserError
        For an unknown prompt name or a budget below 1.
    """
    names = check_prompts(prompts)
    budgets = sorted(set(budgets))
    if not budgets or budgets[0] < 1:
        raise UserError(f"answer budgets must be whole numbers of tokens ≥ 1, not {budgets}")
    qs, gold = dev_questions(sample, seed)
    answers = answer_cache("qa")
    table = []
    for name in names:
        t0, rows = time.perf_counter(), {b: [] for b in budgets}
        for j, q in enumerate(qs):
            ids = prompt_ids(explorer.backbone, [gold[q.passage_id]], q.text, name)
            for b, reply in answers.get_budgets(explorer.backbone, ids, budgets).items():
                rows[b].append({"em": exact_match(reply, q.answers), "f1": f1(reply, q.answers),
                                "contained": contained(reply, q.answers), "tokens": len(ids)})
            if progress is not None:
                progress(name, j + 1, len(qs))
        seconds = round(time.perf_counter() - t0, 1)
        for b in budgets:
            em = statistics.fmean(r["em"] for r in rows[b])
            share = statistics.fmean(r["contained"] for r in rows[b])
            n = len(rows[b])
            table.append({"prompt": name, "budget": b, "shots": len(PROMPTS[name].shots), "questions": n,
                          "em": round(em, 4), "em_ci": wilson(em, n), "f1": mean_ci([r["f1"] for r in rows[b]]),
                          "contained": round(share, 4), "contained_ci": wilson(share, n),
                          "prompt_tokens": round(statistics.fmean(r["tokens"] for r in rows[b])),
                          "seconds": seconds})
    last = [r for r in table if r["budget"] == budgets[-1]]
    best = max(last, key=lambda r: (r["contained"], r["f1"][0]))["prompt"]
    budget = chosen_budget([r for r in table if r["prompt"] == best])
    lines = ["| prompt | new tokens | shots | EM | F1 (95% CI) | answer contained (95% CI) | prompt tokens |",
             "|---" * 7 + "|"]
    lines += [f"| {r['prompt']} | {r['budget']} | {r['shots']} | {r['em']:.3f} | {r['f1'][0]:.3f} "
              f"({r['f1'][1]:.2f}–{r['f1'][2]:.2f}) | {r['contained']:.3f} ({r['contained_ci'][0]:.2f}–"
              f"{r['contained_ci'][1]:.2f}) | {r['prompt_tokens']} |" for r in table]
    result = {"setting": f"{len(qs)} SQuAD v1.1 dev questions (seed {seed}; not the few-shot examples' articles), "
                         f"each answered from its gold paragraph alone, greedy, at most {', '.join(map(str, budgets))} "
                         f"new tokens (one generation per prompt, shorter budgets its prefixes); model "
                         f"{explorer.backbone.name}",
              "chosen": best, "chosen_budget": budget,
              "budget_rule": f"smallest budget reaching {KNEE:.0%} of the best budget's 'contained'",
              "table": table, "markdown": "\n".join(lines)}
    return write_result(result, out, explorer, prompt="each row's own")
