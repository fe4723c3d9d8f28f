"""Small (or scaled) screens: the window, Settings and the model manager open no larger than the
screen, with Send, the composer and Settings' OK / Cancel / Apply on it (trial 38: at QT_SCALE_FACTOR=2
on a 1280 x 900 screen all three opened larger than the screen; at 1366 x 768 the manager was cut).

Each case runs the app in a subprocess on Qt's offscreen platform given a screen of that size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
from PySide6.QtCore import QPoint, QRect
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialogButtonBox, QPushButton, QScrollArea
from app.application import create_app
from app.backends.fake import FakeBackend
from app.main_window import MainWindow

app = create_app([])
screen = app.primaryScreen().availableGeometry()
window = MainWindow("/models/fake", backend=FakeBackend())
window.show()
while not window.model_info:
    QTest.qWait(20)
window.composer.setPlainText("Hello")  # Send enabled
settings = window.open_settings_dialog()
manager = window.open_model_manager()
QTest.qWait(100)

def rect(widget):
    return list(QRect(widget.mapToGlobal(QPoint(0, 0)), widget.size()).getRect())

boxes = settings.findChild(QDialogButtonBox)
found = {"screen": list(screen.getRect()), "window": rect(window), "send": rect(window.send_button),
         "composer": rect(window.composer), "settings": rect(settings), "manager": rect(manager)}
for name in ("Ok", "Cancel", "Apply"):
    found[name] = rect(boxes.button(getattr(QDialogButtonBox.StandardButton, name)))
# What is out of sight in the manager (its last button) comes into sight by scrolling its content.
remove = manager.findChild(QPushButton, "removeModelButton")
if isinstance(getattr(manager, "scroll", None), QScrollArea):
    manager.scroll.ensureWidgetVisible(remove, 0, 0)
    QTest.qWait(50)
found["removeModelButton"] = rect(remove)
found["settings_scrolls"] = [settings.scroll.horizontalScrollBar().isVisible(),
                             settings.scroll.verticalScrollBar().isVisible()]
found["manager_scrolls"] = [manager.scroll.horizontalScrollBar().isVisible(),
                            manager.scroll.verticalScrollBar().isVisible()]
# Scrolling, the content keeps its controls at their own height (not squeezed to their minimum).
from PySide6.QtWidgets import QAbstractSpinBox, QPushButton as Button
found["squeezed"] = [w.objectName() or type(w).__name__
                     for dialog in (settings, manager) for kind in (QAbstractSpinBox, Button)
                     for w in dialog.findChildren(kind) if w.isVisible() and w.height() < w.sizeHint().height()]
# The manager's buttons, wrapped onto rows as needed, all inside its content's width.
content = manager.scroll.widget()
found["manager_buttons_inside"] = all(
    b.mapTo(content, QPoint(b.width(), 0)).x() <= manager.scroll.viewport().width()
    for b in content.findChildren(Button) if b.isVisible())
print("RESULT", json.dumps(found))
window.close()
"""


def run_probe(tmp_path, width: int, height: int, scale: float) -> dict:
    config = tmp_path / "screen.json"
    config.write_text(json.dumps({"screens": [{"name": "small", "x": 0, "y": 0, "width": width, "height": height,
                                               "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}", "QT_SCALE_FACTOR": str(scale),
           "SMOLCHAT_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, done.stdout + done.stderr
    return json.loads(line[len("RESULT "):])


def inside(rect: list[int], screen: list[int]) -> bool:
    x, y, w, h = rect
    sx, sy, sw, sh = screen
    return sx <= x and sy <= y and x + w <= sx + sw and y + h <= sy + sh


@pytest.mark.parametrize("width, height, scale", [(1280, 900, 2), (1366, 728, 1)],
                         ids=["1280x900-at-2x", "1366x768-less-a-panel"])
def test_windows_and_their_buttons_fit_a_small_screen(tmp_path, width, height, scale):
    found = run_probe(tmp_path, width, height, scale)
    screen = found["screen"]
    assert screen == [0, 0, round(width / scale), round(height / scale)]
    scrolls = found.pop("settings_scrolls")
    manager_scrolls = found.pop("manager_scrolls")
    assert found.pop("squeezed") == []
    assert found.pop("manager_buttons_inside")
    # Neither dialog scrolls sideways (at 2x, Settings stacks its columns, the manager wraps its rows'
    # titles and its buttons; both had scrolled sideways with the manager's intro cut mid-word).
    assert scrolls[0] is False and manager_scrolls[0] is False
    outside = {name: rect for name, rect in found.items() if name != "screen" and not inside(rect, screen)}
    assert outside == {}, screen
    # Room is left for the title bar the window manager adds above each window.
    assert all(found[name][3] <= screen[3] - 40 for name in ("window", "settings", "manager"))
    if scale == 1:  # the dialogs keep their width where the screen has it, and only lose height
        assert found["manager"][2] == 840 and found["manager"][3] < 760
        assert scrolls == [False, True]  # Settings scrolls down, not sideways as well


def test_the_local_server_dialogs_wrapped_lines_are_shown_whole(qtbot):
    """Trial 53: the port-in-use message's second line and the keyring note's were cut in half (a
    word-wrapped QLabel's one height guess), the dialog not growing for them."""
    from app.local_server import LocalServer, LocalServerDialog

    dialog = LocalServerDialog(LocalServer(), None, 8092, "", None)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    before = dialog.height()
    dialog._failed("Port 8092 is in use by another program: choose another port and turn the server on again.")
    for label in (dialog.message, dialog.key_note):  # (the note: one line or two, as the keyring is there or not)
        qtbot.waitUntil(lambda label=label: label.height() >= label.heightForWidth(label.width()), timeout=2000)
    assert dialog.message.heightForWidth(dialog.message.width()) > dialog.message.fontMetrics().height() * 3 // 2
    assert dialog.height() > before
