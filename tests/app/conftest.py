"""Fixtures for the app tests: offscreen Qt, a temporary data folder, a fake backend, clean teardown."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from app.backends.fake import FakeBackend  # noqa: E402


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    folder = tmp_path / "appdata"
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(folder))
    return folder


@pytest.fixture
def store(data_dir):
    """A Store in the test's data folder, closed afterwards."""
    from app.store import Store

    s = Store(data_dir)
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _full_image_detail(monkeypatch):
    """The app tests' token counts are the fake's at full detail (1,088 an image); the "auto" default
    (balanced on the fake's CPU) has its own tests in test_image_detail.py."""
    from app import settings

    monkeypatch.setattr(settings, "DEFAULT_IMAGE_DETAIL", "full")


@pytest.fixture(scope="package", autouse=True)
def _main_thread_gc(qapp):
    """As the app (app.application.create_app): cycles are collected on the UI thread only. A window of an
    earlier test freed by a collection on an engine thread deadlocked the run (app/main_thread_gc.py)."""
    from app.main_thread_gc import install

    collector = install(qapp)
    yield collector
    collector.stop()
    del qapp._main_thread_collector


@pytest.fixture(autouse=True)
def _close_windows(qapp):
    """Close every window and check its backend stopped, so no engine thread outlives its test."""
    yield
    from app.main_window import MainWindow

    for widget in qapp.topLevelWidgets():
        if isinstance(widget, MainWindow):
            widget.close()
            assert widget.controller.closed, "window closed without stopping its backend"


@pytest.fixture(autouse=True)
def _clear_clipboard(qapp):
    """The clipboard owns the QMimeData a test hands it; left there, it is freed twice at exit (segfault)."""
    yield
    qapp.clipboard().clear()


@pytest.fixture
def make_window(qtbot):
    """Build shown MainWindows on fake backends; they stay referenced until teardown."""
    from app.main_window import MainWindow

    windows = []

    def make(backend, model_path: str | None = "/models/fake", wait_loaded: bool = True):
        win = MainWindow(model_path, backend=backend)
        qtbot.addWidget(win)
        windows.append(win)
        win.show()
        if wait_loaded:
            # waitUntil, not waitSignal: the backend may report the load before we could connect.
            qtbot.waitUntil(lambda: bool(win.model_info), timeout=5000)
        return win

    yield make
    for win in windows:
        win.close()


@pytest.fixture
def fake_session():
    """The fake backend the ``window`` fixture talks to (named after the engine session it stands for)."""
    return FakeBackend(tokens=["The", " cat", " is", " orange", "."], delay=0.005)


@pytest.fixture
def factory(fake_session):
    return fake_session


@pytest.fixture
def window(make_window, factory):
    """A shown MainWindow whose fake model has finished loading."""
    return make_window(factory)


@pytest.fixture
def png(tmp_path):
    """A real 64x48 PNG made with Pillow."""
    path = tmp_path / "photo.png"
    Image.new("RGB", (64, 48), (230, 120, 30)).save(path)
    return path


@pytest.fixture(autouse=True)
def _no_system_keyring(monkeypatch):
    """API keys never reach the developer's real keyring: each test gets keys kept for its session only."""
    import keyring
    from keyring.backends import fail

    from app import remote_settings

    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    monkeypatch.setattr(remote_settings, "KEYS", remote_settings.KeyStore())
    yield
    keyring.set_keyring(previous)
