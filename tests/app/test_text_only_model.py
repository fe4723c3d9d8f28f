"""A text-only model (capabilities ``vision: false``): the window refuses images before sending."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.backends.fake import FakeBackend
from tests.app.helpers import drop, file_mime
from tests.engine.conftest import llama_tiny_checkpoint  # noqa: F401  (fixture)


def _text_only_window(make_window):
    backend = FakeBackend(tokens=["Hi", "!"], model_name="SmolLM2-135M-Instruct", vision=False)
    return make_window(backend), backend


def test_model_info_says_whether_the_model_takes_images(make_window, window):
    win, _ = _text_only_window(make_window)
    assert win.model_info["capabilities"]["vision"] is False
    assert window.model_info["capabilities"]["vision"] is True
    # The composer does not invite an image the model cannot read.
    assert win.composer.placeholderText() == "Ask a question…"
    assert window.composer.placeholderText() == "Ask about an image…"
    # Nor does the empty chat (it said "Drop a photo here…").
    assert win.transcript._empty.text() == "Ask a question below.\nEverything runs on this computer."
    assert window.transcript._empty.text().startswith("Drop a photo here")


def test_dropping_an_image_on_a_text_only_model_shows_why(make_window, png):
    win, backend = _text_only_window(make_window)
    drop(win.composer, file_mime(png))
    assert win.attachments.paths() == []
    assert "text-only model" in win.banner.message() and not win.banner.isHidden()
    assert backend.calls == []


def test_an_image_attached_before_loading_is_not_sent(qtbot, make_window, png):
    win, backend = _text_only_window(make_window)
    win.attachments.add(str(png))  # e.g. attached while the previous, vision model was loaded
    qtbot.keyClicks(win.composer, "What is this?")
    win.send_message()
    assert backend.calls == [] and "text-only model" in win.banner.message()
    assert win.composer.toPlainText() == "What is this?" and win.attachments.paths() == [str(png)]


def test_real_text_only_llama_answers_and_refuses_images(qtbot, llama_tiny_checkpoint, png):  # noqa: F811
    """The tiny SmolLM2-shaped checkpoint in the real engine: "Hi" gets a streamed answer, an image
    gets the banner and is not attached."""
    from app.main_window import MainWindow

    win = MainWindow(str(llama_tiny_checkpoint))  # the default backend: ChatSession.load on the engine thread
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: bool(win.model_info), timeout=60_000)
    assert win.model_info["capabilities"]["vision"] is False
    qtbot.keyClicks(win.composer, "Hi")
    win.generation_params = {"max_new_tokens": 6, "ignore_eos": True}
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        qtbot.mouseClick(win.send_button, Qt.MouseButton.LeftButton)
    assert finished.args[0]["finish_reason"] == "length" and finished.args[0]["generated_tokens"] == 6
    assert win.transcript.messages()[-1]["text"]
    drop(win.composer, file_mime(png))
    assert win.attachments.paths() == [] and "text-only model" in win.banner.message()
    win.close()


def test_a_photo_and_a_video_dropped_together_are_both_named(make_window, png, images_dir):
    """Found by a GUI trial: the photo vanished without a word (the video's message replaced its
    refusal), and the hint under the composer still offered images, videos and PDFs."""
    win, backend = _text_only_window(make_window)
    assert win.composer_hint.text() == "Enter to send · Shift+Enter for a new line · Esc to stop · this model reads text only"
    assert win.attach_button.toolTip() == ("Attach files: this model reads text only (images and videos need a "
                                           "SmolVLM model)")
    video = images_dir.parent / "videos" / "slideshow.mp4"
    win.add_files([str(png), str(video)])
    lines = win.banner.message().split("\n")
    assert lines[0] == ("Not attached: photo.png. SmolLM2-135M-Instruct is a text-only model: it cannot read images; "
                        "a vision model (SmolVLM) can."), lines
    assert lines[1:] == ["SmolLM2-135M-Instruct cannot take videos: remove the video, or load a SmolVLM2 model to "
                         "ask about it."], lines
    assert win.attachments.paths() == [str(video.resolve())]  # marked on its chip; Send says why
    assert backend.calls == []


def test_the_hint_under_the_composer_names_what_the_model_takes(make_window):
    assert make_window(FakeBackend(video=True)).composer_hint.text().endswith(
        "· drop or paste images, videos, PDFs or a folder")
    assert make_window(FakeBackend()).composer_hint.text().endswith("· drop or paste images, PDFs or a folder")


def test_a_file_that_is_no_image_is_said_as_such_not_as_one_the_model_cannot_read(make_window, png, tmp_path):
    """Trial 54: notes.txt handed to a text-only model was refused as an image it cannot read."""
    notes = tmp_path / "notes.txt"
    notes.write_text("a shopping list")
    win, _ = _text_only_window(make_window)
    win.add_files([str(notes), str(png)])
    lines = win.banner.message().split("\n")
    assert lines[0] == ("notes.txt is not an image, a video or a PDF, the files Smolchat attaches: "
                        "paste its text into the message to ask about it.")
    assert lines[1].startswith(f"Not attached: {png.name}. ") and "notes.txt" not in lines[1]
    assert win.attachments.paths() == []


def test_a_photo_attached_while_a_text_only_model_loads_is_said_when_it_has(qtbot, make_window, png):
    """Trial 54: the photo's chip stayed as if it could be sent; only Send said why not."""
    import threading

    backend = FakeBackend(model_name="SmolLM2-135M-Instruct", vision=False)
    gate = threading.Event()
    real_load = backend.load
    backend.load = lambda model, options, on_done: threading.Thread(
        target=lambda: (gate.wait(10), real_load(model, options, on_done)), daemon=True).start()
    win = make_window(backend, wait_loaded=False)
    drop(win.composer, file_mime(png))
    assert win.attachments.paths() != []
    gate.set()
    qtbot.waitUntil(lambda: win.controller.ready, timeout=10_000)
    assert win.banner.message() == ("The attached photos cannot be sent: SmolLM2-135M-Instruct is a text-only model: "
                                    "it cannot read images; a vision model (SmolVLM) can. Remove them, or load one "
                                    "that does.")


def test_a_photo_pasted_or_a_text_file_named_jpg_for_a_text_only_model_is_said_as_what_it_is(make_window, tmp_path):
    """Trial 60: a pasted photo was refused with "Remove the image", though nothing was attached, and a
    text file named fake.jpg was "Not attached … text-only model", not "not an image"."""
    from PySide6.QtGui import QColor, QImage

    win, backend = _text_only_window(make_window)
    image = QImage(20, 10, QImage.Format.Format_RGB32)
    image.fill(QColor(200, 40, 40))
    win.add_image_data(image)
    assert win.banner.message() == ("The pasted image was not attached: SmolLM2-135M-Instruct is a text-only model: "
                                    "it cannot read images; a vision model (SmolVLM) can.")
    fake = tmp_path / "fake.jpg"
    fake.write_text("not a photo at all")
    win.add_files([str(fake)])
    assert win.banner.message() == ("fake.jpg is not an image, a video or a PDF, the files Smolchat attaches: "
                                    "paste its text into the message to ask about it.")
    assert win.attachments.paths() == [] and backend.calls == []
