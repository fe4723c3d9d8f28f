"""The model manager's catalog: each checkpoint's download size and what it can do, checked against
the config folders in shared/models (issue 13)."""

from __future__ import annotations

import json

import pytest
from PySide6.QtWidgets import QLabel

from app.model_manager import CATALOG, CatalogRow


def _parameters(folder) -> int:
    """Parameters of the model a config folder describes (built on the meta device: no memory)."""
    import torch

    from engine.models.smolvlm import SmolVlmModel
    from engine.registry import read_metadata

    with torch.device("meta"):
        model = SmolVlmModel(read_metadata(folder))
    return sum(p.numel() for p in model.parameters())


def test_catalog_sizes_and_abilities_follow_the_configs(shared_dir):
    checked = 0
    for entry in CATALOG:
        folder = shared_dir / "models" / entry.repo_id.split("/")[1]
        if not (folder / "config.json").is_file():
            continue  # not in shared/models (SmolVLM-Instruct 2.2B)
        config = json.loads((folder / "config.json").read_text())
        assert entry.video == (config["model_type"] == "smolvlm"), entry.repo_id
        bf16_gb = 2 * _parameters(folder) / 1e9  # the published checkpoints are bfloat16
        assert entry.size_gb == pytest.approx(bf16_gb, rel=0.12), entry.repo_id
        checked += 1
    assert checked == 5


def test_catalog_rows_show_size_and_abilities(qtbot):
    for entry in CATALOG:
        row = CatalogRow(entry)
        qtbot.addWidget(row)
        title = row.findChild(QLabel, "catalogTitle").text()
        assert f"≈{entry.size_gb:g} GB" in title
        assert title.endswith(f"· {entry.abilities}</span>")
        assert ("video" in entry.abilities) == entry.video
