"""What a tab hands the app: the components to enable, and the updates to make, once the model is loaded."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

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
