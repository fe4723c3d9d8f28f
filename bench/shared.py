"""The team's shared data folder (model files, photos, videos, texts) that the benchmarks read by default:
``$SMOLCHAT_SHARED``, else ``shared`` beside the repository, as the tests find it (tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

SHARED = Path(os.environ.get("SMOLCHAT_SHARED") or Path(__file__).resolve().parents[2] / "shared").expanduser()
