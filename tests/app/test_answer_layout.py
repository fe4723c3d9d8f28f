"""Long answers: the rendered Markdown must end above the stats footer, live and restored."""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QFrame

from app.backends.fake import FakeBackend

WORDS = [f" word{i}" + ("." if i % 17 == 16 else "") + ("\n\n" if i % 60 == 59 else "") for i in range(400)]


def _settle(qtbot, win) -> None:
    for _ in range(5):
        QApplication.processEvents()
        qtbot.wait(20)


def _assert_blocks_above_footer(answer) -> None:
    bubble = answer.findChild(QFrame, "assistantBubble")
    footer = answer._footer
    assert footer.isVisible() and footer.text()
    footer_top = footer.mapTo(bubble, QPoint(0, 0)).y()
    blocks = answer.rendered_widgets()
    assert blocks
    for block in blocks:
        bottom = block.mapTo(bubble, QPoint(0, block.height())).y()
        assert bottom <= footer_top, (bottom, footer_top)
        doc_height = block.document().size().height()
        assert block.height() >= doc_height, (block.height(), doc_height)  # no line clipped or overdrawn


@pytest.fixture
def app_style(qapp):
    """The real app's style sheet (14 px answer text): the bug only shows with it."""
    from app.paths import resource

    old = qapp.styleSheet()
    qapp.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    yield
    qapp.setStyleSheet(old)


@pytest.mark.parametrize("width", [700, 900, 1400])
def test_long_answer_ends_above_its_footer_live_and_restored(qtbot, make_window, tmp_path, app_style, width):
    session = FakeBackend(tokens=WORDS, delay=0.0005)
    win = make_window(session)
    win.resize(width, 700)
    qtbot.keyClicks(win.composer, "Write a long answer")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    _settle(qtbot, win)
    _assert_blocks_above_footer(win.transcript.last_assistant())
    if os.environ.get("SMOLCHAT_LAYOUT_SHOTS"):
        win.grab().save(str(tmp_path / "live.png"))
        win.grab().save(os.environ["SMOLCHAT_LAYOUT_SHOTS"] + f"/live{width}.png")

    conv_id = win.keeper.current_id
    win.new_chat()
    win.open_conversation(conv_id)
    _settle(qtbot, win)
    _assert_blocks_above_footer(win.transcript.last_assistant())
    if os.environ.get("SMOLCHAT_LAYOUT_SHOTS"):
        win.grab().save(os.environ["SMOLCHAT_LAYOUT_SHOTS"] + f"/restored{width}.png")
