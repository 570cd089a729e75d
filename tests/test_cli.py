"""CLI errors: one line on stderr and a non-zero exit, before any model is loaded."""

from __future__ import annotations

import pytest

from unreal_demo.__main__ import main


@pytest.mark.parametrize("setup,args,match", [
    (None, ["--doc", "MISSING.txt", "--question", "q?"], "no such file"),
    ("bin", ["--doc", "DOC", "--question", "q?"], "binary"),
    ("txt", ["--doc", "DOC", "--question", "  "], "question is empty"),
    ("empty", ["--doc", "DOC", "--question", "q?"], "document is empty"),
    ("pdf", ["--doc", "DOC", "--question", "q?"], "unsupported file type"),
])
def test_ask_errors(tmp_path, capsys, setup, args, match):
    files = {"bin": ("a.txt", b"\x00\x01binary"), "txt": ("a.txt", b"Some text."), "empty": ("a.txt", b""),
             "pdf": ("a.pdf", b"%PDF-1.4")}
    if setup:
        name, raw = files[setup]
        (tmp_path / name).write_bytes(raw)
        args = [str(tmp_path / name) if a == "DOC" else a for a in args]
    assert main(["ask", *args, "--model", "no/such-model-anywhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


def test_unknown_model(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("Some text.")
    assert main(["ask", "--doc", str(tmp_path / "a.txt"), "--question", "q?", "--model", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot load model" in err


def test_folder_without_weights(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("Some text.")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert main(["ask", "--doc", str(tmp_path / "a.txt"), "--question", "q?", "--model", str(tmp_path / "model")]) == 2
    assert "no *.safetensors weights" in capsys.readouterr().err


def test_train_refuses_a_shipped_head_and_held_out_data(capsys):
    assert main(["train", "--out", "precomputed/heads/smollm2-135m", "--steps", "1"]) == 2
    assert "holds a shipped head" in capsys.readouterr().err
    assert main(["train", "--sources", "new_wiki", "--out", "/tmp/nowhere-unreal", "--steps", "1"]) == 2
    assert "held out" in capsys.readouterr().err


@pytest.mark.slow
def test_flops_starts_from_the_shipped_head(capsys):
    import json

    from unreal_demo.settings import DEFAULT_HEADS

    head = json.loads(DEFAULT_HEADS["smollm2-135m-instruct"].with_suffix(".json").read_text())
    assert main(["flops", "--backbone", "smollm2-135m-instruct", "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert (inputs["n_context"], inputs["n_ret"], inputs["chunk_layer"]) == (head["n_context"], head["n_ret"],
                                                                            head["chunk_layer"])
    assert main(["flops", "--backbone", "qwen", "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert (inputs["n_context"], inputs["n_ret"]) == (5, 64)  # the paper's setting for its backbones


@pytest.mark.parametrize("args,match", [
    (["eval", "retrieval", "--methods", "colbert"], "unknown method colbert"),
    (["eval", "retrieval", "--model", "some/other-model"], "no trained head ships for model"),
    (["rank", "--passages", "P", "--queries", "Q", "--model", "some/other-model"], "passages file not found"),
    (["rank", "--passages", "README.md", "--queries", "README.md", "--method", "hybrid-fusion"],
     "needs a fusion weight"),
    (["eval", "qa", "--methods", "oracle,magic"], "unknown method magic"),
    (["bench", "longcontext", "--methods", "unreal,magic"], "unknown method magic"),
    (["bench", "longcontext", "--lengths", "2Q"], "cannot read length"),
])
def test_bad_flags_are_one_line_before_any_model(capsys, args, match):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err
