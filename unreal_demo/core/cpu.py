"""One place that knows the CPU: its vector and matrix units, read once, and the paths chosen for them.

Two costs a CPU user waits for depend on these units: chunk encoding (Eq. 1, the truncated forward) and the
exact MaxSim scan (Eq. 4, s_i(x) = Σ_g max_p ⟨q_g, k_{i,p}⟩). The flags are read once from ``/proc/cpuinfo``
(AVX2, AVX-512 F/BF16/FP16/VNNI, AVX-VNNI, AMX BF16/INT8) and :func:`choose` picks, for this CPU, the paths
whose accuracy is measured:

- **encoding dtype**: fp32, except bf16 where the CPU has bf16 units (AMX-BF16 or AVX-512-BF16) *and* the
  key-fidelity check of ``benchmarks/encode_fidelity.py`` passed for bf16 (recorded in
  ``precomputed/encode_fidelity.json``). Without the units bf16 is emulated and ~5x slower than fp32 (AVX2).
- **scan path**: ``numba`` (one kernel compiled by LLVM for this CPU over the keys as stored, fp16 / int8 / fp32,
  fp32 sums: :mod:`maxsim_numba`) where the package imports; else ``numkong`` (its runtime-dispatched fp16
  dot-product kernels over the stored keys, the query rounded to fp16, then an exact fp32 re-scoring of the
  candidates in :meth:`Index.maxsim_topk <unreal_demo.store.index.Index.maxsim_topk>`); else ``torch`` (keys
  converted to fp32 block by block, one GEMM per block); ``benchmarks/maxsim.py`` measures all three.

Both are overridden by ``$UNREAL_DTYPE`` (the same values as ``--dtype``, which wins over it) and
``$UNREAL_SCAN`` (``numba`` | ``numkong`` | ``torch``). :func:`status_line` is the one-line summary printed in the
app's status line and recorded in every benchmark result, e.g. ``"AMD EPYC · AVX2 · scan fp16 via numba, encode
fp32"``.

Example
-------
>>> xeon = parse_cpuinfo("model name : Intel Xeon\\nflags : avx2 avx512f avx512_bf16 amx_bf16 amx_int8\\n")
>>> xeon.units
'AVX2 · AVX-512 (BF16) · AMX (BF16, INT8)'
>>> choose(xeon, fidelity={"bf16": False}, scan="torch").line()
'Intel Xeon · AVX2 · AVX-512 (BF16) · AMX (BF16, INT8) · scan fp32 via torch, encode fp32'
"""

from __future__ import annotations

import functools
import importlib.util
import json
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..settings import ENCODE_ENV, PRECOMPUTED, SCAN_ENV, env

SCANS = ("numba", "numkong", "torch")  # in order of preference (benchmarks/maxsim.py)
FIDELITY_FILE = PRECOMPUTED / "encode_fidelity.json"
_AVX512 = {"avx512_bf16": "BF16", "avx512_fp16": "FP16", "avx512_vnni": "VNNI"}
_AMX = {"amx_bf16": "BF16", "amx_int8": "INT8"}


@dataclass(frozen=True)
class CPUInfo:
    """A CPU's model name and its feature flags (lower case, as ``/proc/cpuinfo`` spells them)."""

    model: str
    flags: frozenset[str]

    @property
    def bf16_units(self) -> bool:
        """Native bf16 dot products (AMX tiles or AVX-512-BF16): where bf16 encoding can be faster than fp32."""
        return bool({"amx_bf16", "avx512_bf16"} & self.flags)

    @property
    def units(self) -> str:
        """The vector/matrix units that matter here: ``"AVX2"``, ``"AVX2 · AVX-512 (BF16, VNNI) · AMX (BF16)"``…"""
        parts = ["AVX2"] if "avx2" in self.flags else ["no AVX2"]
        if "avx512f" in self.flags:
            extra = [name for flag, name in _AVX512.items() if flag in self.flags]
            parts.append("AVX-512" + (f" ({', '.join(extra)})" if extra else ""))
        if "avx_vnni" in self.flags:
            parts.append("AVX-VNNI")
        amx = [name for flag, name in _AMX.items() if flag in self.flags]
        if amx:
            parts.append(f"AMX ({', '.join(amx)})")
        return " · ".join(parts)


def parse_cpuinfo(text: str) -> CPUInfo:
    """The first processor's model name and flags from the text of ``/proc/cpuinfo``."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    model = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    return CPUInfo(" ".join(model.split()), frozenset(fields.get("flags", "").split()))


@functools.cache
def cpu_info() -> CPUInfo:
    """This machine's CPU, read once (an empty flag set where ``/proc/cpuinfo`` is missing, e.g. macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    return parse_cpuinfo(text)


def recorded_fidelity(path: Path = FIDELITY_FILE, model: str | None = None) -> dict[str, bool]:
    """Per encoding dtype, whether its recorded key-fidelity check passed (``benchmarks/encode_fidelity.py``);
    with ``model``, only the rows measured on that model count (bf16 rounding moves the keys of one backbone far
    more than another's: a pass for one is no pass for the other).

    A missing file means no check was recorded (``{}``, silently). A file that cannot be read or is not of the
    shape ``{"rows": [{"dtype": str, "passed": bool}, ...]}`` (bad JSON, a list at the top, a row without its
    keys, a ``passed`` that is not a boolean) means the same, with one warning line: a damaged record makes the
    CPU encode in fp32, it never stops the choice.
    """
    if not path.exists():
        return {}
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
        if not isinstance(rows, list):
            raise TypeError("'rows' is not a list")
        out = {}
        for row in rows:
            if not isinstance(row["dtype"], str) or not isinstance(row["passed"], bool):
                raise TypeError(f"row {row!r}: 'dtype' must be a string and 'passed' a boolean")
            if model is None or row.get("model") == model:
                out[row["dtype"]] = row["passed"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        warnings.warn(f"{path}: unreadable key-fidelity record ({type(exc).__name__}: {first}); encoding in fp32",
                      RuntimeWarning, stacklevel=2)
        return {}
    return out


def numkong_available() -> bool:
    """Whether the ``numkong`` package (the fp16 scan kernels) is installed."""
    return importlib.util.find_spec("numkong") is not None


def numba_available() -> bool:
    """Whether the ``numba`` package (the compiled scan kernel of :mod:`maxsim_numba`) is installed."""
    return importlib.util.find_spec("numba") is not None


def installed(scan: str) -> bool:
    """Whether the package behind scan path ``scan`` imports here (torch always does)."""
    return {"numba": numba_available, "numkong": numkong_available}.get(scan, lambda: True)()


@dataclass(frozen=True)
class Choice:
    """The paths picked for a CPU, and why."""

    cpu: CPUInfo
    encode: str  # "fp32" | "bf16" | "fp16"
    scan: str  # "numba" | "numkong" | "torch"
    why: str

    def line(self) -> str:
        """One line for the status bar and benchmark records."""
        keys = "fp32" if self.scan == "torch" else "fp16"
        return f"{self.cpu.model} · {self.cpu.units} · scan {keys} via {self.scan}, encode {self.encode}"


def choose(cpu: CPUInfo | None = None, dtype: str | None = None, scan: str | None = None,
           fidelity: dict[str, bool] | None = None, model: str | None = None) -> Choice:
    """Pick the encoding dtype and the MaxSim scan path for ``cpu`` (this machine's by default).

    Parameters
    ----------
    cpu : the CPU to choose for (simulate another machine by passing its flags).
    dtype : encoding dtype override (``--dtype``); else ``$UNREAL_DTYPE``; else the rule in the module docstring.
    scan : scan path override; else ``$UNREAL_SCAN``; else the first of :data:`SCANS` that is installed.
    fidelity : per dtype, whether its key-fidelity check passed (default: :func:`recorded_fidelity` of ``model``).
    model : the backbone to encode with; only its own fidelity rows count (None: any row).

    Raises
    ------
    ValueError
        For a scan path that is not one of :data:`SCANS`.
    """
    cpu = cpu or cpu_info()
    fidelity = recorded_fidelity(model=model) if fidelity is None else fidelity
    dtype = dtype or env(ENCODE_ENV) or None
    if dtype:
        encode, why = dtype, "encode dtype set by --dtype / $UNREAL_DTYPE"
    elif cpu.bf16_units and fidelity.get("bf16"):
        encode, why = "bf16", "bf16 units present and the bf16 key-fidelity check passed"
    elif cpu.bf16_units:
        encode, why = "fp32", "bf16 units present but no passing bf16 key-fidelity check recorded"
    else:
        encode, why = "fp32", "no bf16 units (bf16 would be emulated, ~5x slower than fp32)"
    scan = scan or env(SCAN_ENV) or next(s for s in SCANS if installed(s))
    if scan not in SCANS:
        raise ValueError(f"unknown scan path {scan!r}; use one of {SCANS}")
    if not installed(scan):
        fallback = next(s for s in SCANS if installed(s))
        scan, why = fallback, why + f"; {scan} not installed, scanning with {fallback}"
    return Choice(cpu, encode, scan, why)


def status_line(encode: str | None = None) -> str:
    """This machine's CPU and the chosen paths in one line (for the app's status line), e.g.
    ``"AMD EPYC · AVX2 · scan fp16 via numba, encode fp32"``; ``encode`` names the dtype a loaded backbone
    encodes in (``Backbone.encoding_name``), which wins over the rule (it may have been set by ``--dtype``)."""
    return choose(dtype=encode).line()
