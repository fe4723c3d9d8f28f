"""Attaching images: drop, paste, pick, validation and removal."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QFileDialog, QLabel, QScrollArea, QToolButton

from tests.app.helpers import drop, file_mime


def test_drop_on_window_adds_attachment(window, png):
    assert drop(window, file_mime(png))
    assert window.attachments.paths() == [str(png.resolve())]
    assert not window.attachments.isHidden()


def test_dropping_the_same_image_twice_attaches_it_once(window, png):
    drop(window.composer, file_mime(png))
    drop(window.composer, file_mime(png))
    assert window.attachments.paths() == [str(png.resolve())]


def test_text_file_named_png_shows_error_and_keeps_text(qtbot, window, tmp_path):
    fake = tmp_path / "notes.png"
    fake.write_text("this is not an image\n")
    qtbot.keyClicks(window.composer, "Describe this")
    drop(window.composer, file_mime(fake))

    assert window.attachments.paths() == []
    assert window.banner.message() == ("notes.png is not an image, a video or a PDF, the files Smolchat attaches: "
                                      "paste its text into the message to ask about it.")
    assert not window.banner.isHidden()
    assert window.composer.toPlainText() == "Describe this"


def test_zero_byte_file_shows_error_and_keeps_text(qtbot, window, tmp_path):
    empty = tmp_path / "empty.jpg"
    empty.touch()
    qtbot.keyClicks(window.composer, "What is it?")
    drop(window, file_mime(empty))

    assert window.attachments.paths() == []
    assert window.banner.message() == f"Image file is empty (0 bytes): {empty.name}"
    assert window.composer.toPlainText() == "What is it?"


def test_truncated_image_is_rejected(window, tmp_path):
    good = tmp_path / "good.jpg"
    Image.effect_noise((256, 256), 40).convert("RGB").save(good, quality=90)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    drop(window, file_mime(broken))
    assert window.attachments.paths() == []
    assert "broken.jpg" in window.banner.message()


def test_good_and_bad_files_in_one_drop(window, png, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"nope")
    drop(window, file_mime(png, bad))
    assert window.attachments.paths() == [str(png.resolve())]
    assert "bad.png" in window.banner.message()


def test_dismissing_the_banner_hides_it(qtbot, window, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"nope")
    drop(window, file_mime(bad))
    qtbot.mouseClick(window.banner.findChild(QToolButton, "dismissBanner"), Qt.MouseButton.LeftButton)
    assert window.banner.isHidden() and window.banner.message() == ""


def test_a_new_chat_or_another_chat_starts_without_the_last_ones_banner(qtbot, window, tmp_path):
    """Found by a GUI trial: a broken image's error stayed up over the new, empty chat."""
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"nope")
    drop(window, file_mime(bad))
    assert window.banner.isVisible() and "bad.png" in window.banner.message()
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.banner.isHidden() and window.banner.message() == ""
    drop(window, file_mime(bad))
    window.open_conversation(None)  # as a click in the sidebar does
    assert window.banner.isHidden()


def test_ctrl_v_pastes_clipboard_image_as_png_in_data_dir(qtbot, window, data_dir):
    image = QImage(40, 30, QImage.Format.Format_RGB32)
    image.fill(Qt.GlobalColor.darkCyan)
    QApplication.clipboard().setImage(image)
    qtbot.keyClicks(window.composer, "keep me")
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)

    paths = window.attachments.paths()
    assert len(paths) == 1
    assert paths[0].startswith(str((data_dir / "pasted").resolve()))
    with Image.open(paths[0]) as saved:
        assert saved.format == "PNG" and saved.size == (40, 30)
    assert window.composer.toPlainText() == "keep me"


def test_ctrl_v_pastes_file_urls(qtbot, window, png):
    mime = file_mime(png)
    QApplication.clipboard().setMimeData(mime)
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert window.attachments.paths() == [str(png.resolve())]
    assert window.composer.toPlainText() == ""


def test_ctrl_v_pastes_plain_text_as_text(qtbot, window):
    mime = QMimeData()
    mime.setText("just words")
    QApplication.clipboard().setMimeData(mime)
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert window.composer.toPlainText() == "just words"
    assert window.attachments.paths() == []


def test_remove_button_removes_that_attachment(qtbot, window, png, tmp_path):
    other = tmp_path / "other.png"
    Image.new("RGB", (20, 20), "blue").save(other)
    drop(window, file_mime(png, other))
    assert len(window.attachments.paths()) == 2

    buttons = window.attachments.findChildren(QToolButton, "removeAttachment")
    qtbot.mouseClick(buttons[0], Qt.MouseButton.LeftButton)
    assert window.attachments.paths() == [str(other.resolve())]
    qtbot.mouseClick(window.attachments.findChildren(QToolButton, "removeAttachment")[-1], Qt.MouseButton.LeftButton)
    assert window.attachments.paths() == []
    assert window.attachments.isHidden()


def test_attach_button_opens_picker_and_validates(qtbot, window, png, tmp_path, monkeypatch):
    bad = tmp_path / "bad.gif"
    bad.write_bytes(b"GIF89a-truncated")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(png), str(bad)], ""))
    qtbot.mouseClick(window.attach_button, Qt.MouseButton.LeftButton)
    assert window.attachments.paths() == [str(png.resolve())]
    assert "bad.gif" in window.banner.message()


def test_image_only_message_can_be_sent(qtbot, window, fake_session, png, data_dir):
    drop(window, file_mime(png))
    assert window.send_button.isEnabled()
    with qtbot.waitSignal(window.answer_finished, timeout=5000):
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    assert fake_session.calls[-1]["text"] == ""
    [sent] = fake_session.calls[-1]["images"]
    assert sent.startswith(str(data_dir / "images")) and Path(sent).read_bytes() == png.read_bytes()


def test_many_attachments_scroll_sideways_instead_of_widening_the_window(qtbot, window, tmp_path):
    """A dropped folder of 24 photos asked for a 2,063 px window (the chips' row as its minimum
    width): Send and the settings went off a 1,280 px screen. The row now scrolls."""
    photos = []
    for i in range(24):
        photos.append(tmp_path / f"photo{i}.png")
        Image.new("RGB", (40, 30), (10 * i, 80, 120)).save(photos[-1])
    window.resize(900, 700)
    window.show()
    qtbot.waitExposed(window)
    window.attachments.add(str(photos[0]))  # the strip itself: the fake model's context takes only a few
    QApplication.processEvents()
    one = window.minimumSizeHint().width()
    for photo in photos[1:]:
        window.attachments.add(str(photo))
        QApplication.processEvents()
    assert window.minimumSizeHint().width() == one
    assert window.width() == 900
    scroll = window.attachments.findChild(QScrollArea)
    qtbot.waitUntil(lambda: scroll.horizontalScrollBar().maximum() > 0)
    # The chips whole above the scroll bar (found by a trial: at 800 px the bar covered their captions).
    QApplication.processEvents()
    assert scroll.viewport().height() >= scroll.widget().sizeHint().height() >= window.attachments.chips()[0].height()
    assert window.send_button.mapTo(window, window.send_button.rect().bottomRight()).x() < window.width()
    # Sent, they wrap in rows within the bubble (one row of 24 made the window ~3,000 px wide).
    message = window.transcript.add_user_message("Which one?", [str(p) for p in photos])
    QApplication.processEvents()
    assert window.minimumSizeHint().width() == one and window.width() == 900
    assert message.sizeHint().height() > 4 * 120


def test_several_bad_files_are_named_one_a_line_and_a_bad_pdf_adds_its_own(qtbot, window, png, tmp_path,
                                                                          monkeypatch):
    """Found by a trial: eight broken files in one drop gave one run-on sentence, and a broken PDF's
    error (from its background reader) replaced the others."""
    bad = []
    for name in ("a.png", "b.jpg", "c.webp"):
        bad.append(tmp_path / name)
        bad[-1].write_text("not an image")
    window.add_files([str(png), *map(str, bad)])
    assert window.attachments.paths() == [str(png.resolve())]
    lines = window.banner.message().split("\n")
    assert len(lines) == 3 and all(name in line for name, line in zip(("a.png", "b.jpg", "c.webp"), lines))
    fake_pdf = tmp_path / "fake.pdf"
    fake_pdf.write_text("not a pdf")
    window.add_files([*map(str, bad), str(fake_pdf)])
    qtbot.waitUntil(lambda: "fake.pdf" in window.banner.message(), timeout=10_000)
    lines = window.banner.message().split("\n")
    assert len(lines) == 4 and "fake.pdf" in lines[3] and "a.png" in lines[0], lines
    monkeypatch.setattr("app.window_attachments.MAX_PROBLEM_LINES", 2)  # the fake model's context takes ~6 files
    window.add_files(list(map(str, bad)))
    lines = window.banner.message().split("\n")
    assert len(lines) == 2 and "a.png" in lines[0] and lines[1] == "… and 2 more files could not be attached."


def test_the_strip_and_the_model_catalog_scroll_one_way_each(qtbot, window):
    """One helper sets up both scroll areas (they were two copies of the same lines): frameless, the
    content stretched to the area, the attachment row scrolling sideways only, the catalog down only."""
    from PySide6.QtWidgets import QFrame, QLabel

    from app.scroll_area import one_way_scroll

    off, needed = Qt.ScrollBarPolicy.ScrollBarAlwaysOff, Qt.ScrollBarPolicy.ScrollBarAsNeeded
    label = QLabel("row")
    area = one_way_scroll("someScroll", label, sideways=True)
    assert (area.objectName(), area.widget(), area.widgetResizable(), area.frameShape()) == (
        "someScroll", label, True, QFrame.Shape.NoFrame)
    assert (area.horizontalScrollBarPolicy(), area.verticalScrollBarPolicy()) == (needed, off)
    column = one_way_scroll("column", QLabel("column"), sideways=False)
    assert (column.horizontalScrollBarPolicy(), column.verticalScrollBarPolicy()) == (off, needed)

    strip = window.attachments.findChild(QScrollArea, "attachmentScroll")
    assert strip.widget().objectName() == "attachmentRow" and strip.widgetResizable()
    assert (strip.horizontalScrollBarPolicy(), strip.verticalScrollBarPolicy()) == (needed, off)
    catalog = window.open_model_manager().catalog_scroll
    assert catalog.objectName() == "catalogScroll" and catalog.widget().objectName() == "catalogRows"
    assert (catalog.horizontalScrollBarPolicy(), catalog.verticalScrollBarPolicy()) == (off, needed)
    assert catalog.frameShape() == strip.frameShape() == QFrame.Shape.NoFrame


def test_a_row_that_just_overflows_keeps_its_chips_above_the_scroll_bar(qtbot, window, tmp_path, images_dir):
    """Found by a trial at 800 x 600: a video and four photos overflowed the row by a few pixels,
    the scroll bar appeared over the chips' lower edge and cut the video's "0:12 · 12 frames"."""
    window.resize(800, 600)
    qtbot.waitExposed(window)
    scroll = window.attachments.findChild(QScrollArea, "attachmentScroll")
    window.add_files([str(images_dir.parent / "videos" / "slideshow.mp4")])
    for i in range(12):
        if scroll.horizontalScrollBar().maximum() > 0:
            break
        photo = tmp_path / f"photo{i}.png"
        Image.new("RGB", (40, 30), (20 * i, 80, 120)).save(photo)
        window.add_files([str(photo)])
        qtbot.wait(50)
    assert scroll.horizontalScrollBar().maximum() > 0  # the row overflows: the bar shows
    assert scroll.viewport().height() >= scroll.widget().sizeHint().height()  # below the chips, not over them


def test_a_text_beyond_the_context_is_said_while_typing_and_refused_at_send(qtbot, window, factory, png):
    """The fake model counts a token a word and holds 8,192. A 9,000-word paste: once typing pauses
    the status bar says it is beyond the context; Send refuses with the count, storing and sending
    nothing, the text kept. With an image (1,088 tokens at full) 8,000 words are too many as well;
    cut to 7,000 the message goes."""
    win = window
    win.composer.setPlainText("word " * 9000)
    qtbot.waitUntil(lambda: "context" in win.pending_label.text(), timeout=3000)
    assert win.pending_label.text() == "text 9,000 tokens · more than the 8,192-token context"
    win.send_message()
    assert win.banner.message() == ("This message is 9,000 tokens long, more than the 8,192 the model's context "
                                    "holds. Shorten it, or send it in parts.")
    assert factory.calls == [] and win.store.conversations() == []
    assert win.composer.toPlainText() == "word " * 9000

    drop(win.composer, file_mime(png))
    win.composer.setPlainText("word " * 8000)
    qtbot.waitUntil(lambda: "text 8,000" in win.pending_label.text(), timeout=3000)
    assert win.pending_label.text() == ("1 image · 1,088 image tokens (full) · text 8,000 tokens · "
                                        "more than the 8,192-token context")
    win.send_message()
    assert win.banner.message() == ("This message and its attachments take 9,088 tokens (8,000 of them for the "
                                    "text), more than the 8,192 the model's context holds. Shorten the text, or "
                                    "remove some attachments.")
    assert factory.calls == []

    win.composer.setPlainText("word " * 7000)
    qtbot.waitUntil(lambda: "text 7,000" in win.pending_label.text(), timeout=3000)  # (counted: not before)
    # It fits, with less than the 512 tokens the answer may take (trial 74 F11): said, and it can be sent.
    assert win.pending_label.text() == ("1 image · 1,088 image tokens (full) · text 7,000 tokens · only 104 tokens "
                                        "left for the answer")
    win.send_message()
    qtbot.waitUntil(lambda: len(factory.calls) == 1, timeout=5000)
    assert len(factory.calls[0]["text"].split()) == 7000 and len(factory.calls[0]["images"]) == 1


def test_the_system_prompt_and_the_templates_markup_count_toward_the_context(qtbot, window, factory):
    """Trial 75 N5: every prompt has the system prompt and the chat template's markup beside the
    message, whatever old turns are dropped. A text of 8,180 tokens said "only 12 tokens left", and the
    engine refused its prompt of 8,210 at Send, after storing the message. Here the fake's markup is
    30 tokens and the system prompt 4 words: 8,160 words are refused before anything is stored, and
    8,100 leave 58 tokens for the answer."""
    win = window
    factory.overhead = 30
    win.settings.system_prompt = "Answer in one line."
    win.composer.setPlainText("word " * 8160)
    qtbot.waitUntil(lambda: "context" in win.pending_label.text(), timeout=3000)
    assert win.pending_label.text() == "text 8,160 tokens · more than the 8,192-token context"
    win.send_message()
    assert win.banner.message() == ("This message is 8,160 tokens long (8,194 with the system prompt and the chat's "
                                    "markup), more than the 8,192 the model's context holds. Shorten it, or send "
                                    "it in parts.")
    assert factory.calls == [] and win.store.conversations() == []

    win.composer.setPlainText("word " * 8100)
    qtbot.waitUntil(lambda: "left for the answer" in win.pending_label.text(), timeout=3000)
    assert win.pending_label.text().startswith("text 8,100 tokens · only 58 tokens left for the answer")
    assert win.pending_label.property("warning") is True  # on a tinted ground: easy to miss in plain text
    win.composer.setPlainText("A short question.")
    qtbot.waitUntil(lambda: "left for the answer" not in win.pending_label.text(), timeout=3000)
    assert win.pending_label.property("warning") is False
    win.composer.setPlainText("word " * 8100)
    qtbot.waitUntil(lambda: "left for the answer" in win.pending_label.text(), timeout=3000)
    win.send_message()
    qtbot.waitUntil(lambda: len(factory.calls) == 1, timeout=5000)


def test_a_system_prompt_of_half_the_context_is_named_as_the_cause(qtbot, window, factory):
    """Trial 76 P1: beside a system prompt of 9,000 words, "Hello there" was refused as "This message is 2
    tokens long (…), … Shorten it": no message could be short enough. The setting is named instead; a
    system prompt under half the context leaves the message's words."""
    win = window
    win.settings.system_prompt = "rule " * 9000
    win.composer.setPlainText("Hello there")
    win.send_message()
    qtbot.waitUntil(lambda: win.banner.message() != "", timeout=3000)
    assert win.banner.message() == ("The system prompt and the chat's markup take 9,000 of the 8,192 tokens the "
                                    "model's context holds: too many for this message beside them: shorten it in "
                                    "Settings.")
    assert factory.calls == [] and win.store.conversations() == []
    win.settings.system_prompt = "rule " * 3000
    win.composer.setPlainText("word " * 6000)
    win.send_message()
    qtbot.waitUntil(lambda: win.banner.message().startswith("This message"), timeout=3000)
    assert win.banner.message().startswith("This message is 6,000 tokens long (9,000 with the system prompt")


def test_a_text_shorter_in_bytes_than_the_context_is_never_tokenized(qtbot, window, factory):
    """A token is at least one UTF-8 byte: a message of fewer bytes than the context has beside the
    answer's room fits, so typing it costs no tokenizer call (neither does its Send)."""
    counted = []
    factory.count_text_tokens = lambda text: counted.append(text) or len(text.split())
    qtbot.keyClicks(window.composer, "What is in this photo?")
    room = window.answer_room()
    assert room == 512 and window.context_size() == 8192  # (the settings' token limit, a quarter at most)
    text = "x " * ((8192 - room) // 2 - 1)  # 7,678 bytes
    window.composer.setPlainText(text)
    qtbot.wait(400)
    with qtbot.waitSignal(window.answer_finished, timeout=10_000):
        window.send_message()
    assert counted == [] and "context" not in window.pending_label.text()
    assert factory.calls[0]["text"] == text.strip()


def test_a_long_text_is_counted_off_the_ui_thread_and_send_waits_for_the_count(qtbot, window, factory):
    """A multi-megabyte paste takes the tokenizer seconds: it is counted on a worker thread, and a
    Send pressed before the count comes is carried out when it does (refused beyond the context,
    sent otherwise), unless the text changed meanwhile."""
    import threading
    import time

    threads = []

    def slow_count(text):
        threads.append(threading.get_ident())
        time.sleep(0.3)
        return len(text.split())
    factory.count_text_tokens = slow_count
    win = window
    win.composer.setPlainText("word " * 9000)
    win.send_message()  # at once: before the typing pause's count
    assert win.pending_label.text() == "Counting the message's tokens…"
    assert win.banner.message() == "" or not win.banner.isVisible()
    qtbot.waitUntil(lambda: win.banner.isVisible(), timeout=3000)
    assert win.banner.message().startswith("This message is 9,000 tokens long")
    assert threads and threading.get_ident() not in threads and factory.calls == []

    win.composer.setPlainText("word " * 3000)
    win.send_message()
    win.composer.setPlainText("other " * 3000)  # changed before its count came: not sent
    other = ("other " * 3000).strip()  # counted too once typing pauses: wait for both counts
    qtbot.waitUntil(lambda: win.text_counter.known(other) is not None and not win.text_counter.pending(other),
                    timeout=5000)
    QApplication.processEvents()
    assert factory.calls == [] and win.composer.toPlainText() == ("other " * 3000)

    win.composer.setPlainText("word " * 3000)
    win.send_message()
    qtbot.waitUntil(lambda: len(factory.calls) == 1, timeout=3000)
    assert len(factory.calls[0]["text"].split()) == 3000 and win.composer.toPlainText() == ""


def test_a_paste_past_the_composers_limit_is_refused_with_the_reason(qtbot, window):
    """Found by a trial: a 5-million-character paste stalled the window at every cursor blink (Qt
    lays out a paragraph whole). A paste that would take the composer past MAX_TEXT_CHARS is not
    inserted and the banner says why; what fits is pasted, replacing a selection."""
    from app.composer import MAX_TEXT_CHARS

    def paste(text: str) -> None:
        mime = QMimeData()
        mime.setText(text)
        window.composer.insertFromMimeData(mime)

    paste("word " * 200_001)
    assert window.composer.toPlainText() == ""
    assert window.banner.message() == (
        "The text was not pasted: it has 1,000,005 characters, and a message takes at most 1,000,000 (about "
        "250,000 tokens, more than any model here reads). Paste a part of it.")
    # A million characters of base64 held the window 43 s (Qt's wrapping of a run without a space).
    paste("QUJD" * 25_001)
    assert window.composer.toPlainText() == ""
    assert window.banner.message().startswith("The text was not pasted: it has more than 100,000 characters without")
    paste("y" * 10)
    paste("word " * 199_998)
    assert len(window.composer.toPlainText()) == MAX_TEXT_CHARS
    window.composer.selectAll()
    paste("short")
    assert window.composer.toPlainText() == "short"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_pipe_named_like_a_photo_is_refused_without_opening_it(make_window, tmp_path):
    """Trial 54: a pipe named photo.png froze the window (opening it waits for a writer): a video
    model's window opened it to see whether it was an animation."""
    from app.backends.fake import FakeBackend

    window = make_window(FakeBackend(video=True))
    pipes = [tmp_path / name for name in ("photo.png", "loop.gif", "doc.pdf", "clip.mp4")]
    for pipe in pipes:
        os.mkfifo(pipe)
    done = threading.Event()

    def release() -> None:  # if the window did open one, a writer that closes at once lets it go on (and fail)
        if done.wait(5.0):
            return
        while not done.is_set():
            for pipe in pipes:
                with contextlib.suppress(OSError):
                    os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
            time.sleep(0.2)
    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    started = time.monotonic()
    try:
        window.add_files([str(p) for p in pipes])
    finally:
        done.set()
        releaser.join(5)
    assert time.monotonic() - started < 4.0
    assert window.attachments.paths() == []
    assert window.banner.message().split("\n") == [
        f"{p} is not a regular file (a pipe or a device): it cannot be attached" for p in pipes]


def test_a_refusal_of_send_goes_once_its_reason_is_gone_not_before(qtbot, window, factory, tmp_path, png):
    """Trial 60: "This message is … tokens long" stayed over the shorter text that replaced it, and a
    model's "cannot take videos" after the video was removed; trial 61: both went at the first key
    pressed, with the message still refused. Another banner stays."""
    from tests.engine.videos import solid, write_video

    win = window
    win.composer.setPlainText("word " * 9000)
    qtbot.waitUntil(lambda: "context" in win.pending_label.text(), timeout=3000)
    win.send_message()
    refusal = win.banner.message()
    assert refusal.startswith("This message is 9,000 tokens long")
    win.composer.setPlainText("word " * 8500)  # shorter, still past the context once counted
    qtbot.wait(600)
    assert win.banner.message() == refusal and "8,500" in win.pending_label.text()
    win.composer.setPlainText("word " * 8000)  # fits once counted
    qtbot.waitUntil(win.banner.isHidden, timeout=3000)
    win.composer.setPlainText("word " * 9000)
    qtbot.waitUntil(lambda: "context" in win.pending_label.text(), timeout=3000)
    win.send_message()
    win.composer.setPlainText("word " * 10)  # fits without being counted
    assert win.banner.isHidden()

    video = tmp_path / "clip.mp4"
    write_video(video, (solid(32, 32, 10 * i) for i in range(4)), rate=2)
    win.add_files([str(video), str(png)])
    win.composer.setPlainText("What happens?")
    win.send_message()
    refusal = win.banner.message()
    assert "cannot take videos: remove the video" in refusal
    win.composer.setPlainText("What happens here?")
    win.attachments.remove(str(png))  # the video is still there
    assert win.banner.message() == refusal
    win.attachments.remove(win.attachments.paths()[0])
    assert win.banner.isHidden()
    assert factory.calls == []

    win.banner.show_error("Something else went wrong.")  # not a refusal of this message: stays
    win.composer.setPlainText("typing on")
    assert win.banner.message() == "Something else went wrong."


def test_a_file_of_no_kind_smolchat_attaches_is_said_so_and_a_text_files_words_can_be_pasted(tmp_path):
    """Trial 62: a .txt or .md attached got "Not a recognised image file: /full/path"."""
    from app.images import InvalidImageError, validate_image

    files = {"notes.md": b"# Shopping\n\n- milk\n- bread\n", "utf16.txt": "Grüße".encode("utf-16"),
             "long.txt": ("é" * 3000).encode(),  # a character cut at 4 KiB is no damage
             "windows.txt": "“Grüße” – café".encode("cp1252"),  # a one-byte code page's text (trial 63)
             "data.bin": bytes(range(256)) * 4, "empty.dat": b"\x00" * 10}
    said = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InvalidImageError) as refused:
            validate_image(tmp_path / name)
        said[name] = str(refused.value)
    paste = ": paste its text into the message to ask about it."
    kinds = " is not an image, a video or a PDF, the files Smolchat attaches"
    assert said == {"notes.md": "notes.md" + kinds + paste, "utf16.txt": "utf16.txt" + kinds + paste,
                    "long.txt": "long.txt" + kinds + paste, "windows.txt": "windows.txt" + kinds + paste,
                    "data.bin": "data.bin" + kinds + ".",
                    "empty.dat": "empty.dat" + kinds + "."}


def test_a_pending_images_chip_shows_its_name_cut_in_the_middle(qtbot, qapp, window, png):
    """Trial 62: three pages of one PDF and an owner-password PDF's page looked the same in the strip."""
    from app.attachments import AttachmentChip
    from app.paths import resource

    window.add_files([str(png)])
    chip = window.attachments.chip(window.attachments.paths()[0])
    caption = chip.findChild(QLabel, "attachmentCaption")
    assert caption.testAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
    assert caption.geometry().bottom() == chip.findChild(QLabel, "attachmentThumb").geometry().bottom()
    qapp.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))  # the app's 9 px caption font
    try:
        QApplication.processEvents()
        assert caption.text() == "photo.png"  # measured again in the style sheet's font
        long = AttachmentChip(str(png), name="Quarterly report for the board page 12.png")
        qtbot.addWidget(long)
        text = long.findChild(QLabel, "attachmentCaption").text()
        assert "…" in text and text.endswith("… p. 12") and text.startswith("Qu")
        other = AttachmentChip(str(png), name="A screenshot of the settings window.png")
        qtbot.addWidget(other)
        text = other.findChild(QLabel, "attachmentCaption").text()
        assert "…" in text and text.startswith("A s") and text.endswith(".png")
    finally:
        qapp.setStyleSheet("")
