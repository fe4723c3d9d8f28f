"""View ▸ Zoom: the chat's text (messages, code, the message box) grows and shrinks by browser-like
steps with the menu, the keys and Ctrl+wheel, lays out again, and is kept for the next start."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from app.backends.fake import FakeBackend
from app.markdown import RichText
from app.zoom import KEY, STEPS, step_zoom

from .test_theme_screens import app_style  # noqa: F401 - a fixture: the real style sheet


def answered(qtbot, make_window):
    win = make_window(FakeBackend(tokens=["A line of text, then code:\n\n```python\nprint('hi')\n```\n"]))
    win.composer.setPlainText("Show me")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    return win


def answer_text(win) -> RichText:
    return [t for t in win.transcript.widgets()[1].findChildren(RichText) if t.objectName() == "assistantText"][0]


def ctrl_wheel(widget, up: bool) -> None:
    pos = QPointF(widget.rect().center())
    event = QWheelEvent(pos, QPointF(widget.mapToGlobal(pos.toPoint())), QPoint(), QPoint(0, 120 if up else -120),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.ControlModifier, Qt.ScrollPhase.NoScrollPhase,
                        False)
    QApplication.sendEvent(widget, event)


def test_steps_stay_within_the_range():
    assert step_zoom(100, 1) == 110 and step_zoom(100, -1) == 90 and step_zoom(150, 0) == 100
    assert step_zoom(STEPS[-1], 1) == STEPS[-1] and step_zoom(STEPS[0], -1) == STEPS[0]
    assert step_zoom(123, 1) == 110  # a value not among the steps counts from 100 %


def test_zoom_in_grows_the_text_and_the_message_and_is_kept(qtbot, make_window):
    win = answered(qtbot, make_window)
    text = answer_text(win)
    before_height = text.height()
    win.actions["zoom_in"].trigger()
    win.actions["zoom_in"].trigger()
    qtbot.waitUntil(lambda: text.height() > before_height)
    assert win.zoom == 125 and text.font().pixelSize() == 18 and win.composer.font().pixelSize() == 18
    assert win.actions["zoom_reset"].text() == "&Actual size (125 %)"
    win.close()
    again = make_window(FakeBackend())
    assert again.zoom == 125 and again.composer.font().pixelSize() == 18 and again.qsettings.value(KEY) in (125, "125")
    again.actions["zoom_reset"].trigger()
    assert again.zoom == 100 and again.composer.styleSheet() == "" and again.transcript.styleSheet() == ""
    assert again.actions["zoom_reset"].text() == "&Actual size"  # the application's sizes again


def test_ctrl_wheel_over_a_message_zooms_the_whole_chat_not_that_message(qtbot, make_window):
    """QTextEdit's own Ctrl+wheel zoomed the one answer under the mouse, out of step with the rest."""
    win = answered(qtbot, make_window)
    text = answer_text(win)
    ctrl_wheel(text.viewport(), up=True)
    assert win.zoom == 110 and text.font().pixelSize() == 15
    ctrl_wheel(text.viewport(), up=False)
    ctrl_wheel(text.viewport(), up=False)
    assert win.zoom == 90 and text.font().pixelSize() == 13 and win.composer.font().pixelSize() == 13


def test_ctrl_wheel_over_the_message_box_zooms_too(qtbot, make_window):
    """Found by a trial: the keys zoom the message box, Ctrl+wheel over it did nothing."""
    win = make_window(FakeBackend())
    ctrl_wheel(win.composer.viewport(), up=True)
    assert win.zoom == 110
    ctrl_wheel(win.composer.viewport(), up=False)
    assert win.zoom == 100


def test_the_limits_disable_the_actions_and_a_bad_saved_value_is_100(qtbot, make_window):
    win = make_window(FakeBackend())
    for _ in range(len(STEPS)):
        win.actions["zoom_out"].trigger()
    assert win.zoom == STEPS[0] and not win.actions["zoom_out"].isEnabled() and win.actions["zoom_in"].isEnabled()
    win.qsettings.setValue(KEY, "huge")
    win.close()
    assert make_window(FakeBackend()).zoom == 100


def test_inline_code_and_a_long_model_name_follow_the_zoom(qtbot, make_window):
    """Found by a trial: inline code kept the system fixed font's point size while the text around it
    scaled, and at 200 % a long model name made the bubble wider than the chat in an 800 x 600 window
    (its right side out of reach); an empty icon size no longer makes QPainter warnings."""
    from PySide6.QtCore import QSize
    from PySide6.QtGui import QTextFormat

    from app.icons import icon

    backend = FakeBackend(tokens=["Run `make all` now."], model_name="SmolLM2-135M-Instruct.Q4_1.gguf + cktiny")
    win = make_window(backend)
    win.resize(800, 600)
    qtbot.waitExposed(win)
    win.composer.setPlainText("How?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    for _ in range(5):
        win.actions["zoom_in"].trigger()
    assert win.zoom == 200
    [text] = win.transcript.widgets()[1].rendered_widgets()
    it = text.document().begin().begin()
    spans = []
    while not it.atEnd():
        fmt = it.fragment().charFormat()
        spans.append((it.fragment().text(), fmt.fontFixedPitch(), fmt.hasProperty(QTextFormat.Property.FontPointSize),
                      fmt.background().color().alpha() if fmt.background().style() != Qt.BrushStyle.NoBrush else 0))
        it += 1
    # The document's (zoomed) size, not 9 pt; on a grey ground, the plain text on none (trial 55: a
    # monospace font alone read as plain text).
    assert ("make all", True, False, 40) in spans and ("Run ", False, False, 0) in spans, spans
    answer = win.transcript.widgets()[1]
    qtbot.waitUntil(lambda: answer.geometry().right() <= win.transcript.viewport().width())
    assert icon("copy").pixmap(QSize(16, 0)).isNull()


@pytest.mark.usefixtures("app_style")
def test_message_buttons_and_version_arrows_follow_the_zoom(qtbot, make_window):
    """Trial 50 (F15): zoomed in, the text grew but a message's copy / edit / delete / regenerate icons
    and its ‹ › arrows stayed at 100 %, the chat's smallest targets. They grow with it (in a message
    built after the zoom too) and come back with Actual size."""
    win = answered(qtbot, make_window)
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.transcript.widgets()[1].actions_row.button("regenerate").click()  # now ‹ 2 / 2 ›

    def sizes(message) -> dict:
        row = message.actions_row
        found = {name: row.button(name).iconSize().width() for name in ("copy", "edit", "regenerate", "delete")
                 if row.button(name) is not None}
        found["arrow font"] = row.versions.previous.font().pixelSize()
        found["arrow height"] = row.versions.previous.sizeHint().height()
        return found

    question, answer = win.transcript.widgets()
    before = {**sizes(question), **sizes(answer)}
    assert before["copy"] == 15 and before["arrow font"] == 15
    for _ in range(5):
        win.actions["zoom_in"].trigger()
    assert win.zoom == 200
    question, answer = win.transcript.widgets()
    zoomed = {**sizes(question), **sizes(answer)}
    assert {name: zoomed[name] for name in ("copy", "edit", "regenerate", "delete", "arrow font")} == {
        "copy": 30, "edit": 30, "regenerate": 30, "delete": 30, "arrow font": 30}
    assert zoomed["arrow height"] >= 1.6 * before["arrow height"]
    assert answer.actions_row.button("copy").sizeHint().height() >= 30  # the button round the icon too
    win.composer.setPlainText("And now?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    assert sizes(win.transcript.widgets()[3])["copy"] == 30  # a message built at 200 %
    win.actions["zoom_reset"].trigger()
    assert {**sizes(win.transcript.widgets()[2]), **sizes(win.transcript.widgets()[3])}["copy"] == 15
    assert sizes(win.transcript.widgets()[1]) == sizes(answer) and sizes(answer)["regenerate"] == 15


def test_an_indented_code_block_follows_the_zoom(qapp):
    """Trial 51: the text, tables and fenced code doubled; an indented code block stayed at 9 pt."""
    from PySide6.QtGui import QTextFormat

    from app.markdown import render_blocks

    [view] = render_blocks("text\n\n    indented code\n    second line\n\nafter")
    block, sized = view.document().begin(), []
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            look = it.fragment().charFormat()
            sized.append((it.fragment().text(), look.hasProperty(QTextFormat.Property.FontPointSize),
                          look.hasProperty(QTextFormat.Property.FontFamilies)))
            it += 1
        block = block.next()
    assert sized == [("text", False, False), ("indented code", False, True),  # monospace, at the text's size
                     ("second line", False, True), ("after", False, False)]
