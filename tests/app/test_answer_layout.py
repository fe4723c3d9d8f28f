"""Long answers: the rendered Markdown must end above the stats footer, live and restored; and a narrow
window: the composer's placeholder and the status bar's texts shown whole, or elided with a tooltip."""

from __future__ import annotations

import os

import pytest
from PIL import Image
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QFrame, QLabel

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


def test_the_answers_name_text_and_footer_start_on_one_line(qtbot, make_window, app_style):
    """Trial 55: the text sat 4 px right of the name and the footer (its focus ring's inset), as if it
    began with a space."""
    from PySide6.QtGui import QTextCursor

    win = make_window(FakeBackend(tokens=["The", " capital", "."]))
    qtbot.keyClicks(win.composer, "Q")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    _settle(qtbot, win)
    answer = win.transcript.last_assistant()
    name, footer, text = answer.findChild(QLabel, "assistantName"), answer._footer, answer._stream
    first = QTextCursor(text.document())
    starts = [name.mapTo(win, QPoint(0, 0)).x() + name.contentsRect().x(),
              text.viewport().mapTo(win, QPoint(0, 0)).x() + text.cursorRect(first).x(),
              footer.mapTo(win, QPoint(0, 0)).x() + footer.contentsRect().x()]
    assert len(set(starts)) == 1, starts


def test_the_rendered_answer_is_shown_at_its_height_when_the_answer_ends(qtbot, make_window):
    """Found by a trial: right after an answer ended its Markdown was not shown yet (Qt shows a widget
    added to a shown window on a later turn of the event loop) and was one line tall until later
    layout passes: the window drew an empty bubble, or the last lines over the footer, for a moment."""
    win = make_window(FakeBackend(tokens=[f" word{i}" for i in range(300)]))
    win.resize(800, 600)
    qtbot.waitExposed(win)
    seen = []

    def at_finish(_result):
        answer = win.transcript.widgets()[-1]
        [block] = answer.rendered_widgets()
        seen.append((block.isVisibleTo(answer), block.height(), block.document().size().height()))

    win.answer_finished.connect(at_finish)
    win.generation_params = {"max_new_tokens": 300}
    win.composer.setPlainText("go")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    [(visible, height, text_height)] = seen
    assert visible and text_height > 200 and height >= text_height


@pytest.mark.parametrize("width", [760, 1200])
def test_a_long_question_leaves_no_blank_space_below_the_last_answer(qtbot, make_window, app_style, width):
    """Found by a trial: after a ~1,000-character question the transcript scrolled to the bottom of a
    range 873 px taller than its messages, so the window looked empty (live, and on reopening). The
    long bubble's minimum height was its text's height at 120 px wide, which the scroll area kept."""
    win = make_window(FakeBackend(tokens=["Fine", "."]))
    win.resize(width, 600)
    win.show()
    qtbot.waitExposed(win)
    for question in ("live " + "blah " * 200, "short one"):
        win.composer.setPlainText(question)
        with qtbot.waitSignal(win.answer_finished, timeout=10_000):
            qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    for reopen in (False, True):
        if reopen:
            conv_id = win.keeper.current_id
            win.new_chat()
            win.open_conversation(conv_id)
        _settle(qtbot, win)
        view = win.transcript
        last = view.widgets()[-1]
        bottom = last.mapTo(view.viewport(), QPoint(0, last.height())).y()
        assert 0 < bottom <= view.viewport().height(), (reopen, bottom, view.viewport().height())
        assert view.viewport().height() - bottom < 60, (reopen, bottom, view.viewport().height())  # no blank band
        label = view.widgets()[0].findChild(QLabel, "userText")
        assert label.height() >= label.heightForWidth(label.width()), (label.height(), label.width())  # not clipped
        if os.environ.get("SMOLCHAT_LAYOUT_SHOTS"):
            view.verticalScrollBar().setValue(0)
            win.grab().save(os.environ["SMOLCHAT_LAYOUT_SHOTS"] + f"/long-question{width}-{reopen}.png")


def test_break_opportunities_go_into_long_runs_only_and_continue_across_pieces():
    from app.markdown import LONG_RUN, ZERO_WIDTH_SPACE, breakable

    assert breakable("A sentence of ordinary words.") == ("A sentence of ordinary words.", 6)
    marked, run = breakable("x" * 2500)
    assert [len(part) for part in marked.split(ZERO_WIDTH_SPACE)] == [1000, 1000, 500] and run == 500
    streamed, run = "", 0
    for _ in range(25):  # the same run in pieces: the same places, whatever the cut
        piece, run = breakable("x" * 100, run)
        streamed += piece
    assert [len(part) for part in streamed.split(ZERO_WIDTH_SPACE)] == [1000, 1000, 500] and run == 500
    assert breakable("y" * (LONG_RUN - 1) + " " + "z" * (LONG_RUN - 1))[0].count(ZERO_WIDTH_SPACE) == 0
    assert breakable("y" * LONG_RUN + " " + "z" * (LONG_RUN + 1))[0] == (
        "y" * LONG_RUN + " " + "z" * LONG_RUN + ZERO_WIDTH_SPACE + "z")
    assert breakable("https://example.com/" + "ab" * 20, limit=24)[0] == (
        "https://example.com/abab" + ZERO_WIDTH_SPACE + "ab" * 12 + ZERO_WIDTH_SPACE + "ab" * 6)
    # Each run is counted from its own start (runs of exactly the limit are left whole).
    marked, run = breakable(("w" * 24 + " ") * 3 + "v" * 60 + "\nu" * 2, limit=24)
    assert marked == ("w" * 24 + " ") * 3 + ("v" * 24 + ZERO_WIDTH_SPACE) * 2 + "v" * 12 + "\nu" * 2 and run == 1


def test_an_answer_without_spaces_is_laid_out_in_pieces_and_copied_whole(qtbot, make_window):
    """Found by a trial: one delta of 300,000 letters without a space held the window ~4 s (5
    million: ~10 min; Qt wraps such a run anywhere, scanning the rest of it for every line). The
    view gets a break opportunity every LONG_RUN letters; the answer's text (copied, stored) has
    none, and a user bubble shows all of a long unbroken run instead of clipping it."""
    from app.markdown import LONG_RUN, ZERO_WIDTH_SPACE
    from app.text_fit import WRAP_RUN

    long_run = "A" * 300_000
    pasted = "check " + "0123456789abcdef" * 40  # a 640-character hash
    win = make_window(FakeBackend(tokens=[long_run[:150_000], long_run[150_000:]]))
    win.resize(900, 700)
    win.composer.setPlainText(pasted)
    with qtbot.waitSignal(win.answer_finished, timeout=60_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    user, answer = win.transcript.widgets()
    assert user.text == pasted and answer.text == long_run
    shown = "".join(view.toPlainText() for view in answer.rendered_widgets())
    assert shown.replace(ZERO_WIDTH_SPACE, "") == long_run
    assert max(len(part) for part in shown.split(ZERO_WIDTH_SPACE)) == LONG_RUN
    label = user.findChild(QLabel, "userText")
    assert label.text().replace(ZERO_WIDTH_SPACE, "") == pasted
    assert max(len(part) for part in label.text().split(ZERO_WIDTH_SPACE)) <= WRAP_RUN + len("check ")
    _settle(qtbot, win)
    lines = round(label.height() / label.fontMetrics().lineSpacing())
    assert lines >= 640 * label.fontMetrics().horizontalAdvance("0") // label.width(), (lines, label.width())
    answer.actions_row.triggered.emit("copy")
    assert QApplication.clipboard().text() == long_run


def test_no_break_spaces_do_not_count_as_breaks_and_emoji_stay_whole():
    """Found by a second trial: letters joined by no-break spaces froze the window again (Qt never
    breaks there, the run counted them as breaks); a zero-width space went inside an emoji sequence."""
    from app.markdown import ZERO_WIDTH_SPACE, breakable

    marked, _ = breakable("a\u00a0" * 1500)
    assert [len(part) for part in marked.split(ZERO_WIDTH_SPACE)] == [1000, 1000, 1000]
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    for offset in range(30):  # wherever the limit falls, the family stays one sequence
        marked, _ = breakable("x" * offset + family * 8, limit=24)
        assert family * 8 in marked.replace(ZERO_WIDTH_SPACE + "\U0001f468", "\U0001f468"), offset
    assert breakable("x" * 24 + "e\u0301" * 3, limit=24)[0] == "x" * 24 + ZERO_WIDTH_SPACE + "e\u0301" * 3


def test_copying_a_selection_gives_the_text_without_the_displays_break_marks(qtbot, make_window):
    """Found by a second trial: a URL selected in a bubble and copied with Ctrl+C had a zero-width
    space every 24 characters (pasted, it did not work); an answer's every 1,000."""
    from PySide6.QtGui import QKeySequence

    url = "https://github.com/HuggingFaceTB/SmolVLM-256M-Instruct/blob/main/" + "0123456789abcdef" * 4
    long_run = "B" * 2500
    win = make_window(FakeBackend(tokens=[long_run]))
    win.resize(900, 700)
    win.composer.setPlainText(url)
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    user, answer = win.transcript.widgets()
    label = user.findChild(QLabel, "userText")
    assert "\u200b" in label.text()  # what is shown can wrap ...
    label.setSelection(0, len(label.text()))
    label.setFocus()
    QApplication.clipboard().clear()
    qtbot.keySequence(label, QKeySequence.StandardKey.Copy)
    assert QApplication.clipboard().text() == url  # ... what is copied is the text
    view = answer.rendered_widgets()[0]
    view.selectAll()
    view.copy()
    assert QApplication.clipboard().text() == long_run


def test_a_huge_question_shows_its_start_and_a_count_and_copy_and_edit_take_it_whole(qtbot, make_window, store):
    """Found by a trial: a stored 1,000,000-character question scrolled the chat at 170 ms a wheel
    notch (its label laid the whole text out again). The bubble shows the first USER_TEXT_SHOWN
    characters and counts the rest; Copy copies and Edit puts back the whole question."""
    from app.messages import USER_TEXT_SHOWN

    text = ("lorem ipsum dolor sit amet " * 4000)[:100_000 - 4] + " END"
    conv = store.create_conversation("big", model="/models/fake").id
    store.add_message(conv, "user", text)
    store.add_message(conv, "assistant", "ok")
    win = make_window(FakeBackend(tokens=["ok"]))
    user, _ = win.transcript.widgets()
    label = user.findChild(QLabel, "userText")
    assert USER_TEXT_SHOWN == 20_000 and label.text() == text[:20_000]
    more = user.findChild(QLabel, "userTextMore")
    assert more.text() == "… 80,000 more characters (Copy copies all, Edit shows all)"
    _settle(qtbot, win)
    assert more.isVisible() and more.geometry().top() >= label.geometry().bottom()
    user.actions_row.button("copy").click()
    assert QApplication.clipboard().text() == text
    user.actions_row.button("edit").click()
    assert win.composer.toPlainText() == text


def test_a_question_of_at_most_the_shown_length_is_shown_whole_without_a_count(qtbot, make_window):
    from app.messages import USER_TEXT_SHOWN, UserMessage

    text = "x " * (USER_TEXT_SHOWN // 2)
    message = UserMessage(text, [])
    assert message.findChild(QLabel, "userText").text() == text and message.findChild(QLabel, "userTextMore") is None
    message.deleteLater()


def _fully_shown_or_elided_with_tip(label) -> bool:
    """``label``'s whole text fits its width, or (elided) its tooltip holds the whole text."""
    fits = label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width()
    return fits or label.toolTip() == label.text()


def test_at_460_px_the_placeholder_wraps_and_the_status_texts_elide_with_a_tooltip(qtbot, make_window, tmp_path,
                                                                                      app_style):
    """Found by a trial: at ~460 px with photos attached, the composer showed "Ask about an image" of
    a video model's "Ask about an image or a video…" (the second line cut off below the one-line
    editor) and the status bar cut both its texts mid-word, with no way to read the rest."""
    from PySide6.QtCore import QRect

    photos = []
    for i in range(2):
        photos.append(str(tmp_path / f"photo{i}.png"))
        Image.new("RGB", (64, 48), (40 * i, 120, 30)).save(photos[-1])
    win = make_window(FakeBackend(model_name="SmolVLM2", video=True))
    win.resize(460, 700)
    win.add_files(photos)
    qtbot.waitUntil(lambda: "image tokens" in win.pending_label.text(), timeout=5000)
    for _ in range(5):
        QApplication.processEvents()
    assert win.width() <= 480  # (the window's own minimum width)

    composer = win.composer
    assert composer.placeholderText() == "Ask about an image or a video…"
    flags = int(Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextWordWrap)
    margin = round(composer.document().documentMargin())
    room = QRect(0, 0, composer.viewport().width() - margin, 1000)
    wrapped = composer.fontMetrics().boundingRect(room, flags, composer.placeholderText())
    line = composer.fontMetrics().lineSpacing()
    assert wrapped.height() >= 2 * line - 2  # it wraps at this width...
    assert composer.viewport().height() >= wrapped.height() + margin  # ...and both lines show
    two_lines = composer.height()
    composer.setPlainText("hi")
    assert composer.height() == two_lines - line  # one line again once there is text
    composer.clear()
    assert composer.height() == two_lines

    bar = win.statusBar()
    assert win.pending_label.text() == "2 images · 2,176 image tokens (full)"
    assert win.stats_label.text() == "SmolVLM2 · cpu · float32 · ready"
    for label in (win.stats_label, win.pending_label):
        assert _fully_shown_or_elided_with_tip(label), (label.objectName(), label.width(), label.toolTip())
        assert label.mapTo(bar, label.rect().topRight()).x() < bar.width()  # not past the window's edge
    assert win.pending_label.shown_text() == win.pending_label.text()  # the attachments' count keeps its room
    assert win.stats_label.shown_text().endswith("…") and win.stats_label.toolTip() == win.stats_label.text()

    win.resize(1000, 700)  # room for everything: one line, no "…", no tooltip
    for _ in range(5):
        QApplication.processEvents()
    assert composer.placeholder_lines() == 1 and composer.height() == two_lines - line
    for label in (win.stats_label, win.pending_label):
        assert label.shown_text() == label.text() and label.toolTip() == ""


@pytest.mark.parametrize("whole", [
    "👩‍👩‍👧‍👦",  # a family: four emoji joined by ZWJ (11 code points)
    "🇫🇷",  # a flag: two regional indicators
    "e\u0301\u0323",  # a letter with two combining accents
    "👍🏽",  # an emoji with a skin tone
])
def test_a_huge_questions_cut_keeps_a_grapheme_whole(qtbot, whole):
    """The cut at USER_TEXT_SHOWN characters falls inside ``whole`` (at each of its inner points):
    the bubble ends before it, and the count says how many characters are not shown."""
    from app.messages import USER_TEXT_SHOWN, UserMessage, shown_length

    for inside in range(1, len(whole)):
        text = "a" * (USER_TEXT_SHOWN - inside) + whole + "b" * 50
        assert shown_length(text) == USER_TEXT_SHOWN - inside
        message = UserMessage(text, [])
        shown = message.findChild(QLabel, "userText").text().replace("\u200b", "")  # (break opportunities)
        assert shown == "a" * (USER_TEXT_SHOWN - inside)
        assert message.findChild(QLabel, "userTextMore").text().startswith(f"… {len(whole) + 50} more characters")
        message.deleteLater()
    text = "a" * (USER_TEXT_SHOWN - len(whole)) + whole + "b" * 50  # ends right at the limit: shown whole
    assert shown_length(text) == USER_TEXT_SHOWN
