"""One Smolchat per data folder.

Two processes on one data folder would each keep their unsent message under the same settings key
(the last to quit wins: the other's is lost without a word) and both write the conversations'
database. So a start takes a lock file in the data folder (``QLockFile``: it holds the owner's process
id, and a lock whose process is gone, after a crash, is taken over); a second start finds it held
and ends before making a window.

That second start hands its files over: the window that holds the lock listens on a local socket
named after the data folder (:class:`InstanceListener`; ``QLocalServer``, this user only), and a
second start (a file manager's "Open with Smolchat", ``smolchat photo.png``) sends it the files to
attach and the running window comes to the front (:func:`hand_over`). Where no window answers (an
older version, a window still starting) the second start says that Smolchat is already open.

A data folder that cannot be written takes no lock: the store opens read-only there anyway.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, QLockFile, QObject
from PySide6.QtNetwork import QLocalServer, QLocalSocket

LOCK_NAME = "smolchat.lock"
WAIT_MS = 200  # a lock being released by a window that is closing right now


def take_lock(data_dir: Path) -> tuple[QLockFile | None, bool]:
    """``(lock, already_open)``: the lock to keep for the process's life (None where none could be
    made: a folder that cannot be written), and whether another live Smolchat holds it."""
    try:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
    except OSError:
        return None, False
    lock = QLockFile(str(Path(data_dir) / LOCK_NAME))
    lock.setStaleLockTime(0)  # held as long as its process lives, however long that is
    if lock.tryLock(WAIT_MS):
        return lock, False
    if lock.error() == QLockFile.LockError.LockFailedError:
        return None, True
    return None, False  # a permission or other error: no lock, and nothing known to be open


def already_open_text(data_dir: Path) -> str:
    """What a second start says (a dialog and the terminal)."""
    return (f"Smolchat is already open with the conversations in {data_dir}: switch to its window. (A second "
            "window on the same conversations would overwrite the first one's unsent message.)")


#: The most bytes a hand-over may send (a few thousand paths); more is not a hand-over.
MAX_MESSAGE = 1 << 20
#: How long a second start waits for the running window to connect, take its files and reply (ms).
HAND_OVER_MS = 3000


def socket_name(data_dir: Path) -> str:
    """The local socket's name for ``data_dir``: one per data folder, short enough for a Unix socket
    path (the folder's own path may be longer than the 108 bytes one allows)."""
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:24]
    return f"smolchat-{digest}"


class InstanceListener(QObject):
    """The running window's end of :func:`hand_over`: each message (one JSON object and a newline,
    ``{"files": [absolute paths], "model": path or id}``, the model optional) calls ``on_model(model)``
    then ``on_files(files)`` on the UI thread (an empty list: just come to the front), and is answered
    ``ok``. Made by the process that holds the lock, so a socket
    file left by a crashed window is removed first."""

    def __init__(self, data_dir: Path, on_files: Callable[[list[str]], None], parent: QObject | None = None,
                 on_model: Callable[[str], None] | None = None) -> None:
        super().__init__(parent)
        self.on_files, self.on_model = on_files, on_model
        self.name = socket_name(data_dir)
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        QLocalServer.removeServer(self.name)
        self.listening = self.server.listen(self.name)  # False: second starts say Smolchat is open
        self.server.newConnection.connect(self._accept)

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            connection = self.server.nextPendingConnection()
            received = bytearray()

            def read(connection=connection, received=received) -> None:
                received.extend(connection.readAll().data())
                if len(received) > MAX_MESSAGE:
                    connection.abort()
                elif received.endswith(b"\n"):
                    self._take(connection, bytes(received))

            connection.readyRead.connect(read)
            connection.disconnected.connect(connection.deleteLater)

    def _take(self, connection: QLocalSocket, message: bytes) -> None:
        try:
            received = json.loads(message)
            files, model = received["files"], received.get("model")
            if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
                raise ValueError("files: not a list of paths")
            if not (model is None or isinstance(model, str) and model):
                raise ValueError("model: not a model's path or id")
        except (ValueError, KeyError, TypeError, AttributeError):
            connection.abort()
            return
        connection.write(QByteArray(b"ok\n"))
        connection.flush()
        if model is not None and self.on_model is not None:  # first: files given with it wait for its load
            self.on_model(model)
        self.on_files(files)
        connection.disconnectFromServer()


def hand_over(data_dir: Path, files: list[str], wait_ms: int = HAND_OVER_MS, model: str | None = None) -> int | None:
    """Send ``files`` (absolute paths; ``[]``: none) to the window running on ``data_dir``, and ``model``
    (``--model``'s folder, GGUF file or repo id) for it to load; how many files it took (it attaches
    them and comes to the front), or None where none answered. A list of more than
    :data:`MAX_MESSAGE` bytes is cut to the files that fit (trial 54: 3,000 long paths were refused
    as if no window were open)."""
    extra = {"model": model} if model else {}
    message = json.dumps({"files": files, **extra}).encode() + b"\n"
    while len(message) > MAX_MESSAGE and files:
        files = files[:len(files) * MAX_MESSAGE // len(message) - 1] if len(files) > 1 else []
        message = json.dumps({"files": files, **extra}).encode() + b"\n"
    connection = QLocalSocket()
    connection.connectToServer(socket_name(data_dir))
    if not connection.waitForConnected(wait_ms):
        return None
    connection.write(QByteArray(message))
    if not connection.waitForBytesWritten(wait_ms):
        return None
    reply = bytearray()
    while not reply.endswith(b"\n") and connection.waitForReadyRead(wait_ms):
        reply.extend(connection.readAll().data())
    connection.abort()
    return len(files) if bytes(reply) == b"ok\n" else None
