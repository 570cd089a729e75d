"""Provenance: what a result records about how it was made, and the UI's warning beside a result made otherwise."""

from __future__ import annotations

from types import SimpleNamespace

from unreal_demo.core.generation import ANSWER_RULE, DEFAULT_PROMPT
from unreal_demo.evaluation.results import head_mismatch, provenance


def _explorer(tmp_path, weights: bytes = b"w1"):
    (tmp_path / "head.safetensors").write_bytes(weights)
    backbone = SimpleNamespace(name="m", revision="r", dtype="torch.float32", encoding_name="bf16")
    return SimpleNamespace(backbone=backbone, head_source="heads/head.json", head_path=tmp_path / "head.json")


def test_provenance_records_the_prompt_and_the_answer_rule(tmp_path):
    made = provenance(_explorer(tmp_path), argv=["/x/unreal_demo/__main__.py", "eval", "qa"])
    assert made["prompt"] == DEFAULT_PROMPT and made["answer_rule"] == ANSWER_RULE.name
    assert made["encoded_in"] == "bf16"  # the dtype that encoded, beside the answering weights' dtype
    assert made["command"] == "python -m unreal_demo eval qa" and len(made["head_digest"]) == 16


class TestMismatch:
    def test_same_head_prompt_and_rule(self, tmp_path):
        ex = _explorer(tmp_path)
        assert head_mismatch({"provenance": provenance(ex)}, ex) is None

    def test_no_digest_or_another_head(self, tmp_path):
        ex = _explorer(tmp_path)
        assert "no head digest" in head_mismatch({}, ex)
        other = provenance(ex) | {"head_digest": "0" * 16}
        assert "not the loaded head" in head_mismatch({"provenance": other}, ex)

    def test_another_prompt_or_answer_rule(self, tmp_path):
        ex = _explorer(tmp_path)
        assert "'instruction' prompt" in head_mismatch({"provenance": provenance(ex, prompt="instruction")}, ex)
        old = provenance(ex) | {"answer_rule": "16 tokens"}
        assert "cut at 16 tokens" in head_mismatch({"provenance": old}, ex)
