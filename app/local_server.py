"""The "Local server" switch: the loaded model over Smolchat's OpenAI-compatible API, from inside the app.

Like LM Studio's server tab: a port, an optional key, and the URL in the status bar (selectable, and
copied by the dialog's button). The server runs in this process on a background thread (uvicorn) and
shares the window's :class:`~engine.service.EngineService`, so the model is loaded once; the window's
answers and the server's requests queue on the same engine thread, each on its own conversation
(``EngineService.atomic``). It binds 127.0.0.1 only. FastAPI loads when the switch is first turned on.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.text_fit import WrappedLabel

DEFAULT_PORT = 8080


class LocalServer(QObject):
    """Starts and stops the HTTP server over a shared service; ``changed(url)`` ("" when stopped)."""

    changed = Signal(str)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.url = ""
        self._server = None
        self._thread: threading.Thread | None = None
        self._error = ""
        self._poll = QTimer(self)
        self._poll.setInterval(50)
        self._poll.timeout.connect(self._check_started)

    @property
    def running(self) -> bool:
        return bool(self.url)

    def start(self, service, port: int, api_key: str = "", remote: str = "") -> None:
        """Serve ``service``'s loaded model on 127.0.0.1:``port``; ``changed`` or ``failed`` follows.
        ``remote``: the server the window's model runs on instead (none is served from here)."""
        self.stop()
        if remote:  # (trial 60: "Load a model first" while a server's model answered)
            self.failed.emit(f"The model in use runs on {remote}: the local server serves a model running on this "
                             "computer. Load one, then turn the server on.")
            return
        if service is None or service.info is None:
            self.failed.emit("Load a model first: the server serves the model this window has loaded.")
            return
        from server.cli import PortInUse, usable_port

        try:  # said here, in words: uvicorn's own failure is a SystemExit(3) on its thread
            usable_port("127.0.0.1", port)
        except PortInUse:
            self.failed.emit(f"Port {port} is in use by another program: choose another port and turn the server on again.")
            return
        except OSError as exc:
            self.failed.emit(f"The server could not start on port {port}: {exc.strerror or exc}.")
            return
        import uvicorn

        from server.app import create_app
        from server.config import ServerConfig

        config = ServerConfig(model=service.info.path, model_id=service.info.name, port=port,
                              api_key=api_key or None)
        from server.runner import Server

        app = create_app(config, service=service)
        # asyncio's own loop in the window's process: older uvicorn releases installed uvloop's
        # event loop policy process-wide when asked for the "auto" loop (httptools is still used).
        self._server = Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio"),
                              app.state.smolchat.bridge)
        self._error = ""
        self._thread = threading.Thread(target=self._run, name="smolchat-local-server", daemon=True)
        self._thread.start()
        self._port = port
        self._poll.start()

    def _run(self) -> None:
        try:
            self._server.run()
        except SystemExit:  # uvicorn could not bind (another program took the port since start's check)
            self._error = "another program may have taken it: choose another port and turn the server on again."
        except BaseException as exc:  # noqa: BLE001 - said in the dialog, not a traceback on a thread
            self._error = f"{exc}." if str(exc) else f"{type(exc).__name__}."

    def _check_started(self) -> None:
        if self._server is not None and self._server.started:
            self._poll.stop()
            self.url = f"http://127.0.0.1:{self._port}/v1"
            self.changed.emit(self.url)
        elif self._thread is not None and not self._thread.is_alive():
            self._poll.stop()
            self._server = None
            self.failed.emit(f"The server could not start on port {self._port}: {self._error or 'it stopped at once.'}")

    def stop(self) -> None:
        """Stop serving: in-flight answers are cancelled and their streams end with a finish chunk;
        returns within ~3 s."""
        self._poll.stop()
        if self._server is not None:
            self._server.end_answers()
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(3)
        self._server, self._thread = None, None
        if self.url:
            self.url = ""
            self.changed.emit("")


# The key is kept in the system keyring (never in the settings file), under its own service name so
# that no remote server's name can collide with it.
KEY_SERVICE = "smolchat-local-server"
KEY_NAME = "api-key"
_KEYS = None


_IO = None


def _keyring_io():
    """One thread for keyring reads and writes, in order: the keyring may be slow (D-Bus, an unlock
    prompt) and is never used on the UI thread."""
    global _IO
    if _IO is None:
        from concurrent.futures import ThreadPoolExecutor

        _IO = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smolchat-keyring")
    return _IO


def keys():
    """The :class:`~app.remote_settings.KeyStore` of the local server's key (made on first use)."""
    global _KEYS
    if _KEYS is None:
        from app.remote_settings import KeyStore

        _KEYS = KeyStore(KEY_SERVICE)
    return _KEYS


class LocalServerDialog(QDialog):
    """Model ▸ Local server…: the switch, port, key and the URL with a copy button.

    ``key`` ``None`` means the key is still being read from the keyring (off the UI thread): the key
    field and the switch wait for :attr:`key_loaded`."""

    key_loaded = Signal(str)

    def __init__(self, server: LocalServer, service, port: int, key: str | None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("localServerDialog")
        self.setWindowTitle("Local server")
        self.server, self.service = server, service
        self.remote = ""  # the server the window's model runs on, when it is not this computer
        self.switch = QCheckBox("Serve the loaded model (OpenAI-compatible API, this computer only)")
        self.switch.setObjectName("serverSwitch")
        self.switch.setChecked(server.running)
        self.port = QSpinBox()
        self.port.setObjectName("serverPort")
        self.port.setRange(1024, 65535)
        self.port.setValue(port)
        self.key = QLineEdit(key or "")
        self.key.setObjectName("serverKey")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("optional: clients then send 'Authorization: Bearer KEY'")
        store = keys()
        # Wrapped labels as tall as their lines at the dialog's width (trial 53: QLabel's one guess cut
        # the port-in-use message's second line and the keyring note's in half).
        self.key_note = WrappedLabel("The key is kept in the system keyring." if store.persistent
                                     else f"Note: {store.problem}: the key is kept until Smolchat quits.")
        self.key_note.setObjectName("serverKeyNote")
        self._key_ready = key is not None
        self.key_loaded.connect(self._key_read)
        self.url = QLabel(server.url or "Not running")
        self.url.setObjectName("serverUrl")
        self.url.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy = QPushButton("Copy")
        self.copy.setObjectName("copyServerUrl")
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.server.url))
        self.message = WrappedLabel("")
        self.message.setObjectName("serverMessage")
        row = QHBoxLayout()
        row.addWidget(self.url, 1)
        row.addWidget(self.copy)
        form = QFormLayout(self)
        form.addRow(self.switch)
        form.addRow("Port", self.port)
        form.addRow("API key", self.key)
        form.addRow(self.key_note)
        form.addRow("URL", row)
        form.addRow(self.message)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.switch.toggled.connect(self._toggle)
        server.changed.connect(self._show)
        server.failed.connect(self._failed)
        self._show(server.url)

    def _toggle(self, on: bool) -> None:
        self.message.setText("")
        if on:
            self.server.start(self.service, self.port.value(), self.key.text().strip(), self.remote)
        else:
            self.server.stop()

    def _key_read(self, key: str) -> None:
        if not self.key.text():  # what the user typed meanwhile wins
            self.key.setText(key)
        self._key_ready = True
        self._show(self.server.url)

    def _show(self, url: str) -> None:
        self.url.setText(url or "Not running")
        self.copy.setEnabled(bool(url))
        self.port.setEnabled(not url)
        self.key.setEnabled(not url and self._key_ready)
        self.switch.setEnabled(self._key_ready)
        if not self._key_ready:
            self.key.setPlaceholderText("reading the saved key…")
        else:
            self.key.setPlaceholderText("optional: clients then send 'Authorization: Bearer KEY'")

    def _failed(self, message: str) -> None:
        self.message.setText(message)
        self.switch.blockSignals(True)
        self.switch.setChecked(False)
        self.switch.blockSignals(False)
        self._show("")


def install(window) -> LocalServer:
    """Give ``window`` (a MainWindow) its LocalServer and the status-bar URL label (``serverStatus``)."""
    server = LocalServer(window)
    label = QLabel("")
    label.setObjectName("serverStatus")
    label.setAccessibleDescription("Local server address")  # (its text, the address, is its name)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setVisible(False)
    window.statusBar().addPermanentWidget(label)
    window.server_label = label

    def show(url: str) -> None:
        label.setText(f"Server: {url}" if url else "")
        label.setVisible(bool(url))
    server.changed.connect(show)
    return server


def open_dialog(window) -> LocalServerDialog:
    """Model ▸ Local server…: port and key come from and go back to the window's QSettings."""
    from app.backends.local import LocalBackend

    backend = window.engines.current
    service = backend.service if isinstance(backend, LocalBackend) else None  # a remote model is not ours to serve
    qs = window.qsettings
    try:
        port = int(qs.value("server/port", DEFAULT_PORT) or DEFAULT_PORT)
    except (TypeError, ValueError):
        port = DEFAULT_PORT
    store = keys()
    legacy = str(qs.value("server/key", "") or "")  # where versions before the keyring kept it
    dialog = LocalServerDialog(window.local_server, service, port, None, window)
    if service is None and str(window.model_info.get("backend", "")).startswith("remote:"):
        dialog.remote = str(window.model_info.get("device") or window.model_info["backend"][len("remote:"):])
    saved = {"key": legacy or None}
    if legacy:
        qs.remove("server/key")
        qs.sync()
        dialog.key_loaded.emit(legacy)
        _keyring_io().submit(store.set, KEY_NAME, legacy)
    else:
        def read() -> None:
            key = store.get(KEY_NAME)
            saved["key"] = key
            try:
                dialog.key_loaded.emit(key)
            except RuntimeError:  # the dialog was closed and deleted meanwhile
                pass
        _keyring_io().submit(read)

    def save() -> None:
        qs.setValue("server/port", dialog.port.value())
        qs.sync()
        key = dialog.key.text().strip()
        if dialog._key_ready and key != saved["key"]:
            saved["key"] = key
            _keyring_io().submit(store.set, KEY_NAME, key)
    dialog.switch.toggled.connect(save)
    dialog.finished.connect(lambda _result: save())
    dialog.show()
    return dialog
