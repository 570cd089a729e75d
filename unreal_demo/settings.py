"""Settings every part of the package shares, at the bottom of its imports (this module imports nothing from the
package): where the repository's files and the cache are, the default model and its shipped heads, the chunk and
input limits, and every environment variable the package reads (:data:`ENVIRONMENT`, read through :func:`env`).
Every other default comes from the loaded head.

>>> display_path(REPO / "precomputed" / "qa.json")
'precomputed/qa.json'
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRECOMPUTED = REPO / "precomputed"
ASSETS = REPO / "assets"

DEFAULT_MODEL = "smollm2-135m-instruct"  # the offline default: SmolLM2-135M-Instruct, a GGUF file in a PyPI package
SECOND_MODEL = "qwen2.5-0.5b"  # the second offline backbone: Qwen2.5-Coder-0.5B-Instruct (GGUF over six PyPI wheels)
OFFLINE_MODELS = (DEFAULT_MODEL, SECOND_MODEL)  # the names every --model and the app's model picker know offline
# The long run (40,000 question visits over SQuAD dev, NYT and Reddit; precomputed/heads/smollm2-135m-mix, chosen
# over the first ℓc = 25 head on the dev split: precomputed/head_choice.json), its layer weights α retrained on
# NQ-open + TriviaQA + SQuAD (smollm2-135m-mix-alpha), then ρ and α fine-tuned jointly through the LLM on questions
# whose answering chunks were judged by reading, with a distillation term that holds its SQuAD-style ranking; of
# that recipe's two seeds (and their mean), seed 1 is the best on the judged dev set
# (docs/RESULTS.md, "The default head").
# The second backbone's head (precomputed/heads/qwen2.5-0.5b, 4,000 question visits at ℓc = 21: docs/RESULTS.md,
# "A second backbone"); a model whose head.json is missing runs untrained and the app says so (pipeline.head_file).
DEFAULT_HEADS = {DEFAULT_MODEL: PRECOMPUTED / "heads" / "smollm2-135m-mix-joint-seed1" / "head",
                 SECOND_MODEL: PRECOMPUTED / "heads" / SECOND_MODEL / "head"}

CHUNK_TOKENS = 141  # the chunk size T: the paper's mean chunk length, used everywhere a chunk is cut
MAX_TOKENS = 512  # a chunk is cut to this many tokens when encoded (index chunks are ~141 tokens)
MAX_CHARS = 2_000_000  # the most text one request may bring (a pasted or uploaded document)
MAX_N = 1_000  # the most chunks one request may ask to select (≈ 141K tokens, past every supported model's window)
# index build speed on 2 CPU cores, fp32, for the app's estimates: SmolLM2 benchmarks/results/bench_index.json (an AVX2
# EPYC), Qwen2.5-0.5B its whole-corpus build (an AVX-512 EPYC: 2,282,196 tokens in 10,678 s, docs/RESULTS.md "A second
# backbone"); any other model is estimated at SmolLM2's
TOKENS_PER_S = {DEFAULT_MODEL: 576, SECOND_MODEL: 214}

CACHE_ENV = "UNREAL_CACHE"
ENCODE_ENV = "UNREAL_DTYPE"
SCAN_ENV = "UNREAL_SCAN"
STORES_ENV = "UNREAL_OPEN_STORES"
SPACE_ENV = "SPACE_ID"
MODELS_ENV = "UNREAL_MODELS"
ENVIRONMENT = {
    CACHE_ENV: "the cache folder (models, data sets, encodings, indexes); else $XDG_CACHE_HOME/unreal",
    "XDG_CACHE_HOME": "the cache folder's parent when $UNREAL_CACHE is unset (default ~/.cache)",
    ENCODE_ENV: "encoding dtype (fp32, bf16, fp16); else the CPU's choice (core.cpu.choose); also app.py --dtype",
    SCAN_ENV: "MaxSim scan path on CPU (numba, numkong or torch); else the first installed",
    STORES_ENV: "1: the Wikipedia tab opens any index folder or Qdrant store a visitor names and builds a corpus's "
                "index; 0: only its own indexes, shipped or built; else 1 unless the app is public (a Space, "
                "--share, a --host other than loopback)",
    SPACE_ENV: "set by Hugging Face on a Space: the app is public (see $UNREAL_OPEN_STORES)",
    MODELS_ENV: "the models the app's picker offers, comma-separated (e.g. smollm2-135m-instruct,qwen2.5-0.5b); "
                "else every offline model on a laptop, and on a public app only app.py --model (picker disabled)",
    "UNREAL_MODEL": "app.py --model", "UNREAL_HEAD": "app.py --head", "UNREAL_DEVICE": "app.py --device",
    "GRADIO_SERVER_NAME": "app.py --host (default 127.0.0.1)", "GRADIO_SERVER_PORT": "app.py --port (default 7860)",
    "HF_HUB_OFFLINE": "1: never probe the Hugging Face hub", "HF_ENDPOINT": "the hub probed before a download",
    "PIP_INDEX_URL": "the package index data is fetched from (as pip reads it)",
    "PIP_EXTRA_INDEX_URL": "extra package indexes (as pip)", "PIP_CONFIG_FILE": "one more pip.conf (as pip)",
    "PIP_DEFAULT_TIMEOUT": "seconds before a download gives up (default 60)",
    "XDG_CONFIG_DIRS": "where pip's global pip.conf files are", "XDG_CONFIG_HOME": "where pip's user pip.conf is",
}


def env(name: str, default: str | None = None) -> str | None:
    """The environment variable ``name`` (one of :data:`ENVIRONMENT`), else ``default``: the package's one reader."""
    if name not in ENVIRONMENT:
        raise KeyError(f"{name} is not a setting of this package (add it to settings.ENVIRONMENT)")
    return os.environ.get(name, default)


def open_stores(share: bool = False, host: str | None = None) -> bool:
    """Whether the app's Wikipedia tab may open an index folder or Qdrant store a visitor names (any path on the
    server, any URL): ``$UNREAL_OPEN_STORES`` (``1`` or ``0``), else only when the app is not public, that is
    not on a Hugging Face Space (``$SPACE_ID``), not shared (``app.py --share``) and served on a loopback host
    (``host``, else ``$GRADIO_SERVER_NAME``, else 127.0.0.1).

    Raises
    ------
    ValueError
        ``$UNREAL_OPEN_STORES`` is set to something other than 0 or 1.
    """
    value = (env(STORES_ENV) or "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value:
        raise ValueError(f"${STORES_ENV} is 0 or 1, not {value!r}")
    return not public(share, host)


def public(share: bool = False, host: str | None = None) -> bool:
    """Whether the app is public: on a Hugging Face Space (``$SPACE_ID``), shared (``app.py --share``) or served on
    a host other than loopback (``host``, else ``$GRADIO_SERVER_NAME``, else 127.0.0.1)."""
    return bool(share or env(SPACE_ENV) or not _loopback(host or env("GRADIO_SERVER_NAME") or "127.0.0.1"))


def picker_models(first: str, is_public: bool) -> tuple[tuple[str, ...], str | None]:
    """The models the app's model picker offers, the first being ``first`` (app.py --model), and why the picker is
    disabled (None: visitors may switch). ``$UNREAL_MODELS`` (comma-separated) names the models offered, anywhere;
    unset, a laptop (``is_public`` False, :func:`public`) offers ``first`` and every offline model, loaded in the
    background on demand (at most two in memory), and a public app offers ``first`` only, since each model a
    visitor picks costs the server its memory and a load of minutes."""
    listed = [m.strip() for m in (env(MODELS_ENV) or "").split(",") if m.strip()]
    if listed:
        names = tuple(dict.fromkeys([first, *listed]))
        return names, None if len(names) > 1 else f"${MODELS_ENV} names no model but {first}"
    if is_public:
        return (first,), (f"this public app serves {first} only: its owner lists the models visitors may pick in "
                          f"${MODELS_ENV} (e.g. {','.join(OFFLINE_MODELS)})")
    return tuple(dict.fromkeys([first, *OFFLINE_MODELS])), None


def _loopback(host: str) -> bool:
    """Whether ``host`` serves this machine only (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may be reached from elsewhere
        return False


def cache_dir() -> Path:
    """Return the cache folder: ``$UNREAL_CACHE``, else ``$XDG_CACHE_HOME/unreal``, else ``~/.cache/unreal``."""
    root = env(CACHE_ENV)
    path = Path(root) if root else Path(env("XDG_CACHE_HOME") or Path.home() / ".cache") / "unreal"
    path.mkdir(parents=True, exist_ok=True)
    return path


def in_precomputed(path: str | Path | None) -> bool:
    """Whether ``path`` lies in the repository's ``precomputed/`` (a shipped result, head or run)."""
    return path is not None and Path(path).resolve().is_relative_to(PRECOMPUTED)


def display_path(path: str | Path) -> str:
    """``path`` relative to the repository, or as ``<cache>/…`` inside the cache folder, else as given
    when relative, else its last two parts; so no result or screen shows the machine's folders."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    p = p.resolve()
    for root, label in ((REPO, ""), (cache_dir().resolve(), "<cache>/")):
        if p.is_relative_to(root):
            return label + p.relative_to(root).as_posix()
    return ".../" + "/".join(p.parts[-2:])
