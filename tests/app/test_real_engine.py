"""The whole path with the real engine (no fake): drop an image, ask, and see the answer the
engine streams into the window — the same greedy tokens ChatSession gives outside the app."""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.api.events import DoneEvent, GenerationParams
from engine.chat import ChatSession
from tests.app.helpers import drop, file_mime
from tests.engine.conftest import tiny_checkpoint  # noqa: F401  (fixture)


def test_real_engine_answers_a_dropped_image(qtbot, tiny_checkpoint, images_dir):  # noqa: F811
    from app.main_window import MainWindow

    win = MainWindow(str(tiny_checkpoint))  # the default backend: ChatSession.load on the engine thread
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: bool(win.model_info), timeout=60_000)
    assert win.model_info["device"] == "cpu" and win.model_info["dtype"] == "float32"

    photo = images_dir / "coffee.png"
    assert drop(win.composer, file_mime(photo))
    qtbot.keyClicks(win.composer, "What is in the cup?")
    win.generation_params = {"max_new_tokens": 12, "ignore_eos": True}
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    result = finished.args[0]
    assert result["finish_reason"] == "length" and result["generated_tokens"] == 12

    direct = ChatSession.load(str(tiny_checkpoint), device="cpu")
    events = list(direct.send("What is in the cup?", images=[photo],
                              params=GenerationParams(max_new_tokens=12, ignore_eos=True)))
    expected = "".join(e.text for e in events if not isinstance(e, DoneEvent))
    assert result["prompt_tokens"] == events[-1].stats.prompt_tokens
    assert win.transcript.messages()[-1]["text"] == expected.strip()
    win.close()
