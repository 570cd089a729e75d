"""Shared fixtures: a tiny randomly initialised Llama with a tokenizer trained in the test session."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from unreal_demo.core.backbone import Backbone

CORPUS = [
    "The quick brown fox jumps over the lazy dog. A second sentence follows here!",
    "Paris is the capital of France. Berlin is the capital of Germany. Rome is in Italy.",
    "Question: what is the answer? The answer is forty two, said the computer.",
    "Retrieval selects evidence chunks; the model then answers from them alone.",
] * 20


def make_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<unk>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<pad>", unk_token="<unk>")
    return fast


def make_backbone(n_layers: int = 4, seed: int = 0) -> Backbone:
    tok = make_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=n_layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    model.generation_config.eos_token_id = tok.eos_token_id
    return Backbone(model=model, tokenizer=tok, name="tiny-llama", revision="tiny")


@pytest.fixture(scope="session")
def tiny() -> Backbone:
    return make_backbone()


class Scripted(torch.nn.Module):
    """A model that says the given token ids, then its end token, whatever the prompt."""

    def __init__(self, config, script: list[int], eos: int) -> None:
        super().__init__()
        self.config, self.script, self.step = config, [*script, eos], 0
        self.generation_config = SimpleNamespace(eos_token_id=eos)
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # where the backbone reads its device

    def forward(self, input_ids, cache=None, use_cache=True):
        if input_ids.shape[1] > 1:  # a new prompt: say the script from its start
            self.step = 0
        logits = torch.zeros(1, input_ids.shape[1], self.config.vocab_size)
        logits[0, -1, self.script[min(self.step, len(self.script) - 1)]] = 1.0
        self.step += 1
        return SimpleNamespace(logits=logits)


@pytest.fixture(scope="session")
def saying(tiny) -> Callable[[Sequence[str]], Backbone]:
    """A backbone (the tiny tokenizer) whose greedy answer to any prompt is ``words`` joined, each word
    tokenised on its own, then the end token: real decoding and the real answer rule over a known text."""
    def make(words: Sequence[str]) -> Backbone:
        tok = tiny.tokenizer
        script = [i for w in words for i in tok(w, add_special_tokens=False)["input_ids"]]
        assert tok.decode(script) == "".join(words)
        return Backbone(Scripted(tiny.model.config, script, tok.eos_token_id), tok, "scripted", "s")

    return make
