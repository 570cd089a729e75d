"""The long-context benchmark builder, the SQuAD metrics, and a run on the tiny model."""

from __future__ import annotations

import pytest
import torch

from unreal_demo.core.chunking import tokenizer_counters
from unreal_demo.core.generation import AnswerRule, prompt_ids
from unreal_demo.core.head import untrained_head
from unreal_demo.errors import InputError
from unreal_demo.evaluation import answers
from unreal_demo.evaluation.longcontext import run as longcontext_eval
from unreal_demo.evaluation.longcontext.contexts import (
    Builder,
    Item,
    build_pool,
    gold_chunks,
    parse_lengths,
    split_passages,
)
from unreal_demo.evaluation.longcontext.report import markdown
from unreal_demo.evaluation.longcontext.run import ContextEncoder, run_longcontext, summarize
from unreal_demo.evaluation.metrics import contained, exact_match, f1, normalize_answer
from unreal_demo.evaluation.qa import BOUNDS
from unreal_demo.pipeline import Explorer
from unreal_demo.retrieval.registry import RetrievalError, check


def words(texts):
    return [len(t.split()) for t in texts]


def word_offsets(text):
    out, pos = [], 0
    for w in text.split():
        start = text.index(w, pos)
        out.append((start, start + len(w)))
        pos = start + len(w)
    return out


POOL_TEXTS = [f"Distractor passage {i} talks about topic {i}. " * (3 + i % 5) for i in range(400)]
GOLDS = [f"The gold paragraph {k} says the secret number is {1000 + k}. It is here." for k in range(4)]


def builder(seed=0, golds=GOLDS):
    pool = build_pool(POOL_TEXTS + golds[:2], golds, seed)  # two golds planted in the raw texts
    items = [Item(str(k), f"What is secret {k}?", (str(1000 + k),), g, d)
             for k, (g, d) in enumerate(zip(golds, [0.0, 0.3, 0.77, 1.0], strict=True))]
    return Builder(items, pool, words, word_offsets)


class TestBuilder:
    def test_same_seed_identical_contexts(self):
        a, b = builder(0), builder(0)
        for item_a, item_b in zip(a.items, b.items, strict=True):
            assert a.context(item_a, 500).docs == b.context(item_b, 500).docs
        assert builder(1).pool != a.pool

    def test_gold_never_in_the_pool(self):
        b = builder()
        assert not any(g in p or p in g for g in GOLDS for p in b.pool)
        assert len(b.pool) == len(POOL_TEXTS)

    @pytest.mark.parametrize("length", [50, 300, 1000, 3000])
    def test_length_hit_within_one_chunk(self, length):
        b = builder()
        for item in b.items:
            ctx = b.context(item, length)
            assert abs(sum(words(ctx.docs)) - length) <= 141
            assert ctx.tokens == sum(words(ctx.docs))
            assert ctx.docs[ctx.gold_doc] == item.gold

    def test_depth_kept_across_lengths(self):
        b = builder()
        for item in b.items:
            for length in (500, 2000, 6000):
                ctx = b.context(item, length)
                assert abs(ctx.gold_doc / (len(ctx.docs) - 1) - item.depth) <= 1.5 / (len(ctx.docs) - 1)

    def test_contexts_are_prefixes_of_one_pool(self):
        b = builder()
        short, long = b.context(b.items[1], 500), b.context(b.items[1], 3000)
        others = [d for i, d in enumerate(long.docs) if i != long.gold_doc]
        assert others[: short.n_pool] == [d for i, d in enumerate(short.docs) if i != short.gold_doc][: short.n_pool]

    def test_gold_chunks_hold_the_answer(self):
        texts = ["Other text.", "The number is 1001.", "More gold text without it."]
        assert gold_chunks(texts, [0, 1, 1], 1, ["1001"]) == {1}
        assert gold_chunks(texts, [0, 1, 1], 1, ["absent"]) == {1, 2}

    def test_parse_lengths_and_split(self):
        assert parse_lengths("2K, 128k,1M,500") == [2000, 128000, 1000000, 500]
        with pytest.raises(ValueError):
            parse_lengths("8 tokens")
        parts = split_passages("One two three. Four five six. Seven eight nine.", words=4)
        assert parts == ["One two three. Four five six.", "Seven eight nine."]


def same_topic(b: Builder) -> Builder:
    """The same questions with hard distractors: three paragraphs "of the gold's article" and pool passage 5."""
    items = [Item(i.id, i.question, i.answers, i.gold, i.depth,
                  (f"Article {i.id} paragraph one mentions secrets. " * 6, b.pool[5],
                   f"Article {i.id} paragraph two mentions numbers. " * 6,
                   f"Article {i.id} paragraph three. " * 9)) for i in b.items]
    return Builder(items, b.pool, words, word_offsets)


class TestSameTopic:
    @pytest.mark.parametrize("length", [150, 400, 3000])
    def test_hard_distractors_sit_around_the_gold_once_each(self, length):
        b = same_topic(builder())
        for item in b.items:
            ctx = b.context(item, length)
            lo, hi = ctx.block
            assert ctx.docs[ctx.gold_doc] == item.gold and lo <= ctx.gold_doc < hi
            for doc in item.hard:
                assert ctx.docs.count(doc) <= 1  # never twice, even the one the pool also holds
            near = ctx.docs[lo:hi]
            assert all(d in item.hard for d in near if d != item.gold)
            if hi - lo > 2:  # the closest distractor is next to the gold
                assert item.hard[0] in (ctx.docs[ctx.gold_doc - 1], ctx.docs[ctx.gold_doc + 1])
            assert abs(sum(words(ctx.docs)) - length) <= 141 and ctx.tokens == sum(words(ctx.docs))

    def test_short_contexts_are_mostly_hard(self):
        b = same_topic(builder())
        ctx = b.context(b.items[1], 150)
        hard = [d for d in ctx.docs if d in b.items[1].hard]
        assert len(hard) >= 2 and ctx.n_pool <= 1

    def test_a_hard_passage_in_the_prefix_stays_in_place(self):
        b = same_topic(builder())
        ctx = b.context(b.items[0], 3000)
        assert ctx.n_pool > 5 and ctx.docs.count(b.pool[5]) == 1
        lo, hi = ctx.block
        assert b.pool[5] not in ctx.docs[lo:hi]


class TestSquadMetrics:
    """Known cases of SQuAD v1.1's official evaluate script."""

    def test_normalisation(self):
        assert normalize_answer("The  Cat, a hat!") == "cat hat"
        assert normalize_answer("An apple.") == "apple"

    def test_em_f1(self):
        assert exact_match("the Denver Broncos", ["Denver Broncos", "Broncos"]) == 1.0
        assert exact_match("Denver", ["Denver Broncos"]) == 0.0
        assert f1("Denver", ["Denver Broncos"]) == pytest.approx(2 / 3)
        assert f1("Carolina Panthers", ["Denver Broncos"]) == 0.0
        assert f1("", ["x"]) == 0.0

    def test_contained_is_word_aligned(self):
        assert contained("It was in 1889.", ["1889"]) == 1.0
        assert contained("in 18890", ["1889"]) == 0.0


class TestRun:
    @pytest.fixture
    def explorer(self, tiny):
        return Explorer(tiny, untrained_head(tiny, n_ret=8, n_groups=4, chunk_layer=3, n_context=1), None)

    @pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])  # gold first, inside, after the cut tail
    @pytest.mark.parametrize("hard", [(), ("Same article, other paragraph. " * 5, "Another one here. " * 7)])
    def test_keys_equal_direct_encoding(self, explorer, monkeypatch, tmp_path, depth, hard):
        monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
        monkeypatch.setattr(longcontext_eval, "BLOCK", 16)  # several blocks
        count, offsets = tokenizer_counters(explorer.backbone.tokenizer)
        b = Builder([Item("0", "q?", ("1000",), GOLDS[0], depth, hard)], build_pool(POOL_TEXTS, GOLDS, 0), count,
                    offsets)
        ctx = b.context(b.items[0], 1400)  # 1,400 tokens: the last pool passage is cut (a tail)
        assert ctx.tail and (ctx.block[0] > ctx.n_pool) == (depth == 1.0)
        assert ctx.block[1] - ctx.block[0] == 1 + len(hard)
        texts, doc_of, keys = ContextEncoder(b, explorer.backbone, explorer.head).keys(ctx)
        assert (texts, doc_of) == b.chunked(ctx)
        direct = explorer.store([explorer.chunk([t])[0] for t in texts]).keys
        torch.testing.assert_close(keys, direct, atol=2e-3, rtol=0)  # fp16 cache

    def test_run_rows_and_summary(self, explorer, monkeypatch, tmp_path):
        monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
        monkeypatch.setattr(answers, "ANSWER_RULE", AnswerRule(2))  # what the answer cache generates
        monkeypatch.setattr(longcontext_eval, "ANSWER_RULE", AnswerRule(2))
        count, offsets = tokenizer_counters(explorer.backbone.tokenizer)
        items = [Item(str(k), f"What is secret {k}?", (str(1000 + k),), GOLDS[k], 0.5) for k in range(2)]
        b = Builder(items, build_pool(POOL_TEXTS, GOLDS, 0), count, offsets)
        told = []  # what the CLI's progress bar shows
        out = run_longcontext(explorer, b, [300, 900], [1, 3], ("unreal", "bm25", "full"),
                              progress=lambda f, text: told.append((f, text)))
        assert told == [(0.0, "0.3K tokens, question 1"), (0.25, "0.3K tokens, question 2"),
                        (0.5, "0.9K tokens, question 1"), (0.75, "0.9K tokens, question 2"), (1.0, "done")]
        assert len(out["rows"]) == 2 * 2 * (2 * 2 + 1)
        table = {(r["method"], r["length"], r["n"]): r for r in out["table"]}
        assert table[("bm25", 300, 3)]["questions"] == 2 and "f1" in table[("bm25", 300, 3)]
        full = [r for r in out["rows"] if r["method"] == "full"]
        assert all(r["recall"] == 1.0 for r in full)  # full context always holds the gold chunk
        seen = []
        again = run_longcontext(explorer, b, [300, 900], [1, 3], ("unreal", "bm25", "full"),
                                on_length=lambda partial: seen.append((partial["lengths_done"], len(partial["rows"]))))
        assert [r.get("answer") for r in again["rows"]] == [r.get("answer") for r in out["rows"]]
        halves = [run_longcontext(explorer, b, [300, 900], [1, 3], ("unreal", "bm25", "full"), shard=(k, 2))
                  for k in (1, 2)]  # two processes' shares: every question once, the same answers
        assert [len(h["rows"]) for h in halves] == [10, 10]
        assert sorted((r["id"], r["length"], r["method"], r["n"] or 0, r.get("answer")) for h in halves
                      for r in h["rows"]) == sorted((r["id"], r["length"], r["method"], r["n"] or 0, r.get("answer"))
                                                    for r in out["rows"])
        def measured(table):  # all but the selection CPU, which each run times afresh
            return [{k: v for k, v in r.items() if k != "retrieval_cpu_s"} for r in table]

        assert measured(summarize(again["rows"])) == measured(out["table"])
        assert seen == [(["0.3K"], 10), (["0.3K", "0.9K"], 20)]  # written as each length completes
        assert set(again["cpu_seconds"]) == {"0.3K", "0.9K"} and all(v >= 0 for v in again["cpu_seconds"].values())
        # each answer's CPU comes from the cache, so the resumed run reports what the first one spent
        cell = table[("unreal", 900, 3)]
        assert cell["timed"] == 2 and cell["answer_cpu_s"] > 0 and cell["retrieval_cpu_s"] >= 0
        text = markdown(out["table"])
        assert "| unreal | 0.9K |" in text and "full context |" in text
        assert text.count("- UNREAL at") == 2 and text.count("- BM25 at") == 2  # one caption per curve


    def test_bounds_answer_once_for_every_length(self, explorer, monkeypatch, tmp_path):
        monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
        monkeypatch.setattr(answers, "ANSWER_RULE", AnswerRule(2))
        monkeypatch.setattr(longcontext_eval, "ANSWER_RULE", AnswerRule(2))
        count, offsets = tokenizer_counters(explorer.backbone.tokenizer)
        items = [Item("0", "What is secret 0?", ("1000",), GOLDS[0], 0.5)]
        b = Builder(items, build_pool(POOL_TEXTS, GOLDS, 0), count, offsets)
        generated, real = [], answers.stream_answer

        def counted(bb, ids, *a, **k):
            generated.append(ids)
            return real(bb, ids, *a, **k)

        monkeypatch.setattr(answers, "stream_answer", counted)
        out = run_longcontext(explorer, b, [300, 900], [1], ("bm25", "none", "oracle"))
        bounds = {(r["method"], r["length"]): r for r in out["rows"] if r["method"] in ("none", "oracle")}
        assert set(bounds) == {(m, x) for m in ("none", "oracle") for x in (300, 900)}
        assert bounds["oracle", 300]["recall"] == 1.0 and bounds["none", 300]["recall"] == 0.0
        assert bounds["oracle", 300]["answer"] == bounds["oracle", 900]["answer"]
        assert len(generated) == len({tuple(g) for g in generated})  # each prompt answered once, whatever the length
        gold_ids = prompt_ids(explorer.backbone, [GOLDS[0]], items[0].question)
        assert gold_ids in generated and prompt_ids(explorer.backbone, [], items[0].question) in generated
        assert "Bound, oracle (gold paragraph alone) (1 questions)" in markdown(out["table"])
        with pytest.raises(RetrievalError):
            check(["bm25", "gold"], "document", BOUNDS)
        assert check(["none", "bm25", "none", ""], "document", BOUNDS) == ["none", "bm25"]  # each once

    def test_evidence_only_selects_what_an_answered_run_selects(self, explorer, monkeypatch, tmp_path):
        monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
        monkeypatch.setattr(answers, "ANSWER_RULE", AnswerRule(2))
        monkeypatch.setattr(longcontext_eval, "ANSWER_RULE", AnswerRule(2))
        count, offsets = tokenizer_counters(explorer.backbone.tokenizer)
        items = [Item(str(k), f"What is secret {k}?", (str(1000 + k),), GOLDS[k], d)
                 for k, d in zip(range(3), (0.0, 0.5, 1.0), strict=True)]
        b = Builder(items, build_pool(POOL_TEXTS, GOLDS, 0), count, offsets)
        generated = []
        monkeypatch.setattr(answers, "stream_answer", lambda *a, **k: generated.append(a) or iter(()))
        evidence = run_longcontext(explorer, b, [300, 900], [5, 1, 2, 1], ("unreal", "bm25"), answer=False)
        assert generated == []  # nothing answered
        assert len(evidence["rows"]) == 3 * 2 * 2  # one row per question, length and method
        assert {len(r["found"]) for r in evidence["rows"]} == {3} and evidence["ns"] == [1, 2, 5]
        monkeypatch.undo()
        monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
        monkeypatch.setattr(answers, "ANSWER_RULE", AnswerRule(2))
        monkeypatch.setattr(longcontext_eval, "ANSWER_RULE", AnswerRule(2))
        answered = run_longcontext(explorer, b, [300, 900], [1, 2, 5], ("unreal", "bm25"))

        def recall(rows):
            return sorted((r["id"], r["length"], r["method"], r["n"], r["recall"]) for r in rows)

        assert recall(longcontext_eval.per_answer(evidence["rows"], [1, 2, 5])) == recall(answered["rows"])
        cells = {(r["method"], r["length"], r["n"]): r for r in evidence["table"]}
        for r in answered["table"]:
            assert cells[r["method"], r["length"], r["n"]]["recall"] == r["recall"] and "f1" not in cells[
                r["method"], r["length"], r["n"]]
        text = markdown(evidence["table"], longcontext_eval.per_answer(evidence["rows"], [1, 2, 5]), answered=False)
        assert text.startswith("Evidence recall@n") and "| unreal | 0.9K | 3 |" in text and "McNemar" in text
        mixed = answered["rows"] + longcontext_eval.per_answer(evidence["rows"], evidence["ns"])
        with pytest.raises(ValueError, match="cannot be summarised together"):
            summarize(mixed)
        with pytest.raises(InputError, match="only answer"):
            run_longcontext(explorer, b, [300], [1], ("unreal", "full"), answer=False)


def test_shards_are_checked_before_the_model_loads():
    from unreal_demo.evaluation.longcontext.run import parse_shard

    assert parse_shard("1/1", "precomputed/longcontext.json") == (1, 1)  # the whole run may write there
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(InputError, match="give K/N"):
            parse_shard(bad)
    with pytest.raises(InputError, match="partial"):
        parse_shard("1/2", "precomputed/longcontext.json")


def test_plots_draw_both_methods_and_full_context():
    from unreal_demo.ui.plots import length_curve, topn_curve

    table = [{"method": m, "length": 2000, "n": n, "f1": [0.1 * n, 0, 1], "recall": 0.2 * n}
             for m in ("unreal", "bm25") for n in (1, 2, 3)]
    table.append({"method": "full", "length": 2000, "n": None, "f1": [0.25, 0, 1], "recall": 1.0})
    table.append({"method": "oracle", "length": 2000, "n": None, "f1": [0.4, 0.3, 0.5], "recall": 1.0})
    fig = topn_curve(table, 2000, "f1")
    assert [(s.y0, s.line.dash) for s in fig.layout.shapes] == [(0.25, "dash"), (0.4, "dashdot")]
    assert [t.name for t in fig.data] == ["UNREAL 95% interval", "UNREAL f1 (band: 95% interval)",
                                          "UNREAL evidence recall@n", "BM25 95% interval",
                                          "BM25 f1 (band: 95% interval)", "BM25 evidence recall@n"]
    assert list(fig.data[1].y) == [0.1, 0.2, pytest.approx(0.3)]
    best = length_curve(table, "f1")
    assert [list(t.y) for t in best.data] == [[pytest.approx(0.3)], [pytest.approx(0.3)], [0.25]]


def test_every_measured_method_reaches_the_tables_plots_and_captions():
    from unreal_demo.evaluation.longcontext.report import curve_methods
    from unreal_demo.ui.plots import length_curve, topn_curve

    rows = [{"method": m, "length": 2000, "n": n, "fits": True, "em": 0.0, "contained": 0.0, "prompt_tokens": 100,
             "recall": 1.0, "f1": f} for m in ("dense", "bm25", "unreal") for n in (1, 3) for f in (0.2, 0.4)]
    table = summarize(rows)
    assert curve_methods(table) == ["unreal", "bm25", "dense"]  # the registry's order, not the rows'
    text = markdown(table)
    assert "| dense | 2K | 0.30 (1.00) | 0.30 (1.00) |" in text
    assert "| length | UNREAL best n: F1 / EM | BM25 best n: F1 / EM | dense MiniLM-L6-v2 best n: F1 / EM |" in text
    assert "- dense MiniLM-L6-v2 at 2K (2 questions per cell)" in text
    assert [t.name for t in topn_curve(table, 2000).data if t.mode == "lines+markers"] == [
        "UNREAL f1 (band: 95% interval)", "BM25 f1 (band: 95% interval)", "dense MiniLM-L6-v2 f1 (band: 95% interval)"]
    assert [t.name for t in length_curve(table).data][-1] == "dense MiniLM-L6-v2 (best n)"
    alone = topn_curve([r for r in table if r["method"] == "dense"], 2000).data[-1]
    assert alone.line.color == topn_curve(table, 2000).data[-1].line.color  # a method keeps its colour


def test_summary_splits_f1_by_whether_the_gold_was_selected():
    rows = [{"method": "unreal", "length": 8000, "n": 1, "fits": True, "em": 0.0, "contained": 0.0,
             "prompt_tokens": 100, "recall": rec, "f1": f} for rec, f in ((1.0, 0.6), (1.0, 0.2), (0.0, 0.1))]
    (cell,) = summarize(rows)
    assert cell["f1_hit"] == pytest.approx(0.4) and cell["f1_miss"] == pytest.approx(0.1)
    mixed = cell["recall"] * cell["f1_hit"] + (1 - cell["recall"]) * cell["f1_miss"]
    assert mixed == pytest.approx(cell["f1"][0], abs=1e-3)  # the fields are rounded
    (all_hit,) = summarize([r | {"recall": 1.0} for r in rows])
    assert all_hit["f1_miss"] is None
    text = markdown(summarize(rows + [r | {"n": 3} for r in rows]))
    assert "| unreal | 8K | 0.40 / 0.10 | 0.40 / 0.10 |" in text
    assert "F1 where the gold chunk was selected goes from 0.400 to 0.400" in text


class TestDescribePeak:
    @staticmethod
    def cell(n, f1, half, recall):
        return {"method": "unreal", "length": 8000, "n": n, "questions": 60, "f1": (f1, f1 - half, f1 + half),
                "em": f1, "em_ci": (f1 - half, f1 + half), "recall": recall, "label": "8K"}

    def test_an_inverted_u_only_beyond_the_intervals(self):
        from unreal_demo.evaluation.longcontext.report import describe_peak

        table = [self.cell(1, 0.10, 0.03, 0.5), self.cell(5, 0.30, 0.03, 0.8), self.cell(20, 0.12, 0.03, 0.95)]
        text = describe_peak(table, "unreal", 8000)
        assert "highest at n = 5 (0.300" in text and "an inverted U" in text and "0.50 to 0.95" in text
        wide = [self.cell(1, 0.10, 0.15, 0.5), self.cell(5, 0.30, 0.15, 0.8), self.cell(20, 0.12, 0.15, 0.95)]
        assert "no peak within the 95% intervals" in describe_peak(wide, "unreal", 8000)

    def test_a_monotone_curve_has_no_peak(self):
        from unreal_demo.evaluation.longcontext.report import describe_peak

        table = [self.cell(1, 0.30, 0.01, 0.5), self.cell(5, 0.20, 0.01, 0.8), self.cell(20, 0.10, 0.01, 0.9)]
        text = describe_peak(table, "unreal", 8000, "em")
        assert "highest at n = 1" in text and "no peak: it falls from the smallest n" in text
        assert "against 0.100 at n = 20:" in text and "at n = 1 and" not in text  # the best end is not repeated
        rising = [self.cell(1, 0.10, 0.01, 0.5), self.cell(5, 0.20, 0.01, 0.8), self.cell(20, 0.30, 0.01, 0.9)]
        assert "no peak: it rises to the largest n" in describe_peak(rising, "unreal", 8000)
        assert "fewer than two" in describe_peak(table[:1], "unreal", 8000)
        bare = [{k: v for k, v in r.items() if k != "em_ci"} for r in table]  # a row without an interval
        text = describe_peak(bare, "unreal", 8000, "em")
        assert "highest at n = 1 (0.300) against 0.100 at n = 20; this result holds no 95% intervals, so no " \
               "shape is claimed" in text and "CI" not in text

    def test_a_run_too_small_for_an_interval_says_so(self):
        from unreal_demo.evaluation.longcontext.report import describe_peak

        one = [self.cell(n, 0.111, 0.0, 0.5) | {"questions": 1} for n in (1, 3, 5)]
        text = describe_peak(one, "unreal", 8000)
        assert "(1 question per cell): f1 is highest at n = 1 (0.111) against 0.111 at n = 5; too few questions " \
               "for a 95% interval, so no shape is claimed" in text
        assert "CI" not in text and "0.111–0.111" not in text


def test_hard_distractors_interleave_the_article_and_bm25_neighbours():
    from unreal_demo.core.selection import BM25
    from unreal_demo.evaluation.longcontext.contexts import hard_distractors

    pool = ["Volcanoes erupt lava.", "The zebra has stripes.", "Zebra crossings help walkers.", "Bread rises."]
    article = ["Zebras live in herds in Africa.", "The museum opened in 1901."]
    out = hard_distractors("Where do zebras live?", article, BM25(pool), pool, k=2)
    assert out[0] == article[0] and out[2] == article[1]  # the article first in BM25 order, pool neighbours between
    assert set(out[1::2]) <= set(pool) and len(out) == len(set(out)) == 4
    assert hard_distractors("zebra", [], BM25(pool), pool, k=2)[0] in pool[1:3]


def test_one_length_as_the_qa_table_agrees_with_eval_qa():
    """The same per-question scores through ``bench longcontext``'s summary and through ``eval qa``'s own."""
    from unreal_demo.evaluation import qa as qa_eval
    from unreal_demo.evaluation.longcontext.report import qa_table

    scores = {("none", None): [(0, 0.0, 0), (0, 0.2, 0)], ("oracle", None): [(1, 1.0, 1), (0, 0.6, 1)],
              ("bm25", 1): [(1, 0.5, 1), (0, 0.3, 0)], ("bm25", 3): [(1, 0.8, 1), (1, 0.8, 1)],
              ("unreal", 1): [(0, 0.4, 1), (0, 0.1, 1)], ("unreal", 3): [(1, 0.9, 1), (0, 0.2, 0)]}

    def row(em, f, hit):
        return {"em": float(em), "f1": f, "contained": float(em), "recall": float(hit), "prompt_tokens": 10}

    flat = [{"method": m, "length": 2000, "n": n, "fits": True} | row(*s) for (m, n), ss in scores.items() for s in ss]
    ours = qa_table(summarize(flat), 2000)
    theirs = qa_eval.summarize([{"method": m, "k": n or 1, "seconds": 0, "rows": [row(*s) for s in ss]}
                                for (m, n), ss in scores.items()])
    assert [(r["key"], r["k"]) for r in ours] == [("none", None), ("oracle", None), ("unreal", 1), ("bm25", 1),
                                                  ("unreal", 3), ("bm25", 3)]  # bounds, then by k, UNREAL first
    by = {(r["key"], r["k"]): r for r in theirs}
    for r in ours:
        want = by[r["key"], r["k"]]
        for field in ("method", "questions", "em", "contained", "contained_ci", "recall"):
            assert r[field] == want[field], (r["key"], field)
        for field in ("f1_gap_closed", "em_gap_closed"):
            assert r[field] == pytest.approx(want[field], abs=1e-3)
        assert r["f1"] == pytest.approx(want["f1"], abs=1e-4)
    text = markdown(summarize(flat))
    assert "As the downstream QA table (k = n chunks selected from each 2K context" in text
    assert "| UNREAL (trained head) | 3 | 0.500 | 0.550 |" in text
    assert "As the downstream QA table" not in markdown(summarize([r | {"length": 8000} for r in flat] + flat))
    assert "As the downstream QA table" not in markdown(summarize([r for r in flat if r["method"] != "oracle"]))


@pytest.mark.parametrize(("a_only", "b_only", "both", "neither"), [(25, 11, 150, 114), (0, 0, 3, 1), (7, 2, 0, 0),
                                                                   (1, 12, 40, 5)])
def test_paired_recall_is_mcnemars_exact_test(a_only, b_only, both, neither):
    """Counts by hand; p against scipy's exact binomial test, the independent reference."""
    from unreal_demo.evaluation.longcontext.report import recall_pairs

    stats = pytest.importorskip("scipy.stats")
    split = [(1, 0)] * a_only + [(0, 1)] * b_only + [(1, 1)] * both + [(0, 0)] * neither
    rows = [{"id": i, "length": 8000, "n": 3, "method": m, "recall": float(hit)}
            for i, pair in enumerate(split) for m, hit in zip(("unreal", "bm25"), pair, strict=True)]
    rows.append({"id": "x", "length": 8000, "n": 3, "method": "unreal", "recall": 1.0})  # BM25 not run on it
    rows.append({"id": 0, "length": 8000, "n": None, "method": "oracle", "recall": 1.0})  # a bound: no pair
    (got,) = recall_pairs(rows)
    assert (got["a_only"], got["b_only"]) == (a_only, b_only)
    want = stats.binomtest(a_only, a_only + b_only).pvalue if a_only + b_only else 1.0
    assert got["p"] == pytest.approx(want, rel=5e-3)
    table = summarize([r | {"fits": True, "em": 0.0, "f1": 0.1, "contained": 0.0, "prompt_tokens": 9} for r in rows])
    assert f"| 8K | {a_only} / {b_only} (p {got['p']:.2g}) |" in markdown(table, rows)
    assert "McNemar" not in markdown(table)
