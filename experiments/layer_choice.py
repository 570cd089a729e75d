"""ℓc for a new backbone, measured before any head is trained: dev retrieval of each block's own states.

Command (one run per backbone; the SmolLM2 run calibrates the probe against its trained ℓc sweep, docs/RESULTS.md
"Ablations (dev split)", where ℓc = 20 gave R@1 0.087 and ℓc = 25–28 0.38–0.41 after the same short training)::

    python -m experiments layer-choice --model smollm2-135m-instruct --sample 300
    python -m experiments layer-choice --model qwen2.5-0.5b --sample 300

Records: ``experiments/records/layer_choice/<model>.json``. Reported in docs/RESULTS.md, "A second backbone".

The dev split is SQuAD dev's held-back articles (:func:`unreal_demo.data.sources.article_split`, 20%), the one the
base head's training log reads. Each dev paragraph is run once through every block (Eq. 1's encoder, stopped at the
last block asked for) and each question likewise; at every block ℓ the probe scores a paragraph by the cosine of
the question's mean token state with the paragraph's mean token state, after subtracting the paragraphs' mean
state at that block (without it two massive residual dimensions make every pair alike; the raw cosine is
recorded too). It needs no head, so it reads every ℓ from one forward pass; it ranks blocks, it is not a
retriever (a trained head reads far more than a mean).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from unreal_demo.core.backbone import load_backbone
from unreal_demo.core.encoding import padded_batch, run_blocks, token_batches, tokenize_chunks
from unreal_demo.data.sources import article_split
from unreal_demo.evaluation.results import provenance

RECORDS = Path(__file__).resolve().parent / "records" / "layer_choice"


@torch.inference_mode()
def mean_states(backbone, texts: list[str], progress: bool = True) -> torch.Tensor:
    """Each text's mean token state (sink left out) after every block: ``(n_layers, M, d)`` float32."""
    layers = list(range(1, backbone.n_layers + 1))
    rows = tokenize_chunks(backbone, texts, 512)
    out = torch.zeros(len(layers), len(rows), backbone.hidden_size)
    done, start = 0, time.time()
    for batch in token_batches([len(r) for r in rows], 4096):
        ids, mask = padded_batch(backbone, [rows[i] for i in batch])  # (B, T)
        states = run_blocks(backbone, layers, input_ids=ids, attention_mask=mask)
        keep = mask[:, 1:, None].float()  # (B, T-1, 1): real tokens, sink left out
        for j, layer in enumerate(layers):
            h = states[layer][:, 1:].float()  # (B, T-1, d)
            out[j, torch.tensor(batch)] = ((h * keep).sum(1) / keep.sum(1).clamp(min=1)).cpu()
        done += len(batch)
        if progress:
            print(f"  {done}/{len(rows)} texts, {time.time() - start:.0f} s", flush=True)
    return out


def recall_by_layer(queries: torch.Tensor, passages: torch.Tensor, gold: torch.Tensor, centred: bool) -> list[dict]:
    """R@1 / R@10 at every block: ``queries (L, Q, d)``, ``passages (L, M, d)``, ``gold (Q,)``."""
    rows = []
    for layer, (q, p) in enumerate(zip(queries, passages, strict=True), start=1):
        if centred:
            mu = p.mean(0, keepdim=True)
            q, p = q - mu, p - mu
        s = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(p, dim=-1).T  # (Q, M)
        rank = (s > s.gather(1, gold[:, None])).sum(1)  # (Q,) 0-based rank of the gold paragraph
        rows.append({"layer": layer, "r1": float((rank < 1).float().mean()), "r10": float((rank < 10).float().mean())})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments layer-choice", description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--sample", type=int, default=300, help="dev questions (seeded sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="fp32")
    args = ap.parse_args(argv)
    start = time.time()
    backbone = load_backbone(args.model, dtype=args.dtype)
    passages, questions = article_split("squad_dev")[1]
    questions = random.Random(args.seed).sample(questions, min(args.sample, len(questions)))
    where = {p.id: i for i, p in enumerate(passages)}
    gold = torch.tensor([where[q.passage_id] for q in questions])
    print(f"{args.model}: {len(passages)} dev paragraphs, {len(questions)} questions", flush=True)
    p_states = mean_states(backbone, [p.text for p in passages])
    q_states = mean_states(backbone, [q.text for q in questions], progress=False)
    record = {
        "what": "dev retrieval by block from each block's own mean states (no head): centred and raw cosine",
        "model": args.model, "n_layers": backbone.n_layers, "dtype": args.dtype,
        "dev": f"SQuAD dev, held-back articles: {len(passages)} paragraphs, {len(questions)} questions "
               f"(seed {args.seed})",
        "centred": recall_by_layer(q_states, p_states, gold, centred=True),
        "raw": recall_by_layer(q_states, p_states, gold, centred=False),
        "seconds": round(time.time() - start, 1),
        "provenance": provenance() | {
            "model": args.model, "revision": backbone.revision, "dtype": args.dtype},
    }
    RECORDS.mkdir(parents=True, exist_ok=True)
    out = RECORDS / f"{args.model}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    best = max(record["centred"], key=lambda r: (r["r1"], r["r10"]))
    print(f"wrote {out}; best block (centred) {best['layer']} of {backbone.n_layers}: "
          f"R@1 {best['r1']:.3f} R@10 {best['r10']:.3f} ({record['seconds']} s)")
    return 0
