"""The registry: method names per scope, C0 from BM25 or the head's own first pass, a new method in one class."""

import pytest

from unreal_demo.retrieval.registry import RetrievalError, check
from unreal_demo.store.memory import MemoryStore

TEXTS = ["Paris is in France.", "Bread is baked daily.", "France borders Spain."]


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
