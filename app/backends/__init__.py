"""``ChatBackend`` implementations the window talks to (DESIGN.md §7).

``local`` runs the engine in this process (:class:`engine.service.EngineService`); ``fake`` is a canned
engine for tests and screenshots. :func:`backend_from_env` picks one: ``SMOLCHAT_BACKEND`` names a
``"module:callable"`` that returns a ChatBackend (tests start the app with a slow fake or a slowed real
engine this way, e.g. ``SMOLCHAT_BACKEND=app.backends.fake:slow_backend``); unset, the local engine.
"""

from __future__ import annotations

import importlib
import os

from engine.api import ChatBackend

BACKEND_ENV = "SMOLCHAT_BACKEND"


def backend_from_env() -> ChatBackend:
    """The backend ``SMOLCHAT_BACKEND`` names, else a :class:`~app.backends.local.LocalBackend`."""
    spec = os.environ.get(BACKEND_ENV, "")
    if spec:
        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)()
    from app.backends.local import LocalBackend

    return LocalBackend()
