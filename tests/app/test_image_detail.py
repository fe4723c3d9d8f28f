"""Image detail "auto" (the default: full on a GPU, balanced on a CPU) and the per-message choice in
the status bar, with the token count and the detail in use shown before sending."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QComboBox

from app import settings as settings_mod
from engine.api import DETAILS, GenerationParams, resolve_detail
from tests.app.helpers import drop, file_mime


@pytest.fixture
def auto_default(monkeypatch):
    monkeypatch.setattr(settings_mod, "DEFAULT_IMAGE_DETAIL", "auto")  # the shipped default (conftest pins full)


@pytest.mark.parametrize("device, expected", [("cpu", "balanced"), ("cuda", "full"), ("mps", "full"),
                                              ("remote", "full")])
def test_auto_resolves_per_device(device, expected):
    assert resolve_detail("auto", device) == expected
    for level in ("full", "balanced", "fast"):
        assert resolve_detail(level, device) == level
    assert DETAILS[0] == "auto"
    assert GenerationParams(image_detail="auto").image_detail == "auto"
    with pytest.raises(ValueError, match="image_detail must be auto, full, balanced or fast"):
        GenerationParams(image_detail="medium")


def test_auto_is_the_default_and_is_saved(auto_default, tmp_path):
    from PySide6.QtCore import QSettings

    from app.settings import AppSettings, load_settings, save_settings

    assert AppSettings().image_detail == "auto"
    qs = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert load_settings(qs).image_detail == "auto"
    s = AppSettings(image_detail="fast")
    save_settings(s, qs)
    assert load_settings(qs).image_detail == "fast"


def test_status_bar_shows_tokens_at_the_detail_in_use_and_a_message_can_pick_another(
        qtbot, auto_default, window, fake_session, png):
    combo = window.findChild(QComboBox, "messageDetail")
    assert combo.isHidden()  # nothing attached: nothing to choose
    drop(window.composer, file_mime(png))
    # The fake engine runs on the CPU: "auto" reads images at balanced detail (320 tokens each there).
    qtbot.waitUntil(lambda: "320" in window.pending_label.text(), timeout=5000)
    assert window.pending_label.text() == "1 image · 320 image tokens (balanced)"
    assert not combo.isHidden() and combo.currentData() == "auto" and combo.currentText() == "Auto detail"
    combo.setCurrentIndex(combo.findData("full"))  # this message only
    qtbot.waitUntil(lambda: "1,088" in window.pending_label.text(), timeout=5000)
    assert window.pending_label.text() == "1 image · 1,088 image tokens (full)"
    window.composer.setPlainText("What is this?")
    window.send_message()
    qtbot.waitUntil(lambda: not window._busy, timeout=5000)
    assert fake_session.calls[-1]["params"].image_detail == "full"
    assert combo.currentData() == "auto" and combo.isHidden()  # back to Settings' choice
    assert window.pending_label.text() == ""
    window.composer.setPlainText("And now?")
    drop(window.composer, file_mime(png))
    qtbot.waitUntil(lambda: "320" in window.pending_label.text(), timeout=5000)
    window.send_message()
    qtbot.waitUntil(lambda: not window._busy, timeout=5000)
    assert fake_session.calls[-1]["params"].image_detail == "auto"  # the engine resolves it for its device


def test_changing_settings_resets_the_message_choice(qtbot, auto_default, window, png):
    combo = window.findChild(QComboBox, "messageDetail")
    drop(window.composer, file_mime(png))
    qtbot.waitUntil(lambda: "320" in window.pending_label.text(), timeout=5000)
    combo.setCurrentIndex(combo.findData("fast"))
    qtbot.waitUntil(lambda: "(fast)" in window.pending_label.text(), timeout=5000)
    new = settings_mod.AppSettings(image_detail="full")
    window._apply_settings(new)
    assert combo.currentData() == "full"
    qtbot.waitUntil(lambda: window.pending_label.text() == "1 image · 1,088 image tokens (full)", timeout=5000)
