"""What a tab hands the app: the components to enable, and the updates to make, once the model is loaded."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import anyio

from ..pipeline import Explorer


class Once:
    """A slow computation run at most once, by whoever asks first; later calls get its kept result (or error)."""

    def __init__(self, compute: Callable[[], dict]) -> None:
        self._compute, self._lock = compute, threading.Lock()
        self._result: dict | None = None
        self._error: Exception | None = None

    @property
    def done(self) -> bool:
        return self._result is not None or self._error is not None

    def get(self) -> dict:
        with self._lock:
            if not self.done:
                try:
                    self._result = self._compute()
                except Exception as exc:  # kept: every page says the same, nothing is retried
                    self._error = exc
        if self._error is not None:
            raise self._error
        return self._result

    def start(self) -> None:
        """Compute in a background thread (its error is kept for :meth:`get`)."""
        threading.Thread(target=lambda: self.done or self._quiet(), name="worked-example", daemon=True).start()

    def _quiet(self) -> None:
        try:
            self.get()
        except Exception:  # noqa: S110 (shown by the page that asks)
            pass


@dataclass
class Ready:
    """A tab's part of the page's loading step.

    Attributes
    ----------
    enable : buttons shown disabled until the model is ready.
    fill : computes ``{component: update}`` from the loaded explorer (figures, slider ranges).
    outputs : the components ``fill`` and ``example`` update.
    example : a worked example, computed once after the model loads (:class:`Once`); its ``{component:
        update}`` is drawn on every page without a click.
    """

    enable: list = field(default_factory=list)
    fill: Callable[[Explorer], dict] | None = None
    outputs: list = field(default_factory=list)
    example: Once | None = None

    @property
    def components(self) -> list:
        return [*self.enable, *self.outputs]


class Stopped(Exception):  # noqa: N818 (a stop asked for, not an error)
    """Raised inside a run's work (between encoding batches, answer tokens, benchmark steps) after Stop."""


class Run:
    """One press of a tab's run button: when it started, and the flag its Stop button sets.

    :meth:`check` raises :class:`Stopped` once Stop was pressed; :meth:`watch` is a per-batch callback for
    :meth:`pipeline.Explorer.store` that reports ``chunks done / total`` with an estimate to a Gradio progress
    and checks the flag after every batch.
    """

    def __init__(self) -> None:
        self.flag, self.started = threading.Event(), time.perf_counter()

    def check(self) -> None:
        if self.flag.is_set():
            raise Stopped

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def stopped(self) -> str:
        """The line every panel of a stopped run shows."""
        return f"Stopped after {self.seconds:.1f} s: nothing more was computed."

    def watch(self, progress: Callable[..., object] | None, what: str = "encoding chunks",
              low: float = 0.0, high: float = 1.0) -> Callable[[int, int], None]:
        """``watch(done, total)``: the flag checked, then ``progress`` told the chunks done of the total and the
        time left at the rate so far (between ``low`` and ``high`` of the bar)."""
        t0 = time.perf_counter()

        def seen(done: int, total: int) -> None:
            self.check()
            if progress is not None and total:
                spent = time.perf_counter() - t0
                left = spent / done * (total - done) if done else 0.0
                progress(low + (high - low) * done / total,
                         desc=f"{what}: {done:,} / {total:,} chunks, about {left:.0f} s left")
        return seen


class Runs:
    """The current :class:`Run` of each visitor (by Gradio session) and tab: a run begins with a fresh one, and the
    tab's Stop button sets its flag, so that the work ends at its next check and the handler returns (no cancelled
    event, no "Error" badge)."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], Run] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(request, tab: str) -> tuple[str, str]:
        return (getattr(request, "session_hash", None) or "local", tab)

    def begin(self, request, tab: str) -> Run:
        run = Run()
        with self._lock:
            self._runs[self._key(request, tab)] = run
            while len(self._runs) > 4096:  # forget the oldest visitors
                self._runs.pop(next(iter(self._runs)))
        return run

    def stop(self, request, tab: str) -> None:
        with self._lock:
            run = self._runs.get(self._key(request, tab))
        if run is not None:
            run.flag.set()


RUNS = Runs()


async def stepped(steps: Iterator, run: Run, on_stop: Callable[[], tuple]) -> AsyncIterator:
    """A handler's steps (a generator whose work checks ``run``), each computed in a worker thread, as an async
    generator Gradio streams. After Stop (:meth:`Runs.stop`) the work raises :class:`Stopped` at its next check
    and ``on_stop()`` is yielded instead: the handler ends normally, saying it stopped. When Gradio cancels the
    event instead (a closed page, a client's cancel) the wait is abandoned at once and the flag set, so the work
    in the thread ends at its next check rather than running on."""
    end = object()
    try:
        while True:
            try:
                out = await anyio.to_thread.run_sync(next, steps, end, abandon_on_cancel=True)
            except Stopped:
                yield on_stop()
                return
            if out is end:
                return
            yield out
    finally:
        run.flag.set()
