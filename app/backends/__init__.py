"""``ChatBackend`` implementations the window talks to (DESIGN.md §7).

``local`` runs the engine in this process (:class:`engine.service.EngineService`); ``remote`` talks to an
OpenAI-compatible server; ``switch`` routes the window's one backend to either; ``fake`` is a canned
engine for tests and screenshots. :func:`backend_from_env` picks one: ``SMOLCHAT_BACKEND`` names a
``"module:callable"`` that returns a ChatBackend (tests start the app with a slow fake or a slowed real
engine this way, e.g. ``SMOLCHAT_BACKEND=app.backends.fake:slow_backend``); unset, the local engine.
"""

from __future__ import annotations

import importlib
import os

from engine.api import ChatBackend

BACKEND_ENV = "SMOLCHAT_BACKEND"


#: Why ``SMOLCHAT_BACKEND`` was ignored by the last :func:`backend_from_env` ("" when it was not).
ignored_backend = [""]


def backend_from_env() -> ChatBackend:
    """The backend ``SMOLCHAT_BACKEND`` names, else a :class:`~app.backends.local.LocalBackend`.

    A value that names nothing usable is ignored (the local engine runs) and :data:`ignored_backend`
    says why, for the window to show: a stray variable must not stop the app from starting."""
    spec = os.environ.get(BACKEND_ENV, "").strip()
    ignored_backend[0] = ""
    if spec:
        module, _, name = spec.partition(":")
        try:
            return getattr(importlib.import_module(module), name)()
        except Exception as exc:  # noqa: BLE001 - any failure: say it in one line, run the local engine
            ignored_backend[0] = (f"${BACKEND_ENV}: ignored {spec[:80]!r} ({type(exc).__name__}: {exc}); "
                                  "using the local engine.")
    from app.backends.local import LocalBackend

    return LocalBackend()
