"""``python -m unreal_demo flops``: break-even context length of UNREAL vs full context (Eqs. 8-10)."""

from __future__ import annotations

import argparse
import json

from ..settings import CHUNK_TOKENS, DEFAULT_HEADS


def add(sub: argparse._SubParsersAction) -> None:
    """Register the ``flops`` command and its flags."""
    fl = sub.add_parser("flops", help="break-even context length of UNREAL vs full context (Eqs. 8-10)")
    group = fl.add_mutually_exclusive_group(required=True)
    group.add_argument("--backbone", help="muse | nemotron | qwen | a model id or folder")
    group.add_argument("--config", help="a transformers config.json")
    fl.add_argument("--n", type=int, default=5)
    fl.add_argument("--T", type=int, default=CHUNK_TOKENS)
    fl.add_argument("--n-context", type=int, default=None, help="|C0| (default: the default model's shipped head, "
                    "else the paper's 5)")
    fl.add_argument("--n-ret", type=int, default=None, help="R (default: the shipped head's, else the paper's 64)")
    fl.add_argument("--x-ret", type=int, default=None, help="|x_ret| (default |C0|*T + T_q + R)")
    fl.add_argument("--chunk-layer", type=int, default=None)
    fl.add_argument("--json", action="store_true")
    fl.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    """Print the break-even context length N* of a backbone."""
    from ..evaluation.flops import Setting, report, resolve_backbone

    head = None
    shipped = DEFAULT_HEADS.get(args.backbone)
    if shipped is not None and shipped.with_suffix(".json").exists():  # its shipped head: R, |C0|, ℓc
        head = json.loads(DEFAULT_HEADS[args.backbone].with_suffix(".json").read_text())
    paper = {"n_context": 5, "n_ret": 64}  # Table 6's setting for the paper's backbones
    n_context, n_ret = (args.n_context if args.n_context is not None else (head or paper)["n_context"],
                        args.n_ret if args.n_ret is not None else (head or paper)["n_ret"])
    spec = resolve_backbone(args.config or args.backbone, args.chunk_layer or (head or {}).get("chunk_layer"))
    setting = Setting(n=args.n, T=args.T, n_context=n_context, n_ret=n_ret, x_ret=args.x_ret)
    out = report(spec, setting)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{spec.name}: N* (Eq. 10) = {out['n_star']:,.0f} tokens; root of Eq. 8 = {out['n_star_numeric']:,.0f}")
        print("inputs: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in out["inputs"].items()))
