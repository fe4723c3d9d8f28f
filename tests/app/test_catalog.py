"""The model manager's catalog: each checkpoint's download size and what it can do, checked against
the config folders in shared/models and the engine's own capabilities (issue 13); downloaded ones
found in the Hugging Face cache; any repo id, folder or GGUF file typed in, checked before use."""

from __future__ import annotations

import json
import shutil

import pytest
from PySide6.QtWidgets import QLabel

from app import catalog as catalog_module
from app.backends.fake import FakeBackend
from app.catalog import TYPE_ABILITIES, classify, folder_abilities
from app.model_manager import CATALOG, CatalogRow
from app.settings import known_models
from tests.engine.conftest import tiny_checkpoint  # noqa: F401  (fixture)


def _model(folder):
    """The engine's model for a config folder, built on the meta device (no memory)."""
    import torch

    from engine.registry import model_class, read_metadata

    meta = read_metadata(folder)
    with torch.device("meta"):
        return model_class(meta.model_type)(meta)


def test_catalog_sizes_and_abilities_follow_the_configs(shared_dir):
    checked = 0
    for entry in CATALOG:
        folder = shared_dir / "models" / entry.repo_id.split("/")[1]
        if not (folder / "config.json").is_file():
            continue  # not in shared/models (SmolVLM-Instruct 2.2B)
        config = json.loads((folder / "config.json").read_text())
        assert entry.model_type == config["model_type"], entry.repo_id
        model = _model(folder)
        caps = model.capabilities()
        engine_says = "images, video" if caps.video else "images" if caps.vision else "text only"
        assert entry.abilities == engine_says == folder_abilities(folder), entry.repo_id
        stored = sum(p.numel() for p in model.parameters())
        if config.get("tie_word_embeddings"):  # SmolLM2: the head is the embedding, stored once
            stored -= model.lm_head.weight.numel()
        bf16_gb = 2 * stored / 1e9  # the published checkpoints are bfloat16
        assert entry.size_gb == pytest.approx(bf16_gb, rel=0.12), entry.repo_id
        checked += 1
    assert checked == 6
    from engine.registry import supported_model_types

    assert set(TYPE_ABILITIES) == set(supported_model_types())  # a new architecture needs its abilities


def test_catalog_rows_show_size_and_abilities(qtbot):
    for entry in CATALOG:
        row = CatalogRow(entry)
        qtbot.addWidget(row)
        title = row.findChild(QLabel, "catalogTitle").text()
        assert f"≈{entry.size_gb:g} GB" in title
        assert title.endswith(f"· {entry.abilities}</span>")
        assert ("video" in entry.abilities) == entry.video
    text = CatalogRow(next(e for e in CATALOG if e.repo_id.endswith("SmolLM2-135M-Instruct")))
    qtbot.addWidget(text)
    assert text.findChild(QLabel, "catalogTitle").text() == (
        "<b>SmolLM2 135M (text)</b> <span style='color:gray'>· HuggingFaceTB/SmolLM2-135M-Instruct · ≈0.27 GB"
        " · text only</span>")


def test_what_the_user_types_is_classified(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    assert classify(str(tmp_path)) == ("folder", str(tmp_path.resolve()))
    assert classify(f'"{gguf}"') == ("gguf", str(gguf.resolve()))
    assert classify("HuggingFaceTB/SmolVLM2-256M-Video-Instruct") == ("repo", "HuggingFaceTB/SmolVLM2-256M-Video-Instruct")
    assert classify(str(other)) == ("invalid", "weights.bin is a file but not a GGUF model: choose its folder, "
                                               "or a .gguf file.")
    assert classify(str(tmp_path / "missing.gguf")) == ("invalid", f"No such file or folder: {tmp_path / 'missing.gguf'}")
    assert classify("just words") == ("invalid", "Not a Hugging Face repo id (owner/name), a model folder or a "
                                                 ".gguf file: just words")


@pytest.mark.parametrize("typed", ["https://huggingface.co/HuggingFaceTB/SmolVLM-256M-Instruct",
                                   "https://huggingface.co/HuggingFaceTB/SmolVLM-256M-Instruct/tree/main",
                                   "huggingface.co/HuggingFaceTB/SmolVLM-256M-Instruct/",
                                   "https://hf.co/HuggingFaceTB/SmolVLM-256M-Instruct?library=transformers"])
def test_a_pasted_hub_page_is_its_repo_id(typed):
    assert classify(typed) == ("repo", "HuggingFaceTB/SmolVLM-256M-Instruct")


@pytest.mark.parametrize("typed, reason", [
    # Found by a trial: these raised OSError "File name too long" out of the dialog's Add.
    ("a" * 300 + "/b", "Not a model folder, a .gguf file or a Hugging Face repo id (File name too long): "),
    ("a" * 5000, "Not a model folder, a .gguf file or a Hugging Face repo id (File name too long): "),
    ("x/" + "b" * 200, "Not a Hugging Face repo id: owner and name are at most 96 letters, digits, '-', '_' or '.' "
                       "each: "),
    ("someone/bad name", "Not a Hugging Face repo id: owner and name are at most 96 letters, digits, '-', '_' or '.' "
                         "each: someone/bad name"),
    # The download has no revision: refused, not left to huggingface_hub's "Repo id must use alphanumeric chars".
    ("owner/name@main", "A revision (@main) cannot be chosen here: type the repo id alone, owner/name, to download its "
                        "main branch."),
    ("https://huggingface.co/owner/name/tree/v2", "A revision (@v2) cannot be chosen here: type the repo id alone, "
                                                  "owner/name, to download its main branch."),
    ("https://huggingface.co/datasets/owner", "That is a Hugging Face dataset, not a model: "),
    ("https://huggingface.co/owner/name/blob/main/config.json", "Not a Hugging Face model page "
                                                                "(https://huggingface.co/owner/name): "),
])
def test_what_cannot_be_added_gets_one_short_line(typed, reason):
    kind, said = classify(typed)
    assert kind == "invalid" and said.startswith(reason), said
    assert "\n" not in said and len(said) < 300


def test_typed_too_long_gets_one_line(manager):
    manager.add_input.setText("a" * 300 + "/b")
    manager.add_typed()
    report = manager.report.toPlainText()
    assert report.startswith("✘ Not a model folder, a .gguf file or a Hugging Face repo id (File name too long): aaa")
    assert "\n" not in report and report.endswith("…")


@pytest.fixture
def manager(make_window):
    return make_window(FakeBackend()).open_model_manager()


def test_downloaded_checkpoints_show_as_downloaded_and_are_checked_before_use(
        qtbot, make_window, tiny_checkpoint, tmp_path, monkeypatch):  # noqa: F811
    snapshot = tmp_path / "hub" / "snap"
    shutil.copytree(tiny_checkpoint, snapshot)
    repo = "HuggingFaceTB/SmolVLM-256M-Instruct"
    monkeypatch.setattr(catalog_module, "cached_snapshot", lambda r: str(snapshot) if r == repo else "")
    import app.model_manager as mm

    monkeypatch.setattr(mm, "cached_snapshot", catalog_module.cached_snapshot)
    manager = make_window(FakeBackend()).open_model_manager()
    row = manager.rows[repo]
    assert row.status.text() == f"Downloaded (in the Hugging Face cache), not checked yet · {snapshot}"
    assert row.download_button.text() == "Check and add" and not row.use_button.isVisibleTo(manager)
    assert manager.rows["HuggingFaceTB/SmolVLM-500M-Instruct"].download_button.text() == "Download"
    row.download_button.click()
    qtbot.waitUntil(lambda: row.use_button.isVisibleTo(manager), timeout=60_000)
    assert [m["path"] for m in known_models()] == [str(snapshot)]
    assert "Can do: images" in manager.report.toPlainText()


def test_typed_folder_that_cannot_be_used_says_why(qtbot, manager, tiny_checkpoint, tmp_path):  # noqa: F811
    folder = tmp_path / "bert"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    manager.add_input.setText(str(folder))
    manager.add_typed()
    qtbot.waitUntil(lambda: manager.last_report.get("path") == str(folder), timeout=60_000)
    report = manager.report.toPlainText().splitlines()
    assert report[0].startswith("✘ ") and report[1] == f"Folder: {folder}"
    assert report[2] == "Why it cannot be used:"
    assert "model_type 'bert' is not supported (supported: idefics3, smolvlm, llama)" in report[3]
    assert known_models() == []


def test_typed_nonsense_gets_one_line(manager):
    manager.add_input.setText("not a model")
    manager.add_typed()
    assert manager.report.toPlainText() == ("✘ Not a Hugging Face repo id (owner/name), a model folder or a .gguf "
                                            "file: not a model")


def test_typed_repo_id_gets_a_row_and_downloads(qtbot, manager, monkeypatch):
    started = []
    monkeypatch.setattr(manager.tasks, "prepare_download", lambda repo: started.append(repo))
    manager.download_requested.disconnect()
    manager.download_requested.connect(lambda repo: started.append(("download", repo)))
    manager.show()
    qtbot.waitExposed(manager)
    manager.add_input.setText("someone/SmolVLM2-finetune")
    manager.add_typed()
    row = manager.rows["someone/SmolVLM2-finetune"]
    assert row.findChild(QLabel, "catalogTitle").text() == (
        "<b>someone/SmolVLM2-finetune</b> <span style='color:gray'>· size unknown</span>")
    assert started == ["someone/SmolVLM2-finetune", ("download", "someone/SmolVLM2-finetune")]
    assert row.status.text() == "Downloading…"
    # Found by a trial: the row lands below the visible part of the list and the report said nothing.
    assert manager.report.toPlainText() == (
        "Downloading someone/SmolVLM2-finetune from the Hugging Face Hub: its row in the list above shows the "
        "progress; the model is checked when it is complete.")
    viewport = manager.catalog_scroll.viewport()
    qtbot.waitUntil(lambda: viewport.rect().contains(row.mapTo(viewport, row.rect().bottomLeft())))
    manager._on_download_failed("someone/SmolVLM2-finetune", "the Hub cannot be reached (offline?)", False)
    assert manager.report.toPlainText() == (
        "✘ someone/SmolVLM2-finetune: Download failed: the Hub cannot be reached (offline?)")


def test_a_repo_id_in_another_case_reuses_its_row(manager, monkeypatch):
    """Hub ids resolve whatever their case: a second row (and download) for the same repo was a trial's find."""
    started = []
    monkeypatch.setattr(manager.tasks, "prepare_download", lambda repo: started.append(repo))
    manager.download_requested.disconnect()
    rows = dict(manager.rows)
    manager.add_input.setText("https://huggingface.co/huggingfacetb/smolvlm-256m-instruct")
    manager.add_typed()
    assert manager.rows == rows and started == ["HuggingFaceTB/SmolVLM-256M-Instruct"]
    assert manager.report.toPlainText().startswith("Downloading HuggingFaceTB/SmolVLM-256M-Instruct from the Hugging Face Hub")
