"""Choosing the answering prompt (Eq. 7's template) on a dev split, never on the evaluated questions.

Every prompt of :data:`core.generation.PROMPTS` answers the same seeded SQuAD v1.1 dev questions from
their gold paragraph alone (the oracle bound, where retrieval plays no part), greedily, under each
answer rule (budget of new tokens, first-sentence stop or not). Questions of the articles the few-shot
examples come from are left out. The (prompt, rule) with the highest F1 is the choice; the evaluations
record the prompt and rule they used in their provenance. SQuAD dev is not an evaluated set here (held-out evaluation is
SQuAD-Shifts New-Wiki), so the choice cannot leak into any reported number.

    python -m experiments prompt-choice --sample 150 --budgets 16,24,32,48 \\
        --out experiments/records/prompt_choice/prompt_choice.json

Record: ``prompt_choice.json`` (:data:`RECORDS`). Reported in docs/RESULTS.md, "The answering
prompt and answer rule, chosen on a dev split". Adopted: the chosen prompt and rule are
:data:`unreal_demo.core.generation.DEFAULT_PROMPT` and :data:`unreal_demo.core.generation.ANSWER_RULE`.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from unreal_demo.core.generation import ANSWER_RULE, PROMPTS, SHOT_ARTICLES, AnswerRule, prompt_ids
from unreal_demo.data.sources import load_squad
from unreal_demo.errors import UserError
from unreal_demo.evaluation.answers import answer_cache
from unreal_demo.evaluation.metrics import contained, exact_match, f1
from unreal_demo.evaluation.results import write_result
from unreal_demo.evaluation.retrieval import mean_ci, wilson

RECORDS = ("prompt_choice.json",)

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
                      out: str | Path | None = None, progress: Callable[[str, int, int], None] | None = None,
                      budgets: Sequence[int] = (ANSWER_RULE.budget,)) -> dict:
    """Oracle-bound EM, F1 and "contained" of each prompt under each answer rule on the same dev questions.

    The rules are every budget of new tokens, each with and without the first-sentence stop; one
    greedy generation per prompt and question serves them all (:meth:`AnswerCache.get_rules`). The
    choice is the (prompt, rule) with the highest F1 to two decimals, ties broken by "contained": F1
    is SQuAD's own measure, crediting an answer for the gold words it holds and charging it for every
    extra word, so a longer budget wins only where it adds answers faster than words; differences
    below 0.01 (a fraction of one question's F1 at 150 questions) count as ties.

    Raises
    ------
    UserError
        For an unknown prompt name or a budget below 1.
    """
    names = check_prompts(prompts)
    if not budgets or min(budgets) < 1:
        raise UserError(f"answer budgets must be whole numbers of tokens ≥ 1, not {list(budgets)}")
    budgets = sorted(set(budgets))
    rules = [AnswerRule(b, s) for b in budgets for s in (False, True)]
    qs, gold = dev_questions(sample, seed)
    answers = answer_cache("qa")
    table = []
    for name in names:
        t0, rows = time.perf_counter(), {r: [] for r in rules}
        for j, q in enumerate(qs):
            ids = prompt_ids(explorer.backbone, [gold[q.passage_id]], q.text, name)
            for rule, reply in answers.get_rules(explorer.backbone, ids, rules).items():
                rows[rule].append({"em": exact_match(reply, q.answers), "f1": f1(reply, q.answers),
                                   "contained": contained(reply, q.answers), "tokens": len(ids),
                                   "words": len(reply.split())})
            if progress is not None:
                progress(name, j + 1, len(qs))
        seconds = round(time.perf_counter() - t0, 1)
        for rule in rules:
            got, n = rows[rule], len(rows[rule])
            em, share = statistics.fmean(r["em"] for r in got), statistics.fmean(r["contained"] for r in got)
            table.append({"prompt": name, "budget": rule.budget, "first_sentence": rule.first_sentence,
                          "rule": rule.name, "shots": len(PROMPTS[name].shots), "questions": n,
                          "em": round(em, 4), "em_ci": wilson(em, n), "f1": mean_ci([r["f1"] for r in got]),
                          "contained": round(share, 4), "contained_ci": wilson(share, n),
                          "answer_words": round(statistics.fmean(r["words"] for r in got), 1),
                          "prompt_tokens": round(statistics.fmean(r["tokens"] for r in got)), "seconds": seconds})
    best = max(table, key=lambda r: (round(r["f1"][0], 2), r["contained"]))
    lines = ["| prompt | answer rule | shots | EM | F1 (95% CI) | answer contained (95% CI) | answer words | "
             "prompt tokens |", "|---" * 8 + "|"]
    lines += [f"| {r['prompt']} | {r['rule']} | {r['shots']} | {r['em']:.3f} | {r['f1'][0]:.3f} "
              f"({r['f1'][1]:.2f}–{r['f1'][2]:.2f}) | {r['contained']:.3f} ({r['contained_ci'][0]:.2f}–"
              f"{r['contained_ci'][1]:.2f}) | {r['answer_words']} | {r['prompt_tokens']} |" for r in table]
    result = {"setting": f"{len(qs)} SQuAD v1.1 dev questions (seed {seed}; not the few-shot examples' articles), "
                         f"each answered from its gold paragraph alone, greedy, at most "
                         f"{', '.join(map(str, budgets))} new tokens, with and without the "
                         f"first-sentence stop (one generation per prompt and question); model "
                         f"{explorer.backbone.name}",
              "chosen": best["prompt"], "chosen_rule": {"budget": best["budget"],
                                                        "first_sentence": best["first_sentence"]},
              "rule_choice": "highest F1 to two decimals (ties: contained) over every prompt and rule",
              "table": table, "markdown": "\n".join(lines)}
    return write_result(result, out, explorer, prompt="each row's own")


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments prompt-choice [--sample N] [--methods P,P] [--budgets B,B] [--out FILE]``."""
    import argparse

    from tqdm import tqdm

    from unreal_demo.cli.common import ints, model_flags
    from unreal_demo.pipeline import Explorer

    from .common import run_main

    p = argparse.ArgumentParser(prog="python -m experiments prompt-choice", description=__doc__.split("\n")[0])
    p.add_argument("--sample", type=int, default=200, help="SQuAD dev questions")
    p.add_argument("--methods", default=None, help="the prompts to compare, a comma list (default: all)")
    p.add_argument("--budgets", default=None, help="answer budgets in new tokens, a comma list (16,24,32,48); each "
                   "is a greedy prefix of the longest (default: the evaluations' budget)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the JSON result here")
    p.add_argument("--json", action="store_true")
    model_flags(p, dtype=True)

    def handle(args: argparse.Namespace) -> None:
        if args.sample < 1:
            raise UserError("--sample must be at least 1")
        prompts = check_prompts(args.methods.split(",") if args.methods else None)  # before the model loads
        budgets = ints(args.budgets, "--budgets") if args.budgets else [ANSWER_RULE.budget]
        explorer = Explorer.load(args.model, head=args.head, dtype=args.dtype)
        bar = tqdm(unit="question")
        result = run_prompt_choice(explorer, args.sample, prompts, args.seed, args.out, progress=lambda m, d, t: (
            bar.set_description(f"prompt {m}"), setattr(bar, "total", t), bar.update(d - bar.n)), budgets=budgets)
        bar.close()
        print(json.dumps(result) if args.json else result["markdown"] +
              f"\nchosen: {result['chosen']}, {AnswerRule(**result['chosen_rule']).name}")

    return run_main(p, handle, argv)
