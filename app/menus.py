"""The menu bar. Every shortcut lives here, so Help ▸ Keyboard shortcuts can list them all."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QMainWindow,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.focus import give_focus_back
from app.icons import icon
from app.scroll_area import fit_to_screen
from app.window_layout import STOP_ACTION

# Keys handled by widgets rather than menu actions; listed in the shortcuts dialog too.
WIDGET_SHORTCUTS = [
    ("Enter", "Send the message"),
    ("Shift+Enter", "New line in the message"),
    ("Esc", "Stop the answer or the model's load; cancel an edit; in the chat search, clear it first"),
    ("Enter, Shift+Enter in the search", "Older, newer match in the open chat"),
    ("Ctrl+V", "Paste text or an image into the message"),
    ("Del", "Delete the selected chat"),
    ("Ctrl+Z", "Undo a delete (outside the message box)"),
    # A message's buttons have no keys of their own: they are reached by Tab (trial 50: not listed).
    ("Tab, Shift+Tab", "Next, previous control: the chat list, the chat, each message's photos and "
                       "buttons (Copy, Edit, Regenerate, Delete, Continue, ‹ › versions), the message box"),
    ("Space", "Press the focused button (a message's Copy, Edit, Regenerate, Delete, Continue, ‹ ›)"),
    ("Enter, Space on a photo or video", "View a sent photo full size, play a sent video"),
    ("Home, End in the chat", "The chat's first, newest message"),
    ("↑, ↓, Home, End in the chat list", "Open the next, previous, first, last chat"),
]


def _action(window: QMainWindow, text: str, slot, shortcut=None, icon_name: str = "") -> QAction:
    action = QAction(icon(icon_name), text, window) if icon_name else QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    action.triggered.connect(lambda _=False: slot())
    return action


def build_menus(window) -> dict[str, QAction]:
    """Menus for ``window`` (a MainWindow); returns the actions by name."""
    from app.about import about_dialog
    from app.export import export_dialog
    from app.import_chat import import_dialog

    bar = window.menuBar()
    acts = {
        "new_chat": _action(window, "&New chat", window.new_chat, QKeySequence.StandardKey.New, "new-chat"),
        "export_md": _action(window, "Export chat as &Markdown…", lambda: export_dialog(window, "md"), None, "export"),
        "export_json": _action(window, "Export chat as &JSON…", lambda: export_dialog(window, "json")),
        "import_json": _action(window, "&Import chat…", lambda: import_dialog(window)),
        "quit": _action(window, "&Quit", window.close, QKeySequence.StandardKey.Quit),
        # The attach button's file dialog from the keyboard (the button itself is a Tab stop too).
        "attach": _action(window, "&Attach files…", window._pick_files, QKeySequence.StandardKey.Open, "attach"),
        # Esc is the window's own key (it also cancels an edit): shown in the menu after a tab.
        "stop": _action(window, STOP_ACTION, window.stop, None, "stop"),
        "next_chat": _action(window, "Ne&xt chat", lambda: window.step_conversation(1), "Ctrl+PgDown"),
        "previous_chat": _action(window, "&Previous chat", lambda: window.step_conversation(-1), "Ctrl+PgUp"),
        "search": _action(window, "Searc&h chats", window.focus_search, QKeySequence.StandardKey.Find),
        "find_older": _action(window, "&Older match in this chat", lambda: window.step_find(1), "F3"),
        "find_newer": _action(window, "Ne&wer match in this chat", lambda: window.step_find(-1), "Shift+F3"),
        "rename": _action(window, "&Rename chat", lambda: window.sidebar.start_rename(window.keeper.current_id),
                           "F2"),
        # Undone from the banner it leaves (Ctrl+Z), as a delete from the list's menu or its Delete key.
        "delete_chat": _action(window, "&Delete chat", window.delete_open_chat, None, "delete"),
        "zoom_in": _action(window, "Zoom &in", lambda: window.zoom_text(1), QKeySequence.StandardKey.ZoomIn),
        "zoom_out": _action(window, "Zoom &out", lambda: window.zoom_text(-1), QKeySequence.StandardKey.ZoomOut),
        "zoom_reset": _action(window, "&Actual size", lambda: window.zoom_text(0), "Ctrl+0"),
        # (In the message box these keys move its cursor, as in any text field: the box takes them first.)
        "chat_start": _action(window, "Go to the chat's &first message", window.transcript.show_start, "Ctrl+Home"),
        "chat_end": _action(window, "Go to the chat's &newest message", window.transcript.show_end, "Ctrl+End"),
        "models": _action(window, "&Manage models…", window.open_model_manager, "Ctrl+M", "models"),
        "settings": _action(window, "&Settings…", window.open_settings_dialog, "Ctrl+,", "settings"),
        "local_server": _action(window, "&Local server…", window.open_local_server),
        "shortcuts": _action(window, "&Keyboard shortcuts", lambda: shortcuts_dialog(window), "Ctrl+/"),
        "about": _action(window, "&About Smolchat", lambda: about_dialog(window)),
    }
    acts["stop"].setShortcutVisibleInContextMenu(True)
    acts["stop"].setEnabled(False)  # until an answer runs (MainWindow._update_actions)
    for name in ("find_older", "find_newer"):
        acts[name].setEnabled(False)  # until the chat search finds something in the open chat (update_find)
    # Ctrl+Tab as well, as browsers and editors switch tabs (the composer takes no Tab with Ctrl).
    acts["next_chat"].setShortcuts([QKeySequence("Ctrl+PgDown"), QKeySequence("Ctrl+Tab")])
    acts["previous_chat"].setShortcuts([QKeySequence("Ctrl+PgUp"), QKeySequence("Ctrl+Shift+Tab")])
    # Ctrl+= as well: "+" is a shifted key on most keyboards, and browsers take both.
    acts["zoom_in"].setShortcuts([QKeySequence(QKeySequence.StandardKey.ZoomIn), QKeySequence("Ctrl+=")])
    for title, names in (("&File", ["new_chat", "export_md", "export_json", "import_json", None, "quit"]),
                         ("&Chat", ["attach", None, "stop", "rename", "delete_chat", None, "next_chat", "previous_chat",
                                    "search", "find_older", "find_newer"]),
                         ("&View", ["zoom_in", "zoom_out", "zoom_reset", None, "chat_start", "chat_end"]),
                         ("&Model", ["models", "settings", "local_server"]),
                         ("&Help", ["shortcuts", "about"])):
        menu = bar.addMenu(title)
        for name in names:
            menu.addSeparator() if name is None else menu.addAction(acts[name])
    return acts


def shortcut_rows(window) -> list[tuple[str, str]]:
    """``(key, what it does)`` for every shortcut, each key once (a menu action wins over a widget's)."""
    rows = [(", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in a.shortcuts()),
             a.text().replace("&", "").split("\t")[0].rstrip("…"))
            for a in window.actions.values() if not a.shortcut().isEmpty()]
    keys = {key for key, _ in rows}
    return rows + [(key, what) for key, what in WIDGET_SHORTCUTS if key not in keys]


def shortcuts_dialog(window) -> QDialog:
    """Help ▸ Keyboard shortcuts: a table of :func:`shortcut_rows` and a Close button.

    Trial 50: it was one rich-text label, so nothing in it took the focus (a screen reader announced
    an empty dialog), only Esc closed it, and the focus came back to the Attach button. Now the table
    has the focus (the arrow keys read it row by row; Tab goes on to Close), and closing gives the
    focus back to the widget that had it."""
    rows = shortcut_rows(window)
    dialog = QDialog(window)
    dialog.setObjectName("shortcutsDialog")
    dialog.setWindowTitle("Keyboard shortcuts")
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    table = QTableWidget(len(rows), 2)
    table.setObjectName("shortcutsTable")
    table.setAccessibleName("Keyboard shortcuts")
    table.setHorizontalHeaderLabels(["Keys", "What they do"])
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setTabKeyNavigation(False)  # Tab leaves the table for Close; the arrows move within it
    table.setWordWrap(True)
    table.setShowGrid(False)
    table.setAlternatingRowColors(True)
    for row, (keys, what) in enumerate(rows):
        for column, text in enumerate((keys, what)):
            item = QTableWidgetItem(text)
            item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
            if column == 0:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            table.setItem(row, column, item)
    header = table.horizontalHeader()
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
    table.setCurrentCell(0, 0)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout = QVBoxLayout(dialog)
    layout.addWidget(table)
    layout.addWidget(buttons)
    give_focus_back(dialog, window)
    fit_to_screen(dialog, QSize(720, 640))
    table.resizeRowsToContents()
    dialog.show()
    table.setFocus(Qt.FocusReason.OtherFocusReason)
    return dialog

