"""Shared test fixtures: where the read-only ../shared folder (model config files, photos) lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = Path(os.environ.get("SMOLCHAT_SHARED", REPO.parent / "shared"))
    if not path.is_dir():
        pytest.fail(f"shared folder not found at {path}; set SMOLCHAT_SHARED")
    return path


@pytest.fixture(scope="session")
def model_config_dir(shared_dir) -> Path:
    return shared_dir / "models" / "SmolVLM-256M-Instruct"


@pytest.fixture(scope="session")
def images_dir(shared_dir) -> Path:
    return shared_dir / "images"
