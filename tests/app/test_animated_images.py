"""An animated GIF or WebP in a sent message is shown as one (a "GIF" badge; it plays under the
pointer or with the focus, then stops where it is) and plays at full size in the viewer; a still
GIF and an APNG (whose frames Qt cannot read) stay still pictures without the badge."""

from __future__ import annotations

from PIL import Image
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QEnterEvent, QMovie
from PySide6.QtWidgets import QApplication, QLabel

from app.messages import ClickableImage, UserMessage

COLOURS = [(220, 40, 40), (40, 200, 60), (40, 80, 220)]


def _animation(path, fmt: str = "GIF"):
    frames = [Image.new("RGB", (64, 48), colour) for colour in COLOURS]
    frames[0].save(path, fmt, save_all=True, append_images=frames[1:], duration=40, loop=0)
    return str(path)


def _centre(label: QLabel) -> tuple[int, int, int]:
    image = label.pixmap().toImage()
    colour = image.pixelColor(image.width() // 2, image.height() // 2)
    return colour.red(), colour.green(), colour.blue()


def _near(colour, expected) -> bool:
    return all(abs(a - b) <= 12 for a, b in zip(colour, expected))  # the GIF palette's rounding


KEPT: list[UserMessage] = []  # the bubbles alive until the test's end (an image is their child)


def _message(qtbot, path: str, name: str) -> ClickableImage:
    message = UserMessage("What happens here?", [path], names=[name])
    qtbot.addWidget(message)
    KEPT.append(message)
    message.show()
    qtbot.waitExposed(message)
    QApplication.processEvents()
    [image] = message.findChildren(ClickableImage)
    image.clearFocus()  # a window of the bubble alone gives its first Tab stop the focus
    return image


def _enter(widget) -> None:
    widget.enterEvent(QEnterEvent(QPointF(5, 5), QPointF(5, 5), QPointF(5, 5)))


def test_an_animated_gif_is_badged_plays_under_the_pointer_and_stops_where_it_was(qtbot, tmp_path):
    unshown = UserMessage("Not shown", [_animation(tmp_path / "b.gif")])
    [still] = unshown.findChildren(ClickableImage)
    assert still.animated and still.movie is None  # no file held open until it plays
    unshown.deleteLater()
    image = _message(qtbot, _animation(tmp_path / "a.gif"), "cat.gif")
    badge = image.findChild(QLabel, "animationBadge")
    assert badge is not None and badge.text() == "GIF" and badge.isVisible()
    assert image.toolTip() == "cat.gif — click to view full size (hover to play)"
    assert image.accessibleName() == "View cat.gif full size, an animation"
    assert not image.playing() and _near(_centre(image), COLOURS[0])  # still until asked

    _enter(image)
    assert image.playing()
    qtbot.waitUntil(lambda: _near(_centre(image), COLOURS[1]) or _near(_centre(image), COLOURS[2]), timeout=3000)
    image.leaveEvent(QEvent(QEvent.Type.Leave))
    assert not image.playing() and image.movie.state() == QMovie.MovieState.Paused
    frame = image.movie.currentFrameNumber()
    qtbot.wait(200)
    assert image.movie.currentFrameNumber() == frame  # stopped where it was, not back at the first
    # The keyboard plays it too: the focus holds it playing though the pointer leaves.
    image.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(image.playing, timeout=2000)
    image.leaveEvent(QEvent(QEvent.Type.Leave))
    assert image.playing()
    image.clearFocus()
    assert not image.playing()


def test_the_viewer_plays_an_animation_and_the_thumbnail_waits_for_it(qtbot, tmp_path):
    image = _message(qtbot, _animation(tmp_path / "a.webp", "WEBP"), "loop.webp")
    assert image.findChild(QLabel, "animationBadge") is not None
    _enter(image)
    viewer = image.open_viewer()
    assert not image.playing()
    assert viewer.movie is not None and viewer.movie.state() == QMovie.MovieState.Running
    assert viewer.findChild(QLabel, "fullImage").movie() is viewer.movie
    assert viewer.windowTitle() == "loop.webp"
    viewer.close()


def test_a_still_gif_and_an_apng_are_plain_pictures(qtbot, tmp_path):
    still = tmp_path / "still.gif"
    Image.new("RGB", (64, 48), COLOURS[2]).save(still)
    for path, name in ((str(still), "still.gif"), (_animation(tmp_path / "a.png", "PNG"), "moving.png")):
        image = _message(qtbot, path, name)
        assert not image.animated and image.findChild(QLabel, "animationBadge") is None
        assert image.toolTip() == f"{name} — click to view full size"
        _enter(image)
        assert not image.playing() and image.movie is None
        viewer = image.open_viewer()
        assert viewer.movie is None and not viewer.findChild(QLabel, "fullImage").pixmap().isNull()
        viewer.close()
