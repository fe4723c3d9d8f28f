"""Composer formats and EXIF, shortcuts, Markdown with code blocks, pending image tokens, theme,
accessibility."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QSize, QStandardPaths, Qt
from PySide6.QtGui import QImage, QPalette
from PySide6.QtWidgets import QAbstractButton, QApplication, QComboBox, QLabel, QLineEdit, QListWidget, QWidget

from app.backends.fake import FakeBackend
from app.markdown import CodeBlock, split_blocks
from app.thumbnails import thumbnail
from tests.app.helpers import drop, file_mime


@pytest.mark.parametrize("fmt,ext", [("WEBP", "webp"), ("GIF", "gif"), ("BMP", "bmp"), ("TIFF", "tif"),
                                     ("JPEG", "jpg"), ("PNG", "png")])
def test_supported_formats_attach(window, tmp_path, fmt, ext):
    path = tmp_path / f"image.{ext}"
    Image.new("RGB", (30, 20), (10, 200, 90)).save(path, fmt)
    assert drop(window.composer, file_mime(path))
    assert window.attachments.paths() == [str(path.resolve())]


def test_animated_gif_is_accepted(window, tmp_path):
    path = tmp_path / "anim.gif"
    frames = [Image.new("RGB", (16, 16), c) for c in ("red", "blue")]
    frames[0].save(path, save_all=True, append_images=frames[1:])
    window.add_files([str(path)])
    assert window.attachments.paths() == [str(path.resolve())]


def test_exif_orientation_is_applied_to_thumbnails(qapp, tmp_path):
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise on display
    Image.new("RGB", (80, 40), "white").save(path, exif=exif)
    pixmap = thumbnail(str(path), QSize(200, 200))
    assert pixmap.height() > pixmap.width()  # shown upright: portrait


def test_image_data_dragged_from_a_browser_is_attached(window, data_dir):
    image = QImage(20, 10, QImage.Format.Format_RGB32)
    image.fill(Qt.GlobalColor.red)
    mime = QMimeData()
    mime.setImageData(image)
    assert drop(window, mime)
    [path] = window.attachments.paths()
    assert path.startswith(str((data_dir / "pasted").resolve()))


def test_escape_stops_and_ctrl_n_starts_a_new_chat(qtbot, make_window):
    session = FakeBackend(tokens=["x "] * 2000, delay=0.005)
    win = make_window(session)
    win.composer.setPlainText("go")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as finished:
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: session.yielded > 5, timeout=5000)
        qtbot.keyClick(win.composer, Qt.Key.Key_Escape)
    assert finished.args[0]["finish_reason"] == "cancelled"
    assert win.actions["new_chat"].shortcut().toString() == "Ctrl+N"
    win.actions["new_chat"].trigger()
    assert win.transcript.messages() == [] and win.keeper.current_id is None


def test_shortcuts_are_listed_in_the_help_menu(window):
    from app.menus import shortcut_rows

    keys = dict(shortcut_rows(window))
    for key in ("Ctrl+N", "Enter", "Shift+Enter", "Esc", "Ctrl+V", "Ctrl+,"):
        assert key in keys, key
    from PySide6.QtWidgets import QDialog, QTableWidget

    assert window.findChild(QDialog, "shortcutsDialog") is None
    window.actions["shortcuts"].trigger()  # returns None: look for the dialog it opened
    dialog = window.findChild(QDialog, "shortcutsDialog")
    assert dialog is not None and dialog.isVisible()
    table = dialog.findChild(QTableWidget, "shortcutsTable")
    shown = {table.item(row, 0).text(): table.item(row, 1).text() for row in range(table.rowCount())}
    assert shown["Ctrl+N"] == "New chat" and shown["Esc"].startswith("Stop the answer")
    help_menu = [a for a in window.menuBar().actions() if a.text() == "&Help"]
    assert help_menu and help_menu[0].menu().actions()[0].text() == "&Keyboard shortcuts"


def test_the_shortcuts_dialog_takes_the_focus_closes_and_gives_it_back(qtbot, window):
    """Trial 50 (F16): Help ▸ Keyboard shortcuts was one label: nothing in it took the focus (a screen
    reader met an empty dialog), only Esc closed it, the focus then went to the Attach button, and how
    to reach a message's buttons was not listed. Now its table has the focus and is read row by row,
    Tab reaches a Close button, and closing (by Close or Esc) puts the focus back where it was."""
    import shiboken6
    from PySide6.QtGui import QAccessible
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QDialog, QPushButton, QTableWidget

    from .test_conversations import ask

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    ask(qtbot, window, "What is this?")
    regenerate = window.transcript.widgets()[1].actions_row.button("regenerate")
    for close_with in (Qt.Key.Key_Space, Qt.Key.Key_Escape):  # Space on the Close button; Esc
        regenerate.setFocus(Qt.FocusReason.TabFocusReason)
        QTest.keyClick(regenerate, Qt.Key.Key_Slash, Qt.KeyboardModifier.ControlModifier)
        dialog = window.findChild(QDialog, "shortcutsDialog")
        qtbot.waitUntil(dialog.isActiveWindow, timeout=5000)
        table = dialog.findChild(QTableWidget, "shortcutsTable")
        assert QApplication.focusWidget() is table and table.currentRow() == 0
        assert QAccessible.queryAccessibleInterface(table).text(QAccessible.Text.Name) == "Keyboard shortcuts"
        rows = {table.item(row, 0).text(): table.item(row, 1).text() for row in range(table.rowCount())}
        assert all(name in rows["Tab, Shift+Tab"] for name in ("Copy", "Edit", "Regenerate", "Delete", "‹ ›"))
        assert "Regenerate" in rows["Space"] and rows["Home, End in the chat"] == "The chat's first, newest message"
        assert rows["F3"] == "Older match in this chat"
        assert rows["Enter, Space on a photo or video"] == "View a sent photo full size, play a sent video"
        QTest.keyClick(table, Qt.Key.Key_Down)  # the arrows move through the rows, and Tab leaves them
        assert table.currentRow() == 1
        QTest.keyClick(table, Qt.Key.Key_Tab)
        close = QApplication.focusWidget()
        assert isinstance(close, QPushButton) and close.text() == "Close"
        QTest.keyClick(close, close_with)
        qtbot.waitUntil(lambda: not shiboken6.isValid(dialog) or not dialog.isVisible(), timeout=3000)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is regenerate, timeout=3000)
        assert window.isActiveWindow()


def test_markdown_blocks_and_code_copy(qtbot, make_window):
    answer = "Here is code:\n\n```python\nprint('hi')\n```\n\nAnd **bold** text."
    assert [b.kind for b in split_blocks(answer)] == ["text", "code", "text"]
    assert split_blocks(answer)[1].language == "python" and split_blocks(answer)[1].text == "print('hi')"
    assert split_blocks("```\nunclosed")[0].text == "unclosed"
    words = answer.split(" ")
    win = make_window(FakeBackend(tokens=[w if i == 0 else " " + w for i, w in enumerate(words)]))
    win.composer.setPlainText("code please")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    widgets = win.transcript.last_assistant().rendered_widgets()
    assert [type(w).__name__ for w in widgets] == ["RichText", "CodeBlock", "RichText"]
    assert "**" not in widgets[2].toPlainText() and "bold" in widgets[2].toPlainText()
    code = win.transcript.last_assistant().findChild(CodeBlock)
    code.findChild(QAbstractButton, "copyCode").click()
    assert QApplication.clipboard().text() == "print('hi')"


def test_status_bar_shows_image_tokens_of_pending_attachments(qtbot, window, png):
    drop(window.composer, file_mime(png))
    qtbot.waitUntil(lambda: "1,088" in window.pending_label.text(), timeout=5000)
    assert window.pending_label.text() == "1 image · 1,088 image tokens (full)"
    window.attachments.clear()
    assert window.pending_label.text() == ""


def test_theme_follows_setting(qapp):
    from app.theme import apply_theme

    assert apply_theme("dark") is True
    assert qapp.palette().color(QPalette.ColorRole.Base).lightness() < 80
    assert apply_theme("light") is False
    assert qapp.palette().color(QPalette.ColorRole.Base).lightness() > 200


def test_controls_have_accessible_names_and_svg_icons(window):
    from app.paths import resource

    window.open_model_manager()
    window.open_settings_dialog()
    unnamed = []
    for top in [window, window.model_manager]:
        for widget in top.findChildren(QAbstractButton) + top.findChildren(QLineEdit) + top.findChildren(
                QComboBox) + top.findChildren(QListWidget):
            if widget.objectName().startswith("qt_") or isinstance(widget.parent(), QLineEdit):
                continue  # Qt's own sub-controls (a line edit's clear / icon buttons)
            if not (widget.accessibleName() or (isinstance(widget, QAbstractButton) and widget.text())):
                unnamed.append(f"{type(widget).__name__}#{widget.objectName()}")
    assert unnamed == []
    for name in ("send", "stop", "attach", "copy", "edit", "regenerate", "delete", "new-chat", "settings", "models"):
        assert resource(f"icons/{name}.svg").read_text().startswith("<svg"), name


def test_the_window_fits_half_a_laptop_screen(qtbot, window):
    """Found by a trial: the composer's one-line hint held the window at least 729 px wide, so it
    could not be snapped to half of a 1366-px screen; it wraps instead, every word still shown."""
    from PySide6.QtWidgets import QApplication, QLabel

    window.show()
    qtbot.waitExposed(window)
    assert window.minimumSizeHint().width() <= 1366 // 2, window.minimumSizeHint()
    window.resize(1366 // 2, 700)
    for _ in range(5):
        QApplication.processEvents()
    hint = window.findChild(QLabel, "composerHint")
    assert hint.height() >= hint.heightForWidth(hint.width()) > hint.fontMetrics().lineSpacing()  # wrapped, whole


@pytest.mark.parametrize("zoom_steps", [0, 5])
def test_the_message_box_shows_a_whole_line_at_the_windows_minimum_size(qtbot, make_window, zoom_steps):
    """Trial 50 (F15): at the window's minimum size the placeholder "Ask about an image…" was cut in half:
    the key hint under the box wrapped onto more lines than the window's minimum height had room for,
    and the layout squeezed the box's frame below its own height (by the hint's extra line). At 100 %
    and at 200 % (a taller box)."""
    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtWidgets import QApplication, QLabel

    from app.paths import resource

    QApplication.instance().setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    try:
        win = make_window(FakeBackend())
        qtbot.waitExposed(win)
        for _ in range(zoom_steps):
            win.actions["zoom_in"].trigger()
        hint = win.findChild(QLabel, "composerHint")
        for _ in range(3):
            win.resize(100, 100)  # to the minimum
            for _ in range(5):
                QApplication.processEvents()
        composer, frame = win.composer, win.composer.parentWidget()
        inside = QRect(composer.mapTo(frame, QPoint(0, 0)), composer.size())
        seen = (win.size().toTuple(), hint.height() // hint.fontMetrics().lineSpacing())  # (size, hint's lines)
        assert hint.height() >= hint.heightForWidth(hint.width()) > hint.fontMetrics().lineSpacing(), seen
        assert frame.height() >= frame.minimumSizeHint().height(), seen
        assert frame.contentsRect().contains(inside), seen  # the box whole inside its frame
        assert composer.viewport().height() >= composer.fontMetrics().lineSpacing(), seen
    finally:
        QApplication.instance().setStyleSheet("")


def test_ctrl_o_attaches_files_through_the_chat_menu(window, monkeypatch, shared_dir):
    """The attach button's file dialog has a menu item and a key (Ctrl+O), listed in the shortcut
    sheet; the files picked are attached."""
    from PySide6.QtWidgets import QFileDialog

    from app.menus import shortcut_rows

    assert window.actions["attach"].shortcut().toString() == "Ctrl+O"
    assert dict(shortcut_rows(window))["Ctrl+O"] == "Attach files"
    chat_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Chat")
    assert chat_menu.actions()[0] is window.actions["attach"]
    photo = str(shared_dir / "images" / "astronaut.png")
    asked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: (asked.append(a[1:3]) or ([photo], "")))
    window.actions["attach"].trigger()
    # Found by a trial: the dialog opened in the folder Smolchat was started from. Pictures (or the
    # home folder without one) first, then the folder of the files picked last.
    pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
    first = pictures if pictures and Path(pictures).is_dir() else str(Path.home())
    assert asked == [("Attach images, videos or PDFs", first)]
    assert window.attachments.paths() == [photo]
    window.attachments.clear()
    window.actions["attach"].trigger()
    assert asked[1] == ("Attach images, videos or PDFs", str(shared_dir / "images"))


def test_the_keyboard_switches_chats_finds_them_and_shows_stop(qtbot, make_window):
    """Found by a trial: no key switched chats or reached the search field, and Chat ▸ Stop answer
    showed no key and was on with nothing to stop."""
    from app.menus import shortcut_rows

    win = make_window(FakeBackend(tokens=["Yes", "."]))
    stop = win.actions["stop"]
    assert stop.text() == "&Stop answer\tEsc" and not stop.isEnabled()
    for question in ("First", "Second", "Third"):
        win.new_chat()
        win.composer.setPlainText(question)
        with qtbot.waitSignal(win.answer_finished, timeout=5000):
            qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    ids = win.sidebar.ids()  # newest first: Third, Second, First
    assert [win.store.conversation(i).title for i in ids] == ["Third", "Second", "First"]
    assert win.keeper.current_id == ids[0]
    win.composer.setFocus()
    qtbot.keyClick(win.composer, Qt.Key.Key_PageDown, Qt.KeyboardModifier.ControlModifier)
    assert win.keeper.current_id == ids[1] and win.transcript.widgets()[0].text == "Second"
    qtbot.keyClick(win.composer, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)
    assert win.keeper.current_id == ids[2]
    qtbot.keyClick(win.composer, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)  # round to the top
    assert win.keeper.current_id == ids[0]
    qtbot.keyClick(win.composer, Qt.Key.Key_PageUp, Qt.KeyboardModifier.ControlModifier)
    assert win.keeper.current_id == ids[2]
    qtbot.keyClick(win.composer, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert win.sidebar.search.hasFocus()
    keys = dict(shortcut_rows(win))
    assert keys["Ctrl+PgDown, Ctrl+Tab"] == "Next chat" and keys["Ctrl+F"] == "Search chats"


def test_ctrl_z_undoes_a_chat_delete_outside_the_message_box(qtbot, make_window):
    """Found by a trial: Del deleted the chat with an Undo in the banner, but Ctrl+Z did nothing; in
    the message box Ctrl+Z stays the text's own undo."""
    win = make_window(FakeBackend(tokens=["Yes", "."]))
    win.composer.setPlainText("Keep me")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    [chat] = win.sidebar.ids()
    win.sidebar.list.setFocus()
    qtbot.keyClick(win.sidebar.list, Qt.Key.Key_Delete)
    assert win.sidebar.ids() == [] and win.banner.message().startswith("Deleted “Keep me”")
    qtbot.keyClicks(win.composer, "abc")
    qtbot.keyClick(win.composer, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert win.composer.toPlainText() != "abc" and win.sidebar.ids() == []  # the text's undo, not the chat's
    win.sidebar.list.setFocus()
    qtbot.keyClick(win.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert win.sidebar.ids() == [chat] and win.keeper.current_id == chat and win.banner.message() == ""


def test_the_chat_reopened_at_start_is_scrolled_into_view_in_the_list(qtbot, make_window):
    """Found by a trial: with 200 chats, the one reopened at start was highlighted below the list's fold."""
    win = make_window(FakeBackend())
    for i in range(60):
        win.store.create_conversation(f"chat number {i}")
    ids = [c.id for c in win.store.conversations()]
    win.refresh_sidebar()
    win.open_conversation(ids[45])  # far down the list (newest first)
    win.resize(800, 600)
    win.close()
    again = make_window(FakeBackend())
    again.resize(800, 600)
    qtbot.waitExposed(again)
    qtbot.wait(50)
    assert again.keeper.current_id == ids[45]
    item = again.sidebar.list.currentItem()
    rect, view = again.sidebar.list.visualItemRect(item), again.sidebar.list.viewport().rect()
    assert view.contains(rect), (rect, view)


def test_a_chat_restored_while_a_search_hides_it_is_listed(qtbot, make_window):
    """Found by a trial: a chat deleted and restored by Undo while the sidebar's search matched
    nothing of it was opened but not listed (the search is cleared so it shows)."""
    win = make_window(FakeBackend(tokens=["Yes", "."]))
    win.composer.setPlainText("Keep me")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    [chat] = win.sidebar.ids()
    win.delete_conversation(chat)
    qtbot.keyClicks(win.sidebar.search, "zebra")
    assert win.sidebar.ids() == []
    win.banner.undo()
    assert win.keeper.current_id == chat and win.sidebar.ids() == [chat] and win.sidebar.search.text() == ""
    qtbot.keyClicks(win.sidebar.search, "Keep")  # a search that lists the open chat is left alone
    win.open_conversation(chat)
    assert win.sidebar.search.text() == "Keep" and win.sidebar.ids() == [chat]


def test_esc_in_the_chat_search_clears_it_and_a_remote_chat_names_its_server(qtbot, make_window):
    """Found by a trial: Esc left the search's filter on; an empty chat with a server's model said
    "Everything runs on this computer"."""
    win = make_window(FakeBackend())
    win.actions["search"].trigger()
    qtbot.keyClicks(win.sidebar.search, "cats")
    qtbot.keyClick(win.sidebar.search, Qt.Key.Key_Escape)
    assert win.sidebar.search.text() == ""
    win._on_model_loaded({**win.model_info, "backend": "remote:Box", "device": "Box"})
    assert win.transcript._empty.text().endswith("\nAnswers come from the server Box.")


def test_esc_in_the_chat_search_clears_it_while_an_answer_runs_and_then_stops_it(qtbot, make_window):
    """Trial 50: Esc in the search, meant to clear it, cancelled the answer being waited for."""
    win = make_window(FakeBackend(tokens=[f" w{i}" for i in range(400)], delay=0.01))
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.composer.setPlainText("Write a long essay about rivers.")
    with qtbot.waitSignal(win.answer_finished, timeout=20_000) as finished:
        win.send_message()
        qtbot.waitUntil(lambda: len(win.transcript.widgets()[-1].text) > 20, timeout=5000)
        win.actions["search"].trigger()
        qtbot.keyClicks(win.sidebar.search, "riv")
        qtbot.keyClick(win.sidebar.search, Qt.Key.Key_Escape)
        assert win.sidebar.search.text() == "" and win._busy  # cleared; the answer goes on
        qtbot.keyClick(win.sidebar.search, Qt.Key.Key_Escape)  # the next Esc stops it
    assert finished.args[0]["finish_reason"] == "cancelled"
    assert win.sidebar.search.hasFocus()  # (the end of the answer does not take the focus away)


def test_an_empty_chat_list_says_so(qtbot, make_window):
    """Trial 51: with every chat deleted the list was a blank box."""
    win = make_window(FakeBackend(tokens=["ok"]))
    label = win.sidebar.findChild(QLabel, "noChats")
    assert win.sidebar.ids() == [] and label.isVisibleTo(win.sidebar)
    assert label.text() == "No chats yet: a message you send starts one"
    win.composer.setPlainText("hello")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    assert not label.isVisibleTo(win.sidebar)
    win.sidebar.search.setText("zebra")
    assert label.isVisibleTo(win.sidebar) and label.text() == "No chat holds these words"
    win.sidebar.search.clear()
    win.delete_conversation(win.keeper.current_id)
    assert label.isVisibleTo(win.sidebar) and label.text().startswith("No chats yet")


def test_the_window_opens_as_it_was_closed_and_a_hand_edited_value_is_ignored(qtbot, make_window, data_dir):
    """Trial 60: the window opened at 1080 x 720 in the default place at every start, its sidebar at
    its default width."""
    from app.window_layout import GEOMETRY_KEY

    first = make_window(FakeBackend())
    first_size = first.size()  # the default, fitted to the test's screen
    first.resize(700, 500)
    first.centralWidget().setSizes([300, 400])
    sizes = first.centralWidget().sizes()
    assert first.close()
    second = make_window(FakeBackend())
    assert (second.width(), second.height()) == (700, 500)
    assert second.centralWidget().sizes() == sizes and sizes[0] == 300
    assert second.close()
    second.qsettings.setValue(GEOMETRY_KEY, "not a geometry")
    second.qsettings.sync()
    third = make_window(FakeBackend())
    assert (third.width(), third.height()) == (first_size.width(), first_size.height())  # the default


def test_a_narrowed_short_window_gives_the_chat_its_room(qtbot, make_window):
    """Trial 62: at 800 × 500 (a large font) the chat list kept 45% of the width and the keys hint under
    the message box took three lines of the ~150 px left to the messages."""
    win = make_window(FakeBackend())
    win.resize(1400, 900)
    qtbot.waitExposed(win)
    splitter = win.centralWidget()
    splitter.setSizes([560, 840])  # the list widened by the user
    assert win.composer_hint.isVisible()
    win.resize(800, 500)
    QApplication.processEvents()
    sidebar, chat = splitter.sizes()
    assert sidebar == max(win.sidebar.minimumSizeHint().width(), int((sidebar + chat) * 0.35))
    assert not win.composer_hint.isVisible()
    win.resize(1400, 900)  # widened: the list keeps the width it has, the hint comes back
    QApplication.processEvents()
    assert splitter.sizes()[0] == sidebar and win.composer_hint.isVisible()


def test_a_banner_in_a_short_window_takes_a_fifth_of_it_and_scrolls_the_rest(qtbot, make_window):
    """Trial 63: at 800 x 500 with a large font a four-line banner covered two thirds of the messages."""
    win = make_window(FakeBackend())
    win.resize(900, 800)
    qtbot.waitExposed(win)
    lines = "\n".join(f"Line {i} of a long notice about the settings file." for i in range(6))
    win.banner.show_error(lines)
    QApplication.processEvents()
    scroll = win.banner.findChild(QWidget, "bannerScroll")
    line = scroll.widget().fontMetrics().lineSpacing()
    assert scroll.height() >= 6 * line - 2  # a tall window: all six lines
    win.resize(800, 400)
    QApplication.processEvents()
    assert scroll.height() <= max(2 * line, 400 // 5) and scroll.height() >= 2 * line - 2
