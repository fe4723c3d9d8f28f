"""End-to-end through the real widgets, the controller and a fake backend on its own thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QTextBrowser, QToolButton

from app.backends.fake import FakeBackend
from tests.app.helpers import drop, file_mime


def test_drop_image_ask_and_stream_answer(qtbot, window, fake_session, png, data_dir):
    assert drop(window.composer, file_mime(png))
    assert window.attachments.paths() == [str(png.resolve())]

    qtbot.keyClicks(window.composer, "What colour is the cat?")
    with qtbot.waitSignal(window.answer_finished, timeout=5000) as finished:
        qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)

    assert finished.args[0]["finish_reason"] == "stop"
    assert finished.args[0]["generated_tokens"] == 5
    qtbot.waitUntil(lambda: window.send_button.isVisible())
    call = fake_session.calls[-1]
    assert call["text"] == "What colour is the cat?"
    [stored] = call["images"]  # a copy in the app's image store, named by content hash
    assert stored.startswith(str(data_dir / "images")) and Path(stored).read_bytes() == png.read_bytes()
    assert call["thread"] != threading.get_ident()  # the engine ran off the UI thread
    messages = window.transcript.messages()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0] == {"role": "user", "text": "What colour is the cat?", "images": [stored]}
    assert messages[1]["text"] == "The cat is orange."
    rendered = window.transcript.last_assistant().rendered_widgets()
    assert [w.toPlainText() for w in rendered] == ["The cat is orange."]
    assert all(isinstance(w, QTextBrowser) and w.objectName() == "assistantText" for w in rendered)
    assert window.composer.toPlainText() == ""
    assert window.attachments.paths() == []
    assert window.stop_button.isEnabled() is False
    window.composer.setPlainText("next")
    assert window.send_button.isEnabled() is True
    stats = window.findChild(QLabel, "statusStats").text()
    assert "FakeVLM-256M" in stats and "cpu" in stats
    # 1130 prompt tokens: the fake's 42 for the text plus its 1088 for the image
    assert "TTFT 0.12 s" in stats and "25.0 tok/s" in stats and "1130 prompt / 0 cached / 5 generated tokens" in stats


def test_stop_ends_a_long_answer_early(qtbot, make_window):
    session = FakeBackend(tokens=[f" w{i}" for i in range(400)], delay=0.01)
    win = make_window(session)
    qtbot.keyClicks(win.composer, "Tell me a long story")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as finished:
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
        assert win.stop_button.isEnabled() and not win.send_button.isEnabled()
        qtbot.waitUntil(lambda: len(win.transcript.messages()[-1]["text"]) > 0, timeout=5000)
        qtbot.mouseClick(win.stop_button, Qt.MouseButton.LeftButton)

    result = finished.args[0]
    assert result["finish_reason"] == "cancelled"
    assert 0 < result["generated_tokens"] < 400
    answer = win.transcript.last_assistant()
    assert answer.finish_reason == "cancelled"
    assert "cancelled" in answer.footer()
    assert "cancelled" in win.stats_label.text()
    assert answer.text == "".join(f" w{i}" for i in range(result["generated_tokens"])).lstrip()
    assert not win.stop_button.isEnabled()


def test_enter_sends_and_shift_enter_inserts_newline(qtbot, window, fake_session):
    qtbot.keyClicks(window.composer, "first line")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.composer, "second line")
    assert window.composer.toPlainText() == "first line\nsecond line"
    assert fake_session.calls == []

    with qtbot.waitSignal(window.answer_finished, timeout=5000):
        qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    assert fake_session.calls[-1]["text"] == "first line\nsecond line"
    assert fake_session.calls[-1]["images"] == []


def test_enter_on_empty_composer_sends_nothing(qtbot, window, fake_session):
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.wait(50)
    assert fake_session.calls == []
    assert window.transcript.messages() == []


def test_engine_image_error_is_shown_and_prompt_restored(qtbot, make_window, png):
    session = FakeBackend(image_error=f"cannot decode image {png.name}: truncated data")
    win = make_window(session)
    win.add_files([str(png)])
    qtbot.keyClicks(win.composer, "What is this?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)

    assert win.banner.message() == f"cannot decode image {png.name}: truncated data"
    assert win.composer.toPlainText() == "What is this?" and win.attachments.paths() == [str(png)]
    assert win.transcript.widgets() == [] and win.store.conversations() == []  # not sent, so not kept
    assert win.send_button.isEnabled() and not win.stop_button.isEnabled()


def test_a_message_too_long_for_the_context_says_what_to_do(qtbot, make_window):
    """Found by a trial: the banner was the engine's bare "the prompt has 30008 tokens but the
    context holds 8192", lowercase, with nothing about what to do; the message stays in the composer.
    (The window counts the text itself before sending, 3,000 tokens here: the engine's refusal is
    for what it adds, the history and the template.)"""
    win = make_window(FakeBackend(image_error="the prompt has 30008 tokens but the context holds 8192",
                                  error_type="PromptTooLongError"))
    win.composer.setPlainText("word " * 3_000)
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.banner.message() == (
        "Too long for the model's context: this message makes a prompt of 30008 tokens but the context holds "
        "8192. Shorten it or send it in parts (a long chat keeps only the earlier messages that fit).")
    assert win.composer.toPlainText() == "word " * 3_000  # kept as typed, to shorten
    # ... and taken back from the chat, which it started: Send stores it once, not twice.
    assert win.store.conversations() == [] and win.transcript.widgets() == []


def test_a_refused_follow_up_leaves_the_chat_as_it_was_an_edit_is_edited_again_a_regenerate_adds_nothing(qtbot,
                                                                                                   make_window):
    """Taken back: a new question the engine refuses as too long (its earlier exchange stays), and an
    edit (its other version shown again, the composer editing it again with the draft set aside kept:
    found by a trial, the edited text came back outside the edit, so Send added it as a new question).
    A regenerate that never started adds no version (the composer gets no copy of its question)."""
    backend = FakeBackend(tokens=["Fine", "."])
    win = make_window(backend)
    win.composer.setPlainText("First.")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    chat = win.keeper.current_id
    backend.image_error, backend.error_type = "the prompt has 9000 tokens but the context holds 8192", \
        "PromptTooLongError"
    win.composer.setPlainText("Second.")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert [m.text for m in win.store.messages(chat)] == ["First.", "Fine."]
    assert [w.text for w in win.transcript.widgets()] == ["First.", "Fine."]
    assert win.composer.toPlainText() == "Second." and win.keeper.current_id == chat

    win.composer.setPlainText("My draft")
    win._on_message_action("edit", 0)
    win.composer.setPlainText("First, edited.")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert [m.text for m in win.store.messages(chat)] == ["First.", "Fine."]  # the old version, shown again
    assert {count for _, count in win.store.versions(chat).values()} == {1}  # the failed version is gone
    assert win.composer.toPlainText() == "First, edited." and win._editing == 0
    still = "Still editing that message: change it and send again, or press Esc to cancel the edit."
    assert win.banner.message().split("\n") == [
        "Too long for the model's context: this message makes a prompt of 9000 tokens but the context holds 8192. "
        "Shorten it or send it in parts (a long chat keeps only the earlier messages that fit).", still]
    win.banner.dismiss()  # the error read and closed: the edit's notice stays, with its button
    assert win.banner.message() == still
    button = win.banner.findChild(QPushButton, "bannerAction")
    assert button.isVisibleTo(win.banner) and button.text() == "Cancel edit"
    qtbot.keyClick(win.composer, Qt.Key.Key_Escape)  # cancel: the draft set aside comes back
    assert win.banner.isHidden()
    assert win._editing is None and win.composer.toPlainText() == "My draft"

    win.composer.clear()
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win._on_message_action("regenerate", 1)
    # The new version never started: it is not added, the answer it was to replace stays shown (trial 55:
    # an empty "(failed)" 2 / 2 hid it), and the banner says why.
    assert [(m.role, m.text, m.status) for m in win.store.messages(chat)] == [
        ("user", "First.", "done"), ("assistant", "Fine.", "done")]
    assert [w.text for w in win.transcript.widgets()] == ["First.", "Fine."]
    assert {count for _, count in win.store.versions(chat).values()} == {1}
    assert win.banner.message().startswith("Too long for the model's context")
    assert win.composer.toPlainText() == ""  # no second copy of the question to send


def test_text_typed_while_a_question_fails_follows_it_back_into_the_composer(qtbot, make_window, png):
    """Found by a trial: with anything typed during a slow failing answer, the failed question stayed in
    the chat (and a new chat in the sidebar), its text and files not given back."""
    backend = FakeBackend(image_error="fake: The server closed the connection", error_type="Remote:closed",
                          progress_delay=0.2)
    win = make_window(backend)
    win.add_files([str(png)])
    win.composer.setPlainText("Compare these")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
        win.composer.setPlainText("meanwhile")
    assert win.store.conversations() == [] and win.transcript.widgets() == []
    assert win.composer.toPlainText() == "Compare these\n\nmeanwhile"
    assert win.attachments.paths() == [str(png)]


@pytest.mark.parametrize("kind, advice", [
    ("images", "Attach fewer images or pick a lower image detail, shorten it, or send it in parts"),
    ("video frames", "Attach a shorter video or fewer frames (Settings ▸ Video frames), shorten it, or send it in parts"),
])
def test_a_message_too_long_with_its_media_suggests_fewer(qtbot, make_window, kind, advice, tmp_path):
    """Where the media are what does not fit, the engine says so and the banner suggests what helps;
    the message comes back to the composer with its files, to send again with fewer (found by a
    trial: only the text came back, and resending it dropped the photo without a word)."""
    win = make_window(FakeBackend(image_error=f"the prompt has 9012 tokens (8640 of them for {kind}) but the "
                                              "context holds 8192", error_type="PromptTooLongError"))
    png = tmp_path / "shelf.png"
    Image.new("RGB", (40, 30), (10, 120, 40)).save(png)
    assert drop(win.composer, file_mime(png))
    win.composer.setPlainText("Compare these.")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.composer.toPlainText() == "Compare these."
    assert win.attachments.paths() == [str(png)]  # as it was attached, with the copy made then
    [stored] = win.kept_paths()
    assert Path(stored).read_bytes() == png.read_bytes() and stored != str(png)
    assert win.attachments.chip(str(png)).toolTip() == "shelf.png"
    assert win.banner.message() == (
        f"Too long for the model's context: this message makes a prompt of 9012 tokens (8640 of them for {kind}) "
        f"but the context holds 8192. {advice} (a long chat keeps only the earlier messages that fit).")


def test_a_failed_question_comes_back_with_each_identical_file_under_its_own_name(qtbot, make_window, tmp_path):
    """Identical files share one copy in the image store, but the composer gets back the files as
    attached (two chips), so sending again keeps both names."""
    backend = FakeBackend(image_error="fake: The server closed the connection", error_type="Remote:closed")
    win = make_window(backend)
    holiday, cat = tmp_path / "holiday photo.png", tmp_path / "my cat.png"
    Image.new("RGB", (40, 30), (10, 120, 40)).save(holiday)
    cat.write_bytes(holiday.read_bytes())
    assert drop(win.composer, file_mime(holiday)) and drop(win.composer, file_mime(cat))
    assert win.attached_names() == ["holiday photo.png", "my cat.png"]
    win.composer.setPlainText("Same?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.store.conversations() == []
    assert [c.name for c in win.attachments.chips()] == ["holiday photo.png", "my cat.png"]
    backend.image_error = None
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    [question] = [m for m in win.store.messages(win.keeper.current_id) if m.role == "user"]
    assert question.text == "Same?" and question.attached_names == ["holiday photo.png", "my cat.png"]


def test_new_chat_clears_transcript_and_resets_session(qtbot, window, fake_session):
    qtbot.keyClicks(window.composer, "hi")
    with qtbot.waitSignal(window.answer_finished, timeout=5000):
        qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    assert len(fake_session.history) == 2
    resets = fake_session.resets
    qtbot.mouseClick(window.findChild(type(window.new_chat_button), "newChatButton"), Qt.MouseButton.LeftButton)
    assert window.transcript.messages() == []
    assert fake_session.resets == resets + 1  # the backend was told: an empty conversation
    qtbot.waitUntil(lambda: fake_session.history == [], timeout=5000)


def test_close_while_generating_cancels_and_joins_thread(qtbot, make_window):
    session = FakeBackend(tokens=["x"] * 10_000, delay=0.01)
    win = make_window(session)
    qtbot.keyClicks(win.composer, "go")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: session.yielded > 3, timeout=5000)
    win.close()
    assert session.closed and not session.jobs.thread.is_alive()  # close() cancelled and joined the thread
    assert session.yielded < 10_000


def test_widgets_have_the_documented_object_names(window):
    for name in ("composer", "transcript", "attachments", "statusStats", "modelPicker"):
        assert window.findChild(object, name) is not None, name
    for name in ("sendButton", "stopButton", "attachButton"):
        assert isinstance(window.findChild(QToolButton, name), QToolButton), name
    assert window.windowTitle() == "Smolchat"


def test_attach_names_videos_only_for_a_model_that_takes_them(qtbot, make_window):
    """Found by a trial: the attach button offered "images or PDFs" to a SmolVLM2 model too."""
    images = make_window(FakeBackend(video=False))
    assert images.attach_button.toolTip() == "Attach images or PDFs (or drop / paste them, or a folder)"
    backend = FakeBackend(video=True)
    videos = make_window(backend)
    tip = "Attach images, videos or PDFs (or drop / paste them, or a folder)"
    assert videos.attach_button.toolTip() == tip and videos.attach_button.accessibleName() == tip
    backend.video = False  # then a model without video is loaded
    with qtbot.waitSignal(videos.controller.model_loaded, timeout=5000):
        videos.load_model("/models/other")
    assert videos.attach_button.accessibleName() == "Attach images or PDFs (or drop / paste them, or a folder)"


def test_send_has_a_tooltip_with_its_key(qtbot, window):
    """It had an accessible name and no tooltip: each state change cleared it."""
    assert window.send_button.toolTip() == "Send (Enter)"
    window.composer.setPlainText("Hello")  # enables Send (the tooltip was set to "" here)
    assert window.send_button.isEnabled() and window.send_button.toolTip() == "Send (Enter)"
    with qtbot.waitSignal(window.answer_finished, timeout=10_000):
        window.send_message()
    assert window.send_button.toolTip() == "Send (Enter)"


def test_a_drop_notice_shows_while_the_prompt_is_read_and_once(qtbot, make_window):
    """Found by a trial: "the 4 oldest messages were dropped" came only after the answer. The
    engine's first progress event carries it: the banner says it before the first word, and the
    answer's end does not say it again."""
    from engine.api import DoneEvent, GenerationStats, ProgressEvent, TokenEvent

    notice = "The conversation no longer fits the 8192-token context: the 4 oldest messages were dropped."
    gate = threading.Event()

    class Dropping(FakeBackend):
        def _answer(self, kind, text, attachments, params, sink, system_prompt):
            sink(ProgressEvent("prefill", 0, 100, notice=notice))
            gate.wait(5)
            sink(TokenEvent(token_id=1, text="Fine."))
            sink(DoneEvent("stop", GenerationStats(notice=notice)))

    win = make_window(Dropping())
    said = []
    win.controller.notice.connect(said.append)
    win.composer.setPlainText("And now?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.send_message()
        qtbot.waitUntil(lambda: win.banner.message() == notice, timeout=5000)
        assert win.transcript.last_assistant().text == ""  # before the answer's first word
        gate.set()
    assert said == [notice] and win.banner.message() == notice


def test_a_refusal_of_images_goes_once_a_model_that_reads_them_is_loaded(qtbot, make_window, png):
    """Found by a trial: a photo dropped while a vision model loaded was refused by the text model still
    in use, and the banner kept saying the model cannot read images after the new one could."""
    backend = FakeBackend(vision=False)
    win = make_window(backend)
    win.add_files([str(png)])
    assert "is a text-only model: it cannot read images" in win.banner.message()
    backend.vision = True
    win.load_model("/models/fake-vision")
    qtbot.waitUntil(lambda: win.controller.ready and win.model_info["capabilities"]["vision"], timeout=5000)
    assert win.banner.message() == ""
    win.add_files([str(png)])
    assert len(win.attachments.paths()) == 1


def test_enter_while_the_model_loads_says_why_nothing_was_sent(qtbot, make_window):
    """Found by a trial: Enter while a model loaded did nothing and said nothing."""
    import threading

    backend = FakeBackend()
    win = make_window(backend)
    gate = threading.Event()
    backend.jobs.put(gate.wait)  # the next load waits behind this
    win.load_model("/models/other")
    assert win.controller.loading
    win.composer.setPlainText("Hello?")
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.banner.message() == ("The model is still loading: your message stays here, to send once the status "
                                    "bar says ready.")
    assert win.composer.toPlainText() == "Hello?" and win.store.conversations() == []
    gate.set()
    qtbot.waitUntil(lambda: win.controller.ready, timeout=5000)
    # Once loaded, the message still waiting is said (trial 55: it sat there unsent without a word).
    assert win.banner.message() == "The model is ready: press Enter to send your message."


def test_what_was_said_about_a_load_goes_once_a_model_is_ready(qtbot, make_window):
    """Found by a trial: "Could not load the model: ..." and "The model is still loading..." stayed
    up after a model had loaded."""
    import threading

    backend = FakeBackend()
    win = make_window(backend)
    backend.fail = "Box: 401 Unauthorized: the API key is missing or wrong"
    win.load_model("/models/locked")
    qtbot.waitUntil(lambda: win.banner.message().startswith("Could not load the model: Box: 401"), timeout=5000)
    backend.fail = None
    gate = threading.Event()
    backend.jobs.put(gate.wait)
    win.load_model("/models/fake")
    win.composer.setPlainText("Hello?")
    win.send_message()
    assert win.banner.message().startswith("The model is still loading")
    gate.set()
    qtbot.waitUntil(lambda: win.controller.ready, timeout=5000)
    assert win.banner.message() == "The model is ready: press Enter to send your message."
    win.banner.dismiss()
    win.composer.clear()  # nothing waiting: nothing said
    gate.clear()
    backend.jobs.put(gate.wait)
    win.load_model("/models/other")
    win.composer.setPlainText("Hello?")
    win.send_message()
    win.composer.clear()
    gate.set()
    qtbot.waitUntil(lambda: win.controller.ready and win.model_info.get("path") == "/models/other", timeout=5000)
    assert win.banner.message() == ""


def test_a_server_quiet_mid_answer_is_said_in_the_status_bar(qtbot, make_window, monkeypatch):
    """Trial 52: a server that stopped sending mid-answer showed "generating…" for two minutes (the
    stall timeout) with no hint. After a while without a word the status bar says so, and how to stop."""
    import app.main_window as main_window

    monkeypatch.setattr(main_window, "QUIET_S", 0.3)
    monkeypatch.setattr(main_window, "QUIET_CHECK_MS", 50)
    win = make_window(FakeBackend(tokens=["Half", " an", " answer", " then", " silence"], delay=0.6))
    win.controller.model_info.update(backend="remote:Box", device="Box")
    win.composer.setPlainText("Hello?")
    with qtbot.waitSignal(win.answer_finished, timeout=20_000):
        win.send_message()
        qtbot.waitUntil(lambda: "Box has sent nothing for 0 s · Esc stops the answer" in win.stats_label.text(),
                        timeout=5000)
        words = len(win.transcript.widgets()[-1].text)
        qtbot.waitUntil(lambda: len(win.transcript.widgets()[-1].text) > words, timeout=5000)  # a word came
        assert win.stats_label.text().endswith(" · generating…")


def test_an_answers_notice_stays_under_it_naming_the_file_as_attached(qtbot, make_window, png):
    """Trial 52: "Only 4 of the 12 frames of … could be read" was a banner alone: gone once dismissed,
    and after a restart; stored with the copy's content hash for a name."""
    backend = FakeBackend(tokens=["A", " cat."])
    backend.notice = "Only 4 of the 12 frames of {0} could be read (the file ends early)"
    win = make_window(backend)
    assert drop(win.composer, file_mime(png))
    win.composer.setPlainText("What is it?")
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.send_message()
    said = f"Only 4 of the 12 frames of {png.resolve()} could be read (the file ends early)"
    assert said in win.transcript.widgets()[-1].footer() and said in win.banner.message()
    chat = win.keeper.current_id
    win.close()
    again = make_window(FakeBackend())
    again.open_conversation(chat)
    assert said in again.transcript.widgets()[-1].footer()
