"""Keyboard focus, seen and in order (trial 38): every control that takes the focus draws a ring in
both themes, and Tab goes sidebar → header → transcript (its messages) → composer and round again.

The rings are measured on rendered pixels: the same control grabbed unfocused and focused must differ
in a ring's worth of pixels, with the changed pixels at a contrast of at least 3:1 (WCAG's for
non-text indicators) against what was there before.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QRect, Qt
from PySide6.QtGui import QAccessible, QColor, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLineEdit, QToolButton, QWidget

from app.backends.fake import FakeBackend

from .test_theme_screens import contrast

RING_MIN_PIXELS = 40  # a 2 px ring round even the smallest (22 px) button changes ~150


@pytest.fixture
def app_style(qapp):
    """The real style sheet, and the light theme back afterwards (other tests expect it)."""
    from app.paths import resource
    from app.theme import apply_theme

    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    old = qapp.styleSheet()
    qapp.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    yield
    apply_theme("light")
    qapp.setStyleSheet(old)


def _pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    array = np.frombuffer(image.constBits(), dtype=np.uint8, count=image.sizeInBytes())
    return array.reshape(image.height(), image.bytesPerLine() // 4, 4)[:, :image.width(), :3].copy()


def ring(widget: QWidget, shown: QWidget | None = None) -> tuple[int, float]:
    """``(pixels that change, strongest contrast of a changed pixel against its old colour)`` when
    ``widget`` takes the focus by Tab; measured on ``shown`` (the widget itself, or the frame that draws
    its ring) and 3 px around it, in a grab of the whole window."""
    top = widget.window()
    shown = shown or widget
    rect = QRect(shown.mapTo(top, QPoint(0, 0)), shown.size()).adjusted(-3, -3, 3, 3)
    widget.clearFocus()
    top.setFocus()
    QApplication.processEvents()
    before = _pixels(top.grab().toImage().copy(rect))
    widget.setFocus(Qt.FocusReason.TabFocusReason)
    QApplication.processEvents()
    assert widget.hasFocus(), widget.objectName()
    after = _pixels(top.grab().toImage().copy(rect))
    changed = np.argwhere((before != after).any(axis=2))
    best = max((contrast(QColor(*map(int, before[y, x])), QColor(*map(int, after[y, x]))) for y, x in changed),
               default=1.0)
    return len(changed), best


@pytest.fixture(params=["light", "dark"])
def answered(request, qtbot, make_window, app_style):
    """A window in ``request.param``'s theme after a question, its answer and a regenerated answer
    (so the answer has ‹ 1 / 2 › arrows), with a draft in the composer (Send enabled)."""
    from app.theme import apply_theme

    apply_theme(request.param)
    win = make_window(FakeBackend(tokens=["The", " cat", ".\n\n```py\nx = 1\n```"], delay=0.0))
    win.resize(1100, 760)
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.composer.setPlainText("What is this?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.send_message()
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.transcript.widgets()[1].actions_row.button("regenerate").click()
    win.composer.setPlainText("And this?")
    QApplication.processEvents()
    return win


MAIN_CONTROLS = ["settingsButton", "attachButton", "sendButton", "copyMessage", "editMessage", "deleteMessage",
                 "regenerateMessage", "previousVersion", "copyCode", "assistantText", "transcript",
                 "conversationList", "newChatButton", "conversationSearch", "modelPicker"]


def test_every_main_window_control_shows_its_focus(answered):
    """Focused and unfocused, the icon buttons (gear, attach, a message's copy / edit / delete /
    regenerate, the version arrows) drew the very same pixels: 0 differed (trial 38)."""
    win = answered
    seen = {}
    for name in MAIN_CONTROLS:
        widget = next(w for w in win.findChildren(QWidget, name) if w.isVisible() and w.isEnabled())
        seen[name] = ring(widget)
    seen["composer"] = ring(win.composer, win.composer.parentWidget())  # the frame round it draws the ring
    faint = {name: (pixels, round(best, 2)) for name, (pixels, best) in seen.items()
             if pixels < RING_MIN_PIXELS or best < 3.0}
    assert faint == {}, seen


def test_the_chat_lists_current_item_is_ringed(answered):
    """With several chats, the focused list shows which chat Enter / Delete acts on: the current
    item's own ring, not only the list's."""
    win = answered
    win.new_chat()
    win.composer.setPlainText("Second chat")
    win.send_message()
    QTest.qWait(300)
    items = win.sidebar.list
    assert len(win.sidebar.chat_items()) == 2
    items.setCurrentItem(win.sidebar.chat_items()[1])
    rect = items.visualItemRect(win.sidebar.chat_items()[1])
    item = QWidget(items.viewport())  # a stand-in placed on the item, to measure just its rectangle
    item.setGeometry(rect)
    item.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
    item.show()
    pixels, best = ring(items, item)
    assert pixels >= RING_MIN_PIXELS and best >= 3.0, (pixels, best)


def test_settings_and_model_manager_controls_show_their_focus(answered):
    """The dialogs' native controls mostly had a ring; not a combo box, the default button (OK),
    an empty list or a read-only report."""
    win = answered
    faint = {}
    for dialog in (win.open_settings_dialog(), win.open_model_manager()):
        dialog.activateWindow()
        QTest.qWaitForWindowActive(dialog)
        for widget in dialog.findChildren(QWidget):
            if (widget.isVisible() and widget.isEnabled() and widget.focusPolicy() & Qt.FocusPolicy.TabFocus
                    and not widget.objectName().startswith("qt_")):
                dialog.scroll.ensureWidgetVisible(widget)  # as Tab does: on a small screen the content scrolls
                pixels, best = ring(widget)
                if pixels < RING_MIN_PIXELS or best < 1.5:  # Fusion's own rings are paler than ours
                    faint[f"{type(widget).__name__}#{widget.objectName()}"] = (pixels, round(best, 2))
        dialog.hide()
    assert faint == {}


def _tab_walk(win, steps: int) -> list[str]:
    names = []
    for _ in range(steps):
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        names.append(QApplication.focusWidget().objectName())
    return names


def test_tab_goes_sidebar_header_transcript_composer(qtbot, window):
    """From the composer, Tab went through each message's three buttons before New chat or Settings."""
    from .test_conversations import ask

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    for question in ("first", "second"):
        ask(qtbot, window, question)
    window.composer.setFocus()
    walk = _tab_walk(window, 30)
    cycle = walk[:walk.index("composer") + 1]
    assert cycle[:6] == ["newChatButton", "conversationSearch", "conversationList", "modelPicker",
                         "settingsButton", "transcript"]
    assert cycle[-2:] == ["attachButton", "composer"]
    messages = cycle[6:-2]
    assert messages.count("editMessage") == 2 and messages.count("regenerateMessage") == 2
    assert messages[:3] == ["copyMessage", "editMessage", "deleteMessage"]  # the first question's, first
    # Another chat's messages (new widgets) land in the transcript's place too.
    window.new_chat()
    ask(qtbot, window, "third")
    window.composer.setFocus()
    walk = _tab_walk(window, 16)
    assert walk[:6] == cycle[:6] and walk[6:9] == ["copyMessage", "editMessage", "deleteMessage"]
    assert walk[walk.index("attachButton") + 1] == "composer"


def test_the_search_fields_magnifier_is_named(window):
    """An unnamed button to a screen reader (no name, no tooltip)."""
    search = window.sidebar.search
    buttons = [b for b in search.findChildren(QToolButton) if b.isVisible()]
    assert len(buttons) == 1
    magnifier = buttons[0]
    assert QAccessible.queryAccessibleInterface(magnifier).text(QAccessible.Text.Name) == "Search chats"
    assert magnifier.toolTip() == "Search chats"
    assert magnifier.focusPolicy() == Qt.FocusPolicy.NoFocus  # not a Tab stop of its own
    window.composer.setFocus()
    magnifier.click()
    assert QApplication.focusWidget() is search and isinstance(search, QLineEdit)


def test_an_answers_text_comes_before_its_buttons(answered):
    """Trial 38b: an answer's text (and its code's Copy) took the focus after the answer's own buttons,
    because Qt appends the widgets that rendering the finished answer makes at the end of the chain."""
    answered.composer.setFocus()
    expected = ["copyMessage", "editMessage", "deleteMessage", "assistantText", "copyCode", "codeText",
                "previousVersion", "copyMessage", "regenerateMessage", "deleteMessage", "attachButton", "composer"]
    walk = _tab_walk(answered, 20)
    start = walk.index("copyMessage")
    assert walk[start:start + len(expected)] == expected
    # The same once the chat is opened again (its widgets made before they join the window; the
    # banner, and its button, gone with the chat that was left).
    chat = answered.keeper.current_id
    answered.new_chat()
    answered.open_conversation(chat)
    QApplication.processEvents()
    answered.composer.setFocus()
    walk = _tab_walk(answered, 20)
    start = walk.index("copyMessage")
    assert walk[start:start + len(expected)] == expected


def test_tab_through_the_chat_list_keeps_a_new_chat_open(qtbot, window):
    """Trial 50: from a new chat, Tab reaching the chat list opened its first chat (Qt makes a list's
    first row current on focus), the unsent text going along. Focus alone changes nothing now; an
    arrow key opens a chat."""
    from .test_conversations import ask

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    ask(qtbot, window, "first")
    chat = window.keeper.current_id
    window.new_chat()
    window.composer.setPlainText("unsent words")
    window.sidebar.search.setFocus()
    QTest.keyClick(window.sidebar.search, Qt.Key.Key_Tab)
    assert QApplication.focusWidget() is window.sidebar.list
    assert window.keeper.current_id is None and window.composer.toPlainText() == "unsent words"
    walk = _tab_walk(window, 2)
    assert walk[0] == "modelPicker" and window.keeper.current_id is None
    QTest.keyClick(window.composer, Qt.Key.Key_Tab, Qt.KeyboardModifier.ShiftModifier)
    window.sidebar.list.setFocus(Qt.FocusReason.BacktabFocusReason)
    assert window.keeper.current_id is None
    QTest.keyClick(window.sidebar.list, Qt.Key.Key_Down)
    assert window.keeper.current_id == chat


def test_tab_leaves_the_system_prompt_for_the_other_settings(qtbot, window):
    """Trial 50: the settings open in the system prompt, where Tab typed tab characters: the other
    settings were out of reach forwards, and Enter then saved a prompt of tabs."""
    dialog = window.open_settings_dialog()
    dialog.activateWindow()
    QTest.qWaitForWindowActive(dialog)
    dialog.system_prompt.setFocus()
    QTest.keyClick(dialog.system_prompt, Qt.Key.Key_Tab)
    assert dialog.system_prompt.toPlainText() == window.settings.system_prompt
    assert dialog.focusWidget() is not dialog.system_prompt and dialog.isAncestorOf(dialog.focusWidget())
    dialog.reject()


def test_version_arrows_and_regenerate_keep_the_focus_on_the_answer(qtbot, answered):
    """Trial 50: ‹ › or Regenerate pressed from the keyboard replaced the answer, and Qt gave the focus
    to the Attach button (a space typed next opened the file dialog). The focus stays on the answer."""
    win = answered
    answer = win.transcript.widgets()[1]
    arrow = answer.findChild(QToolButton, "previousVersion")
    arrow.setFocus()
    QTest.keyClick(arrow, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: win.transcript.widgets()[1] is not answer, timeout=3000)
    first = win.transcript.widgets()[1]
    qtbot.waitUntil(lambda: first.isAncestorOf(QApplication.focusWidget()), timeout=3000)
    assert QApplication.focusWidget().objectName() == "nextVersion"  # ‹ is disabled at version 1
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: win.transcript.widgets()[1] is not first, timeout=3000)
    second = win.transcript.widgets()[1]
    qtbot.waitUntil(lambda: second.isAncestorOf(QApplication.focusWidget()), timeout=3000)
    assert QApplication.focusWidget().objectName() == "previousVersion"
    regenerate = second.findChild(QToolButton, "regenerateMessage")
    regenerate.setFocus()
    on_the_answer = lambda: (QApplication.focusWidget() is win.transcript  # noqa: E731 - (a streaming answer has no button yet)
                             or win.transcript.widgets()[1].isAncestorOf(QApplication.focusWidget()))
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        QTest.keyClick(regenerate, Qt.Key.Key_Space)
        qtbot.waitUntil(lambda: win.transcript.widgets()[1] is not second, timeout=3000)
        qtbot.waitUntil(on_the_answer, timeout=3000)
    assert on_the_answer()  # also once it is finished


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_sent_photo_is_a_tab_stop_that_opens_with_enter_or_space(qtbot, make_window, app_style, png, theme):
    """Trial 50 (F7): a sent photo's thumbnail opened the full-size viewer by mouse only (no focus).
    Tab reaches it (before its question's buttons), it shows a ring, says what it does, Enter or Space
    opens the viewer, and closing the viewer puts the focus back on it."""
    from app.theme import apply_theme

    apply_theme(theme)
    win = make_window(FakeBackend())
    win.resize(1100, 760)
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.add_files([str(png)])
    win.composer.setPlainText("What is this?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.send_message()
    QApplication.processEvents()
    image = win.transcript.widgets()[0].findChild(QWidget, "messageImage")
    assert QAccessible.queryAccessibleInterface(image).text(QAccessible.Text.Name) == "View photo.png full size"
    pixels, best = ring(image)
    assert pixels >= RING_MIN_PIXELS and best >= 3.0, (pixels, best)
    win.transcript.setFocus(Qt.FocusReason.TabFocusReason)
    assert _tab_walk(win, 2) == ["messageImage", "copyMessage"]
    for key in (Qt.Key.Key_Return, Qt.Key.Key_Space):
        QTest.keyClick(image, Qt.Key.Key_Tab, Qt.KeyboardModifier.ShiftModifier)  # (back onto the photo)
        assert QApplication.focusWidget() is image
        QTest.keyClick(image, key)
        viewer = image.viewer
        assert viewer is not None and viewer.isVisible() and viewer.windowTitle() == "photo.png"
        qtbot.waitUntil(viewer.isActiveWindow, timeout=5000)
        QTest.keyClick(viewer, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is image, timeout=3000)
        QTest.keyClick(image, Qt.Key.Key_Tab)


def test_the_model_folder_dialog_gives_the_focus_back_to_the_picker(qtbot, window, monkeypatch):
    """Trial 51: after Open model folder… the focus came back on the Settings button."""
    from PySide6.QtWidgets import QFileDialog

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: "/models/other")
    window.composer.setFocus()
    window.model_picker._choose()
    qtbot.waitUntil(lambda: window.model_info.get("path") == "/models/other", timeout=5000)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.model_picker, timeout=3000)


def test_edit_puts_the_cursor_at_the_end_of_the_question(qtbot, window):
    """Trial 52: the caret sat at the question's start, so words typed to extend it went in front."""
    from .test_conversations import ask

    ask(qtbot, window, "What colour is the cat?")
    window.transcript.widgets()[0].actions_row.button("edit").click()
    assert window.composer.toPlainText() == "What colour is the cat?"
    assert window.composer.textCursor().position() == len("What colour is the cat?")


def test_the_picker_gets_the_focus_back_also_when_the_window_is_activated_late(qtbot, window, monkeypatch):
    """Trial 52: under a window manager the window is active again only after the dialog's return (X11
    activates asynchronously): the load then turned the picker off with no application focus on it,
    and the focus ended on the Settings button."""
    from PySide6.QtWidgets import QFileDialog, QWidget

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    other = QWidget()
    qtbot.addWidget(other)

    def dialog(*_args, **_kwargs):  # another window keeps the activation past the dialog's return
        other.show()
        other.activateWindow()
        qtbot.waitUntil(other.isActiveWindow, timeout=5000)
        return "/models/other"

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", dialog)
    monkeypatch.setattr(window, "activateWindow", lambda: None)  # (the activation asked for comes later)
    window.model_picker._choose()
    qtbot.waitUntil(lambda: window.model_info.get("path") == "/models/other", timeout=5000)
    other.hide()
    monkeypatch.undo()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    assert QApplication.focusWidget() is window.model_picker
