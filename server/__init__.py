"""Smolchat's local OpenAI-compatible HTTP server (``smolchat serve``), over :class:`engine.service.EngineService`.

Layout: ``config`` (limits and switches), ``errors`` (OpenAI-shaped error bodies), ``schemas`` (request
models, the OpenAPI schema), ``media`` (image and video inputs), ``conversation`` (OpenAI messages ->
the service's history), ``bridge`` (the engine thread seen from asyncio: queue limit, cancel),
``sse`` (stream chunks), ``routes`` (endpoints), ``app`` (the FastAPI application, middleware),
``cli`` (the command line). Only ``engine.api`` and ``engine.service`` are imported at module level:
torch loads on the engine thread.
"""

from server.config import ServerConfig

__all__ = ["ServerConfig", "create_app"]


def create_app(*args, **kwargs):
    """:func:`server.app.create_app` (imported lazily: FastAPI is a server-only dependency)."""
    from server.app import create_app as _create

    return _create(*args, **kwargs)
