"""``smolchat --self-test`` from source, against the tiny random-weight checkpoint (fast, every run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import self_test
from app.main import main as app_main

REPO = Path(__file__).resolve().parents[2]

# Runs the app's real entry point in a fresh interpreter and proves it never built a QApplication.
SCRIPT = r"""
import sys
from app.main import main
code = main(sys.argv[1:])
from PySide6.QtWidgets import QApplication
assert QApplication.instance() is None, "the headless self-test created a QApplication"
sys.exit(code)
"""


def _isolated_env(tmp_path: Path) -> dict:
    env = dict(os.environ, SMOLCHAT_DATA_DIR=str(tmp_path / "data"), HF_HOME=str(tmp_path / "hf"),
               HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    env.pop("QT_QPA_PLATFORM", None)  # headless without needing the offscreen platform
    return env


def test_self_test_answers_the_built_in_image_question(tiny_checkpoint, tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "--self-test", "--model", str(tiny_checkpoint),
                           "--max-new-tokens", "4"],
                          env=_isolated_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    result = json.loads(lines[0])
    assert result["ok"] is True and result["frozen"] is False
    assert result["device"] == "cpu" and result["dtype"] == "float32"
    assert result["generated_tokens"] == 4 and result["finish_reason"] == "length"
    assert result["image_tokens"] > 0 and result["prompt_tokens"] > result["image_tokens"]
    for key in ("import_s", "load_s", "ttft_s", "generate_s", "total_s"):
        assert result[key] >= 0, key
    assert "gui" not in result


def test_self_test_with_the_main_window_offscreen(tiny_checkpoint, tmp_path, monkeypatch, capsys, qapp):
    """Trial 53: ``--gui`` wrote the tested model into the user's settings (their model list and the
    model the app opens next) and a conversations database into their data folder."""
    from app.settings import last_model, open_settings, set_last_model

    data = tmp_path / "data"
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(data))
    set_last_model("/models/the-users-own", open_settings())
    before = {p.relative_to(data): p.read_bytes() for p in data.rglob("*") if p.is_file()}
    assert app_main(["--self-test", "--gui", "--model", str(tiny_checkpoint), "--max-new-tokens", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["generated_tokens"] == 1
    assert result["gui"]["platform"] == "offscreen" and result["gui"]["window_load_s"] > 0
    assert os.environ["SMOLCHAT_DATA_DIR"] == str(data)
    assert {p.relative_to(data): p.read_bytes() for p in data.rglob("*") if p.is_file()} == before
    assert last_model(open_settings()) == "/models/the-users-own"


def test_without_any_model_it_fails_with_a_clear_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert self_test.main([]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": False, "error": json.loads(out)["error"]}
    assert err.startswith("smolchat self-test failed: no model found: pass --model DIR")
    assert str(tmp_path / "data" / "models") in err


def test_a_model_folder_in_the_app_data_is_found(tiny_checkpoint, tmp_path, monkeypatch):
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    (models / "tiny").symlink_to(tiny_checkpoint, target_is_directory=True)
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert self_test.resolve_model(None) == str(models / "tiny")


@pytest.mark.parametrize("bad", ["missing-folder/", "./nowhere"])
def test_a_wrong_model_folder_fails_with_a_clear_message(bad, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert app_main(["--self-test", "--model", bad]) == 1
    assert f"no model at {bad}" in capsys.readouterr().err


def test_a_broken_model_folder_is_reported_not_raised(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert self_test.main(["--model", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("smolchat self-test failed: ") and "\n" == err[-1] and err.count("\n") == 1


def test_the_built_in_image_is_drawn_not_shipped():
    image = self_test.make_image()
    assert image.size == (320, 240) and image.mode == "RGB"
    assert image.getpixel((160, 120)) == (220, 30, 30)  # the red circle in the middle


def test_frozen_paths(tmp_path, monkeypatch):
    """Frozen: resources come from the bundle; data and models go to the per-user folder."""
    from app import paths

    install = tmp_path / "opt" / "smolchat"
    (install / "_internal" / "resources").mkdir(parents=True)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(install / "_internal"), raising=False)
    monkeypatch.delenv("SMOLCHAT_DATA_DIR", raising=False)
    monkeypatch.setattr(paths.platformdirs, "user_data_dir",
                        lambda *a, **k: str(tmp_path / "home" / ".local" / "share" / "Smolchat"))
    assert paths.is_frozen()
    assert paths.resource("style.qss") == install / "_internal" / "resources" / "style.qss"
    assert paths.data_dir() == tmp_path / "home" / ".local" / "share" / "Smolchat"
    assert paths.models_dir() == paths.data_dir() / "models"
    assert install not in paths.models_dir().parents


def test_without_model_it_uses_the_model_the_app_last_used(tiny_checkpoint, tmp_path, monkeypatch):
    """Issue 18: ``smolchat --self-test`` tests the model the app last loaded, not the first one found."""
    from app.settings import open_settings, set_last_model

    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / "aaa-other").symlink_to(tiny_checkpoint, target_is_directory=True)  # found first otherwise
    last = tmp_path / "elsewhere" / "my-model"
    last.parent.mkdir()
    last.symlink_to(tiny_checkpoint, target_is_directory=True)
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(data))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    set_last_model(str(last), open_settings())
    assert self_test.resolve_model(None) == str(last)
    last.unlink()  # gone since: fall back to the models folder
    assert self_test.resolve_model(None) == str(data / "models" / "aaa-other")


@pytest.mark.parametrize("value", ["0", "-5"])
def test_an_answer_of_no_tokens_is_refused_before_anything_loads(tmp_path, capsys, value):
    # 0 used to load the model and then fail with "generation failed: an answer needs max_new_tokens >= 1".
    with pytest.raises(SystemExit) as stopped:
        self_test.main(["--model", str(tmp_path / "no-model"), "--max-new-tokens", value])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        f"smolchat --self-test: error: argument --max-new-tokens: must be >= 1, got {value}"
