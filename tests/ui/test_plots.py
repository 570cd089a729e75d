"""Figures built from result rows: intervals drawn as bands, one curve per method, the bounds as lines."""

from __future__ import annotations

import pandas as pd

from unreal_demo.ui import plots

QA = [{"method": "no context", "key": "none", "k": None, "contained": 0.1, "contained_ci": (0.05, 0.15)},
      {"method": "oracle", "key": "oracle", "k": None, "contained": 0.4, "contained_ci": (0.35, 0.45)},
      {"method": "BM25", "key": "bm25", "k": 1, "contained": 0.2, "contained_ci": (0.15, 0.25)},
      {"method": "BM25", "key": "bm25", "k": 5, "contained": 0.3, "contained_ci": (0.25, 0.35)},
      {"method": "UNREAL", "key": "unreal", "k": 5, "contained": 0.25, "contained_ci": (0.2, 0.3)},
      {"method": "UNREAL", "key": "unreal", "k": 1, "contained": 0.15, "contained_ci": (0.1, 0.2)}]


class TestQaCurves:
    def test_one_line_and_band_per_retriever_sorted_by_k(self):
        fig = plots.qa_curves(QA)
        lines = [t for t in fig.data if t.mode == "lines+markers"]
        assert [t.name for t in lines] == ["BM25", "UNREAL"]
        assert list(lines[1].x) == [1, 5] and list(lines[1].y) == [0.15, 0.25]
        bands = [t for t in fig.data if t.fill == "toself"]
        assert len(bands) == 2 and {t.mode for t in bands} == {"lines"}  # a band draws no markers at its corners
        assert list(bands[1].x) == [1, 5, 5, 1] and list(bands[1].y) == [0.2, 0.3, 0.2, 0.1]  # high, then low back

    def test_bounds_are_flat_lines(self):
        fig = plots.qa_curves(QA)
        assert sorted(s.y0 for s in fig.layout.shapes) == [0.1, 0.4]

    def test_every_registry_method_its_own_colour_an_old_spelling_its_new_ones(self):
        from unreal_demo.retrieval.registry import METHODS

        colours = [plots.method_colour(m) for m in METHODS]
        assert len(set(colours)) == len(colours) and plots.MUTED not in colours
        assert plots.method_colour("hybrid") == plots.method_colour("hybrid-rrf")
        assert plots.method_colour("not-a-method") == plots.MUTED

    def test_a_method_keeps_its_colour_and_the_axis_says_where_chunks_come_from(self):
        fig = plots.qa_curves([r for r in QA if r["key"] != "bm25"], source="selected from the context")
        (unreal,) = (t for t in fig.data if t.mode == "lines+markers")
        assert unreal.line.color == plots.method_colour("unreal")
        assert fig.layout.xaxis.title.text == "k (chunks selected from the context)"

    def test_both_result_forms_give_the_qa_rows(self):
        from unreal_demo.evaluation.longcontext.report import qa_table
        from unreal_demo.ui.tabs.wikipedia import qa_rows

        cells = [{"method": m, "length": 2000, "n": n, "questions": 2, "fits": True, "em": 0.0, "em_ci": (0, 1),
                  "f1": (f, 0, 1), "contained": f, "contained_ci": (0, 1), "recall": 1.0, "prompt_tokens": 9}
                 for m, n, f in (("none", None, 0.1), ("oracle", None, 0.5), ("unreal", 1, 0.3))]
        assert qa_rows({"distractors": "same-topic", "table": cells}) == qa_table(cells, 2000)
        assert [r["key"] for r in qa_table(cells[::-1], 2000)] == ["none", "oracle", "unreal"]  # bounds first, fixed
        part = cells[:2] + [cells[2] | {"fits": False}]  # some prompts past the window: scores of fewer questions
        assert [r["key"] for r in qa_table(part, 2000)] == ["none", "oracle"]
        assert qa_rows({"distractors": "pool", "table": []}) == []
        old = {"k": 5, "table": [{"method": "BM25", "key": "bm25"}, {"method": "none", "key": "none"}]}
        assert [r["k"] for r in qa_rows(old)] == [5, None]  # one k for a whole older table; bounds retrieve nothing


class TestTopnCurve:
    def test_mean_and_interval_triples_become_bands(self):
        rows = [{"method": "unreal", "length": 2000, "n": n, "f1": (m, m - 0.1, m + 0.1), "recall": 0.5}
                for n, m in ((1, 0.2), (5, 0.4))]
        fig = plots.topn_curve(rows, 2000)
        band = next(t for t in fig.data if t.fill == "toself")
        assert list(band.x) == [1, 5, 5, 1]
        assert [round(y, 3) for y in band.y] == [0.3, 0.5, 0.3, 0.1]

    def test_rows_without_intervals_get_no_band(self):
        rows = [{"method": "bm25", "length": 2000, "n": 1, "f1": 0.2, "recall": 0.5}]
        assert not [t for t in plots.topn_curve(rows, 2000).data if t.fill == "toself"]


def test_dev_curve_plots_the_logged_dev_recall_with_wilson_bands():
    from unreal_demo.evaluation.retrieval import wilson
    from unreal_demo.ui.plots import dev_curve

    log = [{"step": 1, "visits": 16, "loss": 3.0}, {"step": 100, "visits": 1600, "loss": 2.0, "dev_R@1": 0.5,
                                                    "dev_R@10": 0.8},
           {"step": 200, "visits": 3200, "loss": 1.5, "dev_R@1": 0.6, "dev_R@10": 0.85}]
    fig = dev_curve(log, questions=200)
    band, line = fig.data[0], fig.data[1]
    assert list(line.x) == [1600, 3200] and list(line.y) == [0.5, 0.6] and line.name == "R@1"
    assert list(band.y)[:2] == [wilson(0.5, 200)[1], wilson(0.6, 200)[1]]
    assert list(band.y)[2:] == [wilson(0.6, 200)[0], wilson(0.5, 200)[0]]
    assert len(dev_curve(log).data) == 2  # no bands without the number of questions
    assert dev_curve(log[:1]).layout.annotations[0].text == "no dev evaluation in this log"


def test_captions_name_the_colours_the_figures_draw():
    from unreal_demo.ui.tabs.intrinsic import rank_caption, recall_caption

    ranks = plots.layer_head_heatmap([[1, 5], [2, 9]], "ranks")
    assert plots.scale_ends(ranks) == ("yellow", "dark purple")  # reversed: rank 1 (the lowest value) is yellow
    assert rank_caption().startswith("*What to look for:* yellow cells are layer × head pairs that rank the answer "
                                     "chunk first (rank 1)")
    assert plots.scale_ends(plots.layer_head_heatmap([[0.1]], "recall", reverse=False)) == ("dark purple", "yellow")
    assert "yellow cells are heads that put the gold chunk first often, dark purple cells rarely" in recall_caption()


def test_the_flops_legend_sits_below_the_plot_clear_of_both_axes():
    measured = pd.DataFrame({"method": ["full", "unreal"], "tokens": [1000, 1000], "ttft_s": [0.5, 0.2]})
    fig = plots.flops_curves([1e3, 1e4], [1e9, 1e10], [2e9, 3e9], 5e3, measured)
    assert fig.layout.yaxis2.side == "right" and fig.layout.legend.orientation == "h"
    assert fig.layout.legend.y < 0 and fig.layout.legend.yanchor == "top"
