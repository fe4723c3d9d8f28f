"""Answer versions in the window: regenerate and edit keep every version; "‹ n / m ›" switches branches,
each with its own later messages, and the backend is given exactly that branch's history."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from app.backends.fake import FakeBackend


def ask(qtbot, win, text: str) -> dict:
    win.composer.setPlainText(text)
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as finished:
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    return finished.args[0]


def shown(win) -> list[str]:
    return [m["text"] for m in win.transcript.messages()]


def switchers(win) -> list[str]:
    return [w.actions_row.versions.text() for w in win.transcript.widgets()]


def click(qtbot, win, index: int, name: str) -> None:
    switcher = win.transcript.widgets()[index].actions_row.versions
    qtbot.mouseClick(getattr(switcher, name), Qt.MouseButton.LeftButton)


def undo(qtbot, win) -> None:
    from PySide6.QtWidgets import QPushButton

    action = win.banner.findChild(QPushButton, "bannerAction")
    assert action.isVisible() and action.text() == "Undo"
    qtbot.mouseClick(action, Qt.MouseButton.LeftButton)


def regenerated(qtbot, make_window):
    """A chat "What colour?" / "Orange." / "Why?" / "Orange." whose first answer was regenerated as "Ginger!";
    returns the window and its fake backend."""
    fake = FakeBackend(tokens=["Orange", "."])
    win = make_window(fake)
    ask(qtbot, win, "What colour?")
    ask(qtbot, win, "Why?")
    fake.tokens = ["Ginger", "!"]
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.transcript.widgets()[1].actions_row.button("regenerate").click()
    return win, fake


def test_regenerate_keeps_the_old_answer_and_its_branch(qtbot, make_window, data_dir):
    win, fake = regenerated(qtbot, make_window)
    assert shown(win) == ["What colour?", "Ginger!"]
    assert switchers(win) == ["", "‹ 2 / 2 ›"]
    ask(qtbot, win, "Sure?")  # continues the new branch
    assert shown(win) == ["What colour?", "Ginger!", "Sure?", "Ginger!"]

    click(qtbot, win, 1, "previous")  # back to the first answer, with its own follow-up
    assert shown(win) == ["What colour?", "Orange.", "Why?", "Orange."]
    assert switchers(win) == ["", "‹ 1 / 2 ›", "", ""]
    assert not win.transcript.widgets()[1].actions_row.versions.previous.isEnabled()
    fake.tokens = ["Because", "."]
    ask(qtbot, win, "Really?")  # the model is given exactly this branch's history
    assert fake.calls[-1]["turns"] == [("user", "What colour?", 0), ("assistant", "Orange.", 0),
                                       ("user", "Why?", 0), ("assistant", "Orange.", 0)]

    click(qtbot, win, 1, "next")
    assert shown(win) == ["What colour?", "Ginger!", "Sure?", "Ginger!"]
    ask(qtbot, win, "Ok?")
    assert [t[1] for t in fake.calls[-1]["turns"]] == ["What colour?", "Ginger!", "Sure?", "Ginger!"]
    conv_id = win.keeper.current_id
    win.close()

    again = make_window(FakeBackend())  # restored after a restart: the branch last shown
    assert again.keeper.current_id == conv_id
    assert shown(again) == ["What colour?", "Ginger!", "Sure?", "Ginger!", "Ok?", "Because."]
    assert switchers(again)[:2] == ["", "‹ 2 / 2 ›"]
    click(qtbot, again, 1, "previous")
    assert shown(again) == ["What colour?", "Orange.", "Why?", "Orange.", "Really?", "Because."]


def test_a_regenerate_that_never_starts_brings_back_the_answer_and_its_branch(qtbot, make_window):
    """Trial 55 F6: Regenerate with the server down added an empty "(failed)" version, shown instead of
    the answer (and its follow-up); now nothing is added and the branch is shown as it was."""
    fake = FakeBackend(tokens=["Orange", "."])
    win = make_window(fake)
    ask(qtbot, win, "What colour?")
    ask(qtbot, win, "Why?")
    fake.image_error, fake.error_type = "server: Connection refused", "Remote:refused"
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.transcript.widgets()[1].actions_row.button("regenerate").click()
    assert shown(win) == ["What colour?", "Orange.", "Why?", "Orange."]
    assert switchers(win) == ["", "", "", ""]
    assert win.banner.message() == "server: Connection refused"
    assert [m.text for m in win.store.messages(win.keeper.current_id)] == ["What colour?", "Orange.", "Why?",
                                                                         "Orange."]


def test_an_edited_question_is_a_new_version_beside_the_old_one(qtbot, make_window):
    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    ask(qtbot, win, "first question")
    ask(qtbot, win, "second question")
    win.transcript.widgets()[0].actions_row.button("edit").click()
    win.composer.setPlainText("edited question")
    fake.tokens = ["B", "."]
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert shown(win) == ["edited question", "B."]
    assert switchers(win) == ["‹ 2 / 2 ›", ""]
    assert fake.calls[-1]["turns"] == [] and fake.calls[-1]["text"] == "edited question"

    click(qtbot, win, 0, "previous")
    assert shown(win) == ["first question", "A.", "second question", "A."]
    branch = [("user", "first question"), ("assistant", "A."), ("user", "second question"), ("assistant", "A.")]
    qtbot.waitUntil(lambda: [(m.role, m.text) for m in fake.history] == branch, timeout=5000)  # its own thread
    # Deleting a version takes its branch with it (trial 38: its answer became "version 1" beside the
    # edited question); Undo in the banner brings them back as they were.
    win.transcript.widgets()[0].actions_row.button("delete").click()
    assert shown(win) == ["edited question", "B."] and switchers(win) == ["", ""]
    assert [m.text for m in win.store.all_messages(win.keeper.current_id)] == ["edited question", "B."]
    assert win.banner.message() == ("Deleted this version of your message and the 3 messages that followed it "
                                    "in its branch.")
    undo(qtbot, win)
    assert shown(win) == ["first question", "A.", "second question", "A."]
    assert switchers(win) == ["‹ 1 / 2 ›", "", "", ""]
    click(qtbot, win, 0, "next")
    assert shown(win) == ["edited question", "B."]


def test_export_gives_the_shown_branch_and_offers_the_other_versions(qtbot, make_window, tmp_path):
    import json

    from app.export import export_json, export_markdown

    win, _ = regenerated(qtbot, make_window)
    conv = win.keeper.current_id
    text = export_markdown(win.store, conv, tmp_path / "chat.md").read_text()
    assert "Ginger!" in text and "Why?" not in text  # the other branch's follow-up is not in this one
    assert "*Version 2 of 2*\n\nGinger!\n" in text
    assert "<details><summary>Other versions</summary>\n\n**Version 1**\n\nOrange.\n\n</details>" in text
    data = json.loads(export_json(win.store, conv, tmp_path / "chat.json").read_text())
    assert [(m["text"], m["version"], m["versions"]) for m in data["messages"]] == [
        ("What colour?", 1, 1), ("Ginger!", 2, 2)]
    assert [m["text"] for m in data["all_messages"]] == ["What colour?", "Orange.", "Why?", "Orange.", "Ginger!"]
    by_id = {m["id"]: m for m in data["all_messages"]}
    assert by_id[data["messages"][1]["parent_id"]]["text"] == "What colour?"


def test_a_failed_edit_keeps_the_version_on_screen_selected(qtbot, make_window, monkeypatch):
    import sqlite3

    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    ask(qtbot, win, "v1")
    win.transcript.widgets()[0].actions_row.button("edit").click()
    win.composer.setPlainText("v2")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    click(qtbot, win, 0, "previous")  # back to v1: shown and selected
    win.transcript.widgets()[0].actions_row.button("edit").click()
    win.composer.setPlainText("v3")
    real = win.store.add_message

    def answer_fails(conv_id, role, *args, **kwargs):
        if role == "assistant":
            raise sqlite3.OperationalError("database or disk is full")
        return real(conv_id, role, *args, **kwargs)
    monkeypatch.setattr(win.store, "add_message", answer_fails)
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert "Could not save the message" in win.banner.message() and win.composer.toPlainText() == "v3"
    assert shown(win) == ["v1", "A."] and switchers(win) == ["‹ 1 / 2 ›", ""]
    assert [m.text for m in win.store.messages(win.keeper.current_id)] == ["v1", "A."]  # v2 is not selected instead


def test_deleting_a_message_while_editing_another_ends_the_edit(qtbot, make_window):
    """An edit is of the message it was started on: a delete above it used to shift the messages
    under it, and sending then added the edited text after the wrong message (two questions in a
    row, the answer hidden). A delete, regenerate or version switch now ends the edit (the composer
    holds what it held before Edit again) and sending asks a new question."""
    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    for text in ("first question", "second question", "third question"):
        ask(qtbot, win, text)
    win.transcript.widgets()[4].actions_row.button("edit").click()
    assert win.banner.message().startswith("Editing a message")
    win.transcript.widgets()[0].actions_row.button("delete").click()
    assert win._editing is None and win.banner.message() == "Deleted your message and its answer."
    assert win.composer.toPlainText() == ""  # what it held before Edit
    assert shown(win) == ["second question", "A.", "third question", "A."]
    ask(qtbot, win, "EDITED third")
    assert shown(win) == ["second question", "A.", "third question", "A.", "EDITED third", "A."]
    assert switchers(win)[2] == ""  # no second version of the third question


def test_changing_buttons_are_greyed_out_while_an_answer_streams(qtbot, make_window):
    """The window ignores edit, regenerate, delete and the version switch during an answer: they are
    shown disabled then (Copy works), and come back when it ends, the new answer's too."""
    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    ask(qtbot, win, "first")
    fake.tokens = ["slow"] * 200
    fake.delay = 0.02
    win.composer.setPlainText("second")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(win.transcript.widgets()) == 4)
    rows = [w.actions_row for w in win.transcript.widgets()]
    assert not any(r.button("delete").isEnabled() for r in rows)
    assert not rows[0].button("edit").isEnabled() and not rows[1].button("regenerate").isEnabled()
    assert not rows[1].versions.isEnabled() and rows[0].button("copy").isEnabled()
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.stop()
    rows = [w.actions_row for w in win.transcript.widgets()]
    assert all(r.button("delete").isEnabled() for r in rows) and rows[3].button("regenerate").isEnabled()
    assert rows[1].versions.isEnabled()


def test_the_message_being_edited_is_scrolled_into_view(qtbot, make_window):
    """Found by a trial: Edit on a message scrolled half out of the transcript's top left it there,
    under the edit banner that appears above the transcript."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication

    win = make_window(FakeBackend(tokens=["A", "."]))
    win.resize(900, 600)
    win.show()
    qtbot.waitExposed(win)
    for i in range(12):
        ask(qtbot, win, f"question {i}")
    QApplication.processEvents()
    target = win.transcript.widgets()[8]  # "question 4"
    bar = win.transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > target.y() + target.height())
    bar.setValue(target.y() + target.height() // 2)  # its top half hidden
    QApplication.processEvents()
    viewport = win.transcript.viewport()
    assert target.mapTo(viewport, QPoint(0, 0)).y() < 0
    target.actions_row.button("edit").click()
    qtbot.waitUntil(lambda: target.mapTo(viewport, QPoint(0, 0)).y() >= 0, timeout=2000)


def test_greyed_out_buttons_are_visibly_fainter_in_both_themes(qtbot, make_window):
    """Found on screen: Qt's generated disabled icon only lightens pixels, so on the dark theme the
    greyed-out Delete looked like the enabled one. Compare the ink the two states draw."""
    from collections import Counter

    from PySide6.QtCore import QPoint, QRect

    from app.theme import apply_theme

    def ink(button) -> float:  # summed colour distance from the button's background (its commonest colour)
        # As drawn in the window: the button's own grab is transparent where the style sheet says so.
        image = win.grab(QRect(button.mapTo(win, QPoint(0, 0)), button.size())).toImage()
        pixels = [image.pixelColor(x, y).getRgb()[:3] for y in range(image.height()) for x in range(image.width())]
        background = Counter(pixels).most_common(1)[0][0]
        return sum(abs(a - b) for pixel in pixels for a, b in zip(pixel, background))

    win = make_window(FakeBackend(tokens=["A", "."]))
    ask(qtbot, win, "first")
    try:
        for theme in ("dark", "light"):
            apply_theme(theme)
            row = win.transcript.widgets()[1].actions_row
            enabled = ink(row.button("delete"))
            row.set_changes_enabled(False)
            disabled = ink(row.button("delete"))
            row.set_changes_enabled(True)
            assert disabled < 0.5 * enabled, (theme, disabled, enabled)
    finally:
        apply_theme("system")


def draft_and_edit(qtbot, make_window, tmp_path):
    """A chat "What is 2+2?" / "A."; the composer holds an unsent draft with a photo; Edit is clicked
    under the question. Returns the window, its fake backend and the photo."""
    from PIL import Image

    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    ask(qtbot, win, "What is 2+2?")
    photo = tmp_path / "photo.png"
    Image.new("RGB", (32, 24), "orange").save(photo)
    win.add_files([str(photo)])
    win.composer.setPlainText("MY IMPORTANT DRAFT")
    cursor = win.composer.textCursor()
    cursor.setPosition(5)  # the writer was at "MY IM|PORTANT"
    win.composer.setTextCursor(cursor)
    win.transcript.widgets()[0].actions_row.button("edit").click()
    assert win.composer.toPlainText() == "What is 2+2?" and win.attachments.paths() == []
    assert win.banner.message().startswith("Editing a message") and "puts back what you were writing" in \
        win.banner.message()
    return win, fake, str(photo)


def test_cancel_edit_puts_the_draft_back(qtbot, make_window, tmp_path):
    """Trial 38: Edit replaced the unsent draft (text and attachments) and Cancel edit left the old
    message in the composer, which Enter then sent as a new message. Cancel edit now restores the
    composer exactly, and the draft sends as the new message it was."""
    from PySide6.QtWidgets import QPushButton

    win, fake, photo = draft_and_edit(qtbot, make_window, tmp_path)
    win.composer.setPlainText("What is 2+2, really?")  # a change to the edit, then cancelled
    qtbot.mouseClick(win.banner.findChild(QPushButton, "bannerAction"), Qt.MouseButton.LeftButton)
    assert not win.banner.isVisible()
    assert win.composer.toPlainText() == "MY IMPORTANT DRAFT" and win.attachments.paths() == [photo]
    assert win.composer.textCursor().position() == 5
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert shown(win) == ["What is 2+2?", "A.", "MY IMPORTANT DRAFT", "A."]
    assert switchers(win) == ["", "", "", ""]  # a new message, not a version of the one edited
    assert fake.calls[-1]["text"] == "MY IMPORTANT DRAFT" and len(fake.calls[-1]["images"]) == 1


def test_esc_cancels_the_edit_too(qtbot, make_window, tmp_path):
    win, _fake, photo = draft_and_edit(qtbot, make_window, tmp_path)
    qtbot.keyClick(win.composer, Qt.Key.Key_Escape)
    assert not win.banner.isVisible() and win._editing is None
    assert win.composer.toPlainText() == "MY IMPORTANT DRAFT" and win.attachments.paths() == [photo]


def test_a_sent_edit_leaves_the_draft_out_and_brings_it_back_after(qtbot, make_window, tmp_path):
    win, fake, photo = draft_and_edit(qtbot, make_window, tmp_path)
    win.transcript.widgets()[0].actions_row.button("edit").click()  # clicked again: the draft stays aside
    win.composer.setPlainText("What is 3+3?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert shown(win) == ["What is 3+3?", "A."] and switchers(win) == ["‹ 2 / 2 ›", ""]
    assert fake.calls[-1]["text"] == "What is 3+3?" and fake.calls[-1]["images"] == []  # without the draft's photo
    assert win.composer.toPlainText() == "MY IMPORTANT DRAFT" and win.attachments.paths() == [photo]
    # Ending an edit by another change to the chat (here a version switch) also puts the draft back.
    win.composer.setPlainText("")
    win.attachments.clear()
    win.transcript.widgets()[0].actions_row.button("edit").click()
    assert win.composer.toPlainText() == "What is 3+3?"
    assert "ends the edit" in win.banner.message()  # nothing was being written: nothing to put back
    click(qtbot, win, 0, "previous")
    assert win._editing is None and win.composer.toPlainText() == "" and win.attachments.paths() == []


def test_deleting_a_question_takes_its_answer_and_can_be_undone(qtbot, make_window):
    """Trial 38: a message went at one click with no Undo, and a deleted question left its answer
    behind (two answers in a row); deleting "What is 2+2?" after editing it into "What is 3+3?" and
    switching back showed the answer "4" with "‹ 1 / 2 ›", "What is 3+3?" as its version 2."""
    fake = FakeBackend(tokens=["4"])
    win = make_window(fake)
    ask(qtbot, win, "What is 2+2?")
    fake.tokens = ["Ha"]
    ask(qtbot, win, "Tell me a joke.")
    ask(qtbot, win, "Another?")
    win.transcript.widgets()[2].actions_row.button("delete").click()
    assert shown(win) == ["What is 2+2?", "4", "Another?", "Ha"]
    assert win.banner.message() == "Deleted your message and its answer."
    undo(qtbot, win)
    assert shown(win) == ["What is 2+2?", "4", "Tell me a joke.", "Ha", "Another?", "Ha"]
    assert not win.banner.isVisible()

    win.transcript.widgets()[0].actions_row.button("edit").click()
    win.composer.setPlainText("What is 3+3?")
    fake.tokens = ["6"]
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    click(qtbot, win, 0, "previous")
    assert shown(win)[:2] == ["What is 2+2?", "4"] and switchers(win)[0] == "‹ 1 / 2 ›"
    win.transcript.widgets()[0].actions_row.button("delete").click()
    assert shown(win) == ["What is 3+3?", "6"] and switchers(win) == ["", ""]
    widgets = win.transcript.widgets()
    assert [w.role for w in widgets] == ["user", "assistant"]
    fake.tokens = ["12"]
    ask(qtbot, win, "Twice that?")  # the model is given the branch shown
    assert fake.calls[-1]["turns"] == [("user", "What is 3+3?", 0), ("assistant", "6", 0)]


def test_undo_of_the_newest_answer_after_the_next_question_puts_it_back_before_that(qtbot, make_window):
    """The newest answer deleted, another question asked and answered, then Undo: the new question took
    the deleted answer's id (Undo said "UNIQUE constraint failed"); the answer now comes back before the
    question asked since, and the model reads the chat as shown."""
    fake = FakeBackend(tokens=["4"])
    win = make_window(fake)
    ask(qtbot, win, "What is 2+2?")
    win.transcript.widgets()[1].actions_row.button("delete").click()
    assert shown(win) == ["What is 2+2?"]
    fake.tokens = ["6"]
    ask(qtbot, win, "And 3+3?")
    assert shown(win) == ["What is 2+2?", "And 3+3?", "6"]
    win.undo_delete()
    assert "Could not" not in win.banner.message()
    assert shown(win) == ["What is 2+2?", "4", "And 3+3?", "6"] and switchers(win) == ["", "", "", ""]
    fake.tokens = ["8"]
    ask(qtbot, win, "And 4+4?")
    assert fake.calls[-1]["turns"] == [("user", "What is 2+2?", 0), ("assistant", "4", 0),
                                       ("user", "And 3+3?", 0), ("assistant", "6", 0)]


def test_undo_into_a_version_not_shown_says_so_and_shows_it(qtbot, make_window):
    """Trial 78 R7: the newest answer deleted, then the first answer regenerated (a new branch), then
    Ctrl+Z: the answer came back in the branch no longer shown, and nothing on screen changed."""
    fake = FakeBackend(tokens=["4"])
    win = make_window(fake)
    ask(qtbot, win, "What is 2+2?")
    fake.tokens = ["6"]
    ask(qtbot, win, "And 3+3?")
    win.transcript.widgets()[3].actions_row.button("delete").click()
    fake.tokens = ["Four"]
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.transcript.widgets()[1].actions_row.button("regenerate").click()
    assert shown(win) == ["What is 2+2?", "Four"]
    win.undo_delete()
    assert shown(win) == ["What is 2+2?", "Four"]  # the version written since stays shown
    assert win.banner.message() == "Restored the message, in a version of the chat not shown now."
    undo_like = win.banner.findChild(QPushButton, "bannerAction")
    assert undo_like.text() == "Show"
    qtbot.mouseClick(undo_like, Qt.MouseButton.LeftButton)
    assert shown(win) == ["What is 2+2?", "4", "And 3+3?", "6"] and switchers(win)[1] == "‹ 1 / 2 ›"


def test_regenerate_says_when_the_settings_make_the_same_answer(qtbot, make_window):
    """Trial 38: with the default Temperature 0 Regenerate gave the identical answer again, so the button
    looked broken. Its tooltip says why, and so does the banner when the new version is the same."""
    import copy

    from app.window_chats import regenerate_note

    fake = FakeBackend(tokens=["Orange", "."])
    win = make_window(fake)
    ask(qtbot, win, "What colour?")
    button = win.transcript.widgets()[1].actions_row.button("regenerate")
    assert win.current_params()["temperature"] == 0.0
    same = ("Temperature is 0, so a regenerated answer comes out the same: raise Temperature in Settings "
            "(Sampling) for a different one.")
    assert button.toolTip() == f"Regenerate answer\n{same}"
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        button.click()
    assert shown(win) == ["What colour?", "Orange."] and switchers(win) == ["", "‹ 2 / 2 ›"]
    assert win.banner.message() == f"The same answer again. {same}"
    assert win.transcript.widgets()[1].actions_row.button("regenerate").toolTip() == f"Regenerate answer\n{same}"

    settings = copy.deepcopy(win.settings)
    settings.overrides = {"temperature": 0.7}
    win._apply_settings(settings)
    button = win.transcript.widgets()[1].actions_row.button("regenerate")
    assert button.toolTip() == "Regenerate answer"
    win.banner.dismiss()
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        button.click()
    assert fake.calls[-1]["params"].temperature == 0.7
    assert switchers(win)[1] == "‹ 3 / 3 ›" and not win.banner.isVisible()  # sampled: nothing to explain
    settings = copy.deepcopy(win.settings)
    settings.seed = 5
    win._apply_settings(settings)
    assert "The seed is fixed" in win.transcript.widgets()[1].actions_row.button("regenerate").toolTip()
    assert regenerate_note({"temperature": 1.0, "seed": None}) == ""


def test_the_markdown_export_gives_another_version_of_a_question_with_its_answer(store, tmp_path):
    """Trial 50: an edited question's other version was in the fold, what it was answered was not."""
    from app.export import export_markdown

    chat = store.create_conversation("Dragons")
    first = store.add_message(chat.id, "user", "Write a long story about a dragon.")
    store.add_message(chat.id, "assistant", "Erebor's dragon slept.", stats={"model_name": "SmolLM2"},
                      status="cancelled")
    store.add_message(chat.id, "user", "Write a short poem about bread.", parent_id=first.parent_id)
    store.add_message(chat.id, "assistant", "Bread is good.", stats={"model_name": "SmolLM2"})
    text = export_markdown(store, chat.id, tmp_path / "chat.md").read_text()
    assert ("<details><summary>Other versions</summary>\n\n**Version 1**\n\nWrite a long story about a dragon.\n\n"
            "*SmolLM2 answered:* *(cancelled)*\n\nErebor's dragon slept.\n\n</details>") in text
    assert text.index("Bread is good.") > text.index("</details>")


def test_the_edit_notice_comes_back_after_another_message_is_closed(qtbot, make_window, tmp_path):
    """Trial 54: a refused attachment's line replaced the edit's notice, and once closed the edit went
    on with no notice and no Cancel edit."""
    from PySide6.QtWidgets import QPushButton

    win, _fake, _photo = draft_and_edit(qtbot, make_window, tmp_path)
    notice = win.banner.message()
    assert notice.startswith("Editing a message: ")
    win.add_files([str(tmp_path / "gone.png")])  # an attachment's error while editing
    assert win.banner.message().startswith("Image file not found")
    win.banner.dismiss()
    assert win.banner.message() == notice and win._editing is not None
    assert win.banner.findChild(QPushButton, "bannerAction").text() == "Cancel edit"
    qtbot.keyClick(win.composer, Qt.Key.Key_Escape)  # the edit ends: its notice does not come back
    assert win._editing is None and not win.banner.isVisible()
    win.banner.show_info("Something else")
    win.banner.dismiss()
    assert not win.banner.isVisible()


def test_switching_an_early_messages_version_keeps_it_where_it_was_clicked(qtbot, make_window):
    """Trial 60: ‹ on an edited early question (its short new branch at the chat's end, the view
    following it) showed the long first branch scrolled to its end, the question out of sight."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication

    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    win.resize(900, 600)
    qtbot.waitExposed(win)
    for i in range(7):
        ask(qtbot, win, f"question {i}")
    win.transcript.widgets()[2].actions_row.button("edit").click()  # "question 1"
    win.composer.setPlainText("question 1, edited")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    QApplication.processEvents()
    assert shown(win)[2:] == ["question 1, edited", "A."]
    before = win.transcript.message_widget(2).mapTo(win.transcript.viewport(), QPoint(0, 0)).y()
    assert 0 <= before < win.transcript.viewport().height()  # in view, where it is clicked
    click(qtbot, win, 2, "previous")
    assert win.transcript.widgets()[2].text == "question 1" and len(shown(win)) == 14
    for _ in range(3):  # as the layout of the long branch settles
        QApplication.processEvents()
        qtbot.wait(30)
        assert win.transcript.message_widget(2).mapTo(win.transcript.viewport(), QPoint(0, 0)).y() == before
    bar = win.transcript.verticalScrollBar()
    assert bar.value() < bar.maximum()


def test_a_banner_above_the_chat_leaves_its_messages_where_they_were_on_screen(qtbot, make_window):
    """Trial 60: a banner shown over the chat pushed its messages down, and a click meant for ‹ or a
    pencil landed on what came there; a chat following its end keeps its end at the bottom."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication

    fake = FakeBackend(tokens=["A", "."])
    win = make_window(fake)
    win.resize(900, 600)
    qtbot.waitExposed(win)
    for i in range(8):
        ask(qtbot, win, f"question {i}")
    win.transcript.show_message(6)  # scrolled back: the view follows the chat's end no more
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(20)
    message = win.transcript.message_widget(7)

    def on_screen() -> int:
        return message.mapTo(win, QPoint(0, 0)).y()

    before = on_screen()
    for show in (lambda: win.banner.show_error("Connection refused.\nSecond line.\nThird line."), win.banner.dismiss):
        show()
        for _ in range(3):
            QApplication.processEvents()
            qtbot.wait(20)
            assert on_screen() == before
    assert win.banner.isHidden()

    win.transcript.show_end()  # following the end: the newest message stays at the bottom edge
    QApplication.processEvents()
    bar = win.transcript.verticalScrollBar()
    win.banner.show_error("Connection refused.")
    QApplication.processEvents()
    qtbot.wait(20)
    assert bar.value() == bar.maximum()
