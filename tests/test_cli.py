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
