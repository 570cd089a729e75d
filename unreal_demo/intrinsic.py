"""Appendix A.2.1 — intrinsic (untrained) retrieval by attention keys and queries, layer by layer.

Per attention layer ℓ and query head h: k̄_i = mean of chunk i's key vectors (the
key/value group of h, for grouped-query attention), q̄ = mean of the question's
query vectors, score_i = ⟨q̄, k̄_i⟩. Keys and queries are captured with forward
hooks (SDPA stays on) both before and after the rotary embedding (after the q/k
norms for models that have them). The residual-stream view scores chunks by the
cosine of mean-pooled hidden states after each block.

Two readings of the context:
- ``separate``: each chunk encoded on its own (as UNREAL's index does), the question alone;
- ``joint``: the whole context in one pass with the question after it (what full context sees).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .backbone import Backbone, BackboneError


@dataclass
class Capture:
    """Per layer: queries ``(B, T, H, hd)``, keys ``(B, T, KV, hd)`` pre/post rotary; residual ``(B, T, d)``."""

    q_pre: list[torch.Tensor]
    k_pre: list[torch.Tensor]
    q_post: list[torch.Tensor]
    k_post: list[torch.Tensor]
    resid: list[torch.Tensor]


def _attention(block) -> torch.nn.Module:
    attn = getattr(block, "self_attn", None)
    if attn is None or not hasattr(attn, "q_proj") or not hasattr(attn, "k_proj"):
        raise BackboneError(f"{type(block).__name__}: no self_attn.q_proj/k_proj to hook; "
                            "intrinsic retrieval supports Llama, Qwen, Gemma-style decoders")
    return attn


@torch.inference_mode()
def capture(backbone: Backbone, ids: torch.Tensor, mask: torch.Tensor | None = None) -> Capture:
    """Run the full model once on ``ids (B, T)`` and capture q/k of every layer and head."""
    heads_q, heads_k, rope, resid, handles = {}, {}, {}, {}, []
    for layer, block in enumerate(backbone.blocks):
        attn = _attention(block)
        hd = attn.head_dim

        def save(store, key, hd=hd):
            def hook(_m, _a, out):
                store[key] = out.view(*out.shape[:2], -1, hd) if out.dim() == 3 else out  # (B, T, heads, hd)
            return hook

        q_src = getattr(attn, "q_norm", None) or attn.q_proj  # Gemma-3 normalises q/k before rotary
        k_src = getattr(attn, "k_norm", None) or attn.k_proj
        handles.append(q_src.register_forward_hook(save(heads_q, layer)))
        handles.append(k_src.register_forward_hook(save(heads_k, layer)))
        handles.append(attn.register_forward_pre_hook(
            lambda _m, _a, kw, layer=layer: rope.__setitem__(layer, kw.get("position_embeddings")),
            with_kwargs=True))
        handles.append(block.register_forward_hook(
            lambda _m, _a, out, layer=layer: resid.__setitem__(layer, out[0] if isinstance(out, tuple) else out)))
    try:
        backbone.base(input_ids=ids, attention_mask=mask, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    cap = Capture([], [], [], [], [])
    for layer, block in enumerate(backbone.blocks):
        q, k = heads_q[layer].float(), heads_k[layer].float()
        cap.q_pre.append(q)
        cap.k_pre.append(k)
        rotate = getattr(sys.modules[type(block.self_attn).__module__], "apply_rotary_pos_emb", None)
        if rope.get(layer) is None or rotate is None:
            raise BackboneError(f"{type(block.self_attn).__name__}: cannot find its rotary embedding")
        cos, sin = rope[layer]
        qr, kr = rotate(q.transpose(1, 2), k.transpose(1, 2), cos.float(), sin.float())
        cap.q_post.append(qr.transpose(1, 2))
        cap.k_post.append(kr.transpose(1, 2))
        cap.resid.append(resid[layer].float())
    return cap


def _span_mean(x: torch.Tensor, spans: Sequence[tuple[int, int, int]]) -> torch.Tensor:
    """Mean of ``x (B, T, ...)`` over each ``(row, start, end)`` span → ``(len(spans), ...)``."""
    return torch.stack([x[b, s:e].mean(0) for b, s, e in spans])


@dataclass
class Scores:
    """Chunk scores: ``qk_pre``/``qk_post`` ``(L, H, M)`` and ``resid`` ``(L, M)``; ``pooled`` states
    ``(M, T_max, d)`` per layer are not kept (memory)."""

    qk_pre: torch.Tensor
    qk_post: torch.Tensor
    resid: torch.Tensor


def _scores(chunk_cap: Capture, chunk_spans, q_cap: Capture, q_span, n_layers: int) -> Scores:
    out = {"qk_pre": [], "qk_post": [], "resid": []}
    for layer in range(n_layers):
        for name, qs, ks in (("qk_pre", q_cap.q_pre, chunk_cap.k_pre), ("qk_post", q_cap.q_post, chunk_cap.k_post)):
            q = _span_mean(qs[layer], [q_span])[0]  # (H, hd)
            k = _span_mean(ks[layer], chunk_spans)  # (M, KV, hd)
            group = q.shape[0] // k.shape[1]  # query heads per key/value head
            k = k.repeat_interleave(group, dim=1)  # (M, H, hd): each query head against its KV group
            out[name].append(torch.einsum("hd,mhd->hm", q, k))  # (H, M)
        qv = torch.nn.functional.normalize(_span_mean(q_cap.resid[layer], [q_span]), dim=-1)  # (1, d)
        kv = torch.nn.functional.normalize(_span_mean(chunk_cap.resid[layer], chunk_spans), dim=-1)  # (M, d)
        out["resid"].append((qv @ kv.T)[0])
    return Scores(torch.stack(out["qk_pre"]), torch.stack(out["qk_post"]), torch.stack(out["resid"]))


def intrinsic_scores(backbone: Backbone, chunks: Sequence[str], question: str, mode: str = "separate") -> Scores:
    """Per layer × head scores of every chunk for one question (see the module docstring)."""
    tok, sink = backbone.tokenizer, backbone.sink_id
    rows = tok(list(chunks), add_special_tokens=False)["input_ids"]
    q_ids = tok(f"Question: {question.strip()}", add_special_tokens=False)["input_ids"]
    dev = backbone.device
    if mode == "separate":
        width = 1 + max(len(r) for r in rows)
        ids = torch.full((len(rows), width), backbone.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, 0], ids[b, 1 : 1 + len(r)], mask[b, : 1 + len(r)] = sink, torch.tensor(r), 1
        chunk_cap = capture(backbone, ids.to(dev), mask.to(dev))
        q_cap = capture(backbone, torch.tensor([[sink, *q_ids]], device=dev))
        return _scores(chunk_cap, [(b, 1, 1 + len(r)) for b, r in enumerate(rows)], q_cap,
                       (0, 1, 1 + len(q_ids)), backbone.n_layers)
    if mode != "joint":
        raise ValueError(f"mode must be 'separate' or 'joint', got {mode!r}")
    sep = tok("\n\n", add_special_tokens=False)["input_ids"]
    seq, spans = [sink], []
    for r in rows:
        spans.append((0, len(seq), len(seq) + len(r)))
        seq += r + sep
    q_span = (0, len(seq), len(seq) + len(q_ids))
    cap = capture(backbone, torch.tensor([seq + q_ids], device=dev))
    return _scores(cap, spans, cap, q_span, backbone.n_layers)


def gold_rank(scores: torch.Tensor, gold: set[int]) -> torch.Tensor:
    """Best rank (1 = top) of any gold chunk along the last axis of ``scores (..., M)``."""
    order = scores.argsort(dim=-1, descending=True)
    ranks = order.argsort(dim=-1) + 1  # rank of every chunk
    return ranks[..., sorted(gold)].min(-1).values
