"""Figures built from result rows: intervals drawn as bands, one curve per method, the bounds as lines."""

from __future__ import annotations

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
        assert len(bands) == 2
        assert list(bands[1].x) == [1, 5, 5, 1] and list(bands[1].y) == [0.2, 0.3, 0.2, 0.1]  # high, then low back

    def test_bounds_are_flat_lines(self):
        fig = plots.qa_curves(QA)
        assert sorted(s.y0 for s in fig.layout.shapes) == [0.1, 0.4]


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
