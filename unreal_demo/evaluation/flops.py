"""Appendix C — FLOPs of full-context answering against UNREAL: Eqs. 8, 9, 10 and Table 6.

Setting: M chunks of T tokens (N = M·T context tokens), T_q query tokens, T_g
decoded tokens, n selected chunks, retrieval input |x_ret|. Θ = active
non-embedding matrix parameters per token; L_a global-attention layers of width
d_a; one query–key pair costs 4·L_a·d_a FLOPs; a token through ℓ of L layers
costs 2Θℓ/L. λ = share of Θ above ℓc; κ = Θ / (L_a·d_a).

Eq. 8 (saving Δ = FLOPs_full − FLOPs_UNREAL) = (a) + (b) − (c) − (d) + (e):
  (a) 2ΘλN                                   deeper layers never run on the context
  (b) 2L_a·d_a [N(N−T) + 2(T_q+T_g)(N−nT)]   cross-chunk attention, query/decode attention to unselected chunks
  (c) 2Θ·nT + 2L_a·d_a·nT(nT+1)              re-encoding the n selected chunks
  (d) 2Θ|x_ret| + 2L_a·d_a·|x_ret|(|x_ret|+1) the retrieval pass
  (e) 2d_a(L_a − L_a,≤c)·N(T+1)              intra-chunk attention above ℓc

Example
-------
>>> spec = PAPER_BACKBONES["qwen"]
>>> round(n_star(spec, Setting(n=5)))           # Table 6: 4,117
4118
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..settings import CHUNK_TOKENS

TERMS = {
    "a": "deeper layers (above ℓc) never run on the context",
    "b": "cross-chunk attention, and query/decode attention to unselected chunks",
    "c": "re-encoding the n selected chunks for the answer",
    "d": "the retrieval pass over x_ret",
    "e": "intra-chunk attention above ℓc (small correction)",
}


@dataclass(frozen=True)
class BackboneSpec:
    """What Eqs. 8–10 need to know about a backbone."""

    name: str
    theta: float  # Θ
    n_layers: int  # L
    attn_layers: int  # L_a
    d_attn: float  # d_a
    chunk_layer: int  # ℓc
    attn_layers_below: float | None = None  # L_a,≤c (default L_a·ℓc/L)
    lam: float | None = None  # λ (default 1 − ℓc/L)

    @property
    def kappa(self) -> float:
        return self.theta / (self.attn_layers * self.d_attn)

    @property
    def lambda_(self) -> float:
        return self.lam if self.lam is not None else 1 - self.chunk_layer / self.n_layers

    @property
    def attn_below(self) -> float:
        if self.attn_layers_below is not None:
            return self.attn_layers_below
        return self.attn_layers * self.chunk_layer / self.n_layers


@dataclass(frozen=True)
class Setting:
    """Pipeline settings: n selected chunks of T tokens, query/answer lengths, |C0|, R (and P)."""

    n: int = 5
    T: int = CHUNK_TOKENS
    T_q: int | None = None  # default T (Eq. 9's assumption)
    T_g: int | None = None  # default T
    n_context: int = 5  # |C0|
    n_ret: int = 64  # R
    x_ret: int | None = None  # default |C0|·T + T_q + R (paper: 910)

    @property
    def tq(self) -> int:
        return self.T if self.T_q is None else self.T_q

    @property
    def tg(self) -> int:
        return self.T if self.T_g is None else self.T_g

    @property
    def xret(self) -> int:
        return self.x_ret if self.x_ret is not None else self.n_context * self.T + self.tq + self.n_ret


def _paper(name: str, theta: float, attn_layers: int, kappa: float, lc: int, L: int, lam: float) -> BackboneSpec:
    return BackboneSpec(name, theta, L, attn_layers, theta / (kappa * attn_layers), lc, lam=lam)


# Table 6 inputs (Θ, L_a, κ, ℓc/L, λ as printed in the paper)
PAPER_BACKBONES = {
    "muse": _paper("Muse-Glimmer-30B", 25.2e9, 13, 4.73e5, 47, 52, 0.096),
    "nemotron": _paper("Nemotron-3.5-Lightning", 2.87e9, 6, 1.17e5, 42, 52, 0.201),
    "qwen": _paper("Qwen3.5-35B-A3B", 2.44e9, 10, 5.95e4, 27, 40, 0.323),
}
TABLE6 = {("muse", 5): 13049, ("muse", 10): 17437, ("nemotron", 5): 6321, ("nemotron", 10): 8471,
          ("qwen", 5): 4117, ("qwen", 10): 5569}


def eq8_terms(spec: BackboneSpec, s: Setting, N: float) -> dict[str, float]:
    """The five terms (a)–(e) of Eq. 8 at context length ``N`` (all positive; Δ = a + b − c − d + e)."""
    th, La, da, T, n, x = spec.theta, spec.attn_layers, spec.d_attn, s.T, s.n, s.xret
    return {
        "a": 2 * th * spec.lambda_ * N,
        "b": 2 * La * da * (N * (N - T) + 2 * (s.tq + s.tg) * (N - n * T)),
        "c": 2 * th * n * T + 2 * La * da * n * T * (n * T + 1),
        "d": 2 * th * x + 2 * La * da * x * (x + 1),
        "e": 2 * da * (La - spec.attn_below) * N * (T + 1),
    }


def eq8_delta(spec: BackboneSpec, s: Setting, N: float) -> float:
    """Eq. 8: FLOPs saved by UNREAL at context length ``N`` (positive = UNREAL cheaper)."""
    t = eq8_terms(spec, s, N)
    return t["a"] + t["b"] - t["c"] - t["d"] + t["e"]


def flops_full(spec: BackboneSpec, s: Setting, N: float) -> float:
    """Full-context FLOPs: N + T_q + T_g tokens through all layers, causal attention."""
    tokens = N + s.tq + s.tg
    return 2 * spec.theta * tokens + 2 * spec.attn_layers * spec.d_attn * tokens * (tokens + 1)


def flops_unreal(spec: BackboneSpec, s: Setting, N: float) -> float:
    """UNREAL FLOPs = full − Δ (chunk encoding to ℓc, retrieval pass, answer from n chunks)."""
    return flops_full(spec, s, N) - eq8_delta(spec, s, N)


def eq9_holds(spec: BackboneSpec, s: Setting, N: float) -> bool:
    """Eq. 9: N² + λκN − κ(nT + |x_ret|) > 0 (UNREAL cheaper, for T_q = T_g = T and N ≫ nT)."""
    k = spec.kappa
    return N * N + spec.lambda_ * k * N - k * (s.n * s.T + s.xret) > 0


def n_star(spec: BackboneSpec, s: Setting) -> float:
    """Eq. 10: N* = [−λκ + √((λκ)² + 4κ(nT + |x_ret|))] / 2."""
    lk, k = spec.lambda_ * spec.kappa, spec.kappa
    return (-lk + math.sqrt(lk * lk + 4 * k * (s.n * s.T + s.xret))) / 2


def n_star_numeric(spec: BackboneSpec, s: Setting, hi: float = 1e9) -> float:
    """The root of Eq. 8 in N (bisection from N = nT, where Δ < 0, to ``hi``)."""
    lo = float(s.n * s.T)
    if eq8_delta(spec, s, lo) > 0:
        return lo
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if eq8_delta(spec, s, mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def spec_from_config(config, chunk_layer: int | None = None, name: str | None = None) -> BackboneSpec:
    """Θ, L, L_a, d_a from a ``transformers`` config (dict or object): attention and MLP projections
    per layer; for MoE, router + shared experts + the experts each token is routed to."""
    c = config if isinstance(config, dict) else config.to_dict()
    c = c.get("text_config", c) or c
    d, L = c["hidden_size"], c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or d // heads
    attn = d * heads * hd * 2 + d * kv * hd * 2  # q, o + k, v
    experts = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts")
    if experts:
        inter = c.get("moe_intermediate_size") or c["intermediate_size"]
        active = c.get("num_experts_per_tok", 1)
        shared = c.get("shared_expert_intermediate_size") or (c.get("n_shared_experts") or 0) * inter
        mlp = d * experts + 3 * d * inter * active + 3 * d * shared
    else:
        mlp = 3 * d * c["intermediate_size"]  # gated MLP: gate, up, down
    types = c.get("layer_types")
    global_layers = [i for i, t in enumerate(types) if t == "full_attention"] if types else list(range(L))
    lc = chunk_layer if chunk_layer is not None else max(1, round(2 * L / 3))
    return BackboneSpec(name or c.get("_name_or_path") or c.get("model_type", "model"), float((attn + mlp) * L), L,
                        len(global_layers), float(heads * hd), lc,
                        attn_layers_below=float(sum(1 for i in global_layers if i < lc)))


def resolve_backbone(name_or_path: str, chunk_layer: int | None = None) -> BackboneSpec:
    """A paper backbone (``muse``, ``nemotron``, ``qwen``), a ``config.json`` path, or a model id/folder."""
    if name_or_path in PAPER_BACKBONES:
        return PAPER_BACKBONES[name_or_path]
    path = Path(name_or_path)
    if path.is_file():
        return spec_from_config(json.loads(path.read_text()), chunk_layer, path.parent.name or path.stem)
    from ..core.backbone import load_backbone

    return spec_from_config(load_backbone(name_or_path).model.config, chunk_layer, name_or_path)


def report(spec: BackboneSpec, s: Setting) -> dict:
    """The ``flops --json`` record: both break-even lengths and every input."""
    return {"n_star": n_star(spec, s), "n_star_numeric": n_star_numeric(spec, s),
            "inputs": asdict(spec) | {"kappa": spec.kappa, "lambda": spec.lambda_, "L_a_below_c": spec.attn_below}
            | asdict(replace(s)) | {"x_ret": s.xret, "T_q": s.tq, "T_g": s.tg}}
