"""The model each browser session uses: :class:`Session`, a :class:`serving.Loading` look-alike that the tabs hold,
which answers with the loading of the model the session of the event it serves picked (:class:`serving.Models`;
the first model outside an event: the worked examples, the layout)."""

from __future__ import annotations

from gradio.context import LocalContext

from ..serving import Loading, Models


def session_of(request) -> str | None:
    """The session of a Gradio request (its ``session_hash``), None outside one."""
    return getattr(request, "session_hash", None) if request is not None else None


class Session:
    """Stands for the :class:`Loading` of the model of the session whose event is being served (Gradio's request
    context: a handler, its generator steps and the worker threads :func:`wiring.stepped` starts all see it):
    ``model``, ``head``, ``head_path``, ``head_source``, ``get()``, ``status()`` … are that loading's."""

    def __init__(self, models: Models) -> None:
        self.models = models

    def current(self) -> Loading:
        return self.models.of(session_of(LocalContext.request.get(None)))

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.current(), name)
