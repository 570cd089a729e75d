"""The product's train stages: the judged sets, and the alpha and joint flags refused in one line."""

from __future__ import annotations

import pytest

from unreal_demo.__main__ import main


@pytest.mark.parametrize("args, match", [
    (["train", "--distil", "1"], "--distil belong to --stage joint"),
    (["train", "--stage", "alpha", "--teacher-fusion", "0.7"], "belong to --stage joint"),
    (["train", "--stage", "joint", "--sources", "nyt"], "--sources belong to --stage base"),
    (["train", "--save", "x"], "belong to --stage alpha and joint"),
    (["train", "--stage", "joint", "--distil", "nan"], "finite number"),
    (["train", "--stage", "joint", "--groups", "5", "--head",
      "precomputed/heads/smollm2-135m-mix-joint-seed1/head.json"], "multiple of G=5"),
    (["train", "--stage", "joint", "--adapter-rank", "9999"], "outside 0..576"),
    (["train", "--stage", "joint", "--groups", "0"], "at least 1"),
    (["train", "--stage", "joint", "--teacher-fusion", "0.7"], "needs --distil"),
    (["train", "--stage", "joint", "--distil", "3", "--teacher-fusion", "1.5"], "from 0 to 1"),
    (["train", "--stage", "alpha", "--steps", "0"], "at least 1"),
    (["train", "--stage", "alpha", "--model", "qwen2.5-0.5b"], "train the model of --head"),
])
def test_bad_stage_flags_are_one_line_before_any_model(capsys, args, match):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_with_more_adds_the_more_side_s_judged_questions_to_their_source(monkeypatch):
    from unreal_demo.core.joint_training import TextSet
    from unreal_demo.training import judged as judged_dev

    trains = [TextSet("nq:judged", ["a"], [["c"]], [[1]]), TextSet("squad", ["s"], [["c"]], [[2]])]
    more = [TextSet("nq:judged", ["b", "d"], [["c2"], ["c3"]], [[4], [5, 6]])]
    monkeypatch.setattr(judged_dev, "natural_sets", lambda index, n, side: side)
    monkeypatch.setattr(judged_dev, "judged_sets", lambda side, sets: (more if sets == "more" else [], []))
    out = judged_dev.with_more(trains, None, 2)
    assert out[0] == TextSet("nq:judged", ["a", "b", "d"], [["c"], ["c2"], ["c3"]], [[1], [4], [5, 6]])
    assert out[1] is trains[1]


@pytest.mark.parametrize("positives, dev", [("judged-all", "dpr"), ("judged", "read")])
def test_open_sets_refuses_unknown_positives_or_dev_before_loading_anything(positives, dev):
    from unreal_demo.training.judged import open_sets

    with pytest.raises(ValueError, match="positives must be one of cleaner, judged, judged-more"):
        open_sets("no/such/head.json", None, positives, dev)


@pytest.mark.parametrize("head", ["smollm2-135m-mix-joint", "smollm2-135m-mix-joint-seed1",
                                  "smollm2-135m-mix-joint-r64"])
def test_a_shipped_joint_head_s_recorded_command_runs_as_train_stage_joint(head):
    """The command a joint head records (``adapter --joint …``, its name before issue 56) parses as ``train --stage
    joint …`` into the very settings the head records: its recipe is reproducible from the product CLI."""
    import json
    import shlex
    from dataclasses import asdict

    from unreal_demo.cli import build_parser
    from unreal_demo.cli.train import joint_config
    from unreal_demo.settings import PRECOMPUTED

    prov = json.loads((PRECOMPUTED / "heads" / head / "head.json").read_text())["provenance"]
    command = prov["joint_command"].replace("python -m unreal_demo adapter --joint", "train --stage joint")
    args = build_parser().parse_args(shlex.split(command))
    assert asdict(joint_config(args)) | prov["joint"] == asdict(joint_config(args))
    assert args.head == "precomputed/heads/smollm2-135m-mix-alpha/head.json"


def test_the_alpha_stage_is_the_shipped_alpha_head_s_variant():
    import json
    from dataclasses import asdict

    from unreal_demo.settings import PRECOMPUTED
    from unreal_demo.training.alpha import ALPHA, alpha_variant

    prov = json.loads((PRECOMPUTED / "heads" / "smollm2-135m-mix-alpha" / "head.json").read_text())["provenance"]
    variant = alpha_variant(400)
    assert prov["adapter"] == ALPHA == variant.label
    assert asdict(variant.cfg) | prov["adapter_row"]["settings"] == asdict(variant.cfg)
    assert prov["adapter_row"]["sources"] == "+".join(variant.sources)


def _explorer(name: str = "tiny-model", layer: int = 1):
    from types import SimpleNamespace

    return SimpleNamespace(backbone=SimpleNamespace(name=name), head=SimpleNamespace(config=SimpleNamespace(
        chunk_layer=layer)))


def test_a_model_without_an_index_is_told_how_to_build_one(monkeypatch, tmp_path):
    from unreal_demo.store import index as store
    from unreal_demo.training.judged import stage_index

    monkeypatch.setenv("UNREAL_CACHE", str(tmp_path))
    with pytest.raises(store.IndexStoreError, match="index build --model tiny-model --out .*tiny-model-l1-all"):
        stage_index(_explorer())


def test_judged_verdicts_only_serve_the_index_they_were_read_on():
    import json
    from types import SimpleNamespace

    from unreal_demo.training.judged import JUDGED_ON, read_on

    shipped = json.loads((JUDGED_ON / "manifest.json").read_text())
    assert read_on(SimpleNamespace(manifest=shipped))
    assert read_on(SimpleNamespace(manifest=shipped | {"dtype": "fp16", "chunk_layer": 20}))  # same cuts
    assert not read_on(SimpleNamespace(manifest=shipped | {"model": "qwen2.5-0.5b", "chunks": 20317}))


def test_training_sets_are_cached_per_index_cut(tmp_path):
    from types import SimpleNamespace

    from unreal_demo.training.sets import _sets_path

    a = SimpleNamespace(manifest={"model": "smollm2-135m-instruct", "target": 141, "chunks": 20354})
    b = SimpleNamespace(manifest={"model": "qwen2.5-0.5b", "target": 141, "chunks": 20317})
    assert _sets_path(tmp_path, "c2", a) != _sets_path(tmp_path, "c2", b)
    assert _sets_path(tmp_path, "c2", a) == _sets_path(tmp_path, "c2", SimpleNamespace(manifest=dict(a.manifest)))
