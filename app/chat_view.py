"""The transcript: a scrolling column of message widgets that follows the newest answer.

Only a window of a chat's messages is built as widgets (at most :data:`MAX_BUILT`, about half a MB
each); the others are :class:`StoredMessage` records. A chat opens with its last
:data:`SHOWN_AT_OPEN` built. Within a screen of either end of what is built, :data:`BATCH` more
are built on that side and as many dropped back to records on the far side, the view held on what it
shows (the answer streaming, when dropped, stays a widget out of the column and goes on growing). A
message jumped to (the search's hit, an edit resumed after a restart, the chat's start) gets a
window of its own. Building every widget of a 2,000-message chat took 15 s on a 2-core
machine, and each layout pass grows with the widgets built (a batch took 2 s at 4,500 built).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QApplication, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.find_in_chat import count, hit_top, mark
from app.messages import CONTINUABLE, AssistantMessage, UserMessage, shown_length
from app.zoom import ctrl_wheel

#: The empty chat's second line with a local model (a server's model names the server instead).
LOCAL_LINE = "Everything runs on this computer."
EMPTY_TEXT = f"Drop a photo here, or paste one, and ask a question about it.\n{LOCAL_LINE}"
#: The empty chat's line for a model that takes no images.
EMPTY_TEXT_ONLY = f"Ask a question below.\n{LOCAL_LINE}"
#: Messages built as widgets when a chat opens (its last ones).
SHOWN_AT_OPEN = 40
#: Messages built at once on the side the view comes within a screen of.
BATCH = 15
#: The most messages built at once: further ones are records again (widgets of a message cost
#: ~0.5 MB, and every layout pass of the column costs time in proportion to them).
MAX_BUILT = 120
#: Messages built on each side of one jumped to (a search hit, an edit, the chat's start).
AROUND = 20

Message = UserMessage | AssistantMessage


@dataclass
class StoredMessage:
    """A message not built as a widget: what building its widget needs, and what callers read of a
    message widget (``role``, ``text``, ``images``, ``message_id``, ``status``).

    ``finish_reason``, ``footer``, ``model_name`` and ``can_continue`` apply to answers only;
    ``versions`` is its "‹ n / m ›" switcher, ``(1, 1)`` for a message with no other version;
    ``created`` the time shown under it; ``attached_names`` what its images' thumbnails and viewer
    call them."""

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
    attached_names: list[str] = field(default_factory=list)  # each image's name as attached ("": unknown)
    engine: str = ""  # an answer's: where it was written ("local", "remote:SERVER"; "": unknown)


class ChatView(QScrollArea):
    """Shows the conversation; new answers stream into the last :class:`AssistantMessage`.

    ``message_action(action, index)`` reports a click on a message's copy/edit/regenerate/delete;
    ``zoom_requested(step)`` a Ctrl+wheel over the chat (+1 in, -1 out; see :mod:`app.zoom`).
    Indices are those of the chat's shown branch, built or not.
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
        # One entry a message, oldest first: in [_lo, _hi) its widget (at column position 1 + i - _lo),
        # elsewhere its record.
        self._messages: list[Message | StoredMessage] = []
        self._lo = self._hi = 0
        self._current: AssistantMessage | None = None
        self._continuable: AssistantMessage | None = None  # the answer showing Continue
        self._follow = True  # the view stays at the chat's end (its newest message)
        # The scroll position to keep while the layout settles, until the user scrolls: a widget's place
        # ("anchor", when messages are built or dropped around the view) or a message jumped to ("pin").
        self._hold: Callable[[], int] | None = None
        self._held: Message | None = None  # the message the hold keeps in place
        self._adjusting = False  # the view being moved by this class, not by the user
        self._more_due = False
        self._changes_enabled = True
        self._regenerate_note = ""
        self._query = ""  # the chat search's text, marked in every message built (app.find_in_chat)
        self._hit_number = 0  # which of the current hit message's hits is the current one
        self._hit: Message | None = None  # the message the search last showed
        self._hit_hidden = False  # its hit is in the part of a long question not shown
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)
        bar.sliderReleased.connect(self._on_slider_released)

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if not ctrl_wheel(event, self.zoom_requested):
            super().wheelEvent(event)

    def moveEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """A banner shown or gone above the view moves its top edge: the messages stay where they were
        on the screen (trial 60: a click meant for ‹ or a pencil landed on what the banner pushed
        there), unless the view follows the chat's end, which stays put at the bottom edge anyway."""
        super().moveEvent(event)
        shift = event.pos().y() - event.oldPos().y()
        if not shift or self._follow or not self.isVisible():
            return
        held = self._hold
        if held is not None and self._held is not None:
            self._set_hold(lambda: held() + shift, self._held)
            return
        message = self._first_visible()
        if message is not None:
            offset = message.y() - self.verticalScrollBar().value() - shift
            self._set_hold(lambda: message.y() - offset, message)

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """Home and End go to the chat's first and newest message (the scroll bar spans only what is built)."""
        if event.key() == Qt.Key.Key_Home:
            self.show_start()
        elif event.key() == Qt.Key.Key_End:
            self.show_end()
        else:
            super().keyPressEvent(event)

    # -- reading -----------------------------------------------------------------------------------
    def messages(self) -> list[dict]:
        """The conversation as plain data: ``[{"role", "text", "images"}...]``."""
        return [
            {"role": m.role, "text": m.text, "images": list(getattr(m, "images", []))} for m in self._messages
        ]

    def widgets(self) -> list[Message | StoredMessage]:
        """One entry a message, oldest first: its widget, or the :class:`StoredMessage` of one not
        built (:meth:`message_widget` builds it). Both have ``role``, ``text``, ``images``,
        ``message_id`` and ``status``."""
        return list(self._messages)

    def built(self) -> int:
        """How many messages are built as widgets."""
        return self._hi - self._lo

    def built_range(self) -> range:
        """The indices of the messages built as widgets (consecutive)."""
        return range(self._lo, self._hi)

    def message_widget(self, index: int) -> Message:
        """Message ``index``'s widget, built if it was not (with the messages between it and what is
        built, or with a window of its own when those are many). Raises IndexError out of range."""
        index = range(len(self._messages))[index]
        self._ensure_built(index)
        return self._messages[index]

    def last_assistant(self) -> AssistantMessage | None:
        """The answer streaming, else the chat's last message when it is an answer's widget (shown or
        not), else the last answer built."""
        if self._current is not None:
            return self._current
        if self._messages and isinstance(self._messages[-1], AssistantMessage):
            return self._messages[-1]
        return next((m for m in reversed(self._messages[self._lo:self._hi]) if isinstance(m, AssistantMessage)), None)

    # -- going places ------------------------------------------------------------------------------
    def show_message(self, index: int, margin: int = 0) -> None:
        """Scroll message ``index`` into view, its top ``margin`` pixels below the view's, built first
        if it was not; held there while the layout settles, until the view is scrolled."""
        laid_out = index in self.built_range()  # (one built now has no place until the layout runs)
        message = self.message_widget(index)
        bar = self.verticalScrollBar()
        top = message.y()
        if not (laid_out and bar.value() + margin <= top
                and top + min(message.height(), self.viewport().height() - margin) <= bar.value() + self.viewport().height()):
            self._follow = False
            self._set_hold(lambda: message.y() - margin, message)

    def screen_offset(self, index: int) -> int:
        """Where message ``index`` (built) sits: its top's distance below the view's top, in pixels
        (negative above it), for :meth:`hold_at`."""
        return self.message_widget(index).y() - self.verticalScrollBar().value()

    def hold_at(self, index: int, offset: int) -> None:
        """Keep message ``index`` ``offset`` pixels below the view's top while the layout settles, until
        the view is scrolled: another version of a message replaced it and what follows it (trial 60:
        the view followed the new branch to the chat's end, the message switched out of sight)."""
        message = self.message_widget(index)
        self._follow = False
        self._set_hold(lambda: message.y() - offset, message)

    def show_start(self) -> None:
        """Show the chat's first message (Home, Ctrl+Home)."""
        if not self._messages:
            return
        if self._lo > 0:
            self._rebuild(0, min(len(self._messages), SHOWN_AT_OPEN))
        first = self._messages[0]
        self._follow = False
        self._set_hold(lambda: first.y() - self._column.contentsMargins().top(), first)

    def show_end(self) -> None:
        """Show the chat's newest message, and follow it (End, Ctrl+End; a message sent)."""
        if self._hi < len(self._messages):
            self._rebuild(max(0, len(self._messages) - SHOWN_AT_OPEN), len(self._messages))
            self.mark_continuable()
        self._follow, self._hold = True, None
        self._adjusting = True
        try:
            self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())
        finally:
            self._adjusting = False

    # -- the chat search ---------------------------------------------------------------------------
    def set_query(self, query: str) -> list[tuple[int, int]]:
        """Mark ``query`` (the chat search's text; "" for none) in every message, also those built
        later; returns its hits, oldest first, as (message index, hit number within the message). A long
        question's hits are counted in all its text, those past the part its bubble shows
        (:func:`app.messages.shown_length`) too: the chat list finds them there (trial 62: the chat was
        listed as holding the words, and the open chat counted none)."""
        if query != self._query:  # other words: no hit is the current one until F3 or a chat opened from the list
            self._query, self._hit = query, None
            for message in self._messages[self._lo:self._hi]:
                mark(message, query, None)
        hits = []
        for i, message in enumerate(self._messages):
            hits += [(i, number) for number in range(count(message.text, query))]
        return hits

    def show_hit(self, index: int, number: int = 0) -> None:
        """Scroll to hit ``number`` (0: the first) of the query in message ``index`` and mark it as the
        current one. The hit is held a third of the way down the view while the layout settles (a
        message just built gets its height over several passes), until the view is scrolled. A hit in
        the part of a long question its bubble does not show brings its "… more characters" line into
        view instead (:meth:`hit_not_shown` says so)."""
        previous, self._hit = self._hit, self.message_widget(index)
        self._hit_number = number
        if previous is not None and previous is not self._hit and previous in self._messages:
            mark(previous, self._query, None)
        text = self._hit.text
        self._hit_hidden = self._hit.role == "user" and number >= count(text[:shown_length(text)], self._query)
        hit = mark(self._hit, self._query, None if self._hit_hidden else number)
        more = self._hit.findChild(QLabel, "userTextMore") if self._hit_hidden else None
        view = more if more is not None else hit[0] if hit is not None else self._hit
        hit = None if more is not None else hit
        content = self.widget()
        self._follow = False
        self._set_hold(lambda: view.mapTo(content, QPoint(0, 0)).y() + (hit_top(hit) if hit is not None else 0)
                       - self.viewport().height() // 3, self._hit)

    def hit_not_shown(self) -> bool:
        """The hit :meth:`show_hit` showed last lies in the part of a long question not shown."""
        return self._hit is not None and self._hit_hidden

    def hit_index(self) -> int | None:
        """The index of the message :meth:`show_hit` showed last (None: none, or it is gone)."""
        return next((i for i, m in enumerate(self._messages) if m is self._hit), None) if self._hit else None

    def current_hit(self) -> tuple[int, int] | None:
        """(message index, hit number) that :meth:`show_hit` showed last (None: none, or it is gone)."""
        index = self.hit_index()
        return None if index is None else (index, self._hit_number)

    # -- adding and removing -----------------------------------------------------------------------
    def add_stored(self, records: list[StoredMessage]) -> None:
        """Append stored messages. A chat opening (nothing built) builds its last :data:`SHOWN_AT_OPEN`
        and follows its end; after messages built up to the end (the branch after a message that was
        deleted or switched to another version) the first :data:`AROUND` appended are built and the
        view stays where it was; after messages not built, none."""
        start = len(self._messages)
        self._messages.extend(records)
        if self._hi == self._lo:
            self._lo = self._hi = len(self._messages)
            self._build_range(max(0, len(self._messages) - SHOWN_AT_OPEN), len(self._messages))
            self._follow = True
        elif self._hi == start:
            self._build_range(self._lo, min(len(self._messages), start + AROUND))
            self._trim(keep=start)
            if self._hi < len(self._messages):
                self._follow = False
        self._empty.setVisible(not self._messages)
        self.mark_continuable()

    def add_stored_answer(self, model_name: str, text: str, finish_reason: str, footer: str) -> AssistantMessage:
        """An answer restored from the store, rendered complete."""
        self.add_stored([StoredMessage("assistant", text, model_name=model_name, finish_reason=finish_reason,
                                       footer=footer, status=_status(finish_reason))])
        return self._messages[-1]

    def add_user_message(self, text: str, images: list[str], names: list[str] | None = None) -> UserMessage:
        """A question sent: ``images`` stored copies, ``names`` what each was attached as ("": unknown)."""
        message = UserMessage(text, images, names=names)
        message.actions_row.set_time(time.time())
        self._add(message)
        if self._query:
            mark(message, self._query, None)
        return message

    def begin_answer(self, model_name: str) -> AssistantMessage:
        self._current = AssistantMessage(model_name)
        self._current.actions_row.set_time(time.time())
        self._add(self._current)
        return self._current

    def set_versions(self, versions: dict[int, tuple[int, int]]) -> None:
        """Each message's "‹ n / m ›" switcher from ``versions`` (message id -> (n, m); absent: 1 / 1)."""
        for message in self._messages:
            shown = versions.get(message.message_id, (1, 1))
            if isinstance(message, StoredMessage):
                message.versions = shown
            else:
                message.actions_row.versions.set_versions(*shown)

    def remove_from(self, index: int) -> None:
        """Remove message ``index`` and everything after it. The message before it is built if it was
        not, so that what follows (:meth:`add_stored`) is built after it and the view stays there."""
        if index > 0 and not self._follow:
            before = self.message_widget(index - 1)
            self._hold = None  # (a message held may be one going)
            self._set_anchor(before)
        focused = QApplication.focusWidget()
        for at, message in enumerate(self._messages[index:], index):
            if focused is not None and isinstance(message, QWidget) and message.isAncestorOf(focused):
                # Regenerate or ‹ › pressed from the keyboard: its message goes, and Qt would hand the
                # focus to the next control in the chain (the Attach button, where a typed space opened
                # the file dialog). It goes to the same control of what takes the message's place.
                name = focused.objectName()
                QTimer.singleShot(0, lambda at=at, name=name: self.focus_message(at, name))
            self._discard(message)
        del self._messages[index:]
        self._hi = min(self._hi, len(self._messages))
        self._lo = min(self._lo, self._hi)
        if self._hi == self._lo and self._messages:  # nothing built is left: the end, as at opening
            self._rebuild(max(0, len(self._messages) - SHOWN_AT_OPEN), len(self._messages))
        if self._current not in self._messages:
            self._current = None
        self._empty.setVisible(not self._messages)
        self.mark_continuable()

    def focus_message(self, index: int, name: str) -> None:
        """Focus the control named ``name`` of message ``index`` (what replaced a message that had the
        focus; an answer whose streamed text, focused, was replaced by the finished one), else that
        message's version arrows, else another of its controls, else the transcript. Not while another
        window is active (the user is elsewhere)."""
        if not self.window().isActiveWindow() or index >= len(self._messages):
            return
        message = self.message_widget(index)
        for wanted in (name, "previousVersion", "nextVersion", None):  # None: any (a streaming answer's text)
            for widget in message.findChildren(QWidget, wanted) if wanted else message.findChildren(QWidget):
                if widget.isVisible() and widget.isEnabled() and widget.focusPolicy() & Qt.FocusPolicy.TabFocus:
                    widget.setFocus(Qt.FocusReason.OtherFocusReason)
                    return
        self.setFocus(Qt.FocusReason.OtherFocusReason)

    @Slot()
    def clear(self) -> None:
        for message in self._messages:
            self._discard(message)
        self._messages.clear()
        self._lo = self._hi = 0
        self._current = self._hit = self._hold = None
        self._follow = True
        self._empty.show()

    def set_placeholder(self, text: str) -> None:
        self._empty.setText(text)

    # -- the streamed answer -----------------------------------------------------------------------
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
                mark(self._current, self._query, None)
            self._current = None
        self.mark_continuable()

    def resume_answer(self, index: int) -> AssistantMessage:
        """Stream the continuation of answer ``index`` (the last message) into it."""
        self.show_end()
        self._current = self._messages[index]
        self._current.resume()
        return self._current

    def mark_continuable(self) -> None:
        """Continue under the last message when it is an answer cut short (:data:`CONTINUABLE`) with
        text to go on from; under no other (continuing an earlier answer would drop what follows it).
        Only the one showing it and the last are touched: called for every message a chat opens with."""
        last = self._messages[-1] if self._messages else None
        if isinstance(last, StoredMessage):  # not built: checked again when it is
            last = None
        offer = last is not None and last.role == "assistant" and last is not self._current and last.can_continue \
            and last.status in CONTINUABLE and bool(last.text.strip())
        shown = self._continuable
        if shown is not None and shown is not last:
            shown.set_continuable(False)
        if last is not None and last.role == "assistant":
            last.set_continuable(offer)
        self._continuable = last if offer else None

    def refresh_times(self) -> None:
        """Say each shown message's time again as of now ("16:30" becomes "Yesterday 16:30" at midnight)."""
        for message in self._messages[self._lo:self._hi]:
            message.actions_row.set_time(message.actions_row.sent_at)

    # -- buttons' state ----------------------------------------------------------------------------
    def set_regenerate_note(self, note: str) -> None:
        """A line added to every Regenerate button's tooltip, the answers added later too ("" for none)."""
        if note == self._regenerate_note:
            return
        self._regenerate_note = note
        for message in self._messages[self._lo:self._hi]:
            message.actions_row.set_note("regenerate", note)

    def set_changes_enabled(self, enabled: bool) -> None:
        """Every message's edit, regenerate, delete and version buttons on or greyed out (Copy stays),
        the messages added later too."""
        if enabled != self._changes_enabled:
            self._changes_enabled = enabled
            for message in self._messages[self._lo:self._hi]:
                message.actions_row.set_changes_enabled(enabled)

    # -- building and dropping widgets -------------------------------------------------------------
    def _add(self, message: Message) -> None:
        """A new message at the chat's end (a question sent, an answer begun): the view goes there."""
        self.show_end()
        self._empty.hide()
        self._connect(message)
        self._messages.append(message)
        self._hi = len(self._messages)
        self._place(message, self._column.count() - 1)
        self._trim(keep=self._hi - 1)
        self.mark_continuable()  # a message after a cut answer: Continue goes

    def _place(self, message: Message, position: int) -> None:
        """Put a widget in the column at layout ``position`` with the buttons' current state."""
        message.actions_row.set_changes_enabled(self._changes_enabled)
        message.actions_row.set_note("regenerate", self._regenerate_note)
        self._column.insertWidget(position, message)
        message.show()  # (one taken out of the column was hidden)

    def _connect(self, message: Message) -> Message:
        message.action_requested.connect(lambda name, m=message: self._on_action(name, m))
        return message

    def _build(self, record: StoredMessage) -> Message:
        if record.role == "user":
            message = UserMessage(record.text, record.images, names=record.attached_names)
        else:
            message = AssistantMessage(record.model_name)
            message.set_engine(record.engine)
            message.restore(record.text, record.finish_reason, record.footer)
            message.status, message.can_continue = record.status, record.can_continue
        message.message_id = record.message_id
        message.actions_row.versions.set_versions(*record.versions)
        message.actions_row.set_time(record.created)
        if self._query:
            mark(message, self._query, None)
        return self._connect(message)

    def _record(self, message: Message) -> StoredMessage:
        """What building ``message`` again needs, from its widget (an answer continued or renamed since it
        was built, a message added live)."""
        versions = message.actions_row.versions
        record = StoredMessage(message.role, message.text, list(message.images), getattr(message, "message_id", None),
                               message.status, versions=(versions.number, versions.count),
                               created=message.actions_row.sent_at,
                               attached_names=list(getattr(message, "attached_names", [])))
        if isinstance(message, AssistantMessage):
            record.model_name, record.footer, record.engine = message.model_name(), message.footer(), message.engine
            record.finish_reason, record.can_continue = message.finish_reason or "stop", message.can_continue
        return record

    def _build_range(self, lo: int, hi: int) -> None:
        """Build the messages of ``[lo, hi)`` that are not: ``lo`` at most, ``hi`` at least what is built."""
        for offset, index in enumerate(range(lo, self._lo)):
            self._messages[index] = self._widget(index)
            self._place(self._messages[index], 1 + offset)  # after the empty chat's placeholder
        self._lo = min(self._lo, lo)
        for index in range(self._hi, hi):
            self._messages[index] = self._widget(index)
            self._place(self._messages[index], 1 + index - self._lo)
        self._hi = max(self._hi, hi)

    def _widget(self, index: int) -> Message:
        entry = self._messages[index]
        return self._build(entry) if isinstance(entry, StoredMessage) else entry  # (the answer taken out)

    def _drop(self, index: int) -> None:
        """Message ``index``'s widget goes back to a record (the first or last one built). The answer
        streaming is only taken out of the column: tokens go on into it, the keeper saves its text."""
        message = self._messages[index]
        if message is self._current:
            self._column.removeWidget(message)
            message.hide()
            return
        self._messages[index] = self._record(message)
        self._discard(message)

    def _trim(self, keep: int) -> None:
        """Drop widgets from the end of what is built farther from message ``keep`` until at most
        :data:`MAX_BUILT` are."""
        while self._hi - self._lo > MAX_BUILT:
            if keep - self._lo >= self._hi - 1 - keep:
                self._drop(self._lo)
                self._lo += 1
            else:
                self._drop(self._hi - 1)
                self._hi -= 1

    def _rebuild(self, lo: int, hi: int) -> None:
        """Drop every widget and build ``[lo, hi)`` instead (a jump far from what is built)."""
        for index in range(self._lo, self._hi):
            self._drop(index)
        self._lo = self._hi = lo
        self._build_range(lo, hi)

    def _ensure_built(self, index: int) -> None:
        if self._lo <= index < self._hi:
            return
        if self._hi > self._lo and max(self._hi, index + 1) - min(self._lo, index) <= MAX_BUILT:
            if not self._follow:
                self._set_anchor(self._first_visible())
            self._build_range(min(self._lo, index), max(self._hi, index + 1))
        else:
            self._rebuild(max(0, index - AROUND), min(len(self._messages), index + AROUND + 1))
        if self._hi < len(self._messages):
            self._follow = False
        self._trim(keep=index)
        self.mark_continuable()

    def _discard(self, message: Message | StoredMessage) -> None:
        """Take ``message`` off the transcript at once. It is deleted later (a click on it may be what
        is removing it), and until Qt does so it must not show: out of the layout it would stay drawn
        where it was, under or over the next chat's messages (trial 37, finding 6, seen whenever the
        deferred deletion waits, e.g. while code runs inside a nested event loop)."""
        if isinstance(message, StoredMessage):
            return
        if message is self._continuable:
            self._continuable = None
        if message is self._hit:
            self._hit = None
        self._column.removeWidget(message)
        message.hide()
        message.deleteLater()

    # -- the view ----------------------------------------------------------------------------------
    def _first_visible(self) -> Message | None:
        top = self.verticalScrollBar().value()
        built = self._messages[self._lo:self._hi]
        return next((m for m in built if m.y() + m.height() > top), built[-1] if built else None)

    def _set_anchor(self, message: Message | None) -> None:
        """Keep ``message`` where it is in the view while widgets are built or dropped around it. A hold
        already set stays (until the user scrolls): while the layout settles, what is "in view" is not
        known, and the message it holds is."""
        if message is None or self._hold is not None:
            return
        offset = message.y() - self.verticalScrollBar().value()
        self._set_hold(lambda: message.y() - offset, message)

    def _set_hold(self, where: Callable[[], int], message: Message) -> None:
        self._hold, self._held = where, message
        self._apply_hold()
        QTimer.singleShot(0, self, self._apply_hold)  # again once the layout has run

    def _apply_hold(self) -> None:
        if self._hold is None or self._follow:
            return
        self._adjusting = True
        try:
            self.verticalScrollBar().setValue(max(0, self._hold()))
        except RuntimeError:  # the widget held was deleted meanwhile (a chat switched): nothing to hold
            self._hold = None
        finally:
            self._adjusting = False

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self._adjusting = True
            try:
                self.verticalScrollBar().setValue(maximum)
            finally:
                self._adjusting = False
        else:
            self._apply_hold()
        self._want_more(self.verticalScrollBar().value())

    def _on_scrolled(self, value: int) -> None:
        if not self._adjusting:
            self._follow = self._hi == len(self._messages) and value >= self.verticalScrollBar().maximum() - 8
            self._hold = None
        self._want_more(value)

    def _on_slider_released(self) -> None:
        """The scroll bar's thumb let go: at its top (bottom) with messages above (below) not built, the
        chat's first (newest) message, as the thumb says; elsewhere, a batch where it is near an end of
        what is built. Nothing is built while the thumb is held (it would jump away from the pointer):
        the bar only spans the messages built, and a drag to the top reached 15 more messages a drag in
        a chat of 1,000 (trial 74 F10)."""
        bar = self.verticalScrollBar()
        if bar.value() <= bar.minimum() and self._lo > 0:
            self.show_start()
        elif bar.value() >= bar.maximum() and self._hi < len(self._messages):
            self.show_end()
        else:
            self._want_more(bar.value())

    def _want_more(self, value: int) -> None:
        """Within a screen of either end of what is built: build a batch there, once events are
        processed (the layout is not done while a scroll or range change is being handled)."""
        bar, page = self.verticalScrollBar(), self.viewport().height()
        if bar.isSliderDown():
            return  # (the thumb held: see _on_slider_released)
        if not self._more_due and ((self._lo > 0 and value < page)
                                   or (self._hi < len(self._messages) and value > bar.maximum() - page)):
            self._more_due = True
            QTimer.singleShot(0, self, self._build_more)

    def _build_more(self) -> None:
        self._more_due = False
        bar, page = self.verticalScrollBar(), self.viewport().height()
        built = self._messages[self._lo:self._hi]
        visible = self._held if self._hold is not None and self._held in built else self._first_visible()
        if visible is None:
            return
        keep = self._messages.index(visible, self._lo, self._hi)
        if self._lo > 0 and bar.value() < page:
            self._set_anchor(visible)
            self._build_range(max(0, self._lo - BATCH), self._hi)
        elif self._hi < len(self._messages) and bar.value() > bar.maximum() - page:
            self._set_anchor(visible)
            self._build_range(self._lo, min(len(self._messages), self._hi + BATCH))
            if self._hi == len(self._messages):
                self.mark_continuable()
        else:
            return
        self._trim(keep=keep)
        self._settle()

    def _settle(self) -> None:
        """Lay out what was just built now, and put the view where the hold keeps it, before any
        other event. Left to the event loop, the layout took two passes (~40 ms); a wheel notch or a
        PageUp between them scrolled from the old place and dropped the hold, and the view leapt the
        batch built above (15 messages a notch at an ordinary wheel pace: trial 74 F1), or was
        painted for a moment with the batch in view and new answers' footers over their text."""
        for _ in range(3):  # a text's height follows its width: a pass sizes the views, the next their bubbles
            QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        self._apply_hold()

    def _on_action(self, name: str, message) -> None:
        if message in self._messages:
            self.message_action.emit(name, self._messages.index(message))


def _status(finish_reason: str) -> str:
    """The stored status of an answer that ended with ``finish_reason`` (as :meth:`AssistantMessage.finish` sets it)."""
    return finish_reason if finish_reason != "stop" else "done"
