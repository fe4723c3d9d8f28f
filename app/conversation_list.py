"""The sidebar: search box, New chat, and the list of saved conversations (rename, delete)."""

from __future__ import annotations

import datetime as dt
import time

from PySide6.QtCore import QEvent, QLocale, QPoint, QSize, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QFrame,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStyledItemDelegate,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.conversations import display_title
from app.find_in_chat import FindRow
from app.icons import icon
from app.store import Conversation

ID_ROLE = Qt.ItemDataRole.UserRole
UNTITLED = "New chat"


def period(updated: float, today: dt.date) -> str:
    """The heading a chat last changed at ``updated`` (seconds since the epoch) is listed under, as
    of ``today`` (local time): Today, Yesterday, Previous 7 days, Previous 30 days, then the month
    ("October") within the year, then the year ("2025")."""
    day = dt.datetime.fromtimestamp(updated).date()
    age = (today - day).days
    if age <= 0:
        return "Today"  # (a clock set back: a date ahead of today counts as today)
    if age == 1:
        return "Yesterday"
    if age <= 7:
        return "Previous 7 days"
    if age <= 30:
        return "Previous 30 days"
    if day.year == today.year:
        return QLocale(QLocale.Language.English).standaloneMonthName(day.month)  # as the rest of the window
    return str(day.year)


class _TitleDelegate(QStyledItemDelegate):
    """The list's editor for a chat's title (F2), named for a screen reader ("edit" alone before)."""

    def createEditor(self, parent, option, index):  # noqa: N802 - Qt's name
        editor = super().createEditor(parent, option, index)
        editor.setAccessibleName("Chat title")
        editor.setAccessibleDescription("Enter renames the chat, Esc keeps its title")
        return editor

    def setEditorData(self, editor, index) -> None:  # noqa: N802 - Qt's name
        super().setEditorData(editor, index)
        # All selected as the view leaves it, the cursor at the start: a title longer than the row showed
        # its end, its first letters cut off (trial 55). After the view's own selectAll, hence the timer.
        QTimer.singleShot(0, editor, lambda: editor.setSelection(len(editor.text()), -len(editor.text())))


class ConversationList(QFrame):
    """Lists conversations newest first. It only emits; the window talks to the store.

    Signals: ``open_requested(id)``, ``new_requested()``, ``rename_requested(id, title)``,
    ``delete_requested(id)``, ``search_changed(text)``, ``find_step(step)`` (the search's hits in the
    open chat: +1 the next older, -1 the next newer; the ↑ ↓ buttons, Enter and Shift+Enter in the search),
    ``search_due()`` (the list is about to be used from the search, by Down: a search the window has put
    off to a pause in typing must be run first, so the list holds what the field says).
    """

    open_requested = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    search_changed = Signal(str)
    find_step = Signal(int)
    search_due = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.new_button = QPushButton(icon("new-chat"), "New chat")
        self.new_button.setObjectName("newChatButton")
        self.new_button.setAccessibleName("New chat")
        self.new_button.setToolTip("New chat (Ctrl+N)")
        self.search = QLineEdit()
        self.search.setObjectName("conversationSearch")
        self.search.setPlaceholderText("Search chats")
        self.search.setAccessibleName("Search conversations")
        self.search.setClearButtonEnabled(True)
        for button in self.search.findChildren(QToolButton):  # Qt's clear button: no name of its own
            button.setAccessibleName("Clear search")
            button.setToolTip("Clear search (Esc)")
        # The magnifier is a button to assistive technology: named, and clicking it puts the cursor in the field.
        find = self.search.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        find.setText("Search chats")
        find.triggered.connect(lambda: self.search.setFocus())
        self.list = QListWidget()
        self.list.setObjectName("conversationList")
        # Long titles end in "…" (full title in the tooltip) instead of scrolling the sidebar sideways.
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setAccessibleName("Conversations")
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.list.setItemDelegate(_TitleDelegate(self.list))
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setIconSize(QSize(16, 16))
        self.list.setUniformItemSizes(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 10, 10, 10)
        layout.setSpacing(8)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        self.find_row = FindRow()
        self.find_row.step.connect(self.find_step)
        layout.addWidget(self.find_row)
        layout.addWidget(self.list, 1)

        self.new_button.clicked.connect(lambda: self.new_requested.emit())
        self.search.textChanged.connect(lambda text: self.search_changed.emit(text))
        self.list.currentItemChanged.connect(self._on_current_changed)
        self.list.itemChanged.connect(self._on_item_changed)
        self.list.customContextMenuRequested.connect(self._context_menu)
        delete = QAction("Delete chat", self.list)
        delete.setShortcut(QKeySequence.StandardKey.Delete)
        delete.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(self._delete_current)
        self.list.addAction(delete)
        self._filling = False
        # An empty list said nothing (trial 51: a blank box once every chat was deleted).
        self._nothing = QLabel(self.list.viewport())
        self._nothing.setObjectName("noChats")
        self._nothing.setWordWrap(True)
        self._nothing.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self._nothing.hide()
        self.list.viewport().installEventFilter(self)
        self.list.installEventFilter(self)
        self.search.installEventFilter(self)

    # -- contents ----------------------------------------------------------------------------------
    def set_conversations(self, conversations: list[Conversation], current_id: int | None,
                          today: dt.date | None = None) -> None:
        """List ``conversations`` (newest first) under headings of when each last changed (:func:`period`
        as of ``today``, default the local date); ``current_id``'s row selected."""
        self._filling = True
        self.list.clear()
        today, heading = today or dt.date.fromtimestamp(time.time()), None
        for conv in conversations:
            if (when := period(conv.updated, today)) != heading:
                heading = when
                header = QListWidgetItem(heading)
                header.setFlags(Qt.ItemFlag.NoItemFlags)  # not selectable: keys and clicks pass over it
                # Read as a heading, not as a chat named "Today".
                header.setData(Qt.ItemDataRole.AccessibleTextRole, f"{heading}, heading")
                header.setData(Qt.ItemDataRole.AccessibleDescriptionRole, f"The chats below last changed {heading}")
                font = header.font()
                font.setBold(True)
                font.setPointSizeF(font.pointSizeF() * 0.85)
                header.setFont(font)
                self.list.addItem(header)
            title = display_title(conv.title).strip() or UNTITLED  # a stored title may hold bidi controls
            item = QListWidgetItem(title)
            item.setData(ID_ROLE, conv.id)
            item.setToolTip(title)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if conv.id == current_id:
                self.list.setCurrentItem(item)
        self._filling = False
        self._show_current()
        self._say_if_empty()

    def _say_if_empty(self) -> None:
        """An empty list says why (trial 51: a blank box once every chat was deleted)."""
        empty = not self.chat_items()
        searching = bool(self.search.text().strip())
        self._nothing.setText("No chat holds these words" if searching else "No chats yet: a message you send starts one")
        self._nothing.setVisible(empty)
        self.list.setAccessibleDescription(self._nothing.text() if empty else "")

    def _show_current(self) -> None:
        """The open chat's row in view: the one reopened at start (or opened by a key) may sit below
        the list's fold; the list is filled before the window has its size, so again on a resize."""
        if self.list.currentItem() is not None:
            self.list.scrollToItem(self.list.currentItem(), QAbstractItemView.ScrollHint.EnsureVisible)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
        if watched is self.list.viewport() and event.type() == QEvent.Type.Resize:
            self._show_current()
            self._nothing.setGeometry(self.list.viewport().rect().adjusted(8, 8, -8, -8))
        if watched is self.list and event.type() == QEvent.Type.FocusIn and self.list.currentItem() is None:
            # Qt makes a list's first row current when Tab reaches a list without one: from a new chat,
            # Tab towards the model picker opened the newest chat, the unsent text and photo with it.
            # Focus alone changes nothing; an arrow key then opens the first chat.
            QAbstractScrollArea.focusInEvent(self.list, event)
            return True
        if watched is self.list and event.type() == QEvent.Type.KeyPress and self.chat_items() \
                and event.key() in (Qt.Key.Key_Home, Qt.Key.Key_End, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown):
            return self._jump(event.key())
        if watched is self.search and event.type() == QEvent.Type.KeyPress \
                and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.search.text().strip():
            self.find_step.emit(-1 if event.modifiers() & Qt.KeyboardModifier.ShiftModifier else 1)
            return True
        if watched is self.search and event.type() == QEvent.Type.KeyPress and event.key() == Qt.Key.Key_Down \
                and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            # Down from the search goes to the chats it lists (trial 60: it took Tab, Down, Enter); the
            # first one opens when the open chat is not among them.
            self.search_due.emit()
            if not self.chat_items():
                return False
            self.list.setFocus(Qt.FocusReason.OtherFocusReason)
            if self.list.currentItem() is None:
                self.list.setCurrentItem(self.chat_items()[0])
            return True
        return super().eventFilter(watched, event)

    def _jump(self, key) -> bool:
        """Home / End: the first / last chat (Qt's own went to the first row, a heading it cannot
        select, and stayed put); PageUp / PageDown: Qt's, else the first / last chat where it stayed."""
        items = self.chat_items()
        if key in (Qt.Key.Key_Home, Qt.Key.Key_End):
            self.list.setCurrentItem(items[0] if key == Qt.Key.Key_Home else items[-1])
            return True
        before = self.list.currentItem()
        QListWidget.keyPressEvent(self.list, QKeyEvent(QEvent.Type.KeyPress, key, Qt.KeyboardModifier.NoModifier))
        if self.list.currentItem() is before:
            self.list.setCurrentItem(items[0] if key == Qt.Key.Key_PageUp else items[-1])
        return True

    def chat_items(self) -> list[QListWidgetItem]:
        """The list's rows that are chats (not headings), top to bottom."""
        items = (self.list.item(i) for i in range(self.list.count()))
        return [item for item in items if item.data(ID_ROLE) is not None]

    def ids(self) -> list[int]:
        return [item.data(ID_ROLE) for item in self.chat_items()]

    def titles(self) -> list[str]:
        return [item.text() for item in self.chat_items()]

    def headings(self) -> list[str]:
        items = (self.list.item(i) for i in range(self.list.count()))
        return [item.text() for item in items if item.data(ID_ROLE) is None]

    def select(self, conversation_id: int | None) -> None:
        self._filling = True
        item = self._item(conversation_id)
        self.list.setCurrentItem(item) if item is not None else self.list.clearSelection()
        self._filling = False
        self._show_current()

    def remove(self, conversation_id: int) -> None:
        """Take ``conversation_id``'s row out of the list (a chat deleted), and its heading with it when
        no other chat is under it: the list of thousands is not filled again (3,000 chats: ~0.1 s)."""
        item = self._item(conversation_id)
        if item is None:
            return
        self._filling = True
        try:
            row = self.list.row(item)
            self.list.takeItem(row)
            heading = self.list.item(row - 1) if row > 0 else None
            after = self.list.item(row)  # (None past the end)
            if heading is not None and heading.data(ID_ROLE) is None and (after is None or after.data(ID_ROLE) is None):
                self.list.takeItem(row - 1)
        finally:
            self._filling = False
        self._say_if_empty()

    def step(self, current_id: int | None, step: int) -> int | None:
        """The chat ``step`` places below (+) or above (-) ``current_id`` in the list as shown, round
        from the last to the first; the first (or last) when ``current_id`` is not listed; None when the
        list is empty."""
        ids = self.ids()
        if not ids:
            return None
        if current_id not in ids:
            return ids[0] if step > 0 else ids[-1]
        return ids[(ids.index(current_id) + step) % len(ids)]

    def start_rename(self, conversation_id: int) -> None:
        item = self._item(conversation_id)
        if item is not None:
            self.list.editItem(item)

    def _item(self, conversation_id: int | None) -> QListWidgetItem | None:
        if conversation_id is None:
            return None
        return next((item for item in self.chat_items() if item.data(ID_ROLE) == conversation_id), None)

    # -- user actions ------------------------------------------------------------------------------
    @Slot(QListWidgetItem, QListWidgetItem)
    def _on_current_changed(self, current: QListWidgetItem | None, _previous) -> None:
        if current is not None and not self._filling:
            self.open_requested.emit(current.data(ID_ROLE))

    @Slot(QListWidgetItem)
    def _on_item_changed(self, item: QListWidgetItem) -> None:
        if not self._filling:
            self.rename_requested.emit(item.data(ID_ROLE), item.text())

    def _delete_current(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.delete_requested.emit(item.data(ID_ROLE))

    @Slot(QPoint)
    def _context_menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None or item.data(ID_ROLE) is None:
            return
        menu = QMenu(self)
        menu.addAction(icon("edit"), "Rename", lambda: self.list.editItem(item))
        menu.addAction(icon("delete"), "Delete", lambda: self.delete_requested.emit(item.data(ID_ROLE)))
        menu.exec(self.list.viewport().mapToGlobal(pos))
