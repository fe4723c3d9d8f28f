"""Counting the composer's text with the loaded model's tokenizer, off the UI thread.

A pasted book chapter is counted in milliseconds, but a 5-million-character paste takes ~4 s on
this project's 2-core CPU (SmolLM2's tokenizer, ``tokenizers`` releasing the GIL): on the UI thread
that froze the window. One worker counts the newest text asked for; a text asked for while another is
being counted waits for it, and only the newest of those is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from PySide6.QtCore import QObject, Signal, Slot

log = logging.getLogger(__name__)
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smolchat-count")


class TextCounter(QObject):
    """Tokens of texts, counted on a worker thread; :attr:`counted` says when a count is known.

    ``count(text) -> int`` is the backend's (``ChatBackend.count_text_tokens``: -1 when unknown); it
    runs on the worker thread.
    """

    counted = Signal()  # a new count is in :meth:`known` (UI thread)
    _finished = Signal(int)  # tokens of the text running (from the worker)

    def __init__(self, count: Callable[[str], int], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._count = count
        self._running: str | None = None  # being counted on the worker
        self._waiting: str | None = None  # to count next: only the newest text asked for
        self._keep = True  # the running count is of the loaded tokenizer (forget() clears it)
        self._last: tuple[str, int] | None = None  # the newest text counted, and its tokens
        self._finished.connect(self._on_finished)

    def known(self, text: str) -> int | None:
        """Tokens of ``text`` if it was the last text counted (-1: the backend could not say), else None."""
        return self._last[1] if self._last is not None and self._last[0] == text else None

    def pending(self, text: str) -> bool:
        """``text`` is being counted or waits to be."""
        return text in (self._running, self._waiting)

    def request(self, text: str) -> None:
        """Count ``text`` unless it is counted or pending; a text waiting before is dropped for it."""
        if self.known(text) is not None or self.pending(text):
            return
        self._waiting = text
        if self._running is None:
            self._start()

    def forget(self) -> None:
        """Drop the last count and the one running (another model: another tokenizer)."""
        self._last, self._keep = None, False

    def _start(self) -> None:
        text, self._waiting = self._waiting, None
        if text is None:
            return
        self._running, self._keep = text, True
        count, finished = self._count, self._finished

        def job() -> None:
            try:
                tokens = int(count(text))
            except Exception:  # noqa: BLE001 - a count is a hint: Send still works without it
                log.warning("counting the message's tokens failed", exc_info=True)
                tokens = -1
            try:
                finished.emit(tokens)
            except RuntimeError:  # the window closed while this ran
                pass
        _WORKER.submit(job)

    @Slot(int)
    def _on_finished(self, tokens: int) -> None:
        text, self._running = self._running, None
        if self._keep:
            self._last = (text, tokens)
        self._start()
        self.counted.emit()
