"""The CPU module: flags parsed once, the encoding dtype and scan path chosen per CPU, and both overrides."""

from __future__ import annotations

import json

import pytest
import torch

from unreal_demo.core import cpu
from unreal_demo.core.backbone import pick_device_dtype
from unreal_demo.settings import ENCODE_ENV, SCAN_ENV

EPYC = cpu.parse_cpuinfo("processor : 0\nmodel name : AMD EPYC\nflags : fpu avx f16c fma avx2\n\n"
                         "processor : 1\nmodel name : AMD EPYC\nflags : fpu avx f16c fma avx2\n")
XEON = cpu.parse_cpuinfo("model name : Intel(R) Xeon(R)  Platinum 8480+\nflags : avx2 avx512f avx512_bf16 "
                         "avx512_fp16 avx512_vnni amx_bf16 amx_int8 amx_tile\n")


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    monkeypatch.delenv(ENCODE_ENV, raising=False)
    monkeypatch.delenv(SCAN_ENV, raising=False)


def test_flags_and_units():
    assert EPYC.model == "AMD EPYC" and EPYC.units == "AVX2" and not EPYC.bf16_units
    assert XEON.model == "Intel(R) Xeon(R) Platinum 8480+" and XEON.bf16_units
    assert XEON.units == "AVX2 · AVX-512 (BF16, FP16, VNNI) · AMX (BF16, INT8)"
    assert cpu.parse_cpuinfo("").units == "no AVX2"


def test_bf16_only_with_the_units_and_a_passing_fidelity_check():
    assert cpu.choose(EPYC, fidelity={"bf16": True}).encode == "fp32"  # emulated bf16 is slower
    assert cpu.choose(XEON, fidelity={}).encode == "fp32"
    assert cpu.choose(XEON, fidelity={"bf16": False}).encode == "fp32"
    assert cpu.choose(XEON, fidelity={"bf16": True}).encode == "bf16"


def test_overrides_and_fallbacks(monkeypatch):
    monkeypatch.setenv(ENCODE_ENV, "bf16")
    monkeypatch.setenv(SCAN_ENV, "torch")
    choice = cpu.choose(EPYC, fidelity={})
    assert (choice.encode, choice.scan) == ("bf16", "torch")
    assert choice.line() == "AMD EPYC · AVX2 · scan fp32 via torch, encode bf16"
    assert cpu.choose(EPYC, dtype="fp16", fidelity={}).encode == "fp16"  # --dtype wins over the variable
    monkeypatch.setenv(SCAN_ENV, "numkong")
    monkeypatch.setattr(cpu, "numkong_available", lambda: False)  # a machine without the package
    assert cpu.choose(EPYC, fidelity={}).scan in ("numba", "torch")  # the first installed path
    monkeypatch.setattr(cpu, "numba_available", lambda: False)
    choice = cpu.choose(EPYC, fidelity={})
    assert choice.scan == "torch" and "numkong not installed, scanning with torch" in choice.why
    monkeypatch.delenv(SCAN_ENV)
    assert cpu.choose(EPYC, fidelity={}).scan == "torch"  # nothing but torch installed
    monkeypatch.setattr(cpu, "numba_available", lambda: True)
    assert cpu.choose(EPYC, fidelity={}).scan == "numba"  # the preferred path where it imports
    with pytest.raises(ValueError, match="unknown scan path"):
        cpu.choose(EPYC, scan="amx", fidelity={})


def test_the_backbone_dtype_follows_the_choice(monkeypatch):
    monkeypatch.setattr("unreal_demo.core.backbone.choose", lambda model=None: cpu.choose(XEON, fidelity={"bf16": 1}))
    assert pick_device_dtype("cpu") == (torch.device("cpu"), torch.bfloat16)
    assert pick_device_dtype("cpu", "fp32")[1] == torch.float32
    monkeypatch.setenv(ENCODE_ENV, "fp16")
    assert pick_device_dtype("cpu")[1] == torch.float16


def test_recorded_fidelity(tmp_path):
    path = tmp_path / "f.json"
    assert cpu.recorded_fidelity(path) == {}
    path.write_text(json.dumps({"rows": [{"dtype": "bf16", "passed": True}, {"dtype": "int8", "passed": False}]}))
    assert cpu.recorded_fidelity(path) == {"bf16": True, "int8": False}
    assert cpu.status_line().startswith(cpu.cpu_info().model)


def test_a_pass_counts_only_for_the_model_it_was_measured_on(tmp_path):
    """bf16 moves one backbone's pooled keys far more than another's (see experiments/second_backbone.py
    --bf16-keys): one model's pass must not switch another's encoding to bf16."""
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"rows": [{"dtype": "bf16", "passed": True, "model": "smollm2-135m-instruct"}]}))
    assert cpu.recorded_fidelity(path, model="smollm2-135m-instruct") == {"bf16": True}
    assert cpu.recorded_fidelity(path, model="qwen2.5-0.5b") == {}
    assert cpu.choose(XEON, fidelity=cpu.recorded_fidelity(path, model="qwen2.5-0.5b")).encode == "fp32"
    assert cpu.choose(XEON, fidelity=cpu.recorded_fidelity(path, model="smollm2-135m-instruct")).encode == "bf16"


@pytest.mark.parametrize("text", [
    json.dumps([{"dtype": "bf16", "passed": True}]),  # a list at the top
    json.dumps({"row": [{"dtype": "bf16", "passed": True}]}),  # a wrong key
    json.dumps({"rows": [{"dtype": "bf16", "passed": "yes"}]}),  # a non-boolean
    json.dumps({"rows": [{"dtype": "bf16"}]}),  # a row without its verdict
    json.dumps({"rows": {"dtype": "bf16", "passed": True}}),  # rows not a list
    json.dumps({"rows": ["bf16"]}),  # a row that is not an object
    '{"rows": [',  # bad JSON
    "\udcff",  # not UTF-8 once written
])
def test_a_damaged_record_falls_back_to_fp32_with_one_warning(tmp_path, text):
    path = tmp_path / "f.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.warns(RuntimeWarning, match="unreadable key-fidelity record.*encoding in fp32") as caught:
        assert cpu.recorded_fidelity(path) == {}
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    with pytest.warns(RuntimeWarning):
        assert cpu.choose(XEON, fidelity=cpu.recorded_fidelity(path)).encode == "fp32"


def test_a_missing_record_is_silent(tmp_path, recwarn):
    assert cpu.recorded_fidelity(tmp_path / "none.json") == {} and not recwarn.list
