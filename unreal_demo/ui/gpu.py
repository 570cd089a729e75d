"""``spaces.GPU`` for the heavy event handlers on a Hugging Face ZeroGPU Space; a no-op everywhere else."""

from __future__ import annotations

from collections.abc import Callable


def on_gpu(fn: Callable, duration: int = 120) -> Callable:
    """``spaces.GPU(duration=...)(fn)`` when the ``spaces`` package is importable, else ``fn`` unchanged."""
    try:
        import spaces
    except ImportError:
        return fn
    return spaces.GPU(duration=duration)(fn)
