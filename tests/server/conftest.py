"""Fixtures: one real server subprocess on the tiny checkpoint (shared by the module tests), and
in-process servers over scripted engines for what a real model cannot be made to do on cue."""

from __future__ import annotations

import pytest

from tests.engine.conftest import smollm2_gguf, tiny_checkpoint  # noqa: F401 - fixtures, re-exported here
from tests.server.helpers import ServerProcess, ThreadServer, wait_ready


@pytest.fixture(scope="session")
def server(tiny_checkpoint):  # noqa: F811
    """The tiny model behind ``python -m engine serve`` (no key, loopback, a small queue)."""
    proc = ServerProcess(tiny_checkpoint, "--max-queue", "8", "--max-body-mb", "8")
    try:
        wait_ready(proc.url, proc=proc.proc)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def url(server) -> str:
    return server.url


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):  # noqa: F811
    """An in-process server over SmolLM2-135M-Instruct's real weights (float32, CPU; skipped without
    the GGUF): ``(url, model id, its ChatSession)``."""
    import httpx

    from engine import load_model
    from engine.cache import CacheConfig
    from engine.chat import ChatSession
    from engine.sources import resolve_source
    from engine.tokenizer import Tokenizer
    from server import ServerConfig, create_app

    model = load_model(smollm2_gguf, "cpu", "float32")
    tokenizer = Tokenizer.from_pretrained(resolve_source(smollm2_gguf).folder)
    session = ChatSession(model, tokenizer, None, CacheConfig(kind="paged", max_tokens=2048))
    srv = ThreadServer(create_app(ServerConfig(model=str(smollm2_gguf)), loader=lambda model, options: session))
    try:
        yield srv.url, httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"], session
    finally:
        srv.stop()
