"""Fixtures for the packaging tests: offscreen Qt and the tiny random-weight checkpoint."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tests.engine.conftest import tiny_checkpoint  # noqa: E402,F401  (re-exported fixture)
