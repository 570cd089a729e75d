"""The in-memory chunk store: lazy encoding happens once, in one pass, on first use; data it does not keep is
refused with the store's own error."""

import threading

import pytest
import torch

from unreal_demo.store.base import ChunkStore, StoreError
from unreal_demo.store.memory import MemoryStore

TEXTS = ["Paris is in France.", "Bread is baked daily.", "France borders Spain."]


class Encoder:
    """A stand-in for a forward pass: counts its calls and fills the token parts like the real ones."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, parts: list | None) -> torch.Tensor:
        self.calls += 1
        if parts is not None:
            parts.append((torch.ones(7, 4), torch.tensor([2, 2, 3])))  # (ΣT_i, d), (M,)
        return torch.arange(3 * 2 * 4, dtype=torch.float).reshape(3, 2, 4)  # (M, L_p, d)


class TestLazyStore:
    def test_bm25_never_encodes(self):
        enc = Encoder()
        store = MemoryStore.lazy(TEXTS, enc)
        assert store.bm25_topk(["France"], 2)[1].shape == (1, 2)
        assert enc.calls == 0

    def test_keys_and_tokens_come_from_one_pass(self):
        enc = Encoder()
        store = MemoryStore.lazy(TEXTS, enc)
        assert store.keys.shape == (3, 2, 4)
        (tokens, lengths), = store._tokens
        assert tokens.shape == (7, 4) and lengths.tolist() == [2, 2, 3]
        store.keys  # noqa: B018
        assert enc.calls == 1

    def test_concurrent_first_use_encodes_once(self):
        enc = Encoder()
        store = MemoryStore.lazy(TEXTS, enc)
        threads = [threading.Thread(target=lambda: store.keys) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert enc.calls == 1

    def test_the_token_mean_is_the_stores_own(self):
        """A pasted document's μ comes from its own token states (the Encoder's parts), once."""
        store = MemoryStore(TEXTS, tokens=[(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([1, 1])),
                                           (torch.tensor([[1.0, 1.0]]), torch.tensor([1]))])
        assert store.token_mean().tolist() == pytest.approx([2 / 3, 2 / 3])
        lazy = MemoryStore.lazy(TEXTS, Encoder())
        assert lazy.token_mean().tolist() == [1.0] * 4 and lazy.token_mean() is lazy.token_mean()

    def test_without_token_states_sparse_says_so(self):
        store = MemoryStore.lazy(TEXTS, Encoder(), keep_tokens=False)
        with pytest.raises(StoreError, match="token states"):
            store.token_parts  # noqa: B018

    def test_a_store_without_keys_says_unreal_needs_the_model(self):
        with pytest.raises(StoreError, match="needs the model"):
            MemoryStore(TEXTS).keys  # noqa: B018

    def test_scoring_keys_are_unit_norm_along_d(self):
        store = MemoryStore.lazy(TEXTS, Encoder())
        norms = store.scoring_keys(True).norm(dim=-1)  # (M, L_p)
        torch.testing.assert_close(norms, torch.ones(3, 2))
        assert torch.equal(store.scoring_keys(False), store.keys)


def test_the_memory_store_is_a_chunk_store():
    keys, tokens = torch.ones(3, 2, 4), [(torch.ones(6, 4), torch.tensor([2, 2, 2]))]
    assert isinstance(MemoryStore(TEXTS, keys, tokens), ChunkStore)  # (the check reads every member)
