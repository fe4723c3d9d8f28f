"""Videos through the real engine (a tiny random-weight SmolVLM2): the local backend gets the video as a
video, the budget shown before sending is the engine's count of the video's prompt, and Stop stops the
sampling."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import Qt

from tests.app.helpers import drop, file_mime
from tests.engine.conftest import family_checkpoint  # noqa: F401  (fixture)
from tests.engine.videos import solid, write_video

pytest.importorskip("av")


@pytest.fixture
def smolvlm2_window(qtbot, family_checkpoint):  # noqa: F811
    from app.main_window import MainWindow

    win = MainWindow(str(family_checkpoint("SmolVLM2-256M-Video-Instruct")))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: bool(win.model_info), timeout=120_000)
    assert win.model_info["capabilities"]["video"]
    yield win
    win.close()


def test_video_question_through_the_local_engine(qtbot, smolvlm2_window, shared_dir):
    win = smolvlm2_window
    clip = shared_dir / "videos" / "moving_square.mp4"  # 6 s at 10 fps: 6 frames at 1 fps
    drop(win.composer, file_mime(clip))
    per_frame = win.model_info["capabilities"]["image_tokens_per_tile"]
    # The engine's count of the video's whole prompt at the window's sampling: its intro, each
    # frame's "Frame from 00:0s:" and image block (what the frames alone, 6 x per_frame, left out).
    from engine.api import GenerationParams
    from engine.chat import ChatSession

    session = ChatSession.load(win.model_info["path"], device="cpu")
    expected = session.count_video_tokens(clip, GenerationParams(video_fps=win.settings.video_fps,
                                                                 video_max_frames=win.settings.video_max_frames))
    assert expected > 6 * per_frame + 6 * 5
    assert win.pending_label.text().startswith(f"1 video · 6 frames · {expected:,} tokens")
    qtbot.keyClicks(win.composer, "Where does the square go?")
    win.generation_params = {"max_new_tokens": 3, "ignore_eos": True}
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    result = finished.args[0]
    assert result["finish_reason"] == "length", result
    assert result["video_frames"] == 6 and result["image_tokens"] == 6 * per_frame


def test_stop_while_frames_are_sampled(qtbot, smolvlm2_window, tmp_path, monkeypatch):
    """Stop pressed while the engine thread decodes the first frame: the answer ends "cancelled"
    without decoding the other frames or reading the prompt."""
    from engine.models.smolvlm import video as video_module

    win = smolvlm2_window
    clip = write_video(tmp_path / "long.mp4", (solid(32, 32, i % 200) for i in range(120)), rate=1)
    drop(win.composer, file_mime(clip))
    started, release, resized = threading.Event(), threading.Event(), []
    real = video_module.resize_frame

    def held(image, **kwargs):
        resized.append(1)
        started.set()
        release.wait(10)  # until the test has pressed Stop
        return real(image, **kwargs)

    monkeypatch.setattr(video_module, "resize_frame", held)
    qtbot.keyClicks(win.composer, "What happens?")
    with qtbot.waitSignal(win.answer_finished, timeout=60_000) as finished:
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
        assert started.wait(30)
        qtbot.mouseClick(win.stop_button, Qt.MouseButton.LeftButton)
        release.set()
    result = finished.args[0]
    assert result["finish_reason"] == "cancelled"
    # Frames are converted on CONVERT_THREADS workers while decoding goes on, with at most twice
    # that many waiting: those may have been handed over before the Stop, not the other ~60.
    from engine.api.videos import CONVERT_THREADS
    assert 1 <= len(resized) <= 2 * CONVERT_THREADS + 1 < 64
    assert result.get("prompt_tokens", 0) == 0  # nothing was prefilled
    assert win.transcript.messages()[0]["text"] == "What happens?"  # the question is kept
