"""Eqs. 8–10: Table 6 reproduced, Eq. 10 against Eq. 8's root, and each term against a brute-force count."""

from __future__ import annotations

import json

import pytest

from unreal_demo.__main__ import main
from unreal_demo.evaluation.flops import (
    PAPER_BACKBONES,
    TABLE6,
    BackboneSpec,
    Setting,
    eq8_delta,
    eq8_terms,
    eq9_holds,
    n_star,
    n_star_numeric,
    spec_from_config,
)


@pytest.mark.parametrize("key,n", sorted(TABLE6))
def test_table6_within_half_a_percent(key, n):
    got = n_star(PAPER_BACKBONES[key], Setting(n=n, x_ret=910))
    assert abs(got - TABLE6[(key, n)]) / TABLE6[(key, n)] < 0.005


@pytest.mark.parametrize("key,n", sorted(TABLE6))
def test_eq10_close_to_numeric_root_of_eq8(key, n):
    spec, s = PAPER_BACKBONES[key], Setting(n=n, x_ret=910)
    root = n_star_numeric(spec, s)
    assert abs(eq8_delta(spec, s, root)) < 1e-6 * spec.theta * root
    assert abs(n_star(spec, s) - root) / root < 0.01
    assert eq9_holds(spec, s, 1.01 * n_star(spec, s)) and not eq9_holds(spec, s, 0.99 * n_star(spec, s))


def brute_force(spec: BackboneSpec, s: Setting, M: int) -> dict[str, float]:
    """Enumerate every token × layer (2Θ/L each) and every query–key pair (4·d_a each, per attention
    layer) of both pipelines, attributing each to the term of Eq. 8 it belongs to. All layers are
    global-attention layers here; the selected chunks are the first n (any n give the same counts)."""
    T, n, L, lc, S = s.T, s.n, spec.n_layers, spec.chunk_layer, s.tq + s.tg
    lin, pair = 2 * spec.theta / L, 4 * spec.d_attn
    N = M * T
    c = dict.fromkeys(["a", "b", "c", "d", "e", "full", "unreal"], 0.0)
    for layer in range(1, L + 1):
        # full context: one causal sequence of N context tokens, then S query/decode tokens
        for p in range(N + S):
            c["full"] += lin
            if p < N and layer > lc:
                c["a"] += lin
            for j in range(p + 1):
                c["full"] += pair
                if p < N and j // T == p // T:
                    c["e"] += pair if layer > lc else 0.0  # intra-chunk, above ℓc
                elif p < N:
                    c["b"] += pair  # cross-chunk attention
                elif j < N and j // T >= n:
                    c["b"] += pair  # query/decode attention to an unselected chunk
        # UNREAL: each chunk alone through blocks 1..ℓc
        if layer <= lc:
            for p in range(N):
                c["unreal"] += lin + pair * (p % T + 1)
        # the retrieval pass over x_ret
        for p in range(s.xret):
            c["unreal"] += lin + pair * (p + 1)
            c["d"] += lin + pair * (p + 1)
        # the answer pass: n selected chunks, then query/decode tokens
        for p in range(n * T + S):
            c["unreal"] += lin + pair * (p + 1)
            if p < n * T:
                c["c"] += lin + pair * (p + 1)
    return c


def test_terms_match_brute_force_count():
    spec = BackboneSpec("tiny", theta=1000.0, n_layers=4, attn_layers=4, d_attn=8.0, chunk_layer=3)
    s = Setting(n=2, T=5, T_q=3, T_g=2, x_ret=9)
    M = 6
    terms, brute = eq8_terms(spec, s, M * s.T), brute_force(spec, s, M)
    for key in "abcde":
        assert brute[key] == pytest.approx(terms[key]), key
    assert brute["full"] - brute["unreal"] == pytest.approx(eq8_delta(spec, s, M * s.T))


def test_spec_from_llama_config():
    cfg = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "intermediate_size": 1536, "model_type": "llama"}
    spec = spec_from_config(cfg, chunk_layer=20)
    per_layer = 576 * 576 * 2 + 576 * 192 * 2 + 3 * 576 * 1536
    assert spec.theta == per_layer * 30 and spec.attn_layers == 30 and spec.d_attn == 576
    assert spec.lambda_ == pytest.approx(1 / 3) and spec.attn_below == 20


def test_spec_counts_only_global_attention_layers_and_routed_experts():
    cfg = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 2, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32}
    spec = spec_from_config(cfg, chunk_layer=2)
    assert spec.attn_layers == 2 and spec.attn_below == 1
    assert spec.theta == 4 * (64 * 64 * 4 + 64 * 8 + 3 * 64 * 32 * 2)


def test_cli_json(capsys):
    assert main(["flops", "--backbone", "qwen", "--n", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"n_star", "n_star_numeric", "inputs"}
    assert abs(out["n_star"] - 4117) / 4117 < 0.005
