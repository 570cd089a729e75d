"""Eq. 1 — chunk embeddings: k_i = LLM_{ℓc}(c_i), pooled to L_p vectors.

Each chunk is encoded on its own (no cross-chunk attention) through blocks
1..ℓc only: a forward hook on block ℓc stops the forward pass there, so the
blocks above ℓc are never run, for any ``transformers`` decoder. A fixed sink
token is prepended to every chunk (the first position of a causal LM becomes an
attention sink with a huge norm) and left out of pooling. The T_i token states
are then mean-pooled into L_p contiguous groups.

Example
-------
>>> h = torch.arange(8.0).view(1, 4, 2)          # (B=1, T=4, d=2)
>>> pool_groups(h, torch.tensor([4]), 2)        # groups {0,1} and {2,3}
tensor([[[1., 2.],
         [5., 6.]]])
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..settings import MAX_TOKENS, cache_dir
from .backbone import Backbone


class _StopForward(Exception):
    """Raised by the hook on the last block needed, to skip every block above it."""


def run_blocks(
    backbone: Backbone,
    layers: Sequence[int],
    input_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: object | None = None,
) -> dict[int, torch.Tensor]:
    """Run the decoder up to ``max(layers)`` and return the residual stream after each block asked for.

    Parameters
    ----------
    layers : 1-based block numbers; block ``l``'s output is ``LLM_l(x)`` of the paper.
    input_ids, inputs_embeds : ``(B, T)`` ids or ``(B, T, d)`` embeddings (one of them).
    attention_mask : ``(B, T)`` (or ``(B, T_past + T)`` with a cache), 1 for real tokens.
    position_ids : ``(B, T)``; needed with left padding or a cache.
    cache : a ``transformers`` ``DynamicCache`` to fill (prefix) or read (continuation).

    Returns
    -------
    dict mapping each layer to its ``(B, T, d)`` hidden states.
    """
    wanted = sorted(set(layers))
    if not wanted or wanted[0] < 1 or wanted[-1] > backbone.n_layers:
        raise ValueError(f"layers must lie in 1..{backbone.n_layers}, got {list(layers)}")
    me, out = threading.get_ident(), {}

    def make_hook(layer: int) -> Callable:
        def hook(_module, _args, output):
            if threading.get_ident() != me:  # another request sharing the model
                return None
            out[layer] = output[0] if isinstance(output, tuple) else output
            if layer == wanted[-1]:
                raise _StopForward
            return None

        return hook

    handles = [backbone.blocks[layer - 1].register_forward_hook(make_hook(layer)) for layer in wanted]
    try:
        backbone.base(input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                      position_ids=position_ids, cache=cache, use_cache=cache is not None)
    except _StopForward:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return out


def group_weights(lengths: torch.Tensor, n_groups: int, width: int) -> torch.Tensor:
    """Averaging weights ``(B, n_groups, width)`` splitting each row's first ``lengths[b]`` positions
    into ``n_groups`` contiguous groups; positions at or past ``lengths[b]`` (padding) get weight 0.

    A sequence shorter than ``n_groups`` repeats tokens so every group is non-empty.
    """
    lengths = lengths.clamp(min=1).view(-1, 1)  # (B, 1)
    pos = torch.arange(width, device=lengths.device).view(1, -1)  # (1, W)
    group = (pos * n_groups) // lengths  # (B, W): group of each token
    valid = pos < lengths
    g = torch.arange(n_groups, device=lengths.device).view(1, -1, 1)  # (1, G, 1)
    w = ((group.unsqueeze(1) == g) & valid.unsqueeze(1)).float()  # (B, G, W)
    # empty groups (short sequences): take the token at g * T / n_groups
    empty = w.sum(-1) == 0  # (B, G)
    fill = (torch.arange(n_groups, device=lengths.device).view(1, -1) * lengths) // n_groups  # (B, G)
    w = w + empty.unsqueeze(-1) * torch.nn.functional.one_hot(fill, width).float()
    return w / w.sum(-1, keepdim=True)


def pool_groups(states: torch.Tensor, lengths: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Mean-pool ``(B, T, d)`` states into ``(B, n_groups, d)``; padding beyond ``lengths`` is ignored."""
    w = group_weights(lengths.to(states.device), n_groups, states.shape[1]).to(states.dtype)
    return torch.bmm(w, states)


def token_batches(lengths: Sequence[int], token_budget: int, max_batch: int = 64) -> list[list[int]]:
    """Length-bucketed batches: indices sorted by length, packed so that ``batch * longest <= token_budget``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current, longest = [], [], 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if current and (new_longest * (len(current) + 1) > token_budget or len(current) >= max_batch):
            batches.append(current)
            current, new_longest = [], lengths[i]
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


def tokenize_chunks(backbone: Backbone, texts: Sequence[str], max_tokens: int) -> list[list[int]]:
    """Token ids of each chunk: ``[sink] + ids[:max_tokens]``."""
    ids = backbone.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return [[backbone.sink_id] + row[:max_tokens] for row in ids]


def padded_batch(backbone: Backbone, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``(B, T)`` ids and attention mask on the backbone's device."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), backbone.pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for j, r in enumerate(rows):
        ids[j, : len(r)] = torch.tensor(r)
        mask[j, : len(r)] = 1
    return ids.to(backbone.device), mask.to(backbone.device)


@torch.inference_mode()
def query_states(backbone: Backbone, queries: Sequence[str], layer: int, max_tokens: int = 256) -> list[torch.Tensor]:
    """Each query encoded alone to block ``layer``: its token states ``(T_q, d)`` (float32, sink left out)."""
    out, enc = [], backbone.encoder(layer)  # in the encoding dtype (Backbone.encoder)
    for ids in tokenize_chunks(backbone, queries, max_tokens):
        h = run_blocks(enc, [layer], input_ids=torch.tensor([ids], device=backbone.device))[layer]
        out.append(h[0, 1:].float().cpu())
    return out


@torch.inference_mode()
def encode_chunks(
    backbone: Backbone,
    texts: Sequence[str],
    layer: int,
    n_pool: int = 7,
    max_tokens: int = MAX_TOKENS,
    token_budget: int = 8192,
    progress: Callable[[int, int], None] | None = None,
    tokens_out: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Encode chunks through blocks 1..``layer`` and pool each to ``n_pool`` vectors (Eq. 1).

    Parameters
    ----------
    texts : the M chunk texts, each encoded on its own.
    layer : ℓc, the last block run.
    n_pool : L_p.
    max_tokens : chunk tokens beyond this are cut (the sink token is extra).
    token_budget : padded tokens per forward batch.
    progress : called as ``progress(done, total)`` after each batch.
    tokens_out : if a list, it receives each chunk's L2-normalised token states ``(T_i, d)`` (fp16),
        in input order, for sparse token matching (same forward pass).

    Returns
    -------
    Tensor ``(M, n_pool, d)``, float32 on CPU. The blocks run in the backbone's encoding dtype
    (:meth:`Backbone.encoder`: bf16 where the CPU choice or ``--dtype`` says so).
    """
    rows = tokenize_chunks(backbone, texts, max_tokens)
    enc = backbone.encoder(layer)
    out = torch.zeros(len(rows), n_pool, backbone.hidden_size)
    tokens: list[torch.Tensor | None] = [None] * len(rows)
    done = 0
    for batch in token_batches([len(r) for r in rows], token_budget):
        ids, mask = padded_batch(backbone, [rows[i] for i in batch])  # (B, T) each
        states = run_blocks(enc, [layer], input_ids=ids, attention_mask=mask)[layer]  # (B, T, d)
        lengths = mask.sum(1) - 1  # sink left out
        pooled = pool_groups(states[:, 1:].float(), lengths, n_pool)  # (B, L_p, d)
        out[torch.tensor(batch)] = pooled.cpu()
        if tokens_out is not None:
            unit = torch.nn.functional.normalize(states[:, 1:].float(), dim=-1).half().cpu()
            for j, i in enumerate(batch):
                tokens[i] = unit[j, : int(lengths[j])]
        done += len(batch)
        if progress is not None:
            progress(done, len(rows))
    if tokens_out is not None:
        tokens_out.extend(tokens)
    return out


def cache_folder(backbone: Backbone, texts: Sequence[str], layer: int, n_pool: int, max_tokens: int) -> Path:
    """``<cache>/encodings/<key>``: the key hashes the model (and its encoding dtype), ℓc, L_p, chunk length and
    every text."""

    key = hashlib.sha1(json.dumps([backbone.encode_numerics, layer, n_pool, max_tokens, list(texts)]).encode())
    return cache_dir() / "encodings" / key.hexdigest()[:20]


def _write_part(path, stored: dict) -> None:
    from safetensors.torch import save_file

    tmp = path.with_suffix(".tmp")
    save_file(stored, str(tmp))
    tmp.rename(path)


def cached_encode(
    backbone: Backbone,
    texts: Sequence[str],
    layer: int,
    n_pool: int = 7,
    max_tokens: int = MAX_TOKENS,
    part_size: int = 512,
    progress: Callable[[int, int], None] | None = None,
    token_parts: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> torch.Tensor:
    """:func:`encode_chunks` with an on-disk cache keyed by model, settings and texts.

    Encodings are written in parts of ``part_size`` chunks, so a killed run resumes from
    the last complete part. Chunk states do not depend on any trained parameter, so one
    cache serves every head trained at the same ℓc. With ``token_parts`` (a list), the normalised
    token states are kept too and each part appends ``(tokens (N, d) fp16, lengths (m,))``.
    """
    from safetensors.torch import load_file

    folder = cache_folder(backbone, texts, layer, n_pool, max_tokens)
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for n, s in enumerate(range(0, len(texts), part_size)):
        path = folder / f"part{n:05d}.safetensors"
        stored = load_file(str(path)) if path.exists() else {}
        if "k" not in stored or (token_parts is not None and "tokens" not in stored):
            toks: list[torch.Tensor] | None = [] if token_parts is not None else None
            stored = {"k": encode_chunks(backbone, texts[s : s + part_size], layer, n_pool, max_tokens,
                                         tokens_out=toks).half()}
            if toks is not None:
                stored |= {"tokens": torch.cat(toks), "lengths": torch.tensor([len(t) for t in toks])}
            _write_part(path, stored)
        parts.append(stored["k"].float())  # stored as fp16: the same values on every run
        if token_parts is not None:
            token_parts.append((stored["tokens"], stored["lengths"]))
        if progress is not None:
            progress(min(s + part_size, len(texts)), len(texts))
    return torch.cat(parts) if parts else torch.zeros(0, n_pool, backbone.hidden_size)


@torch.inference_mode()
def warm_cache(
    backbone: Backbone,
    texts: Sequence[str],
    settings: Sequence[tuple[int, int]],
    max_tokens: int = MAX_TOKENS,
    part_size: int = 512,
    token_budget: int = 8192,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Fill :func:`cached_encode`'s cache for several ``(ℓc, L_p)`` settings in one forward pass per part.

    The pass runs to the deepest ℓc asked for and pools the states of every ℓc with every L_p it
    is paired with, so an ℓc or L_p sweep costs one encoding instead of one per setting.
    """
    folders = {st: cache_folder(backbone, texts, st[0], st[1], max_tokens) for st in settings}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    layers = sorted({layer for layer, _ in settings})
    enc = backbone.encoder(layers[-1])
    for n, s in enumerate(range(0, len(texts), part_size)):
        missing = [st for st in settings if not (folders[st] / f"part{n:05d}.safetensors").exists()]
        if missing:
            rows = tokenize_chunks(backbone, texts[s : s + part_size], max_tokens)
            out = {st: torch.zeros(len(rows), st[1], backbone.hidden_size) for st in missing}
            for batch in token_batches([len(r) for r in rows], token_budget):
                ids, mask = padded_batch(backbone, [rows[i] for i in batch])  # (B, T) each
                states = run_blocks(enc, layers, input_ids=ids, attention_mask=mask)  # {l: (B, T, d)}
                lengths = mask.sum(1) - 1  # sink left out
                for layer, n_pool in missing:
                    pooled = pool_groups(states[layer][:, 1:].float(), lengths, n_pool)  # (B, L_p, d)
                    out[(layer, n_pool)][torch.tensor(batch)] = pooled.cpu()
            for st in missing:
                _write_part(folders[st] / f"part{n:05d}.safetensors", {"k": out[st].half()})
        if progress is not None:
            progress(min(s + part_size, len(texts)), len(texts))
