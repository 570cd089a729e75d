"""``python -m unreal_demo train``: a query head, stage by stage of the default head's recipe.

``--stage base`` (the default) trains ρ, α (and P) through the LLM (Eq. 6, :mod:`core.training`); ``--stage alpha``
retrains α on the natural and SQuAD-style questions' cached states (:mod:`training.alpha`); ``--stage joint``
fine-tunes ρ and α together from there (:mod:`training.joint`). The default head is base → alpha → joint; each head's
JSON records the commands that made it.
"""

from __future__ import annotations

import argparse
import math

from ..errors import UserError
from ..settings import DEFAULT_HEADS, DEFAULT_MODEL, display_path

STAGES = ("base", "alpha", "joint")
JOINT_DEFAULTS = {"steps": 600, "batch": 16, "lr": 5e-4, "seed": 0}  # the joint stage's, where a flag is not given
LATER_ONLY = ("head", "save")  # flags of the alpha and joint stages
SHARED = ("out", "steps", "batch", "lr", "seed", "n_context")  # base flags the joint stage reads too


def _train_fields() -> set[str]:
    """The base stage's settings (:class:`core.training.TrainConfig`)."""
    from ..core.training import TrainConfig

    return set(TrainConfig.__dataclass_fields__)


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``train`` command and its flags."""
    tr = sub.add_parser("train", help="train a query head: the base head (Eq. 6) on SQuAD v1.1 dev and other "
                        "sources, or the α and joint stages of the default head's recipe (--stage)")
    tr.add_argument("--stage", choices=STAGES, default="base",
                    help="base: ρ, α (and P) through the LLM; alpha: α retrained on cached query states of natural "
                    "and SQuAD-style questions, from --head; joint: ρ and α fine-tuned together, from --head")
    tr.add_argument("--out", help="base: the run folder (the head is written there); alpha, joint: the result JSON")
    tr.add_argument("--model")
    tr.add_argument("--sources", help="comma list of training sources (default squad_dev; also nyt, reddit, vitaminc); "
                    "new_wiki and amazon are held out")
    tr.add_argument("--readout", help='blocks α reads: "all" (default), "chunk" (ℓc only) or e.g. "16,20,24"')
    for name in ("chunk_layer", "n_pool", "n_ret", "n_groups", "n_context", "context_tokens", "negatives",
                 "mined", "mine_every", "steps", "batch", "warmup", "seed", "checkpoint_every", "dev_every",
                 "dev_sample"):
        tr.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int)
    for name in ("lr", "temperature", "weight_decay"):
        tr.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float)
    tr.add_argument("--force", action="store_true", help="train over a shipped head in --out")
    tr.add_argument("--use-prompt", dest="use_prompt", action="store_true", default=None,
                    help="learn the soft prompt P (full backprop through the prefix, ~3x slower)")
    tr.add_argument("--head", default=None, help="alpha, joint: the starting head, whose model they train on with "
                    "its index (default: the shipped head)")
    tr.add_argument("--save", default=None, help="alpha, joint: write the trained head here (NAME → NAME.json, "
                    "NAME.safetensors)")
    joint_flags(tr, shared=False)
    tr.set_defaults(func=run)


def joint_flags(p: argparse.ArgumentParser, shared: bool = True) -> None:
    """The joint stage's own flags; ``shared``: also ``--steps``, ``--batch``, ``--lr``, ``--seed`` and
    ``--n-context``, which ``train`` has for every stage."""
    if shared:
        for name in ("steps", "batch", "seed", "n_context"):
            p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=None)
        p.add_argument("--lr", type=float, default=None)
    p.add_argument("--positives", choices=("cleaner", "judged", "judged-more"), default="cleaner",
                   help="joint: the natural training questions' positives: the dpr rule's at BM25 rank ≤ 3, the "
                   "chunks judged by reading to answer them (precomputed/judged/train.json.gz), or those and the "
                   "judged questions the α stage's sample left out (precomputed/judged/more.json.gz)")
    p.add_argument("--dev", choices=("dpr", "judged"), default="dpr",
                   help="joint: the natural dev sets: labelled by the dpr rule, or their questions with a chunk "
                   "judged by reading to answer them (precomputed/judged/dev.json.gz)")
    p.add_argument("--train-c0", dest="train_c0", choices=("bm25", "without-positive", "half", "quarter"),
                   default="bm25", help="joint: each training question's C0: BM25's top chunks (as a search has "
                   "them), those that are not its positive, or each question once with each (half: drawn alike; "
                   "quarter: one visit in four without the positive)")
    p.add_argument("--patience", type=int, default=None,
                   help="joint: dev checks without a better one before stopping (default 4)")
    p.add_argument("--r10-within", dest="r10_within", type=float, default=None,
                   help="joint: keep the dev check with the best mean R@10 among those whose mean R@1 is at most "
                   "this far below step 0's (default: the best mean R@1)")
    p.add_argument("--keep", choices=("best", "last"), default="best",
                   help="joint: score and save the best dev check's state or the last step's")
    p.add_argument("--distil", type=float, default=0.0,
                   help="joint: weight of a KL term keeping each SQuAD-style training question's candidate scores "
                   "near the starting head's (0: none)")
    p.add_argument("--teacher-fusion", dest="teacher_fusion", type=float, default=None,
                   help="joint with --distil: distil every training question toward the starting head's score "
                   "fusion with BM25 at this weight w (w·z(UNREAL) + (1−w)·z(BM25)) instead of toward the starting "
                   "head alone on the SQuAD-style questions")
    p.add_argument("--groups", type=int, default=None, metavar="G",
                   help="joint: start from --head with its R retrieval tokens cut into G query vectors (a divisor "
                   "of R; more vectors cost G / 4 times today's scan)")
    p.add_argument("--adapter-rank", dest="adapter_rank", type=int, default=None, metavar="R",
                   help="joint: start from --head with a new query adapter of rank R (the identity at first; the "
                   "model's hidden size d for a full d × d map) and train it with ρ and α")
    p.add_argument("--lr-rho", dest="lr_rho", type=float, default=5e-4, help="joint: learning rate of ρ (--lr: of α "
                   "and the adapter, default 5e-4)")


def joint_config(args: argparse.Namespace):
    """The :class:`core.joint_training.JointConfig` of the joint flags, checked (a :class:`errors.UserError`)."""
    from ..core.joint_training import JointConfig

    given = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in JOINT_DEFAULTS.items()}
    if given["steps"] < 1 or given["batch"] < 1 or (args.patience is not None and args.patience < 1):
        raise UserError("--steps, --batch and --patience must be at least 1")
    if not math.isfinite(args.distil) or args.distil < 0:
        raise UserError(f"--distil is a loss weight, a finite number of at least 0, not {args.distil}")
    if args.teacher_fusion is not None and not (0 <= args.teacher_fusion <= 1 and args.distil):
        raise UserError("--teacher-fusion is a score-fusion weight from 0 to 1 and needs --distil")
    if args.r10_within is not None and not 0 <= args.r10_within <= 1:
        raise UserError("--r10-within is a recall difference from 0 to 1")
    if args.n_context is not None and not 0 <= args.n_context <= 16:
        raise UserError(f"--n-context is |C0|, from 0 to 16 passages, not {args.n_context}")
    return JointConfig(lr_rho=args.lr_rho, r10_within=args.r10_within, distil=args.distil,
                       teacher_fusion=args.teacher_fusion, **given,
                       **({} if args.patience is None else {"patience": args.patience}))


def joint_widen(args: argparse.Namespace) -> dict:
    """``--groups`` and ``--adapter-rank`` as :meth:`core.head.QueryHead.reshaped`'s fields (those given)."""
    if (args.groups is not None and args.groups < 1) or (args.adapter_rank is not None and args.adapter_rank < 1):
        raise UserError("--groups and --adapter-rank must be at least 1")
    return {k: v for k, v in (("n_groups", args.groups), ("adapter_rank", args.adapter_rank)) if v is not None}


def _joint_only(args: argparse.Namespace) -> list[str]:
    """The joint stage's flags given away from their defaults."""
    defaults = {"positives": "cleaner", "dev": "dpr", "train_c0": "bm25", "patience": None, "r10_within": None,
                "keep": "best", "distil": 0.0, "teacher_fusion": None, "groups": None, "adapter_rank": None,
                "lr_rho": 5e-4}
    return [f"--{k.replace('_', '-')}" for k, v in defaults.items() if getattr(args, k) != v]


def run(args: argparse.Namespace) -> None:
    """Train the ``--stage`` asked for."""
    if args.stage != "joint" and (flags := _joint_only(args)):
        raise UserError(f"{', '.join(flags)} belong to --stage joint")
    if args.stage == "base":
        if given := [f"--{k}" for k in LATER_ONLY if getattr(args, k) is not None]:
            raise UserError(f"{', '.join(given)} belong to --stage alpha and joint (base writes its head to --out)")
        return _base(args)
    base_only = [f"--{k.replace('_', '-')}" for k, v in vars(args).items()
                 if v is not None and k not in SHARED and k in _train_fields()] + (["--force"] if args.force else [])
    if base_only:
        raise UserError(f"{', '.join(base_only)} belong to --stage base"
                        + (" (the alpha and joint stages train the model of --head)" if "--model" in base_only else ""))
    head = args.head or str(DEFAULT_HEADS[DEFAULT_MODEL].with_suffix(".json"))
    if args.stage == "alpha":
        from ..training.alpha import run_alpha
        from .common import print_rows

        steps = 400 if args.steps is None else args.steps
        if steps < 1:
            raise UserError("--steps must be at least 1")
        result = run_alpha(head, steps, args.out, args.save)
        print_rows(result["rows"])
        return
    from ..training.joint import run_joint

    cfg, widen = joint_config(args), joint_widen(args)  # checked before the model loads
    result = run_joint(head, cfg, args.out, args.save, train_c0=args.train_c0, keep=args.keep,
                       n_context=args.n_context, positives=args.positives, dev=args.dev, widen=widen)
    print(result["markdown"])


def _base(args: argparse.Namespace) -> None:
    """The base head (:func:`core.training.train`)."""
    from ..core.training import TrainConfig, train

    overrides = {k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__ and v is not None}
    head = train(TrainConfig(**overrides), force=args.force)
    print(f"trained head written to {display_path(head.config.provenance['settings']['out'])}: "
          f"{head.n_params():,} parameters, final loss {head.config.provenance['final_loss']}")
