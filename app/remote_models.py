"""The model lists of the user's servers, fetched off the UI thread for the model picker.

A list is fetched when the window starts, when servers change in Settings ▸ Engines, and when the
picker's menu opens on a list older than :data:`MAX_AGE` seconds; the menu shows what is known
meanwhile (or why a server cannot be reached), so opening it never waits on the network.
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Signal, Slot

from app import remote_settings
from app.backends.remote_http import RemoteError, list_models

MAX_AGE = 60.0


class RemoteModels(QObject):
    """``lists[server name]`` is a list of model ids, or a string saying why there is none yet."""

    changed = Signal()
    _fetched = Signal(str, object, float)  # server name, list or error text, when (thread -> UI thread)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.lists: dict[str, list[str] | str] = {}
        self._when: dict[str, float] = {}
        self._running: set[str] = set()
        self._fetched.connect(self._store)

    def servers(self) -> list[str]:
        return [s["name"] for s in remote_settings.load_servers()]

    def refresh(self, stale_only: bool = False) -> None:
        """Fetch every server's list in the background (``stale_only``: those older than MAX_AGE)."""
        names = self.servers()
        for gone in set(self.lists) - set(names):
            self.lists.pop(gone)
        now = time.monotonic()
        for name in names:
            if name in self._running or (stale_only and now - self._when.get(name, -MAX_AGE * 2) < MAX_AGE):
                continue
            self._running.add(name)
            self.lists.setdefault(name, "loading the model list…")
            threading.Thread(target=self._fetch, args=(name,), name="RemoteModels", daemon=True).start()
        self.changed.emit()

    def _fetch(self, name: str) -> None:
        try:
            result: list[str] | str = [m["id"] for m in list_models(remote_settings.server(name), timeout=10.0)]
        except (RemoteError, KeyError) as exc:
            result = str(exc)
        try:
            self._fetched.emit(name, result, time.monotonic())
        except RuntimeError:  # the window closed while the server was answering: nobody to tell
            pass

    @Slot(str, object, float)
    def _store(self, name: str, result, when: float) -> None:
        self._running.discard(name)
        if name in self.servers():
            self.lists[name], self._when[name] = result, when
            self.changed.emit()
