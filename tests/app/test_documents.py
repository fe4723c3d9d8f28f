"""PDFs (pages rendered off the UI thread, a page picker for long ones), folders and several files at once."""

from __future__ import annotations

import threading

import pytest
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app import pdf_pages
from tests.app.helpers import drop, file_mime


def make_pdf(path, pages: int, size=(200, 300)):
    """A real PDF of ``pages`` pages (Pillow's PDF writer), each a different grey."""
    images = [Image.new("RGB", size, (10 * i, 10 * i, 10 * i)) for i in range(pages)]
    images[0].save(path, "PDF", save_all=True, append_images=images[1:])
    return path


def encrypted_pdf(path):
    """A one-page PDF with a Standard security handler whose password is not empty."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
            b"<< /Filter /Standard /V 1 /R 2 /O <" + b"11" * 32 + b"> /U <" + b"22" * 32 + b"> /P -4 >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 5\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += (b"trailer\n<< /Size 5 /Root 1 0 R /Encrypt 4 0 R /ID [<" + b"00" * 16 + b"> <" + b"00" * 16
            + b">] >>\nstartxref\n%d\n%%%%EOF\n" % xref)
    path.write_bytes(bytes(out))
    return path


def empty_pdf(path):
    import pypdfium2 as pdfium

    pdfium.PdfDocument.new().save(str(path))
    return path


def names(win) -> list[str]:
    return [p.rsplit("/", 1)[-1] for p in win.attachments.paths()]


def test_pdf_pages_are_rendered_off_the_ui_thread_and_attached(qtbot, window, fake_session, tmp_path, monkeypatch):
    threads = []
    render = pdf_pages.render_pages
    monkeypatch.setattr(pdf_pages, "render_pages",
                        lambda *a, **k: threads.append(threading.get_ident()) or render(*a, **k))
    pdf = make_pdf(tmp_path / "scan.pdf", 3)
    assert drop(window.composer, file_mime(pdf))
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 3, timeout=10_000)
    assert threads and threads[0] != threading.get_ident()
    assert names(window) == ["scan page 1.png", "scan page 2.png", "scan page 3.png"]
    with Image.open(window.attachments.paths()[1]) as page:  # 200 x 300 pt at the 4x cap
        assert page.size == (800, 1200) and page.getpixel((400, 600)) == (10, 10, 10)
    assert window.pending_label.text() == "3 images · 3,264 image tokens (full)"  # 1,088 a page at full detail
    window.composer.setPlainText("Summarise the scan")
    with qtbot.waitSignal(window.answer_finished, timeout=10_000):
        qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    assert len(fake_session.calls[-1]["images"]) == 3


def test_picked_files_keep_their_order_with_pdf_pages_and_videos_in_place(qtbot, window, tmp_path, images_dir):
    """Found by a trial: a PDF picked with other files attached its pages after them (they come back
    from rendering later), and a video went before the photos picked ahead of it; "the first
    image" then meant another file to the model than to the user."""
    photos = []
    for name in ("a.png", "b.png"):
        Image.new("RGB", (32, 32), "red" if name == "a.png" else "blue").save(tmp_path / name)
        photos.append(str(tmp_path / name))
    first, second = make_pdf(tmp_path / "first.pdf", 2), make_pdf(tmp_path / "second.pdf", 1)
    video = str(images_dir.parent / "videos" / "slideshow.mp4")
    window.add_files([str(first), photos[0], video, str(second), photos[1]])
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 6 and window.documents.working == 0, timeout=10_000)
    assert names(window) == ["first page 1.png", "first page 2.png", "a.png", "slideshow.mp4",
                             "second page 1.png", "b.png"]
    Image.new("RGB", (32, 32), "green").save(tmp_path / "later.png")  # a later pick goes after them
    window.add_files([str(tmp_path / "later.png")])
    assert names(window)[-1] == "later.png"


def test_a_long_pdf_opens_the_page_picker_with_the_pages_that_fit(qtbot, window, tmp_path):
    window.generation_params = {"max_new_tokens": 512}
    window.add_files([str(make_pdf(tmp_path / "manual.pdf", 12))])
    qtbot.waitUntil(lambda: window.documents.picker is not None and window.documents.picker.isVisible(),
                    timeout=10_000)
    picker = window.documents.picker
    budget = 8192 - 512 - 256  # the fake's context, the answer's room, the text's margin
    assert (picker.first.value(), picker.last.value()) == (1, budget // 1088) == (1, 6)
    assert picker.cost_label.text() == "6 pages · 6,528 image tokens of 7,424 available"
    picker.last.setValue(8)
    assert picker.cost_label.text().startswith("8 pages · 8,704 image tokens of 7,424 available — too many")
    assert not picker.attach_button.isEnabled()
    picker.first.setValue(3)
    picker.last.setValue(5)
    assert picker.cost_label.text() == "3 pages · 3,264 image tokens of 7,424 available"
    qtbot.mouseClick(picker.attach_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 3, timeout=10_000)
    assert names(window) == ["manual page 3.png", "manual page 4.png", "manual page 5.png"]


@pytest.mark.parametrize("kind, message", [
    ("broken", "broken.pdf is damaged: PDFium cannot read it."),
    ("encrypted", "encrypted.pdf is password-protected: Smolchat cannot open encrypted PDFs. "
                  "Save a copy without the password."),
    ("empty", "empty.pdf has no pages."),
    ("text", "text.pdf is not a PDF file."),
    # Found by a trial: these were "has no pages", as if complete.
    ("truncated", "truncated.pdf is damaged (not a complete PDF): no page can be read."),
    ("garbage", "garbage.pdf is damaged (not a complete PDF): no page can be read."),
])
def test_unreadable_pdfs_give_one_line_and_attach_nothing(qtbot, window, tmp_path, kind, message):
    path = tmp_path / f"{kind}.pdf"
    if kind == "broken":
        make_pdf(path, 2)
        path.write_bytes(path.read_bytes()[:300])  # cut short: no xref, no pages left
        path.write_bytes(path.read_bytes() + b"\n/Type /Page garbage")
    elif kind == "encrypted":
        encrypted_pdf(path)
    elif kind == "empty":
        empty_pdf(path)
    elif kind == "truncated":
        make_pdf(path, 2)
        path.write_bytes(path.read_bytes()[:200])  # cut before its first page object
    elif kind == "garbage":
        path.write_bytes(b"%PDF-1.4 garbage")
    else:
        path.write_text("just text")
    window.add_files([str(path)])
    qtbot.waitUntil(lambda: window.banner.message() == message, timeout=10_000)
    assert window.attachments.paths() == [] and window.documents.working == 0


def test_a_dropped_folder_attaches_its_images_and_pdfs_sorted(qtbot, window, tmp_path):
    folder = tmp_path / "holiday"
    (folder / "sub").mkdir(parents=True)
    for name in ("b.png", "a.jpg", "sub/c.png"):
        Image.new("RGB", (32, 32), "red").save(folder / name)
    (folder / "notes.txt").write_text("not an image")
    make_pdf(folder / "c-ticket.pdf", 1)
    assert drop(window, file_mime(folder))
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 3, timeout=10_000)
    assert names(window)[:2] == ["a.jpg", "b.png"] and names(window)[2] == "c-ticket page 1.png"


def _scans(window, tmp_path, count: int):
    """A folder of ``count`` small PNGs, of which 6 fit the fake model's context with 512 tokens kept for
    the answer (1,088 tokens an image at full detail, 7,424 available)."""
    window.generation_params = {"max_new_tokens": 512}
    folder = tmp_path / "scans"
    folder.mkdir()
    for i in range(count):
        Image.new("RGB", (40, 30), (i, 0, 0)).save(folder / f"scan{i:02}.png")
    return folder


def test_too_many_images_for_the_context_are_left_out_with_a_message(qtbot, window, tmp_path):
    folder = _scans(window, tmp_path, 10)
    window.add_files([str(folder)])
    assert names(window) == [f"scan{i:02}.png" for i in range(6)]
    assert window.banner.message() == ("Attached 6 of 10 images: the rest would not fit the model's context "
                                       "(1,088 tokens an image at full detail, 7,424 available). "
                                       "Lower the image detail in Settings to fit more.")


def test_the_note_on_images_left_out_goes_with_the_last_chip(qtbot, window, tmp_path):
    """Trial 54: "Attached 6 of 40 images" stayed in the banner after the chips it counted were removed
    (or sent); an error about a refused file of the same drop stays."""
    folder = _scans(window, tmp_path, 10)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    window.add_files([str(broken), str(folder)])
    note = ("Attached 6 of 10 images: the rest would not fit the model's context (1,088 tokens an image at full "
            "detail, 7,424 available). Lower the image detail in Settings to fit more.")
    lines = window.banner.message().split("\n")
    assert len(lines) == 2 and lines[1] == note and "broken.png" in lines[0]
    for path in window.attachments.paths()[:-1]:
        window.attachments.remove(path)
    assert window.banner.message().split("\n") == lines  # one chip left: the note still counts it
    window.attachments.remove(window.attachments.paths()[0])
    assert window.banner.message() == lines[0]
    assert window.banner.tone() == "error"


def test_a_note_alone_closes_the_banner_when_the_chips_are_sent(qtbot, window, tmp_path):
    folder = _scans(window, tmp_path, 8)
    window.add_files([str(folder)])
    assert window.banner.message().startswith("Attached 6 of 8 images")
    window.composer.setPlainText("What do these say?")
    window.send_message()
    qtbot.waitUntil(lambda: not window.attachments.paths(), timeout=5_000)
    assert window.banner.isHidden()


def test_a_pdf_in_a_folder_the_images_filled_is_left_out_with_the_others(qtbot, window, tmp_path):
    """Found by a trial: the folder's images filled the context, then its PDF's page was attached
    anyway (a page always went in), one more than the banner said, and the answer hit the context's end."""
    folder = _scans(window, tmp_path, 10)
    make_pdf(folder / "ticket.pdf", 1)
    window.add_files([str(folder)])
    qtbot.waitUntil(lambda: window.documents.working == 0, timeout=10_000)
    assert names(window) == [f"scan{i:02}.png" for i in range(6)]
    assert window.banner.message().split("\n") == [
        "Attached 6 of 10 images: the rest would not fit the model's context (1,088 tokens an image at full "
        "detail, 7,424 available). Lower the image detail in Settings to fit more.",
        "ticket.pdf was not attached: the attachments already fill the model's context (1,088 tokens a page at "
        "full detail, 896 available)."]


def test_the_file_dialog_takes_several_images_and_pdfs(qtbot, window, tmp_path, monkeypatch):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    for p in (a, b):
        Image.new("RGB", (20, 20), "blue").save(p)
    pdf = make_pdf(tmp_path / "doc.pdf", 2)
    seen = {}

    def pick(parent, caption, folder, filters):
        seen["filters"] = filters
        return [str(a), str(b), str(pdf)], ""
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", pick)
    qtbot.mouseClick(window.attach_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 4, timeout=10_000)
    assert names(window)[:2] == ["a.png", "b.png"] and "*.pdf" in seen["filters"].split(";;")[0]


def test_a_pasted_pdf_file_is_attached_page_by_page(qtbot, window, tmp_path, qapp):
    qapp.clipboard().setMimeData(file_mime(make_pdf(tmp_path / "copied.pdf", 2)))
    window.composer.setFocus()
    window.composer.paste()
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 2, timeout=10_000)
    assert window.composer.toPlainText() == "" and names(window) == ["copied page 1.png", "copied page 2.png"]
    # Kept with the message under those names: an export names the pages' files so.
    qtbot.keyClicks(window.composer, "Summarise")
    with qtbot.waitSignal(window.answer_finished, timeout=10_000):
        window.send_message()
    [message] = [m for m in window.store.messages(window.keeper.current_id) if m.role == "user"]
    assert message.attached_names == ["copied page 1.png", "copied page 2.png"]


def test_identical_pages_of_two_pdfs_keep_each_pdfs_name(qtbot, window, tmp_path):
    """One copy in the image store for both pages: each keeps the name of the PDF it came from (found by
    a trial: both were kept as the last one's)."""
    first = make_pdf(tmp_path / "Quarterly report.pdf", 1)
    (tmp_path / "四半期.pdf").write_bytes(first.read_bytes())
    drop(window.composer, file_mime(first, tmp_path / "四半期.pdf"))
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 2, timeout=10_000)
    assert window.attached_names() == ["Quarterly report page 1.png", "四半期 page 1.png"]
    qtbot.keyClicks(window.composer, "Compare")
    with qtbot.waitSignal(window.answer_finished, timeout=10_000):
        window.send_message()
    [message] = [m for m in window.store.messages(window.keeper.current_id) if m.role == "user"]
    assert message.images[0] == message.images[1]
    assert message.attached_names == ["Quarterly report page 1.png", "四半期 page 1.png"]


def test_a_white_page_keeps_a_visible_edge_in_its_thumbnail(qapp, tmp_path):
    from PySide6.QtCore import QSize

    from app.thumbnails import thumbnail

    page = tmp_path / "page.png"
    Image.new("RGB", (600, 800), "white").save(page)
    image = thumbnail(str(page), QSize(64, 64), square=True, radius=8).toImage()
    edge, centre = image.pixelColor(0, 32), image.pixelColor(32, 32)
    assert centre.name() == "#ffffff" and edge.alpha() > 0 and edge.red() < 230


def test_a_second_long_pdf_waits_for_the_first_picker_and_counts_its_pages(qtbot, window, tmp_path):
    """Trial 54: two pickers stacked, each promising the same room; after both, "Attached 0 of 6"."""
    window.generation_params = {"max_new_tokens": 512}
    window.add_files([str(make_pdf(tmp_path / "first.pdf", 12))])
    window.add_files([str(make_pdf(tmp_path / "second.pdf", 12))])
    qtbot.waitUntil(lambda: window.documents.picker is not None and window.documents.picker.isVisible(),
                    timeout=10_000)
    first = window.documents.picker
    qtbot.waitUntil(lambda: window.documents.working == 0 and bool(window.documents._waiting), timeout=10_000)
    assert first.windowTitle() == "Pages of first.pdf" and len(window.findChildren(type(first))) == 1
    first.last.setValue(3)
    qtbot.mouseClick(first.attach_button, Qt.MouseButton.LeftButton)  # 3 pages: 3,264 tokens, rendering
    qtbot.waitUntil(lambda: window.documents.picker is not first and window.documents.picker.isVisible(),
                    timeout=10_000)
    second = window.documents.picker
    assert second.windowTitle() == "Pages of second.pdf"
    # The first PDF's three pages count, rendered or not: 7,424 - 3,264 = 4,160 tokens, 3 pages.
    assert (second.first.value(), second.last.value()) == (1, 3)
    assert second.cost_label.text() == "3 pages · 3,264 image tokens of 4,160 available"
    qtbot.mouseClick(second.attach_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(window.attachments.paths()) == 6, timeout=10_000)
    assert names(window) == [f"first page {n}.png" for n in (1, 2, 3)] + [f"second page {n}.png" for n in (1, 2, 3)]
    assert "Attached" not in (window.banner.message() or "")


def test_files_given_while_the_model_loads_wait_for_it(qtbot, make_window, tmp_path):
    """Trial 54: a PDF given at start (``smolchat doc.pdf``) was cut to fit before the model said its
    context, with no page picker."""
    from app.backends.fake import FakeBackend

    backend = FakeBackend()
    gate = threading.Event()
    real_load = backend.load

    def slow_load(model, options, on_done):
        threading.Thread(target=lambda: (gate.wait(10), real_load(model, options, on_done)), daemon=True).start()
    backend.load = slow_load
    win = make_window(backend, wait_loaded=False)
    win.generation_params = {"max_new_tokens": 512}
    pdf = make_pdf(tmp_path / "manual.pdf", 12)
    win.open_files([str(pdf)])
    assert win.controller.loading and win.attachments.paths() == []
    assert win.banner.message() == "The file will be attached once the model has loaded."
    gate.set()
    qtbot.waitUntil(lambda: win.documents.picker is not None and win.documents.picker.isVisible(), timeout=10_000)
    assert win.documents.picker.windowTitle() == "Pages of manual.pdf"
    assert win.banner.message() != "The file will be attached once the model has loaded."


def test_an_empty_folders_line_stays_beside_other_files_errors(window, tmp_path):
    """Trial 54: with a broken file in the same drop, the empty folder's line was left out."""
    (tmp_path / "empty").mkdir()
    window.add_files([str(tmp_path / "gone.png"), str(tmp_path / "empty")])
    lines = window.banner.message().split("\n")
    assert lines[0].startswith("Image file not found") and lines[1] == "The folder empty holds no images or PDFs."
