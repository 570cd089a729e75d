"""UPR re-ranking: the batched, padded question log-probability equals an unbatched full forward's; the re-ranked
list is UNREAL's top 10 in another order, then UNREAL's own; evaluations leave it out unless asked."""

from __future__ import annotations

import torch

from unreal_demo.retrieval.registry import METHODS, check, names, retrieve
from unreal_demo.retrieval.upr import DEPTH, prompt_ids, question_logprob
from unreal_demo.store.memory import MemoryStore

PASSAGES = ["Paris is the capital of France.", "Bread is baked daily in every village of the valley.",
            "Spain borders France and Portugal."]
QUESTION = "Which country is Paris in?"


def reference_logprob(backbone, passage: str, question: str) -> float:
    """Mean log P of the question's tokens after UPR's prompt: one unpadded sequence, the model's own logits."""
    prompt = prompt_ids(backbone, passage)
    q = backbone.tokenizer(" " + question, add_special_tokens=False)["input_ids"]
    logits = backbone.model(input_ids=torch.tensor([prompt + q])).logits[0].float()  # (T, V)
    logp = logits.log_softmax(-1)
    return float(sum(logp[len(prompt) - 1 + j, t] for j, t in enumerate(q)) / len(q))


def test_batched_logprob_equals_one_sequence_at_a_time(tiny):
    got = question_logprob(tiny, PASSAGES, QUESTION)  # (3,): padded to the longest prompt
    want = torch.tensor([reference_logprob(tiny, p, QUESTION) for p in PASSAGES])
    assert got.shape == (3,)
    assert torch.allclose(got, want, atol=1e-4), (got, want)


def test_reranks_only_unreals_top_depth(tiny):
    from unreal_demo.core.encoding import encode_chunks
    from unreal_demo.core.head import untrained_head
    from unreal_demo.pipeline import Explorer

    texts = [f"Passage {i} tells of town {i} and its river." for i in range(DEPTH + 5)]
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=2), None)
    store = MemoryStore(texts, encode_chunks(tiny, texts, 2, 2))
    unreal = retrieve(store, explorer, [QUESTION], len(texts), "unreal")
    upr = retrieve(store, explorer, [QUESTION], len(texts), "upr")
    assert sorted(upr.ids[0][:DEPTH]) == sorted(unreal.ids[0][:DEPTH])
    assert upr.ids[0][DEPTH:] == unreal.ids[0][DEPTH:]
    lp = question_logprob(tiny, [texts[i] for i in upr.ids[0][:DEPTH]], QUESTION)
    assert torch.allclose(torch.tensor(upr.scores[0][:DEPTH]), lp, atol=1e-3)
    assert upr.scores[0][:DEPTH] == sorted(upr.scores[0][:DEPTH], reverse=True)
    assert max(upr.scores[0][DEPTH:]) < min(upr.scores[0][:DEPTH])
    assert len(retrieve(store, explorer, [QUESTION], 3, "upr").ids[0]) == 3


def test_offered_where_asked_never_by_default():
    assert METHODS["upr"].costly and "upr" not in names("document")
    assert "upr" in names("index") and "upr" in names("corpus")
    assert "upr" not in names("corpus", costly=False) and "upr" not in names("index", costly=False)
    assert check(["unreal", "upr"], "corpus") == ["unreal", "upr"]


def test_an_empty_question_is_refused(tiny):
    import pytest

    from unreal_demo.errors import InputError

    with pytest.raises(InputError, match="at least one token"):
        question_logprob(tiny, PASSAGES, "   ")
