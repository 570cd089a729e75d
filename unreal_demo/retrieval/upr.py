"""UPR re-ranking (Sachan et al., 2022, "Improving Passage Retrieval with Zero-Shot Question Generation"): the same
frozen LLM re-reads UNREAL's top :data:`DEPTH` chunks and orders them by the mean log-probability of the question
given each chunk, log P(q | c) / |q|. The chunks below the top :data:`DEPTH` keep UNREAL's order after them, so
R@k for k ≥ :data:`DEPTH` is UNREAL's; only the order inside the top :data:`DEPTH` changes. It costs
:data:`DEPTH` forward passes of the whole LLM per question (no decoding), so no evaluation runs it unless asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.backbone import Backbone
from ..errors import InputError
from .base import QueryModel, Retrieval, Retriever, timed
from .unreal import UnrealRetriever

DEPTH = 10  # UNREAL's top chunks the LLM re-reads per question
PASSAGE_TOKENS = 512  # a longer chunk is cut to its first 512 tokens before it is re-read
QUESTION_TOKENS = 128  # and a question to its first 128 (the prompt stays inside any model's window)
INSTRUCTION = "Please write a question based on this passage."  # UPR's question-generation prompt


def prompt_ids(backbone: Backbone, passage: str) -> list[int]:
    """Token ids of UPR's prompt for ``passage`` (cut to :data:`PASSAGE_TOKENS`), ending where the question starts."""
    tok = backbone.tokenizer
    body = tok(passage.strip(), add_special_tokens=False)["input_ids"][:PASSAGE_TOKENS]
    head = tok("Passage: ", add_special_tokens=True)["input_ids"]
    return head + body + tok(f"\n{INSTRUCTION}\nQuestion:", add_special_tokens=False)["input_ids"]


@torch.inference_mode()
def question_logprob(backbone: Backbone, passages: Sequence[str], question: str) -> torch.Tensor:
    """Mean log P(question token | passage prompt, earlier question tokens) for each passage ``(P,)``: one padded
    forward of the whole LLM over the ``P`` prompts, the LM head applied only where a question token is predicted.

    Example
    -------
    >>> import math
    >>> from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> words = ["[PAD]", "Passage", ":", "Please", "write", "a", "question", "based", "on", "this", "passage", ".",
    ...          "Question", "who", "won", "?", "Ada", "ran"]
    >>> t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[PAD]"))
    >>> t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    >>> tok = PreTrainedTokenizerFast(tokenizer_object=t, pad_token="[PAD]")
    >>> cfg = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                   num_attention_heads=2, num_key_value_heads=2)
    >>> lp = question_logprob(Backbone(LlamaForCausalLM(cfg).eval(), tok, "tiny", "0"), ["Ada won", "ran"], "who won ?")
    >>> lp.shape, bool((lp < 0).all()), bool(lp.max() > -math.log(len(words)) - 1)
    (torch.Size([2]), True, True)
    """
    tok = backbone.tokenizer
    q = tok(" " + question.strip(), add_special_tokens=False)["input_ids"][:QUESTION_TOKENS]
    if not question.strip() or not q:
        raise InputError("UPR needs a question with at least one token")
    rows = [prompt_ids(backbone, p) for p in passages]
    width = max(len(r) for r in rows) + len(q)
    ids = torch.full((len(rows), width), backbone.pad_id, dtype=torch.long)  # (P, T), right-padded
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r) + len(q)] = torch.tensor(r + q)
        mask[i, : len(r) + len(q)] = 1
    hidden = backbone.base(input_ids=ids.to(backbone.device), attention_mask=mask.to(backbone.device),
                           use_cache=False).last_hidden_state  # (P, T, d)
    at = torch.tensor([[len(r) - 1 + j for j in range(len(q))] for r in rows])  # (P, |q|): positions predicting q
    states = hidden.gather(1, at.to(hidden.device)[..., None].expand(-1, -1, hidden.shape[-1]))  # (P, |q|, d)
    head = backbone.model.get_output_embeddings()
    logits = torch.nn.functional.linear(states.float(), head.weight.float(),
                                        None if head.bias is None else head.bias.float())  # (P, |q|, V) in fp32
    target = torch.tensor(q, device=logits.device)[None, :, None].expand(len(rows), -1, 1)  # (P, |q|, 1)
    logp = logits.gather(2, target)[..., 0] - logits.logsumexp(-1)  # (P, |q|): log P of each question token
    return logp.mean(1).cpu()  # (P,)


class UPRRerank(Retriever):
    """UNREAL's top :data:`DEPTH`, re-ordered by the LLM's mean log P(question | chunk) (UPR). Its scores are those
    log-probabilities; every chunk below the top :data:`DEPTH` gets one score under all of them (their order is
    UNREAL's, their MaxSim scores are in another unit)."""

    name, label = "upr", "UNREAL top 10, re-read by the LLM (UPR)"
    help = "UNREAL's top 10 re-ordered by the LLM's mean log P(question | chunk) (UPR; 10 LLM passes a question)"
    model, needs, composed, trained, costly = True, ("keys",), True, True, True
    scopes = frozenset({"corpus", "index"})

    def __init__(self, unreal: UnrealRetriever) -> None:
        self.unreal = unreal

    def search(self, store: Any, queries: Sequence[str], k: int, query_model: QueryModel | None = None,
               fusion_weight: float | None = None, vectors: torch.Tensor | None = None) -> Retrieval:
        timings: dict[str, float] = {}
        scores, ids, q, _, b_scores = self.unreal.top(store, query_model, queries, max(k, DEPTH), timings,
                                                      vectors=vectors)
        texts, out_ids, out_scores = store.texts, [], []
        for found, row, question in zip(scores.tolist(), ids.tolist(), queries, strict=True):
            row = [i for i, s in zip(row, found, strict=True) if s > float("-inf")]  # a store's padding left out
            top = row[:DEPTH]
            lp = timed(timings, "rerank", lambda top=top, question=question:
                       question_logprob(query_model.backbone, [texts[i] for i in top], question))
            order = lp.argsort(descending=True, stable=True).tolist()
            below = float(lp.min()) - 1.0  # every chunk below the top DEPTH scores under every re-read one
            out_ids.append(([top[j] for j in order] + row[DEPTH:])[:k])
            out_scores.append(([round(float(lp[j]), 4) for j in order] + [below] * len(row[DEPTH:]))[:k])
        return Retrieval(out_ids, out_scores, timings, q, bm25_scores=b_scores)
