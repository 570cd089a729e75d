"""What a tab hands the app: the components to enable, and the updates to make, once the model is loaded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..pipeline import Explorer


@dataclass
class Ready:
    """A tab's part of the page's loading step.

    Attributes
    ----------
    enable : buttons shown disabled until the model is ready.
    fill : computes ``{component: update}`` from the loaded explorer (figures, slider ranges).
    outputs : the components ``fill`` updates.
    """

    enable: list = field(default_factory=list)
    fill: Callable[[Explorer], dict] | None = None
    outputs: list = field(default_factory=list)

    @property
    def components(self) -> list:
        return [*self.enable, *self.outputs]
