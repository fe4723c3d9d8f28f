"""Waiting for the first word (issue 19): the pending answer says what the engine reads and how far it
is, fed by the backend's ProgressEvents; the wait is estimated beside the token budget before sending."""

from __future__ import annotations

import threading

from PIL import Image

from app.backends.fake import FakeBackend
from app.formatting import describe_progress
from app.wait_estimate import estimate_text, record_answer, speed_key
from app.wait_progress import WAITING_TEXT
from engine.api import ProgressEvent
from tests.app.helpers import drop, file_mime


def _photos(tmp_path, n):
    paths = []
    for i in range(n):
        path = tmp_path / f"photo{i}.png"
        Image.new("RGB", (64, 48), (230, 120, 30 * i)).save(path)
        paths.append(path)
    return paths


def test_pending_answer_reads_each_image_tile_by_tile_then_the_question(qtbot, make_window, tmp_path):
    win = make_window(FakeBackend(tokens=["A", " cat", "."]))
    drop(win.composer, file_mime(*_photos(tmp_path, 2)))
    qtbot.waitUntil(lambda: len(win.attachments.paths()) == 2, timeout=5000)
    win.composer.setPlainText("Compare them")
    seen, status = [], []

    def snapshot(_event):  # connected after the window's own slots: sees the bubble as updated
        status.append(win.stats_label.text())
        waiting = win.transcript.last_assistant().waiting
        seen.append((waiting.text(), waiting.bar.value(), waiting.bar.maximum(), waiting.isVisibleTo(win)))
    win.controller.progress.connect(snapshot)
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.send_message()
    assert ("Reading image 1 of 2 — tile 5 of 17", 4, 34, True) in seen
    assert ("Reading image 2 of 2 — tile 17 of 17", 33, 34, True) in seen
    # Nothing read yet of a prompt (one chunk reports only its end): a busy bar, not an empty one.
    assert [s[2] for s in seen if s[0] == "Reading your question (2,218 tokens)"][0] == 0
    assert seen[-1] == ("Reading your question (2,218 tokens)", 2218, 2218, True)
    texts = [s[0] for s in seen]
    assert texts.index("Reading image 2 of 2 — tile 1 of 17") > texts.index("Reading image 1 of 2 — tile 17 of 17")
    assert "FakeVLM-256M · cpu · float32 · Reading image 1 of 2 — tile 5 of 17" in status
    assert status[-1] == "FakeVLM-256M · cpu · float32 · generating…"  # the prompt is read: no stale progress
    answer = win.transcript.last_assistant()
    assert answer.text == "A cat." and not answer.waiting.isVisibleTo(win)


def test_a_backend_without_progress_shows_an_indeterminate_bar(qtbot, make_window, monkeypatch):
    """A remote server says nothing before its first token: the bar runs without a position."""
    backend = FakeBackend(tokens=["Hi"])
    gate = threading.Event()

    def silent(attachments, params, sink):
        gate.wait(5)
        return 42
    monkeypatch.setattr(backend, "_read_prompt", silent)
    win = make_window(backend)
    win.composer.setPlainText("Hello")
    win.send_message()
    answer = win.transcript.last_assistant()
    qtbot.waitUntil(lambda: answer.waiting.isVisibleTo(win), timeout=5000)
    assert answer.waiting.text() == WAITING_TEXT
    assert (answer.waiting.bar.minimum(), answer.waiting.bar.maximum()) == (0, 0)
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        gate.set()
    assert answer.text == "Hi" and not answer.waiting.isVisibleTo(win)


def test_an_answer_behind_the_local_servers_says_so_until_its_own_work_starts(qtbot, make_window, monkeypatch):
    """Trial 53: behind an API client's answer the window said "Waiting for the first word…" for 7 s."""
    backend = FakeBackend(tokens=["Hi"])
    backend.ahead = 1
    gate = threading.Event()

    def later(attachments, params, sink):
        gate.wait(5)
        sink(ProgressEvent("prefill", 0, 12))
        return 12
    monkeypatch.setattr(backend, "_read_prompt", later)
    win = make_window(backend)
    win.composer.setPlainText("Hello")
    win.send_message()
    answer = win.transcript.last_assistant()
    assert answer.waiting.text() == "Waiting for the answer the local server is giving another program…"
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        gate.set()
    assert answer.text == "Hi"
    backend.ahead = 3
    win.composer.setPlainText("Again")
    win.send_message()
    assert win.transcript.last_assistant().waiting.text() == ("Waiting for 3 answers the local server is giving "
                                                             "other programs…")
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=5000)


def test_progress_text_for_videos_and_without_a_breakdown():
    assert describe_progress(ProgressEvent("image", 12, 40, 0, 1, 12, 40, "video")) == \
        ("Reading video 1 of 1 — frame 13 of 40", 12, 40)
    assert describe_progress(ProgressEvent("image", 3, 13)) == ("Reading the image — tile 4 of 13", 3, 13)
    assert describe_progress(ProgressEvent("prefill", 512, 1141)) == ("Reading your question (1,141 tokens)", 512, 1141)
    # The frames of a video being taken from the file (trial 52: seconds said as "Waiting for the first word…").
    assert describe_progress(ProgressEvent("frames", 11, 60, 0, 1, 11, 60, "video")) == \
        ("Taking frames from the video — frame 12 of 60", 11, 60)
    assert describe_progress(ProgressEvent("frames", 0, 30, 1, 2, 0, 30, "video")) == \
        ("Taking frames from video 2 of 2 — frame 1 of 30", 0, 30)
    # A server loading its model (trial 77 Q11): a busy bar, and how long the answer has waited.
    assert describe_progress(ProgressEvent("server_loading", 12, 0)) == \
        ("The server is loading its model — asking again (12 s so far)", 0, 0)
    assert describe_progress(ProgressEvent("server_thinking", 1234, 0)) == \
        ("The model is thinking (1,234 characters so far)", 0, 0)


def test_estimate_text():
    assert [estimate_text(s) for s in (None, 0.6, 1.4, 25.2, 59.4, 70, 121)] == [
        "", "", "≈ 1 s on this machine", "≈ 25 s on this machine", "≈ 59 s on this machine",
        "≈ 1 min 10 s on this machine", "≈ 2 min on this machine"]


def test_the_wait_is_estimated_beside_the_token_budget_once_measured(qtbot, make_window, tmp_path):
    win = make_window(FakeBackend())
    [photo] = _photos(tmp_path, 1)
    drop(win.composer, file_mime(photo))
    qtbot.waitUntil(lambda: "1,088" in win.pending_label.text(), timeout=5000)
    assert win.pending_label.text() == "1 image · 1,088 image tokens (full)"  # nothing measured yet: no guess
    win.qsettings.setValue(speed_key(win.model_info), (1088 + 40) / 25)  # 45.12 prompt tokens/s
    win.attachments.clear()
    drop(win.composer, file_mime(photo))
    qtbot.waitUntil(lambda: "1,088" in win.pending_label.text(), timeout=5000)
    assert win.pending_label.text() == "1 image · 1,088 image tokens (full) · ≈ 25 s on this machine"


def test_real_answers_measure_the_speed(qtbot, make_window, tmp_path):
    win = make_window(FakeBackend())
    key = speed_key(win.model_info)
    win.composer.setPlainText("Short question")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    assert win.qsettings.value(key) is None  # 42 prompt tokens: too few to measure
    drop(win.composer, file_mime(*_photos(tmp_path, 1)))
    qtbot.waitUntil(lambda: len(win.attachments.paths()) == 1, timeout=5000)
    win.composer.setPlainText("What is it?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    assert float(win.qsettings.value(key)) == 1130 / 0.125  # the fake's TTFT for 42 + 1088 tokens


def test_speed_is_averaged_and_not_kept_for_remote_models(qapp, tmp_path):
    from PySide6.QtCore import QSettings

    qs = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    local = {"model_name": "SmolVLM-256M-Instruct", "device": "cpu", "dtype": "float32", "backend": "local"}
    result = {"finish_reason": "stop", "prompt_tokens": 1141, "cached_tokens": 141, "ttft_s": 20.0}
    assert record_answer(qs, local, result) == 50.0
    assert record_answer(qs, local, {**result, "ttft_s": 10.0}) == 75.0
    assert record_answer(qs, local, {**result, "finish_reason": "error"}) is None
    remote = {**local, "backend": "remote:gpu-box"}
    assert record_answer(qs, remote, result) is None and speed_key(remote) is None
