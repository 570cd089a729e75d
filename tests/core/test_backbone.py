"""The GGUF → safetensors conversion on first start, including two processes converting at once."""

from __future__ import annotations

import threading

import pytest
import transformers

from tests.conftest import make_backbone
from unreal_demo.core import backbone as bb


def _fake_gguf(monkeypatch):
    """Auto classes that hand out a tiny model instead of reading a GGUF file; calls counted."""
    tiny, calls = make_backbone(n_layers=1), []

    class Model:
        @staticmethod
        def from_pretrained(folder, gguf_file, dtype):
            calls.append(gguf_file)
            return tiny.model

    class Tok:
        @staticmethod
        def from_pretrained(folder, gguf_file):
            return tiny.tokenizer

    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Model)
    monkeypatch.setattr(transformers, "AutoTokenizer", Tok)
    return calls


def test_two_conversions_at_once_leave_one_complete_copy(tmp_path, monkeypatch):
    calls = _fake_gguf(monkeypatch)
    out = tmp_path / "models" / "m"
    errors = []

    def convert():
        try:
            bb._convert_gguf(tmp_path, "m.gguf", out)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=convert) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(calls) == 2
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]  # no temporary folder left behind


def test_a_stale_incomplete_copy_is_replaced(tmp_path, monkeypatch):
    _fake_gguf(monkeypatch)
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").write_text("{}")  # a conversion killed before the weights were written
    bb._convert_gguf(tmp_path, "m.gguf", out)
    assert (out / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_random_backbone_has_the_folders_shape_and_tokenizer(tmp_path):
    """A config and tokenizer without weights (what travels to a lent GPU) give a model of that shape."""
    tiny = make_backbone(n_layers=3)
    tiny.model.config.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    got = bb.random_backbone(tmp_path, device="cpu", dtype="fp32", seed=1)
    assert (got.n_layers, got.hidden_size) == (3, tiny.hidden_size)
    assert got.tokenizer("Paris is the capital")["input_ids"] == tiny.tokenizer("Paris is the capital")["input_ids"]
    assert got.revision == "random:1" and not any(p.requires_grad for p in got.model.parameters())
    again = bb.random_backbone(tmp_path, device="cpu", dtype="fp32", seed=1)  # the seed fixes the weights
    assert all(bool((a == b).all()) for a, b in zip(got.model.parameters(), again.model.parameters(), strict=True))


def test_random_backbone_without_a_config_is_one_clear_error(tmp_path):
    with pytest.raises(bb.BackboneError, match="cannot read a config and tokenizer"):
        bb.random_backbone(tmp_path, device="cpu")


def _bf16(tiny_fp32: bb.Backbone) -> bb.Backbone:
    """The same weights encoding in bf16 (what load_backbone hands out on a CPU whose choice is bf16)."""
    import dataclasses

    import torch

    return dataclasses.replace(tiny_fp32, encode_dtype=torch.bfloat16)


def test_bf16_encoding_view_copies_the_first_lc_blocks_only_and_answers_stay_fp32():
    """Forced on any CPU (emulated where it has no bf16 units): blocks 1..ℓc copied in bf16, the rest shared."""
    import torch

    tiny = make_backbone(n_layers=2)
    enc_backbone = _bf16(tiny)
    view = enc_backbone.encoder(1)
    assert view is enc_backbone.encoder(1) and tiny.encoder(1) is tiny  # built once; fp32 encodes itself
    assert view.dtype == torch.bfloat16 and enc_backbone.dtype == torch.float32  # answering weights untouched
    assert view.blocks[0].block is not tiny.blocks[0] and view.blocks[1].block is tiny.blocks[1]
    assert next(view.blocks[0].parameters()).dtype == torch.bfloat16
    assert view.model.get_input_embeddings().weight is tiny.model.get_input_embeddings().weight  # shared
    assert all(p.dtype == torch.float32 for p in tiny.model.parameters())
    assert enc_backbone.numerics == tiny.numerics == "tiny"  # answers keyed as before
    assert (enc_backbone.encode_numerics, tiny.encode_numerics) == ("tiny:bfloat16", "tiny")
    assert enc_backbone.encoding_name == "bf16" and tiny.encoding_name == "fp32"
    assert enc_backbone.encoder(2) is not view and not enc_backbone._views.get((1, torch.bfloat16))  # one kept


def test_bf16_keys_and_queries_match_fp32_within_the_recorded_tolerance():
    import torch

    from unreal_demo.core.encoding import cache_folder, encode_chunks, query_states
    from unreal_demo.core.head import untrained_head

    tiny = make_backbone(n_layers=2)
    enc_backbone = _bf16(tiny)
    texts = ["Paris is the capital of France.", "The river flows north to the sea in spring.", "A cat sat."]
    k32, k16 = (encode_chunks(b, texts, 2, n_pool=2) for b in (tiny, enc_backbone))
    cos = torch.nn.functional.cosine_similarity(k32, k16, dim=-1)
    assert k16.dtype == torch.float32 and float(cos.min()) > 0.999  # the fidelity record's key cosine is ≥ 0.999
    assert not torch.equal(k32, k16)  # the bf16 path did run
    assert cache_folder(tiny, texts, 2, 2, 256) != cache_folder(enc_backbone, texts, 2, 2, 256)  # keyed by dtype
    head = untrained_head(tiny, chunk_layer=1, n_ret=4, n_groups=2)
    q32 = head.encode(tiny, ["Where is Paris?"], [["Paris is in France."]])
    q16 = head.encode(enc_backbone, ["Where is Paris?"], [["Paris is in France."]])
    assert float(torch.nn.functional.cosine_similarity(q32, q16, dim=-1).min()) > 0.999 and not torch.equal(q32, q16)
    s32, s16 = query_states(tiny, ["Where is Paris?"], 2)[0], query_states(enc_backbone, ["Where is Paris?"], 2)[0]
    assert float(torch.nn.functional.cosine_similarity(s32, s16, dim=-1).min()) > 0.999


def test_encoding_dtype_dispatch(monkeypatch):
    """bf16 only with the units and a passing record; --dtype / $UNREAL_DTYPE override; weights stay fp32 on CPU."""
    import torch

    from unreal_demo.core import cpu
    from unreal_demo.settings import ENCODE_ENV

    monkeypatch.delenv(ENCODE_ENV, raising=False)
    epyc = cpu.parse_cpuinfo("model name : AMD EPYC\nflags : avx2\n")
    zen4 = cpu.parse_cpuinfo("model name : AMD EPYC 9004\nflags : avx2 avx512f avx512_bf16\n")
    for machine, record, want in [(zen4, {"bf16": True}, torch.bfloat16), (zen4, {}, torch.float32),
                                  (zen4, {"bf16": False}, torch.float32), (epyc, {"bf16": True}, torch.float32)]:
        monkeypatch.setattr(bb, "choose", lambda m=machine, r=record, model=None: cpu.choose(m, fidelity=r))
        dev, dt = bb.pick_device_dtype("cpu")
        assert dt == want and bb.weights_dtype(dev, dt) == torch.float32
    monkeypatch.setattr(bb, "choose", lambda model=None: cpu.choose(epyc, fidelity={}))
    assert bb.pick_device_dtype("cpu", "bf16")[1] == torch.bfloat16  # --dtype
    monkeypatch.setenv(ENCODE_ENV, "bf16")
    assert bb.pick_device_dtype("cpu")[1] == torch.bfloat16  # $UNREAL_DTYPE
    assert cpu.status_line("bf16").endswith("encode bf16") and cpu.status_line("fp32").endswith("encode fp32")
