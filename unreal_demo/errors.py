"""The one error base: what the user asked cannot be done, and the message says why in one line.

The CLI and every tab catch :class:`UserError` (and only it) and show its message as is; any
other exception is a bug and shows as one (a traceback in the log, a short notice on screen).
"""

from __future__ import annotations


class UserError(Exception):
    """A request that cannot be served as given; ``str(error)`` is one line meant for the user."""


class InputError(UserError, ValueError):
    """Input the pipeline refuses (empty, too long, unknown option)."""
