"""The ablation sweeps' table and file."""

from __future__ import annotations

import json


def test_ablation_table_escapes_pipes_and_keeps_columns(tmp_path):
    from experiments.ablations import _slug, _write
    from unreal_demo.evaluation.ablation import SWEEPS, VARIANTS, read_sweeps

    row = {"R@1": 0.1, "R@5": 0.2, "R@10": 0.3, "MRR@10": 0.15, "final_loss": 2.0, "params": 1234}
    name = "|C0| = 2 (64 tokens each)"
    assert name in VARIANTS and _slug(name) == "c0----2"
    out = _write(tmp_path / "a.json", "squad-l20", {name: row | {"variant": name}}, row, 60, 300, 422)
    lines = out["markdown"].splitlines()
    assert all(line.count("|") - line.count("\\|") == lines[0].count("|") for line in lines)
    assert "\\|C0\\| = 2" in lines[-1] and (tmp_path / "a.json").exists()
    # a second sweep is kept beside the first, each with its own command
    # and a sweep another command wrote (the adapter's) survives a rewrite
    mix = next(iter(SWEEPS["mix-l25"].variants))
    other = read_sweeps(tmp_path / "a.json") | {"joint-fine-tune": {"rows": []}}
    (tmp_path / "a.json").write_text(json.dumps({"sweeps": other}))
    _write(tmp_path / "a.json", "mix-l25", {mix: row | {"variant": mix}}, row, 100, 400, 1207)
    both = read_sweeps(tmp_path / "a.json")
    assert list(both) == ["squad-l20", "mix-l25", "joint-fine-tune"]
    assert "--sweep mix-l25 --steps 100" in both["mix-l25"]["command"]
    assert both["squad-l20"]["rows"][0]["variant"] == name


def test_shipped_ablations_file_reads_as_sweeps():
    from experiments.adapter_grid import GRID
    from unreal_demo.evaluation.ablation import SWEEPS, read_sweeps
    from unreal_demo.settings import PRECOMPUTED

    sweeps = read_sweeps(PRECOMPUTED / "ablations.json")
    known = {name: set(s.variants) for name, s in SWEEPS.items()}
    known["query-adapter"] = set(GRID) | {"shipped head (no adapter)", "shipped head (no adapter), keys centred",
                                          "BM25", "dense MiniLM"}  # `adapter` command
    known["query-adapter-c0-5"] = known["centring-fresh-dev"] = known["query-adapter"]  # --n-context 5, centring
    known["query-adapter-judged-dev"] = known["query-adapter"]  # --dev judged
    joint = sweeps.pop("joint-fine-tune")  # `adapter --joint` runs: each row is one of its result file's rows
    for row in joint["rows"]:
        result = json.loads((PRECOMPUTED.parent / row["result"]).read_text())
        assert result["n_context"] == row["|C0|"] and row["variant"].startswith(("starting head", "joint fine-tune"))
        assert any(all(r.get(k) == v for k, v in row.items() if "R@" in k or k in ("parameters", "best step"))
                   for r in result["rows"]), row["variant"]
    assert joint["markdown"].startswith("| variant |")
    assert joint["command"].count("--joint") == len({r["result"] for r in joint["rows"]})  # one command per file
    assert sweeps and set(sweeps) <= set(known)
    for name, result in sweeps.items():
        assert all(r["variant"] in known[name] for r in result["rows"])
        assert result["markdown"].startswith("| variant |") and result["setting"] and result["command"]
