"""What a screen reader gets (trial 50): the status bar's words, which message a button acts on, named
controls, headings read as headings, and announcements of what changes away from the focus."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import QLabel, QLineEdit, QToolButton

from app.backends.fake import FakeBackend


def name(widget) -> str:
    return QAccessible.queryAccessibleInterface(widget).text(QAccessible.Text.Name)


def description(widget) -> str:
    return QAccessible.queryAccessibleInterface(widget).text(QAccessible.Text.Description)


@pytest.fixture
def said(monkeypatch):
    """The announcements made (text, assertive), as if a screen reader listened."""
    import app.a11y

    heard: list[tuple[str, bool]] = []

    class Listening:
        AnnouncementPoliteness = QAccessible.AnnouncementPoliteness

        @staticmethod
        def isActive() -> bool:  # noqa: N802 - Qt's name
            return True

        @staticmethod
        def updateAccessibility(event) -> None:  # noqa: N802 - Qt's name
            heard.append((event.message(), event.politeness() == QAccessible.AnnouncementPoliteness.Assertive))

    monkeypatch.setattr(app.a11y, "QAccessible", Listening)
    return heard


def answered(qtbot, make_window):
    win = make_window(FakeBackend(tokens=["The", " cat", " is", " orange", "."]))
    win.composer.setPlainText("What colour is the cat in this long question about pets?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    return win


def test_the_status_bar_says_its_text(qtbot, make_window):
    """A fixed name ("Model and answer statistics") hid "ready", "loading…" and why an answer stopped."""
    win = answered(qtbot, make_window)
    assert name(win.stats_label) == win.stats_label.text() and "tok/s" in win.stats_label.text()
    assert description(win.stats_label) == "Model and answer statistics"


def test_a_messages_buttons_say_whose_they_are(qtbot, make_window):
    win = answered(qtbot, make_window)
    question, answer = win.transcript.widgets()
    q, a = question.actions_row, answer.actions_row
    assert [name(q.button(n)) for n in ("copy", "edit", "delete")] == [
        "Copy question", "Edit question and resend", "Delete question"]
    assert [name(a.button(n)) for n in ("copy", "regenerate", "delete")] == [
        "Copy answer", "Regenerate answer", "Delete answer"]
    assert description(q.button("copy")) == "Question: What colour is the cat in this long question about pets?"
    assert description(a.button("delete")) == "Answer: The cat is orange."
    assert q.button("copy").toolTip() == "Copy text"  # (what the eye reads is unchanged)
    assert name(answer.findChild(QLabel, "assistantAvatar")) == "Answer"
    assert {name(view) for view in answer.rendered_widgets()} == {"Answer text"}


def test_a_long_message_is_quoted_by_its_start(qapp):
    from app.messages import UserMessage

    message = UserMessage("word " * 100, [])
    assert description(message.actions_row.button("edit")) == "Question: " + ("word " * 16).strip() + "…"


def test_the_sidebar_names_its_clear_button_rename_field_and_headings(qtbot, make_window):
    win = answered(qtbot, make_window)
    win.sidebar.search.setText("cat")
    clear = [b for b in win.sidebar.search.findChildren(QToolButton) if b.isVisible() and name(b) == "Clear search"]
    assert len(clear) == 1
    win.sidebar.search.clear()
    assert win.sidebar.headings() == ["Today"]
    heading = win.sidebar.list.item(0)
    assert heading.data(Qt.ItemDataRole.AccessibleTextRole) == "Today, heading"
    win.sidebar.start_rename(win.keeper.current_id)
    editor = win.sidebar.list.findChild(QLineEdit)
    assert editor is not None and name(editor) == "Chat title"


def test_banners_answers_and_versions_are_announced(qtbot, make_window, said):
    win = answered(qtbot, make_window)
    assert said[-1] == ("Answer finished", False)
    win.banner.show_error("Could not save the answer: the disk is full.")
    assert said[-1] == ("Could not save the answer: the disk is full.", True)
    win.banner.add_info("Another line.")
    assert said[-1] == ("Another line.", False)  # the new line, not the whole banner again
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.transcript.widgets()[1].actions_row.button("regenerate").click()
    win.transcript.widgets()[1].actions_row.versions.previous.click()
    assert said[-1] == ("Version 1 of 2 shown", False)
