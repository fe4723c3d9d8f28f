"""The app's "Local server" switch (pytest-qt), and the window sharing its engine service with the server."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from app.backends.local import LocalBackend
from engine.api import DoneEvent, GenerationParams, HistoryMessage
from tests.server.fakes import FakeSession, fake_loader
from tests.server.helpers import free_port


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SMOLCHAT_DATA_DIR", str(tmp_path / "appdata"))
    from app.main_window import MainWindow

    session = FakeSession()
    win = MainWindow("/models/fake", backend=LocalBackend(fake_loader(session)))
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: bool(win.model_info), timeout=10_000)
    yield win, session
    win.close()


def test_the_switch_serves_the_windows_model_and_shows_a_copyable_url(qtbot, window):
    win, session = window
    dialog = win.open_local_server()
    port = free_port()
    dialog.port.setValue(port)
    dialog.key.setText("k3y")
    with qtbot.waitSignal(win.local_server.changed, timeout=10_000):
        dialog.switch.setChecked(True)
    url = f"http://127.0.0.1:{port}/v1"
    assert dialog.url.text() == url and win.server_label.text() == f"Server: {url}"
    assert win.server_label.isVisibleTo(win)
    dialog.copy.click()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == url
    QGuiApplication.clipboard().clear()

    headers = {"Authorization": "Bearer k3y"}
    models = httpx.get(f"{url}/models", headers=headers).json()["data"]
    assert models[0]["id"] == "fake"  # the window's model: loaded once, served by both
    reply = httpx.post(f"{url}/chat/completions", headers=headers, timeout=10,
                       json={"model": "fake", "messages": [{"role": "user", "content": "over http"}]})
    assert reply.json()["choices"][0]["message"]["content"] == "over http "
    assert httpx.get(f"{url}/models").status_code == 401

    with qtbot.waitSignal(win.local_server.changed, timeout=10_000) as stopped:
        dialog.switch.setChecked(False)
    assert stopped.args == [""] and not win.server_label.isVisibleTo(win)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", headers=headers, timeout=2)
    dialog.close()
    assert int(win.qsettings.value("server/port")) == port  # remembered for next time


def _switch_on_a_taken_port(qtbot, win):
    """Turn the Local server dialog's switch on at a port another socket listens on; returns the
    dialog (once the server has failed) and the port."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        dialog = win.open_local_server()
        dialog.port.setValue(port)
        with qtbot.waitSignal(win.local_server.failed, timeout=10_000):
            dialog.switch.setChecked(True)
    return dialog, port


def test_a_taken_port_is_reported_and_the_switch_turns_back_off(qtbot, window):
    win, _ = window
    dialog, port = _switch_on_a_taken_port(qtbot, win)
    # Was "The server could not start on port 8080 (is it in use?) SystemExit: 3".
    assert not dialog.switch.isChecked()
    assert dialog.message.text() == (f"Port {port} is in use by another program: choose another port and turn "
                                     "the server on again.")
    dialog.close()


def test_a_port_taken_after_the_check_is_said_in_words_too(qtbot, window, monkeypatch):
    """Another program binds the port between the check and uvicorn's bind: uvicorn's SystemExit(3)
    on the server's thread becomes a sentence, not "SystemExit: 3"."""
    import server.cli

    win, _ = window
    monkeypatch.setattr(server.cli, "usable_port", lambda host, port: port)
    dialog, port = _switch_on_a_taken_port(qtbot, win)
    assert not dialog.switch.isChecked()
    assert dialog.message.text() == (f"The server could not start on port {port}: another program may have taken "
                                     "it: choose another port and turn the server on again.")
    dialog.close()


def test_window_and_server_answers_each_run_on_their_own_conversation():
    """The window's set_history + send and a server request's are each queued atomically, so neither
    answers on the other's history."""
    session = FakeSession()
    backend = LocalBackend(fake_loader(session))
    loaded = threading.Event()
    backend.load("fake", {}, lambda info, message: loaded.set())
    assert loaded.wait(5)
    service = backend.service
    seen: list[list[str]] = []
    original = session.send

    def spy(text, images=(), params=None):
        seen.append([t.text for t in session.turns] + [text])
        return original(text, images, params)
    session.send = spy
    put = service._queue.put

    def slow_put(item):  # widen the gap between two puts, where another thread could slip in
        put(item)
        time.sleep(0.002)
    service._queue.put = slow_put
    done = [threading.Event() for _ in range(40)]
    app_history = [HistoryMessage("user", "app q1"), HistoryMessage("assistant", "app a1")]

    def window(i):
        backend.set_history(app_history)
        backend.send(f"app q{i}", [], GenerationParams(max_new_tokens=1),
                     lambda e: isinstance(e, DoneEvent) and done[i].set())

    def server(i):
        with service.atomic():
            service.set_history([HistoryMessage("user", "srv q1"), HistoryMessage("assistant", "srv a1")])
            service.send(f"srv q{i}", [], GenerationParams(max_new_tokens=1),
                         lambda e: isinstance(e, DoneEvent) and done[i].set())
    threads = [threading.Thread(target=window if i % 2 else server, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(d.wait(10) for d in done)
    for turns in seen:
        owner = turns[-1][:3]
        assert turns[:2] == [f"{owner} q1", f"{owner} a1"], turns
    backend.close()


@pytest.fixture
def memory_keyring(monkeypatch):
    from app import local_server
    from tests.keyring_memory import memory_keyring

    monkeypatch.setattr(local_server, "_KEYS", None)  # a KeyStore made under the memory backend
    with memory_keyring() as store:
        yield store


def _wait_keyring(qtbot):
    from app import local_server

    local_server._keyring_io().submit(lambda: None).result(5)  # every queued read and write is done
    qtbot.wait(50)  # and the read's signal delivered


def test_the_servers_key_is_kept_in_the_keyring_not_in_the_settings(qtbot, window, memory_keyring):
    win, _ = window
    win.qsettings.setValue("server/key", "old-plain-key")  # as versions before the keyring kept it
    dialog = win.open_local_server()
    _wait_keyring(qtbot)
    assert dialog.key.text() == "old-plain-key" and dialog.switch.isEnabled()
    assert win.qsettings.value("server/key") is None  # moved out of the settings file
    assert memory_keyring == {("smolchat-local-server", "api-key"): "old-plain-key"}
    assert "system keyring" in dialog.key_note.text()

    dialog.key.setText("n3w")
    dialog.close()
    _wait_keyring(qtbot)
    assert memory_keyring == {("smolchat-local-server", "api-key"): "n3w"}
    win.qsettings.sync()
    assert "n3w" not in open(win.qsettings.fileName(), encoding="utf-8", errors="replace").read()

    again = win.open_local_server()
    _wait_keyring(qtbot)
    assert again.key.text() == "n3w"  # read back from the keyring
    again.close()
