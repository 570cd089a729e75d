"""Eqs. 2–3 — the query side: soft prompt P, retrieval tokens ρ, layer weights α, G-group pooling.

Eq. 2:  x_ret = [P, C0(x), x_1..x_Tq, ρ_1..ρ_R]   (after a fixed attention-sink token)
Eq. 3:  q_r = Σ_ℓ α_ℓ · LLM_ℓ(x_ret)[pos(ρ_r)],  then the R states are mean-pooled into G groups.

Query adapter (the sibling paper "Beyond the Final Embedding", its Tables 2 and 4): each of the G pooled
query vectors is mapped by  q′ = q + U Vᵀ q  (rank r; a full d × d map W when r = d:  q′ = q + W q)
before it is normalised and scored. U starts at zero, so a new adapter is the identity. Since
⟨A q, k⟩ = ⟨q, Aᵀ k⟩, a query-side map expresses any bilinear score without touching a stored key:
every index stays valid. r = 0 (the default) is no adapter, and such a head scores as before.

Only P (1 × d), ρ (R × d), α (one weight per read-out layer) and the adapter are trained:
(R + 1)·d + |α| + 2·r·d (or d² when r = d) parameters; the backbone stays frozen. A head is stored as
``NAME.safetensors`` (weights) + ``NAME.json`` (:class:`HeadConfig`).

Example
-------
>>> states = torch.ones(1, 2, 4, 3)              # (B, |α|, R, d)
>>> alpha = torch.tensor([0.5, 0.5])
>>> torch.einsum("l,blrd->brd", alpha, states).shape
torch.Size([1, 4, 3])
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import UserError
from .backbone import Backbone
from .encoding import run_blocks


class HeadError(UserError, ValueError):
    """A head file that is missing, corrupted, or does not fit the loaded model."""


@dataclass
class HeadConfig:
    """Everything needed to rebuild a head and to score chunks the way it was trained.

    The defaults are the shipped head's settings (``precomputed/heads/smollm2-135m``); training
    (:class:`training.TrainConfig`) takes its defaults from here.
    """

    model: str
    hidden_size: int
    n_layers: int
    chunk_layer: int = 25  # ℓc
    n_pool: int = 7  # L_p
    n_ret: int = 32  # R
    n_groups: int = 4  # G
    n_context: int = 2  # |C0|
    context_tokens: int = 64  # each C0 passage cut to this many tokens
    context_source: str = "bm25"  # where C0 comes from: "bm25" (the paper's) or "head" (its own first pass)
    adapter_rank: int = 0  # r of the query adapter q′ = q + U Vᵀ q; 0 = none, hidden_size = a full d × d map
    chunk_tokens: int = 256  # chunks cut to this many tokens when encoded
    readout_layers: list[int] = field(default_factory=list)  # 1-based; empty = all blocks
    use_prompt: bool = False
    normalize: bool = True  # L2-normalise query groups and pooled chunk vectors
    temperature: float = 0.05
    trained: bool = False
    fusion_weight: float | None = None  # w of the score-fusion hybrid, fitted on the dev split (eval heads)
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.readout_layers:
            self.readout_layers = list(range(1, self.n_layers + 1))
        if self.n_groups < 1:
            raise HeadError(f"G={self.n_groups}: a head needs at least one query vector")
        if self.n_ret % self.n_groups:
            raise HeadError(f"R={self.n_ret} must be a multiple of G={self.n_groups}")
        if not 1 <= self.chunk_layer <= self.n_layers:
            raise HeadError(f"chunk_layer {self.chunk_layer} outside 1..{self.n_layers}")
        if not 0 <= self.adapter_rank <= self.hidden_size:
            raise HeadError(f"adapter rank {self.adapter_rank} outside 0..{self.hidden_size} (d)")
        if self.context_source not in CONTEXT_SOURCES:
            raise HeadError(f"C0 source {self.context_source!r}: use one of {', '.join(CONTEXT_SOURCES)}")


CONTEXT_SOURCES = {"bm25": "BM25's top |C0| chunks (the paper's)",
                   "head": "the head's own top |C0| chunks from a first pass without C0 (two passes, one model)"}


def query_text(query: str, context: Sequence[str]) -> str:
    """The text part of x_ret: the C0 passages, then the question."""
    parts = [c.strip() for c in context if c.strip()]
    return "\n\n".join([*parts, f"Question: {query.strip()}"])


class QueryHead(nn.Module):
    """The trained query side of UNREAL (Eqs. 2–3)."""

    def __init__(self, config: HeadConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        gen = torch.Generator().manual_seed(seed)
        self.prompt = nn.Parameter(torch.randn(1, d, generator=gen) * 0.02)  # P
        self.rho = nn.Parameter(torch.randn(config.n_ret, d, generator=gen) * 0.02)  # ρ
        n = len(config.readout_layers)
        self.alpha = nn.Parameter(torch.full((n,), 1.0 / n))  # α
        r = config.adapter_rank
        if r == d:  # a full map W: q′ = q + W q
            self.adapter_w = nn.Parameter(torch.zeros(d, d))
        elif r:  # q′ = q + U Vᵀ q; U = 0 makes it the identity at initialisation
            self.adapter_u = nn.Parameter(torch.zeros(d, r))
            self.adapter_v = nn.Parameter(torch.randn(d, r, generator=gen) / d**0.5)

    def init_from_embeddings(self, backbone: Backbone, seed: int = 0) -> None:
        """Scale P and ρ to the norm of real token embeddings (random rows of the embedding matrix)."""
        emb = backbone.model.get_input_embeddings().weight.detach().float().cpu()
        gen = torch.Generator().manual_seed(seed)
        rows = torch.randint(0, emb.shape[0], (self.config.n_ret + 1,), generator=gen)
        with torch.no_grad():
            self.prompt.copy_(emb[rows[:1]])
            self.rho.copy_(emb[rows[1:]])

    def n_params(self) -> int:
        """Trained parameters: ρ, α, and P only where it is used (the unused P row is kept in the file)."""
        return sum(p.numel() for name, p in self.named_parameters() if self.config.use_prompt or name != "prompt")

    def digest(self) -> str:
        """SHA-1 of the configuration and every trained value: two heads with one digest score alike."""
        h = hashlib.sha1(json.dumps(asdict(self.config), sort_keys=True, default=str).encode())
        for name, t in sorted(self.state_dict().items()):
            h.update(name.encode() + t.detach().float().cpu().numpy().tobytes())
        return h.hexdigest()

    def check_backbone(self, backbone: Backbone) -> None:
        """Raise :class:`HeadError` if the head was built for a different hidden size or depth."""
        c = self.config
        if c.hidden_size != backbone.hidden_size or c.n_layers != backbone.n_layers:
            raise HeadError(
                f"head is for d={c.hidden_size}, L={c.n_layers} ({c.model}); "
                f"model {backbone.name} has d={backbone.hidden_size}, L={backbone.n_layers}"
            )

    def build_prefix(
        self, backbone: Backbone, queries: Sequence[str], contexts: Sequence[Sequence[str]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings of ``[sink, P, C0(x), x]`` for a batch, left-padded so that ρ follows at the end.

        Returns
        -------
        embeds ``(B, T, d)`` and mask ``(B, T)`` (1 for real tokens).
        """
        c, tok = self.config, backbone.tokenizer
        rows = []
        for query, ctx in zip(queries, contexts, strict=True):
            cut = [tok.decode(tok(p, add_special_tokens=False)["input_ids"][: c.context_tokens]) for p in ctx]
            rows.append(tok(query_text(query, cut), add_special_tokens=False)["input_ids"])
        n_p = 1 if c.use_prompt else 0
        width = 1 + n_p + max(len(r) for r in rows)
        ids = torch.full((len(rows), width), backbone.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        is_prompt = torch.zeros(len(rows), width, dtype=torch.bool)
        for b, r in enumerate(rows):
            start = width - len(r) - 1 - n_p
            ids[b, start] = backbone.sink_id
            ids[b, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[b, start:] = 1
            is_prompt[b, start + 1] = bool(n_p)
        dev = backbone.device
        embeds = backbone.embed(ids.to(dev))  # (B, T, d)
        if n_p:  # P replaces the placeholder after the sink (differentiable)
            embeds = torch.where(is_prompt.to(dev).unsqueeze(-1), self.prompt.to(dev, embeds.dtype), embeds)
        return embeds, mask.to(dev)

    def retrieval_states(
        self, backbone: Backbone, queries: Sequence[str], contexts: Sequence[Sequence[str]],
        prefix_kv: Sequence[torch.Tensor] | None = None,
    ) -> dict[int, torch.Tensor]:
        """Residual states ``LLM_l(x_ret)`` at the R ρ positions, ``(B, R, d)`` per read-out layer.

        With P (``use_prompt``), gradients reach P through the whole prefix, so x_ret runs in one
        pass. Without P, nothing before ρ depends on trained parameters: the prefix runs once
        without gradients into a KV cache and only the R ρ tokens are differentiated, ~3x cheaper.
        ``prefix_kv`` (:meth:`prefix_cache` of these questions) skips the prefix altogether.
        """
        from transformers import DynamicCache

        c = self.config
        if prefix_kv is not None and c.use_prompt:
            raise HeadError("a head with a soft prompt P trains its prefix: it has no fixed prefix cache")
        if prefix_kv is not None:
            cache, mask = _cache_from(backbone, prefix_kv)  # the prefix's KV, (B, T) mask
            dtype = backbone.dtype
        else:
            prefix, mask = self.build_prefix(backbone, queries, contexts)  # (B, T, d), (B, T)
            dtype = prefix.dtype
        b, dev = mask.shape[0], mask.device
        pos = (mask.cumsum(1) - 1).clamp(min=0)  # (B, T)
        rho = self.rho.to(dev, dtype).unsqueeze(0).expand(b, -1, -1)  # (B, R, d)
        rho_pos = mask.sum(1, keepdim=True) + torch.arange(c.n_ret, device=dev)  # (B, R)
        full_mask = torch.cat([mask, torch.ones(b, c.n_ret, dtype=mask.dtype, device=dev)], 1)
        if c.use_prompt:
            states = run_blocks(backbone, c.readout_layers, inputs_embeds=torch.cat([prefix, rho], 1),
                                attention_mask=full_mask, position_ids=torch.cat([pos, rho_pos], 1))
            return {layer: h[:, -c.n_ret :] for layer, h in states.items()}
        if prefix_kv is None:
            cache = DynamicCache(config=backbone.model.config)
            with torch.no_grad():
                run_blocks(backbone, [max(c.readout_layers)], inputs_embeds=prefix, attention_mask=mask,
                           position_ids=pos, cache=cache)
        return run_blocks(backbone, c.readout_layers, inputs_embeds=rho, attention_mask=full_mask,
                          position_ids=rho_pos, cache=cache)

    @torch.no_grad()
    def prefix_cache(self, backbone: Backbone, queries: Sequence[str], contexts: Sequence[Sequence[str]],
                     dtype: torch.dtype = torch.float16) -> list[torch.Tensor]:
        """Each question's prefix ``[sink, C0(x), x]`` as the keys and values of every block up to the last
        read-out one, ``(L, 2, H_kv, T_i, d_head)`` per question, in ``dtype`` on the CPU.

        Without P nothing before ρ is trained, so a training loop computes this once per question and
        :meth:`retrieval_states` (``prefix_kv=``) runs only the R ρ tokens on it: the same states as from the
        text (up to float rounding in float32; float16 storage rounds the keys and values).
        """
        from transformers import DynamicCache

        if self.config.use_prompt:
            raise HeadError("a head with a soft prompt P trains its prefix: it has no fixed prefix cache")
        prefix, mask = self.build_prefix(backbone, queries, contexts)  # (B, T, d), (B, T)
        cache = DynamicCache(config=backbone.model.config)
        run_blocks(backbone, [max(self.config.readout_layers)], inputs_embeds=prefix, attention_mask=mask,
                   position_ids=(mask.cumsum(1) - 1).clamp(min=0), cache=cache)
        kv = torch.stack([torch.stack([cache.layers[i].keys, cache.layers[i].values], 1)
                          for i in range(max(self.config.readout_layers))])  # (L, B, 2, H_kv, T, d_head)
        width = mask.shape[1]
        return [kv[:, b, :, :, width - n :].to("cpu", dtype).clone() for b, n in enumerate(mask.sum(1).tolist())]

    def layer_groups(
        self, backbone: Backbone, queries: Sequence[str], contexts: Sequence[Sequence[str]]
    ) -> torch.Tensor:
        """The ρ states of every read-out layer mean-pooled into the G groups, ``(B, |α|, G, d)`` float32.

        Everything after this is linear in these states and holds all trained weights but ρ (and P):
        cached once, they let α and the adapter train without running the LLM (:mod:`state_training`).
        """
        c = self.config
        states = self.retrieval_states(backbone, queries, contexts)
        stacked = torch.stack([states[layer].float() for layer in c.readout_layers], 1)  # (B, |α|, R, d)
        b, n_layers = stacked.shape[:2]
        return stacked.reshape(b, n_layers, c.n_groups, c.n_ret // c.n_groups, -1).mean(3)  # (B, |α|, G, d)

    def from_layer_groups(self, groups: torch.Tensor) -> torch.Tensor:
        """Query vectors ``(B, G, d)`` from :meth:`layer_groups`: the α-weighted sum (Eq. 3), the adapter,
        then L2 normalisation (when the head normalises); :meth:`forward` up to float rounding (it sums over
        layers before it pools)."""
        q = torch.einsum("l,blgd->bgd", self.alpha.to(groups.device), groups)  # (B, G, d)
        return self.adapt(q)

    def adapt(self, q: torch.Tensor) -> torch.Tensor:
        """The query adapter on pooled query vectors ``(..., d)``, then normalisation (when the head normalises).

        >>> head = QueryHead(HeadConfig(model="toy", hidden_size=4, n_layers=2, chunk_layer=1, n_ret=2,
        ...                             n_groups=1, adapter_rank=2, normalize=False))
        >>> q = torch.tensor([[1.0, 2.0, 0.0, -1.0]])
        >>> torch.equal(head.adapt(q), q)      # U = 0 at initialisation: the identity
        True
        """
        if self.config.adapter_rank == self.config.hidden_size:
            q = q + q @ self.adapter_w.to(q.device).T  # (…, d)
        elif self.config.adapter_rank:
            q = q + (q @ self.adapter_v.to(q.device)) @ self.adapter_u.to(q.device).T  # (…, r) → (…, d)
        return nn.functional.normalize(q, dim=-1) if self.config.normalize else q

    def adapter_matrix(self) -> torch.Tensor:
        """The adapter as one ``(d, d)`` matrix A with q′ = A q (the identity without an adapter)."""
        d = self.config.hidden_size
        eye = torch.eye(d)
        if self.config.adapter_rank == d:
            return eye + self.adapter_w.detach().float().cpu()
        if self.config.adapter_rank:
            return eye + self.adapter_u.detach().float().cpu() @ self.adapter_v.detach().float().cpu().T
        return eye

    def forward(
        self, backbone: Backbone, queries: Sequence[str], contexts: Sequence[Sequence[str]],
        prefix_kv: Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Query vectors ``(B, G, d)`` (float32) for a batch of questions with their C0 passages (or their
        :meth:`prefix_cache`)."""
        c = self.config
        states = self.retrieval_states(backbone, queries, contexts, prefix_kv)
        stacked = torch.stack([states[layer].float() for layer in c.readout_layers], 1)  # (B, |α|, R, d)
        q = torch.einsum("l,blrd->brd", self.alpha.to(stacked.device), stacked)  # (B, R, d)
        q = q.reshape(q.shape[0], c.n_groups, c.n_ret // c.n_groups, -1).mean(2)  # (B, G, d)
        return self.adapt(q)

    @torch.inference_mode()
    def encode(self, backbone: Backbone, queries: Sequence[str], contexts: Sequence[Sequence[str]]) -> torch.Tensor:
        """Query vectors ``(B, G, d)`` (float32) at answer time: :meth:`forward` through the backbone's encoding
        view (:meth:`Backbone.encoder` at ℓc: blocks 1..ℓc in the encoding dtype, bf16 where the CPU choice or
        ``--dtype`` says so, the blocks above in the model's). Training calls :meth:`forward` on the model itself."""
        return self(backbone.encoder(self.config.chunk_layer), queries, contexts)

    def reshaped(self, **changes) -> QueryHead:
        """A copy of this head with :class:`HeadConfig` fields changed and the same trained values: another |C0|
        (``n_context``), its R retrieval tokens cut into another number of query vectors (``n_groups``), or a new
        query adapter (``adapter_rank``, the identity at first) on a head that has none.

        Raises
        ------
        HeadError
            A field other than these three, or a value the trained values cannot carry (a G that does not divide
            R, another adapter rank on a head that has an adapter).

        Examples
        --------
        >>> head = QueryHead(HeadConfig(model="tiny", hidden_size=4, n_layers=2, chunk_layer=1, n_ret=4, n_groups=2))
        >>> wide = head.reshaped(n_groups=4, adapter_rank=2)
        >>> wide.config.n_groups, torch.equal(wide.rho, head.rho), torch.equal(wide.adapter_matrix(), torch.eye(4))
        (4, True, True)
        """
        if unknown := sorted(set(changes) - {"n_context", "n_groups", "adapter_rank"}):
            raise HeadError(f"a head's trained values cannot be reshaped to another {unknown[0]}")
        rank = changes.get("adapter_rank", self.config.adapter_rank)
        if self.config.adapter_rank and rank != self.config.adapter_rank:
            raise HeadError(f"the head has an r = {self.config.adapter_rank} adapter: it cannot become r = {rank}")
        out = QueryHead(replace(self.config, **changes))
        missing, unexpected = out.load_state_dict(self.state_dict(), strict=False)  # a new adapter keeps its
        assert not unexpected and all(k.startswith("adapter_") for k in missing)  # identity initialisation
        return out.train(self.training)

    def save(self, path: str | Path) -> None:
        """Write ``path.safetensors`` and ``path.json``."""
        path = Path(path).with_suffix("")
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
                  str(path.with_suffix(".safetensors")))
        path.with_suffix(".json").write_text(json.dumps(asdict(self.config), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> QueryHead:
        """Load a head saved by :meth:`save`; raise :class:`HeadError` on a missing or damaged file."""
        path = Path(path).with_suffix("")
        try:
            config = HeadConfig(**json.loads(path.with_suffix(".json").read_text()))
            state = load_file(str(path.with_suffix(".safetensors")))
        except FileNotFoundError as exc:
            raise HeadError(f"head file missing: {exc.filename}") from None
        except (json.JSONDecodeError, TypeError, OSError, ValueError, SafetensorError) as exc:
            raise HeadError(f"head {path} is corrupted or truncated: {str(exc).splitlines()[0]}") from None
        head = cls(config)
        try:
            head.load_state_dict(state)
        except RuntimeError as exc:
            raise HeadError(f"head {path} does not match its config: {str(exc).splitlines()[0]}") from None
        return head


def _cache_from(backbone: Backbone, prefix_kv: Sequence[torch.Tensor]):
    """A ``DynamicCache`` of a batch from :meth:`QueryHead.prefix_cache` tensors, left-padded with zeros to the
    longest, and its ``(B, T)`` mask (0 on the padding), on the backbone's device and dtype."""
    from transformers import DynamicCache

    widths = [p.shape[3] for p in prefix_kv]
    width, dev = max(widths), backbone.device
    n_layers, _, heads, _, head_dim = prefix_kv[0].shape
    mask = torch.zeros(len(prefix_kv), width, dtype=torch.long)
    cache = DynamicCache(config=backbone.model.config)
    for i, t in enumerate(widths):
        mask[i, width - t :] = 1
    for layer in range(n_layers):
        kv = torch.zeros(2, len(prefix_kv), heads, width, head_dim, dtype=backbone.dtype)  # (2, B, H_kv, T, d_head)
        for i, p in enumerate(prefix_kv):
            kv[:, i, :, width - widths[i] :] = p[layer]
        kv = kv.to(dev)
        cache.update(kv[0], kv[1], layer)
    return cache, mask.to(dev)


def untrained_head(backbone: Backbone, **overrides) -> QueryHead:
    """A fresh head for ``backbone`` (ℓc defaults to 2/3 of the depth)."""
    settings = {"chunk_layer": max(1, round(backbone.n_layers * 2 / 3))} | overrides
    head = QueryHead(HeadConfig(model=backbone.name, hidden_size=backbone.hidden_size,
                                n_layers=backbone.n_layers, **settings))
    head.init_from_embeddings(backbone)
    return head
