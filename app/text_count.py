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
    _finished = Signal(int, int)  # request number, tokens (from the worker)

    def __init__(self, count: Callable[[str], int], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._count = count
        self._texts: dict[int, str] = {}  # request number -> text, for the one running and the one waiting
        self._running: int | None = None
        self._waiting: int | None = None
        self._serial = 0
        self._last: tuple[str, int] | None = None  # the newest text counted, and its tokens
        self._finished.connect(self._on_finished)

    def known(self, text: str) -> int | None:
        """Tokens of ``text`` if it was the last text counted (-1: the backend could not say), else None."""
        return self._last[1] if self._last is not None and self._last[0] == text else None

    def pending(self, text: str) -> bool:
        """``text`` is being counted or waits to be."""
        return any(self._texts.get(n) == text for n in (self._running, self._waiting) if n is not None)

    def request(self, text: str) -> None:
        """Count ``text`` unless it is counted or pending; a text waiting before is dropped for it."""
        if self.known(text) is not None or self.pending(text):
            return
        self._serial += 1
        if self._waiting is not None:
            self._texts.pop(self._waiting, None)
        self._texts[self._serial] = text
        self._waiting = self._serial
        if self._running is None:
            self._start()

    def forget(self) -> None:
        """Drop the last count and the one running (another model: another tokenizer)."""
        self._last = None
        if self._running is not None:
            self._texts.pop(self._running, None)  # its result is not kept when it comes

    def _start(self) -> None:
        number, self._waiting = self._waiting, None
        if number is None:
            return
        self._running = number
        text, count, finished = self._texts[number], self._count, self._finished

        def job() -> None:
            try:
                tokens = int(count(text))
            except Exception:  # noqa: BLE001 - a count is a hint: Send still works without it
                log.warning("counting the message's tokens failed", exc_info=True)
                tokens = -1
            try:
                finished.emit(number, tokens)
            except RuntimeError:  # the window closed while this ran
                pass
        _WORKER.submit(job)

    @Slot(int, int)
    def _on_finished(self, number: int, tokens: int) -> None:
        text = self._texts.pop(number, None)
        self._running = None
        if text is not None:
            self._last = (text, tokens)
        self._start()
        self.counted.emit()
