"""Fixtures: one real server subprocess on the tiny checkpoint (shared by the module tests), and
in-process servers over scripted engines for what a real model cannot be made to do on cue."""

from __future__ import annotations

import pytest

from tests.engine.conftest import tiny_checkpoint  # noqa: F401 - a fixture, re-exported here
from tests.server.helpers import ServerProcess, wait_ready


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
