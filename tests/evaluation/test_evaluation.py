"""Metrics against a hand-worked example, and the ``rank`` command's output shape."""

from __future__ import annotations

import json

import pytest
import torch

from unreal_demo.__main__ import main
from unreal_demo.evaluation.retrieval import fit_fusion_weight, metrics, mrr_at_k, recall_at_k, wilson


def test_metrics_hand_worked():
    rankings = [[4, 2, 9, 1], [7, 8, 3, 0], [5, 6, 2, 1]]
    gold = [{2}, {0, 3}, {11}]
    # query 0: gold at rank 2; query 1: first gold (3) at rank 3; query 2: none
    assert recall_at_k(rankings, gold, 1) == 0.0
    assert recall_at_k(rankings, gold, 2) == pytest.approx(1 / 3)
    assert recall_at_k(rankings, gold, 3) == pytest.approx(2 / 3)
    assert mrr_at_k(rankings, gold, 10) == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)
    assert mrr_at_k(rankings, gold, 2) == pytest.approx((1 / 2) / 3)
    row = metrics(rankings, gold)
    assert row["R@20"] == pytest.approx(0.6667, abs=1e-4)


def test_wilson_interval_contains_p():
    lo, hi = wilson(0.7, 300)
    assert lo < 0.7 < hi and hi - lo < 0.11


def test_fusion_weight_picks_the_better_signal():
    gold = [{0}, {1}, {2}]
    good = torch.eye(3) * 5
    bad = torch.tensor([[0.0, 1, 0], [0, 0, 1], [1, 0, 0]])
    assert fit_fusion_weight(good, bad, gold) > 0.5
    assert fit_fusion_weight(bad, good, gold) < 0.5


def test_rank_command_bm25_is_well_formed(tmp_path, capsys):
    passages = [{"id": "p1", "text": "Paris is the capital of France."},
                {"id": "p2", "text": "Berlin is the capital of Germany."},
                {"id": "p3", "text": "Cats sleep a lot."}]
    queries = [{"id": "q1", "text": "capital of Germany"}, {"id": "q2", "text": "sleeping cats"}]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(p) for p in passages))
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    assert main(["rank", "--passages", str(tmp_path / "p.jsonl"), "--queries", str(tmp_path / "q.jsonl"),
                 "--method", "bm25", "--k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["query"] for r in out["results"]] == ["q1", "q2"]
    assert out["results"][0]["hits"][0]["id"] == "p2" and out["results"][1]["hits"][0]["id"] == "p3"
    for r in out["results"]:
        assert len(r["hits"]) == 2
        assert r["hits"][0]["score"] >= r["hits"][1]["score"]


def test_rank_command_bad_jsonl(tmp_path, capsys):
    (tmp_path / "p.jsonl").write_text("not json\n")
    assert main(["rank", "--passages", str(tmp_path / "p.jsonl"), "--queries", str(tmp_path / "p.jsonl"),
                 "--method", "bm25"]) == 2
    assert capsys.readouterr().err.startswith("error: passages file")


def test_corpus_store_methods_on_tiny_model(tiny, monkeypatch, tmp_path):
    """Every corpus method ranks the whole corpus; UNREAL equals brute-force MaxSim with BM25's C0."""
    from unreal_demo.core.head import untrained_head
    from unreal_demo.core.maxsim import maxsim_reference, normalize_chunks
    from unreal_demo.evaluation.retrieval import corpus_store
    from unreal_demo.pipeline import Explorer
    from unreal_demo.retrieval.registry import all_scores, names, retrieve

    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
    texts = ["Paris is the capital of France.", "Berlin is in Germany.", "The fox jumps.", "Forty two."]
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3, n_context=1), None)
    store = corpus_store(texts, explorer, keep_tokens=True)
    queries = ["capital of France?", "what does the fox do?"]
    for method in names("corpus"):
        found = retrieve(store, explorer, queries, 4, method, fusion_weight=0.5)
        assert all(sorted(row) == [0, 1, 2, 3] for row in found.ids), method
    assert retrieve(store, explorer, queries, 1, "bm25").ids == [[0], [2]]
    c0 = [[texts[0]], [texts[2]]]  # each query's top BM25 chunk
    with torch.no_grad():
        q = explorer.head(tiny, queries, c0)
    ref = maxsim_reference(q, normalize_chunks(store.keys))
    assert torch.allclose(all_scores(store, explorer, queries, "unreal")[1], ref, atol=1e-5)


def test_index_retrieval_eval_counts_any_chunk_of_the_gold_paragraph(tmp_path, tiny, monkeypatch):
    from unreal_demo.core.head import untrained_head
    from unreal_demo.core.selection import zscore
    from unreal_demo.data.sources import Passage, Question
    from unreal_demo.errors import UserError
    from unreal_demo.evaluation import retrieval as evaluation
    from unreal_demo.pipeline import Explorer
    from unreal_demo.retrieval.registry import all_scores, retrieve
    from unreal_demo.store import index as idx

    passages = [Passage(f"p{i}", f"T{i}", f"Item {i} weighs {i * 3} kilograms. " * (1 + 8 * (i % 2)), "t")
                for i in range(10)]
    qs = [Question(f"q{i}", f"item {i} weighs", ("x",), f"p{i}", f"T{i}") for i in range(10)]
    monkeypatch.setattr(evaluation, "load_squad", lambda name: (passages, qs))
    explorer = Explorer(tiny, untrained_head(tiny, n_ret=4, n_groups=2, chunk_layer=3, n_context=1), None)
    idx.build_index(tmp_path / "ix", tiny, passages, layer=3, shard_size=4, target=40)
    ix = idx.Index(tmp_path / "ix")
    assert len(ix) > len(passages)  # long paragraphs span several chunks
    result = evaluation.run_index_retrieval_eval(explorer, ix, sample=10, methods=["bm25", "unreal"], seed=0)
    order = evaluation.random.Random(0).sample(qs, 10)  # the eval's seeded sample
    ranked = retrieve(ix, explorer, [q.text for q in order], 20, "bm25").ids
    gold = [{i for i, c in enumerate(ix.chunks) if c["passage"] == q.passage_id} for q in order]
    for k in (1, 5, 10):
        assert result["table"][0][f"R@{k}"] == round(evaluation.recall_at_k(ranked, gold, k), 4)
    assert [r["key"] for r in result["table"]] == ["bm25", "unreal"] and result["table"][1]["n"] == 10
    # every question's gold rank is kept per method, in the sample's order, and gives the table's recall back
    assert result["questions"] == [q.id for q in order]
    assert result["ranks"]["bm25"] == evaluation.gold_ranks(ranked, gold)
    for row in result["table"]:
        hits = [r is not None and r <= 10 for r in result["ranks"][row["key"]]]
        assert row["R@10"] == round(sum(hits) / len(hits), 4)
    # score fusion over the index with the head's own dev-fitted w, against w·z(U) + (1−w)·z(BM25) by hand
    with pytest.raises(UserError, match="no score-fusion weight"):
        evaluation.run_index_retrieval_eval(explorer, ix, sample=10, methods=["hybrid-fusion"], seed=0)
    explorer.head.config.fusion_weight = 0.3
    fused = evaluation.run_index_retrieval_eval(explorer, ix, sample=10, methods=["hybrid-fusion"], seed=0)
    texts = [q.text for q in order]
    u = all_scores(ix, explorer, texts, "unreal")[1]  # (Q, M)
    by_hand = (0.3 * zscore(u) + 0.7 * zscore(ix.bm25_scores(texts))).topk(20, dim=1).indices.tolist()
    assert fused["fusion_weight"] == 0.3 and "w=0.3" in fused["table"][0]["method"]
    assert fused["table"][0]["R@1"] == round(evaluation.recall_at_k(by_hand, gold, 1), 4)
    assert fused["table"][0]["MRR@10"] == round(evaluation.mrr_at_k(by_hand, gold), 4)


def test_amazon_corpus_is_its_own_reviews_and_questions(monkeypatch):
    from unreal_demo.data.sources import Passage, Question
    from unreal_demo.evaluation import retrieval as evaluation

    reviews = [Passage(f"r{i}", f"P{i}", f"Review {i}: the kettle boils in {i} minutes.", "amazon") for i in range(6)]
    qs = [Question(f"q{i}", f"how fast does kettle {i} boil?", (f"{i} minutes",), f"r{i}", f"P{i}") for i in range(6)]
    asked = []
    monkeypatch.setattr(evaluation, "load_squad", lambda name: asked.append(name) or (reviews, qs))
    corpus, sample, gold = evaluation.held_out(4, 0, "amazon")
    assert asked == ["amazon"] and corpus == reviews and len(sample) == 4
    assert all(corpus[next(iter(g))].id == q.passage_id for q, g in zip(sample, gold, strict=True))
