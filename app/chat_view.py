"""The transcript: a scrolling column of message widgets that follows the newest answer.

A long chat opens with only its last messages built as widgets (:data:`SHOWN_AT_OPEN`); the earlier
ones stay :class:`StoredMessage` records until the view is scrolled up to them, then are built
:data:`EARLIER_BATCH` at a time above what is shown, the view held where it was. Building every
widget of a 2,000-message chat took 15 s on a 2-core machine, with the window frozen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from PySide6.QtCore import QCoreApplication, QEvent, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from app.find_in_chat import hit_top, holds, mark
from app.messages import CONTINUABLE, AssistantMessage, UserMessage
from app.zoom import ctrl_wheel

#: The empty chat's second line with a local model (a server's model names the server instead).
LOCAL_LINE = "Everything runs on this computer."
EMPTY_TEXT = f"Drop a photo here, or paste one, and ask a question about it.\n{LOCAL_LINE}"
#: The empty chat's line for a model that takes no images.
EMPTY_TEXT_ONLY = f"Ask a question below.\n{LOCAL_LINE}"
#: Messages built as widgets when a chat opens (its last ones); the rest wait for a scroll up.
SHOWN_AT_OPEN = 40
#: Earlier messages built at once when the view comes within a screen of the first one built.
EARLIER_BATCH = 15


@dataclass
class StoredMessage:
    """A stored message for the transcript: what building its widget needs, and until then what its
    callers read of a message widget (``role``, ``text``, ``images``, ``message_id``, ``status``).

    ``finish_reason``, ``footer``, ``model_name`` and ``can_continue`` apply to answers only;
    ``versions`` is its "‹ n / m ›" switcher, ``(1, 1)`` for a message with no other version;
    ``created`` the time shown under it."""

    role: str
    text: str
    images: list[str] = field(default_factory=list)
    message_id: int | None = None
    status: str = "done"
    model_name: str = "Smolchat"
    finish_reason: str = "stop"
    footer: str = ""
    can_continue: bool = True
    versions: tuple[int, int] = (1, 1)
    created: float | None = None  # when it was stored (seconds since the epoch; None: unknown)


class ChatView(QScrollArea):
    """Shows the conversation; new answers stream into the last :class:`AssistantMessage`.

    ``message_action(action, index)`` reports a click on a message's copy/edit/regenerate/delete;
    ``zoom_requested(step)`` a Ctrl+wheel over the chat (+1 in, -1 out; see :mod:`app.zoom`).
    """

    message_action = Signal(str, int)
    zoom_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setAccessibleName("Conversation")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        content = QWidget()
        content.setObjectName("transcriptContent")
        self._column = QVBoxLayout(content)
        self._column.setContentsMargins(24, 20, 24, 20)
        self._column.setSpacing(16)
        self._empty = QLabel(EMPTY_TEXT)
        self._empty.setObjectName("emptyState")
        self._empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._empty.setWordWrap(True)
        # The placeholder takes all the room while it shows; afterwards the trailing stretch keeps
        # the messages packed at the top.
        self._column.addWidget(self._empty, 1)
        self._column.addStretch(0)
        self.setWidget(content)
        # One entry a message, oldest first: from _first_built on its widget, before that its record.
        self._messages: list[UserMessage | AssistantMessage | StoredMessage] = []
        self._first_built = 0
        self._anchor: int | None = None  # the distance from the bottom kept while earlier ones are built
        self._adjusting = False  # the view being moved by this class, not by the user
        self._earlier_due = False
        self._query = ""  # the chat search's text, marked in every message built (app.find_in_chat)
        self._hit: UserMessage | AssistantMessage | None = None  # the message the search last showed
        self._pin: QWidget | None = None  # the hit's text view held in place until the view is scrolled
        self._current: AssistantMessage | None = None
        self._continuable: AssistantMessage | None = None  # the answer showing Continue
        self._follow = True
        self._changes_enabled = True
        self._regenerate_note = ""
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if not ctrl_wheel(event, self.zoom_requested):
            super().wheelEvent(event)

    def messages(self) -> list[dict]:
        """The conversation as plain data: ``[{"role", "text", "images"}...]``."""
        return [
            {"role": m.role, "text": m.text, "images": list(getattr(m, "images", []))} for m in self._messages
        ]

    def widgets(self) -> list[UserMessage | AssistantMessage | StoredMessage]:
        """One entry a message, oldest first: its widget, or the :class:`StoredMessage` of an earlier
        one not built yet (:meth:`message_widget` builds it). Both have ``role``, ``text``, ``images``,
        ``message_id`` and ``status``."""
        return list(self._messages)

    def message_widget(self, index: int) -> UserMessage | AssistantMessage:
        """Message ``index``'s widget, built (with every message after it) if it was not yet.
        Raises IndexError for an index out of range."""
        index = range(len(self._messages))[index]
        self._build_back_to(index)
        return self._messages[index]

    def show_message(self, index: int, margin: int = 0) -> None:
        """Scroll message ``index`` into view, ``margin`` pixels clear of the view's edges; it is built
        first if it was not yet, and laid out with what was built with it so that it is found where it
        ends up."""
        message = self.message_widget(index)
        self.widget().layout().activate()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        self._follow = False
        self.ensureWidgetVisible(message, 0, margin)

    def set_query(self, query: str) -> list[int]:
        """Mark ``query`` (the chat search's text; "" for none) in every message, also those built
        later; returns the indices of the messages that hold it, oldest first."""
        if query != self._query:
            self._query = query
            if not query:
                self._hit = self._pin = None
            for message in self._messages[self._first_built:]:
                mark(message, query, message is self._hit)
        return [i for i, message in enumerate(self._messages) if holds(message.text, query)]

    def show_hit(self, index: int) -> None:
        """Scroll to message ``index``'s first hit of the query and mark it as the current one. The
        hit is held a third of the way down the view while the layout settles (a message just built
        gets its height over several passes), until the view is scrolled."""
        previous, self._hit = self._hit, self.message_widget(index)
        if previous is not None and previous is not self._hit and previous in self._messages:
            mark(previous, self._query, False)
        self._follow, self._anchor = False, None
        self._pin = mark(self._hit, self._query, True) or self._hit
        self._hold_pin()

    def hit_index(self) -> int | None:
        """The index of the message :meth:`show_hit` showed last (None: none, or it is gone)."""
        return next((i for i, m in enumerate(self._messages) if m is self._hit), None) if self._hit else None

    def _hold_pin(self) -> None:
        """Put the pinned hit a third of the way down the view."""
        pin = self._pin
        if pin is None or self._hit is None:
            return
        y = pin.mapTo(self.widget(), pin.rect().topLeft()).y() + hit_top(pin, self._query)
        bar = self.verticalScrollBar()
        self._adjusting = True
        try:
            bar.setValue(max(0, y - self.viewport().height() // 3))
        finally:
            self._adjusting = False

    def built(self) -> int:
        """How many messages, the last ones, are built as widgets."""
        return len(self._messages) - self._first_built

    def add_stored(self, records: list[StoredMessage]) -> None:
        """Append stored messages. A chat opening (nothing shown before) builds only its last
        :data:`SHOWN_AT_OPEN`; after messages already shown every record is built."""
        start = len(self._messages)
        self._messages.extend(records)
        if self._first_built == start:
            self._first_built, self._follow = len(self._messages), True
            self._build_back_to(max(0, len(self._messages) - SHOWN_AT_OPEN))
        else:
            for index in range(start, len(self._messages)):
                self._messages[index] = self._build(self._messages[index])
                self._place(self._messages[index], self._column.count() - 1)
        self._empty.setVisible(not self._messages)
        self.mark_continuable()

    def add_stored_answer(self, model_name: str, text: str, finish_reason: str, footer: str) -> AssistantMessage:
        """An answer restored from the store, rendered complete."""
        self.add_stored([StoredMessage("assistant", text, model_name=model_name, finish_reason=finish_reason,
                                       footer=footer, status=_status(finish_reason))])
        return self._messages[-1]

    def set_versions(self, versions: dict[int, tuple[int, int]]) -> None:
        """Each message's "‹ n / m ›" switcher from ``versions`` (message id -> (n, m); absent: 1 / 1)."""
        for message in self._messages:
            shown = versions.get(message.message_id, (1, 1))
            if isinstance(message, StoredMessage):
                message.versions = shown
            else:
                message.actions_row.versions.set_versions(*shown)

    def remove_from(self, index: int) -> None:
        """Remove message ``index`` and everything after it."""
        for message in self._messages[index:]:
            self._discard(message)
        del self._messages[index:]
        self._after_removal()

    def remove_at(self, index: int) -> None:
        self._discard(self._messages.pop(index))
        self._after_removal()

    def _after_removal(self) -> None:
        self._first_built = min(self._first_built, len(self._messages))
        if self._first_built == len(self._messages):  # every message shown went: show the end again
            self._build_back_to(max(0, len(self._messages) - SHOWN_AT_OPEN))
        if self._current not in self._messages:
            self._current = None
        self._empty.setVisible(not self._messages)
        self.mark_continuable()

    def last_assistant(self) -> AssistantMessage | None:
        return next((m for m in reversed(self._messages) if isinstance(m, AssistantMessage)), None)

    def set_placeholder(self, text: str) -> None:
        self._empty.setText(text)

    def add_user_message(self, text: str, images: list[str]) -> UserMessage:
        message = UserMessage(text, images)
        message.actions_row.set_time(time.time())
        self._add(message)
        if self._query:
            mark(message, self._query, False)
        return message

    def begin_answer(self, model_name: str) -> AssistantMessage:
        self._current = AssistantMessage(model_name)
        self._current.actions_row.set_time(time.time())
        self._add(self._current)
        return self._current

    @Slot(str)
    def append_token(self, piece: str) -> None:
        if self._current is not None:
            self._current.append(piece)

    @Slot(object)
    def show_progress(self, event) -> None:
        """Progress before the first word of the streaming answer (an ``engine.api.ProgressEvent``)."""
        if self._current is not None:
            self._current.show_progress(event)

    def end_answer(self, finish_reason: str, footer: str = "") -> None:
        if self._current is not None:
            self._current.finish(finish_reason, footer)
            if self._query:
                mark(self._current, self._query, False)
            self._current = None
        self.mark_continuable()

    def resume_answer(self, index: int) -> AssistantMessage:
        """Stream the continuation of answer ``index`` (the last message) into it."""
        self._current = self._messages[index]
        self._current.resume()
        self._follow = True
        return self._current

    def mark_continuable(self) -> None:
        """Continue under the last message when it is an answer cut short (:data:`CONTINUABLE`) with
        text to go on from; under no other (continuing an earlier answer would drop what follows it).
        Only the one showing it and the last are touched: called for every message a chat opens with."""
        last = self._messages[-1] if self._messages else None
        offer = last is not None and last.role == "assistant" and last is not self._current and last.can_continue \
            and last.status in CONTINUABLE and bool(last.text.strip())
        shown = self._continuable
        if shown is not None and shown is not last:
            shown.set_continuable(False)
        if last is not None and last.role == "assistant":
            last.set_continuable(offer)
        self._continuable = last if offer else None

    @Slot()
    def clear(self) -> None:
        for message in self._messages:
            self._discard(message)
        self._messages.clear()
        self._first_built = 0
        self._anchor = None
        self._current = self._hit = self._pin = None
        self._empty.show()

    def _discard(self, message: UserMessage | AssistantMessage) -> None:
        """Take ``message`` off the transcript at once. It is deleted later (a click on it may be what
        is removing it), and until Qt does so it must not show: out of the layout it would stay drawn
        where it was, under or over the next chat's messages (trial 37, finding 6, seen whenever the
        deferred deletion waits, e.g. while code runs inside a nested event loop)."""
        if isinstance(message, StoredMessage):
            return
        if message is self._continuable:
            self._continuable = None
        if message is self._hit:
            self._hit = self._pin = None
        self._column.removeWidget(message)
        message.hide()
        message.deleteLater()

    def set_regenerate_note(self, note: str) -> None:
        """A line added to every Regenerate button's tooltip, the answers added later too ("" for none)."""
        if note == self._regenerate_note:
            return
        self._regenerate_note = note
        for message in self._messages[self._first_built:]:
            message.actions_row.set_note("regenerate", note)

    def set_changes_enabled(self, enabled: bool) -> None:
        """Every message's edit, regenerate, delete and version buttons on or greyed out (Copy stays),
        the messages added later too."""
        if enabled != self._changes_enabled:
            self._changes_enabled = enabled
            for message in self._messages[self._first_built:]:
                message.actions_row.set_changes_enabled(enabled)

    def _add(self, message: UserMessage | AssistantMessage) -> None:
        self._empty.hide()
        self._messages.append(message)
        self._place(message, self._column.count() - 1)
        self.mark_continuable()  # a message after a cut answer: Continue goes

    def _place(self, message: UserMessage | AssistantMessage, position: int) -> None:
        """Put a new widget in the column at layout ``position`` with the buttons' current state."""
        if not self._changes_enabled:
            message.actions_row.set_changes_enabled(False)
        if self._regenerate_note:
            message.actions_row.set_note("regenerate", self._regenerate_note)
        message.action_requested.connect(lambda name, m=message: self._on_action(name, m))
        self._follow = True
        self._column.insertWidget(position, message)

    def _build(self, record: StoredMessage) -> UserMessage | AssistantMessage:
        if record.role == "user":
            message = UserMessage(record.text, record.images)
        else:
            message = AssistantMessage(record.model_name)
            message.set_text(record.text)
            message.finish(record.finish_reason, record.footer)
            message.status, message.can_continue = record.status, record.can_continue
        message.message_id = record.message_id
        message.actions_row.versions.set_versions(*record.versions)
        message.actions_row.set_time(record.created)
        if self._query:
            mark(message, self._query, False)
        return message

    def _build_back_to(self, index: int) -> None:
        """Build the messages from ``index`` to the first one built, above it in the column; the view
        stays on what it shows (unless it follows the end)."""
        if index >= self._first_built:
            return
        follow = self._follow
        if not follow and self._pin is None:
            bar = self.verticalScrollBar()
            self._anchor = bar.maximum() - bar.value()
        for offset, position in enumerate(range(index, self._first_built)):
            self._messages[position] = self._build(self._messages[position])
            self._place(self._messages[position], 1 + offset)  # after the empty chat's placeholder
        self._first_built = index
        self._follow = follow

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        bar = self.verticalScrollBar()
        self._adjusting = True
        try:
            if self._follow:
                bar.setValue(maximum)
            elif self._pin is not None:
                self._hold_pin()
            elif self._anchor is not None:  # messages were built above: what was on screen stays there
                bar.setValue(maximum - self._anchor)
        finally:
            self._adjusting = False
        self._want_earlier(bar.value())

    def _on_scrolled(self, value: int) -> None:
        if not self._adjusting:
            self._follow = value >= self.verticalScrollBar().maximum() - 8
            self._anchor = self._pin = None
        self._want_earlier(value)

    def _want_earlier(self, value: int) -> None:
        """Within a screen of the first message built: build the batch before it, once events are
        processed (the layout is not done while a scroll or range change is being handled)."""
        if self._first_built > 0 and value < self.viewport().height() and not self._earlier_due:
            self._earlier_due = True
            QTimer.singleShot(0, self, self._build_earlier)

    def _build_earlier(self) -> None:
        self._earlier_due = False
        if self._first_built > 0 and self.verticalScrollBar().value() < self.viewport().height():
            self._build_back_to(max(0, self._first_built - EARLIER_BATCH))

    def _on_action(self, name: str, message) -> None:
        if message in self._messages:
            self.message_action.emit(name, self._messages.index(message))


def _status(finish_reason: str) -> str:
    """The stored status of an answer that ended with ``finish_reason`` (as :meth:`AssistantMessage.finish` sets it)."""
    return finish_reason if finish_reason != "stop" else "done"
