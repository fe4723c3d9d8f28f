"""Photos of more pixels than Qt decodes by default (256 MB: about 67 megapixels), up to the engine's own
limit, are shown like any other: in the composer's chip, in the sent message and in the viewer."""

from __future__ import annotations

from PIL import Image
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QImageReader
from PySide6.QtWidgets import QLabel

from app.image_viewer import MAX_SHOWN_PIXELS, ImageViewer
from app.messages import ClickableImage, UserMessage
from app.thumbnails import thumbnail

BLUE = (40, 120, 200)


def _big(path, fmt: str, **options):
    """A 9000 × 8000 (72-megapixel) image of one colour: 288 MB decoded whole, over Qt's 256 MB."""
    Image.new("RGB", (9000, 8000), BLUE).save(path, fmt, **options)
    return path


def _centre(pixmap_or_image) -> tuple[int, int, int]:
    image = pixmap_or_image.toImage() if hasattr(pixmap_or_image, "toImage") else pixmap_or_image
    colour = image.pixelColor(image.width() // 2, image.height() // 2)
    return colour.red(), colour.green(), colour.blue()


def _near(colour: tuple[int, int, int], expected: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 3 for a, b in zip(colour, expected))  # JPEG's rounding


def test_a_72_megapixel_photo_is_shown_in_its_chip_its_message_and_the_viewer(qtbot, window, tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown turned 90°: a portrait 8000 × 9000
    path = _big(tmp_path / "panorama.jpg", "JPEG", exif=exif)
    window.add_files([str(path)])
    assert window.attachments.paths() == [str(path.resolve())]
    chip = window.attachments.findChild(QLabel, "attachmentThumb").pixmap()
    assert not chip.isNull() and _near(_centre(chip), BLUE)

    window.composer.setPlainText("What is this?")
    with qtbot.waitSignal(window.answer_finished, timeout=30_000):
        window.send_message()
    [image] = window.transcript.widgets()[0].findChildren(ClickableImage)
    shown = image.pixmap()
    assert (shown.width(), shown.height()) == (160, 180)  # upright, in the 240 × 180 box
    assert _near(_centre(shown), BLUE)

    viewer = image.open_viewer()
    # Reduced to Qt's default budget (8192² pixels), the aspect ratio kept, and said so in the title.
    assert (viewer.image.width(), viewer.image.height()) == (7723, 8688)
    assert _near(_centre(viewer.image), BLUE)
    assert viewer.windowTitle().endswith("(shown at 97% of 8,000 × 9,000 pixels)")
    viewer.close()


def test_a_big_image_of_a_format_qt_decodes_only_whole_is_shown_and_qt_keeps_its_limit(qapp, tmp_path):
    path = _big(tmp_path / "screenshot.png", "PNG", compress_level=1)  # the quickest to write small
    limit = QImageReader.allocationLimit()
    pixmap = thumbnail(str(path), QSize(120, 120), square=True)
    assert (pixmap.width(), pixmap.height()) == (120, 120) and _near(_centre(pixmap), BLUE)
    viewer = ImageViewer(str(path))
    assert (viewer.image.width(), viewer.image.height()) == (8688, 7723)
    assert QImageReader.allocationLimit() == limit  # raised for those reads only
    viewer.close()


def test_an_image_the_viewer_cannot_show_is_named_as_it_was_attached(qapp, tmp_path):
    stored = tmp_path / "b99dfd6326eb2b142ea56c9541959aa0.jpg"  # a copy in the image store is named by its hash
    stored.write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    message = UserMessage("Look", [str(stored)], names=["holiday.jpg"])
    [image] = message.findChildren(ClickableImage)
    assert image.toolTip() == "holiday.jpg — click to view full size"
    viewer = image.open_viewer()
    text = viewer.findChild(QLabel, "fullImage").text()
    assert text.startswith("“holiday.jpg” cannot be shown (") and "b99dfd" not in text
    assert viewer.windowTitle() == "holiday.jpg"
    viewer.close()
    message.deleteLater()


def test_a_small_image_is_shown_at_its_own_size_titled_by_its_name(qapp, png):
    viewer = ImageViewer(str(png))
    assert (viewer.image.width(), viewer.image.height()) == (64, 48) and viewer.windowTitle() == "photo.png"
    assert viewer.image.pixelColor(10, 10).name() == "#e6781e"
    viewer.close()


def test_thumbnails_keep_the_exif_orientation_when_decoded_small(qapp, tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 8  # turned 90° the other way
    path = tmp_path / "tall.jpg"
    Image.new("RGB", (800, 200), "white").save(path, exif=exif)
    pixmap = thumbnail(str(path), QSize(240, 180))
    assert (pixmap.width(), pixmap.height()) == (45, 180)  # upright: 200 × 800 in the 240 × 180 box


def test_a_sent_photo_is_named_as_attached_in_the_chat_and_after_reopening(qtbot, make_window, png):
    """The stored copy is named by its content hash: the thumbnail's tooltip and the viewer's title
    give the name the photo was attached as, live and when the chat is opened again."""
    from PySide6.QtCore import Qt

    from app.backends.fake import FakeBackend

    win = make_window(FakeBackend())
    win.add_files([str(png)])
    win.composer.setPlainText("What is this?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    [image] = win.transcript.widgets()[0].findChildren(ClickableImage)
    assert image.path != str(png) and image.toolTip() == "photo.png — click to view full size"
    chat = win.keeper.current_id
    win.open_conversation(None)
    win.open_conversation(chat)
    [image] = win.transcript.widgets()[0].findChildren(ClickableImage)
    viewer = image.open_viewer()
    assert viewer.windowTitle() == "photo.png"
    viewer.close()


def _shown_viewer(qtbot, path) -> ImageViewer:
    """The viewer of the image at ``path``, on the screen."""
    viewer = ImageViewer(str(path))
    qtbot.addWidget(viewer)
    viewer.show()
    qtbot.waitExposed(viewer)
    return viewer


def test_the_viewer_fits_a_large_photo_to_its_window_zooms_and_stays_on_the_screen(qtbot, tmp_path):
    """Trial 62: a 9,000 × 9,000 photo showed one corner with no way to see all of it, and a 10,000 × 20
    image's window ran off the screen."""
    from PySide6.QtCore import QEvent, QPoint, QPointF
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    from app.image_viewer import fit_scale

    path = tmp_path / "big.png"
    Image.new("RGB", (3000, 2000), (30, 90, 200)).save(path)
    viewer = _shown_viewer(qtbot, path)
    screen = viewer.screen().availableGeometry()
    assert screen.contains(viewer.frameGeometry()) or screen.contains(viewer.geometry())
    label, room = viewer.label, viewer.scroll.viewport().size()
    assert viewer.fitted and label.width() <= room.width() and label.height() <= room.height()
    assert max(label.width() / room.width(), label.height() / room.height()) > 0.97  # fills one side
    assert abs(label.width() / label.height() - 1.5) < 0.01
    assert viewer.percent.text() == f"{100 * label.width() / 3000:.0f}%"
    viewer.actual_size()
    assert (label.width(), label.height()) == (3000, 2000) and viewer.percent.text() == "100%"
    viewer.zoom(-1)
    assert (label.width(), label.height()) == (2000, 1333) and viewer.percent.text() == "67%"
    viewer.zoom(+1)
    viewer.zoom(+1)
    assert label.width() == 4500 and viewer.percent.text() == "150%"
    for _ in range(6):  # enlarged up to MAX_SHOWN_PIXELS only (at 8x it would be a 1.5 GB pixmap)
        viewer.zoom(+1)
    assert label.width() * label.height() <= MAX_SHOWN_PIXELS * 1.001 and label.width() > 3000 * 3
    viewer.fit()
    assert label.width() <= room.width() and viewer.fit_button.isChecked()
    viewer.resize(500, 400)  # the fit follows the window once resizing pauses
    qtbot.waitUntil(lambda: label.width() <= viewer.scroll.viewport().width() < 520, timeout=2000)
    viewport = viewer.scroll.viewport()
    double = QMouseEvent(QEvent.Type.MouseButtonDblClick, QPointF(10, 10), QPointF(viewport.mapToGlobal(QPoint(10, 10))),
                         Qt.MouseButton.LeftButton, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(viewport, double)
    assert not viewer.fitted and label.width() == 3000
    viewer.close()

    assert fit_scale(QSize(1, 1), QSize(300, 200)) == 1.0  # a small image is not blown up
    wide = tmp_path / "wide.png"
    Image.new("RGB", (10_000, 20), (200, 40, 40)).save(wide)
    viewer = _shown_viewer(qtbot, wide)
    assert screen.contains(viewer.geometry())
    assert viewer.label.width() <= viewer.scroll.viewport().width()
    viewer.close()


def test_a_reduced_image_zooms_in_steps_of_the_file_and_says_its_largest(qtbot, tmp_path, monkeypatch):
    """Trial 63: a 9,000 × 9,000 photo (shown reduced to MAX_SHOWN_PIXELS) went to "91%" on "100%" and
    Ctrl+1, and zoomed in steps of the reduced copy (91% -> 137% -> 182%, each a blurrier copy)."""
    import app.image_viewer as viewer_module

    monkeypatch.setattr(viewer_module, "MAX_SHOWN_PIXELS", 1000 * 1000)  # a 1,200-pixel square is reduced
    path = tmp_path / "square.png"
    Image.new("RGB", (1200, 1200), (30, 90, 200)).save(path)
    viewer = _shown_viewer(qtbot, path)
    assert viewer.windowTitle() == "square.png (shown at 83% of 1,200 × 1,200 pixels)"
    viewer.actual_size()
    assert viewer.label.width() == 1000 and viewer.percent.text() == "83%"
    assert viewer.percent.toolTip() == "The largest this image is shown at: 83% of its 1,200 × 1,200 pixels"
    viewer.zoom(+1)  # no larger: the copy is not enlarged past MAX_SHOWN_PIXELS
    assert viewer.label.width() == 1000 and viewer.percent.text() == "83%"
    viewer.zoom(-1)
    assert viewer.label.width() == 800 and viewer.percent.text() == "67%" and viewer.percent.toolTip() == ""
    viewer.zoom(-1)
    assert viewer.label.width() == 600 and viewer.percent.text() == "50%"
    viewer.zoom(+1)
    assert viewer.percent.text() == "67%"
    viewer._show_at(0.097 / viewer._reduced())  # a fit of 9.7%: "+" shows 25%, not a 10% that looks the same
    viewer.zoom(+1)
    assert viewer.percent.text() == "25%"
    viewer.close()
