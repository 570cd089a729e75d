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

:func:`run_intrinsic_eval` is the benchmark (``eval intrinsic``); :func:`live_scores` the Intrinsic tab's live run
on one document.
"""

from __future__ import annotations

import json
import math
import numbers
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..core.backbone import Backbone, BackboneError
from ..core.encoding import padded_batch
from ..errors import InputError
from ..pipeline import check_inputs


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
        chunk_cap = capture(backbone, *padded_batch(backbone, [[sink, *r] for r in rows]))
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


LIVE_CHARS, LIVE_CHUNKS = 60_000, 64  # the live view's limits (about 9K tokens)


@dataclass
class LiveScores:
    """One document and question scored by every layer × head (:func:`live_scores`): the chunks, the chunk
    followed (``chunk``), its best rank per layer × head ``ranks (L, H)``, its residual-stream rank per layer
    ``resid (L,)``, and every chunk's score per layer ``z (L, M)`` (z-normalised per head, then averaged over
    heads)."""

    chunks: list[str]
    chunk: int
    ranks: list[list[int]]
    resid: list[int]
    z: list[list[float]]


def _chunk_id(chunk: object) -> int:
    """``chunk`` as an ``int``: an int, a whole float (a number box's 3.0) or its digits as text; negative means
    BM25's top chunk.

    Raises
    ------
    InputError
        One line, for anything else (empty, NaN, 2.5).
    """
    if isinstance(chunk, str) and re.fullmatch(r"\s*[+-]?\d+\s*", chunk):
        return int(chunk)
    if isinstance(chunk, numbers.Real) and not isinstance(chunk, bool) and math.isfinite(chunk) \
            and float(chunk).is_integer():
        return int(chunk)
    raise InputError(f"the answer chunk id must be a whole number (-1: BM25's top chunk; got {chunk!r})")


def live_scores(explorer, doc: str, question: str, mode: str = "separate", view: str = "qk_post",
                chunk: object = -1) -> LiveScores:
    """The Intrinsic tab's live run: chunk ``doc`` as the pipeline does, follow chunk ``chunk`` (-1: BM25's top
    chunk) and score every chunk by every layer × head (:func:`intrinsic_scores`, ``view`` ``qk_post`` or
    ``qk_pre``).

    Raises
    ------
    InputError
        Inputs :func:`pipeline.check_inputs` refuses (at most :data:`LIVE_CHARS` characters), more than
        :data:`LIVE_CHUNKS` chunks, or a chunk id that is not a whole number or does not exist.
    """
    cid = _chunk_id(chunk)  # before any work: a number box may send None, NaN or 2.5
    check_inputs([doc], question, max_chars=LIVE_CHARS)
    chunks = explorer.chunk([doc])
    if len(chunks) > LIVE_CHUNKS:
        raise InputError(f"{len(chunks)} chunks: the live view takes at most {LIVE_CHUNKS} (about 9K tokens)")
    if cid < 0:
        cid = explorer.rank([doc], question, 1, "bm25", chunks=chunks).selected[0]
    if cid >= len(chunks):
        raise InputError(f"chunk id {cid} does not exist (0..{len(chunks) - 1})")
    s = intrinsic_scores(explorer.backbone, [c.text for c in chunks], question, mode)
    qk = getattr(s, view)  # (L, H, M)
    spread = qk.std(-1, keepdim=True, correction=0).clamp(min=1e-6)
    z = ((qk - qk.mean(-1, keepdim=True)) / spread).mean(1)  # (L, M): z per head, mean over heads
    return LiveScores([c.text for c in chunks], cid, gold_rank(qk, {cid}).tolist(), gold_rank(s.resid, {cid}).tolist(),
                      z.tolist())


def random_recall(n_chunks: int, n_gold: int, k: int) -> float:
    """Chance that a random ranking puts one of ``n_gold`` gold chunks in its top ``k``."""
    return 1.0 - math.comb(n_chunks - n_gold, min(k, n_chunks)) / math.comb(n_chunks, min(k, n_chunks))


def benchmark_contexts(sample: int, seed: int, same_article: int = 4, distractors: int = 5) -> list[dict]:
    """Held-out New-Wiki questions, each with its gold paragraph among ``same_article`` other paragraphs
    of its article and ``distractors`` Wikipedia summaries, shuffled (seeded)."""
    from ..data.sources import load_squad, load_summaries

    passages, questions = load_squad("new_wiki")
    summaries = load_summaries()
    by_title: dict[str, list] = {}
    for p in passages:
        by_title.setdefault(p.title, []).append(p)
    rng = random.Random(seed)
    out = []
    for q in rng.sample(questions, min(sample, len(questions))):
        gold = next(p for p in by_title[q.title] if p.id == q.passage_id)
        others = rng.sample([p for p in by_title[q.title] if p.id != gold.id],
                            min(same_article, len(by_title[q.title]) - 1))
        docs = [gold, *others, *rng.sample(summaries, distractors)]
        rng.shuffle(docs)
        out.append({"question": q.text, "docs": [d.text for d in docs],
                    "gold_doc": next(i for i, d in enumerate(docs) if d.id == gold.id)})
    return out


def run_intrinsic_eval(explorer, sample: int = 60, seed: int = 0, out: str | None = None) -> dict:
    """Recall@1/5 of the gold chunk by layer (best head, mean over heads), both readings, both rotary
    sides, the residual view, and references (random, BM25, the trained UNREAL head)."""
    bb, L = explorer.backbone, explorer.backbone.n_layers
    acc = {f"{m}/{v}": {1: [], 5: []} for m in ("separate", "joint") for v in ("qk_pre", "qk_post", "resid")}
    refs = {"random": {1: [], 5: []}, "bm25": {1: [], 5: []}, "unreal": {1: [], 5: []}}
    for item in tqdm(benchmark_contexts(sample, seed), desc="intrinsic", unit="question"):
        chunks = explorer.chunk(item["docs"])
        gold = {c.id for c in chunks if c.doc == item["gold_doc"]}
        texts = [c.text for c in chunks]
        for mode in ("separate", "joint"):
            s = intrinsic_scores(bb, texts, item["question"], mode)
            for view in ("qk_pre", "qk_post", "resid"):
                rank = gold_rank(getattr(s, view), gold)  # (L, H) or (L,)
                for k in (1, 5):
                    acc[f"{mode}/{view}"][k].append((rank <= k).float())
        for k in (1, 5):
            refs["random"][k].append(random_recall(len(chunks), len(gold), k))
        for method in ("bm25", "unreal"):
            r = explorer.rank(item["docs"], item["question"], 5, method, chunks=chunks)
            rank = int(gold_rank(torch.tensor([r.scores]), gold)[0])
            for k in (1, 5):
                refs[method][k].append(float(rank <= k))
    result = {"sample": sample, "seed": seed, "layers": list(range(1, L + 1)), "model": bb.name,
              "head": explorer.head_source, "setting": "gold New-Wiki paragraph + 4 paragraphs of its article "
              "+ 5 Wikipedia summaries per question, chunked (~141 tokens)",
              "command": f"python -m unreal_demo eval intrinsic --sample {sample}",
              "references": {m: {f"R@{k}": sum(v[k]) / len(v[k]) for k in (1, 5)} for m, v in refs.items()},
              "curves": {}}
    for name, by_k in acc.items():
        curve = {}
        for k in (1, 5):
            mean = torch.stack(by_k[k]).mean(0)  # (L, H) or (L,)
            if mean.dim() == 2:
                curve[f"R@{k} best head"] = mean.max(1).values.tolist()
                curve[f"R@{k} mean over heads"] = mean.mean(1).tolist()
                curve[f"R@{k} by head"] = mean.tolist()
            else:
                curve[f"R@{k}"] = mean.tolist()
        result["curves"][name] = curve
    if out:
        Path(out).write_text(json.dumps(result, indent=1))
    return result
