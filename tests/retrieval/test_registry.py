"""The one store every method scores against: lazy encoding happens once, in one pass, on first use."""

import threading

import pytest
import torch

from unreal_demo.retrieval.registry import MemoryStore, RetrievalError, check

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

    def test_without_token_states_sparse_says_so(self):
        store = MemoryStore.lazy(TEXTS, Encoder(), keep_tokens=False)
        with pytest.raises(RetrievalError, match="token states"):
            store.token_parts  # noqa: B018

    def test_a_store_without_keys_says_unreal_needs_the_model(self):
        with pytest.raises(RetrievalError, match="needs the model"):
            MemoryStore(TEXTS).keys  # noqa: B018

    def test_scoring_keys_are_unit_norm_along_d(self):
        store = MemoryStore.lazy(TEXTS, Encoder())
        norms = store.scoring_keys(True).norm(dim=-1)  # (M, L_p)
        torch.testing.assert_close(norms, torch.ones(3, 2))
        assert torch.equal(store.scoring_keys(False), store.keys)


def test_method_names_are_checked_per_scope():
    assert check(["unreal", "bm25"], "document") == ["unreal", "bm25"]
    with pytest.raises(RetrievalError, match="unknown method nope"):
        check(["nope"], "document")


class TestContextSource:
    """C0 from BM25 (the paper's) or from the head's own first pass without C0 (two passes, one model)."""

    def _explorer(self, tiny, source: str):
        from unreal_demo.core.head import untrained_head
        from unreal_demo.pipeline import Explorer

        head = untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=2, n_context=1, context_source=source)
        return Explorer(tiny, head, None)

    def test_head_source_takes_the_heads_own_top_chunk(self, tiny):
        from unreal_demo.core.encoding import encode_chunks
        from unreal_demo.retrieval.registry import context_of
        from unreal_demo.retrieval.unreal import query_vectors

        explorer = self._explorer(tiny, "head")
        store = MemoryStore(TEXTS, encode_chunks(tiny, TEXTS, 2, 2))
        bm25_ids = store.bm25_topk(["Spain?"], 1)[1]
        first = query_vectors(explorer, ["Spain?"], [[]])
        want = TEXTS[int(store.maxsim_topk(first, 1)[1][0, 0])]
        assert context_of(store, explorer, ["Spain?"], bm25_ids) == [[want]]
        bm25 = self._explorer(tiny, "bm25")
        assert context_of(store, bm25, ["Spain?"], bm25_ids) == [[TEXTS[int(bm25_ids[0, 0])]]]

    def test_unknown_source_is_refused(self, tiny):
        from unreal_demo.core.head import HeadError

        with pytest.raises(HeadError, match="C0 source"):
            self._explorer(tiny, "dense")


def test_a_new_method_is_one_class_and_one_registry_line(monkeypatch):
    """Adding a method = one Retriever subclass + one entry in METHODS; retrieve() and the checks find it."""
    from unreal_demo.retrieval.base import Retrieval, Retriever
    from unreal_demo.retrieval.registry import METHODS, names, retrieve

    class Longest(Retriever):
        name, label, help = "longest", "longest chunk", "the longest chunks first"

        def search(self, store, queries, k, explorer=None, fusion_weight=None, vectors=None):
            order = sorted(range(len(store)), key=lambda i: -len(store.texts[i]))[:k]
            return Retrieval([order] * len(queries), [[float(len(store.texts[i])) for i in order]] * len(queries))

    monkeypatch.setitem(METHODS, "longest", Longest())
    store = MemoryStore(TEXTS)
    found = retrieve(store, None, ["any question"], 2, "longest")
    assert found.ids == [sorted(range(len(TEXTS)), key=lambda i: -len(TEXTS[i]))[:2]]
    assert "longest" in names("index") and check(["longest"], "document") == ["longest"]


def test_the_memory_store_is_a_chunk_store():
    from unreal_demo.store.base import ChunkStore

    keys, tokens = torch.ones(3, 2, 4), [(torch.ones(6, 4), torch.tensor([2, 2, 2]))]
    assert isinstance(MemoryStore(TEXTS, keys, tokens), ChunkStore)  # (the check reads every member)
