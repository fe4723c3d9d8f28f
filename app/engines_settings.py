"""Settings ▸ Engines: the OpenAI-compatible servers a user chats through (vLLM, llama.cpp, Ollama, ours).

Each server has a name, a base URL and an optional API key (kept in the system keyring, never in the
settings file; session-only when there is no keyring, and the panel says so). "Test connection" runs
off the UI thread and gives one verdict per failure (refused, DNS, TLS, timeout, 401, 403, 404, 429,
5xx, not OpenAI-compatible); on success it lists the models with what each can do and where that was
read, and a "can see images" toggle for models no source describes.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app import remote_settings
from app.backends.remote_http import Server, check_connection, model_label, probe_capabilities
from engine.api.errors import describe_error
from engine.api.servers import check_server_address, masked_url, split_password, with_password

log = logging.getLogger(__name__)

PROBED_MODELS = 8  # capability probes per test (each is a few requests)
#: The most servers the list shows at once (it scrolls beyond).
LIST_ROWS = 12


class EnginesPanel(QGroupBox):
    """The Engines group of the settings dialog. ``servers_changed(name, reached)`` after a save, a
    removal (``reached`` True: the server's address, key or URL password may have changed, or it is
    gone) or a model's "can see images" answer (False)."""

    servers_changed = Signal(str, bool)
    tested = Signal(str, str)  # kind ("ok", "unauthorized", ...), verdict (for tests and screen readers)
    _result = Signal(str, str, object)  # kind, verdict, [(model, caps, sources)] from the test thread

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Engines", parent)
        self.setObjectName("enginesPanel")
        self.testing = False  # a Test connection is running
        self._tests = 0  # Test connections started: a result not of the latest is an overtaken one's
        self._testing_for: tuple = ()  # (name, url, key) of the server the running test checks
        self.servers = QListWidget()
        self.servers.setObjectName("serverList")
        self.servers.setAccessibleName("Servers")
        # A long name and URL elided in the middle (the whole in the tooltip), not a sideways scroll bar
        # over a third of the list (found by a GUI trial).
        self.servers.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.servers.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.servers.currentRowChanged.connect(self._show_server)
        self.name = self._line("serverName", "Server name", "e.g. GPU box")
        self.url = self._line("serverUrl", "Base URL", "http://gpu-box:8000/v1")
        self.key = self._line("serverKey", "API key", "optional")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_note = QLabel(
            "API keys are kept in the system keyring, never in the settings file." if remote_settings.KEYS.persistent
            else f"Note: {remote_settings.KEYS.problem} — API keys are kept for this session only.")
        self.key_note.setObjectName("keyNote")
        self.key_note.setWordWrap(True)
        self.save_button = self._button("saveServer", "Save server", self.save_server)
        self.remove_button = self._button("removeServer", "Remove", self._ask_remove)
        self.test_button = self._button("testConnection", "Test connection", self.test_connection)
        self.verdict = QLabel("")
        self.verdict.setObjectName("testVerdict")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.models = QListWidget()
        self.models.setObjectName("serverModels")
        self.models.setAccessibleName("The server's models and what they can do")
        self.models.setWordWrap(True)
        self.models.hide()  # shown with a test's results: empty, it was a large box without a word
        self.vision_boxes: dict[str, QCheckBox] = {}  # model -> its "can see images" toggle
        self._result.connect(self._show_result)
        for line in (self.url, self.key):  # (typed by the user; setText for another server clears them itself)
            line.textEdited.connect(self._fields_edited)

        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Base URL", self.url)
        form.addRow("API key", self.key)
        buttons = QHBoxLayout()
        for b in (self.save_button, self.test_button, self.remove_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        intro = QLabel("Chat through a model on another machine: any OpenAI-compatible server "
                       "(vLLM, llama.cpp's llama-server, Ollama, LM Studio, smolchat serve).")
        intro.setWordWrap(True)
        intro.setObjectName("settingsNote")
        for w in (intro, self.servers):
            layout.addWidget(w)
        layout.addLayout(form)
        layout.addWidget(self.key_note)
        layout.addLayout(buttons)
        layout.addWidget(self.verdict)
        layout.addWidget(self.models, 1)
        layout.addStretch(0)  # takes the room while the models' list is hidden: the rest stays together, on top
        self._fill()

    def _line(self, name: str, accessible: str, placeholder: str) -> QLineEdit:
        line = QLineEdit()
        line.setObjectName(name)
        line.setAccessibleName(accessible)
        line.setPlaceholderText(placeholder)
        return line

    def _button(self, name: str, text: str, slot) -> QPushButton:
        button = QPushButton(text)
        button.setObjectName(name)
        button.clicked.connect(slot)
        return button

    # -- the server list ---------------------------------------------------------------------------
    def _fill(self, select: str = "") -> None:
        self.servers.clear()
        for entry in remote_settings.load_servers():
            item = QListWidgetItem(f"{entry['name']} — {masked_url(entry['url'])}")
            item.setToolTip(item.text())
            item.setData(Qt.ItemDataRole.UserRole, entry["name"])
            self.servers.addItem(item)
            if entry["name"] == select:
                self.servers.setCurrentItem(item)
        self.servers.addItem("+ New server…")
        if not select:
            self.servers.setCurrentRow(self.servers.count() - 1)
        self._fit_list()

    def _fit_list(self) -> None:
        """The server list as tall as its rows, up to :data:`LIST_ROWS` (then it scrolls): at a fixed 90 px,
        a seventh server put "+ New server…" out of view while the panel had room to spare (trial 55)."""
        rows = min(self.servers.count(), LIST_ROWS)
        row = self.servers.sizeHintForRow(0) if self.servers.count() else self.fontMetrics().height()
        self.servers.setFixedHeight(rows * row + 2 * self.servers.frameWidth() + 4)
        self.servers.scrollToItem(self.servers.currentItem())

    def selected_name(self) -> str:
        item = self.servers.currentItem()
        return str(item.data(Qt.ItemDataRole.UserRole) or "") if item else ""

    @Slot(int)
    def _show_server(self, _row: int) -> None:
        name = self.selected_name()
        entry = next((s for s in remote_settings.load_servers() if s["name"] == name), {"name": "", "url": ""})
        url = remote_settings.shown_url(entry) if name else ""
        for line, text in ((self.name, entry["name"]), (self.url, url)):
            line.setText(text)
            line.setCursorPosition(0)  # a long one shows its start, not its end
        self.key.setText(remote_settings.KEYS.get(name) if name else "")
        self.remove_button.setEnabled(bool(name))
        self.verdict.clear()
        self.models.clear()
        self.models.hide()

    @Slot()
    def save_server(self) -> None:
        name, url = self.name.text().strip(), self.url.text().strip()
        if not name or not url:
            self.verdict.setText("Give the server a name and a base URL.")
            return
        try:
            check_server_address(url)
        except ValueError as exc:  # a typo saved would only fail later, as an unknown host
            self.verdict.setText(f"✗ {exc}.")
            return
        old = self.selected_name()
        saved = next((s["url"] for s in remote_settings.load_servers() if s["name"] == old), "") if old else ""
        # A password in the URL (a proxy's basic authentication) is kept as the key is, never in the file.
        url, url_kept = remote_settings.store_url(name, url, old, saved)
        remote_settings.upsert_server({"name": name, "url": url}, old_name=old)
        if old and old != name:
            remote_settings.KEYS.delete(old)
        kept = remote_settings.KEYS.set(name, self.key.text().strip())
        self._fill(name)
        password = remote_settings.KEYS.get(remote_settings.url_password_name(name))
        session = []  # what the keyring could not keep (none here): held for this session only
        if self.key.text().strip() and not kept:
            session.append("API key")
        if password and not url_kept:
            session.append("URL password")
        both = (" Requests carry the URL password (basic authentication), not the API key: one Authorization "
                "header holds one of them." if password and self.key.text().strip() else "")
        self.verdict.setText(f"Saved {name}." + (f" Its {' and '.join(session)} {'is' if len(session) == 1 else 'are'} "
                                                 "kept for this session only." if session else "") + both)
        self.servers_changed.emit(name, True)
        if old and old != name:
            self.servers_changed.emit(old, True)

    @Slot()
    def _ask_remove(self) -> None:
        """Remove asks first: a server's address and its API key go for good (trial 52: a key press
        meant for another button removed one)."""
        name = self.selected_name()
        if not name:
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Remove server", f"Remove the server {name} and its API key?",
                          QMessageBox.StandardButton.Cancel, self)
        box.setObjectName("removeServerBox")
        remove = box.addButton("Remove", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.finished.connect(lambda _result: self.remove_server() if box.clickedButton() is remove else None)
        box.finished.connect(box.deleteLater)
        box.open()

    @Slot()
    def remove_server(self) -> None:
        name = self.selected_name()
        if name:
            remote_settings.remove_server(name)
            self._fill()
            self.servers_changed.emit(name, True)

    # -- testing -------------------------------------------------------------------------------------
    def current_server(self) -> Server:
        """The server as the fields show it now (saved or not)."""
        entry = next((s for s in remote_settings.load_servers() if s["name"] == self.selected_name()), {})
        url, password = split_password(self.url.text().strip())
        if password == remote_settings.MASK:  # as the field shows a stored one
            password = remote_settings.stored_password(self.selected_name(), entry.get("url", ""))
        return Server(self.name.text().strip() or "server", with_password(url, password),
                      self.key.text().strip(), dict(entry.get("vision") or {}))

    @Slot()
    def test_connection(self) -> None:
        """Check the fields' server on a helper thread; :attr:`tested` and the verdict label follow.
        While :attr:`testing` the same server, another press does nothing; a press for another server
        starts its own test, and the earlier one's result is dropped (trial 71: a server that never
        finished answering held every other server's Test connection off)."""
        server = self.current_server()
        if self.testing and _identity(server) == self._testing_for:
            return
        if not server.url:
            self._drop_test()
            self._clear_models()
            self.verdict.setText("Enter the server's base URL first.")
            return
        try:
            check_server_address(server.url)
        except ValueError as exc:  # not "Unknown host ... (DNS)" for what is no address at all
            self._drop_test()
            self._clear_models()  # (another server's models under this verdict: trial 77 Q6)
            self.verdict.setText(f"✗ {exc}.")
            return
        # Not turned off while it runs: a button turned off hands the focus on (to Remove, which the
        # next key press then pressed: trial 52); a press meanwhile is ignored instead.
        self.testing = True
        self._tests += 1
        self._testing_for = _identity(server)
        self.test_button.setText("Testing…")
        self.verdict.setText(f"Testing {masked_url(server.url)}…")
        self._clear_models()
        threading.Thread(target=self._test, args=(server, self._tests), name="TestConnection", daemon=True).start()

    @Slot()
    def _fields_edited(self) -> None:
        """The address or key being edited: the last test's verdict and models were another server's
        (trial 78 R8: "✓ Connected" and its list stood under a URL typed since). A test running for
        the old fields is dropped when it ends (:meth:`_show_result`)."""
        if not self.testing:
            self.verdict.clear()
            self._clear_models()

    def _clear_models(self) -> None:
        """Take the last test's model list (and its "can see images" boxes) away."""
        self.models.clear()
        self.models.hide()
        self.vision_boxes.clear()

    def _drop_test(self) -> None:
        """Forget a running test (its result will not be shown): a press for other fields overtook it."""
        if self.testing:
            self._tests += 1
            self.testing = False
            self.test_button.setText("Test connection")

    def _test(self, server: Server, number: int) -> None:
        rows = []
        try:
            kind, verdict, ids = check_connection(server)
            for model in ids[:PROBED_MODELS]:
                caps, sources = probe_capabilities(server, model)
                rows.append((model, caps, sources))
        except Exception as exc:  # a bug must still end the test: else "Testing…" stays, the button off
            log.error("testing %s failed", masked_url(server.url), exc_info=exc)
            kind, verdict, rows = "error", f"The test failed: {describe_error(exc)}", []
        self._result.emit(kind, verdict, (number, server, rows))

    @Slot(str, str, object)
    def _show_result(self, kind: str, verdict: str, result) -> None:
        number, server, rows = result
        if number != self._tests:
            return  # a test overtaken by a later one: neither its verdict nor its end are the later one's
        self.testing = False
        self.test_button.setText("Test connection")
        now = self.current_server()  # (its URL with a stored password in place of the field's ***)
        if _identity(server) != _identity(now):
            self.verdict.clear()  # about fields changed since: not said over the new ones
            return
        self.verdict.setText(("✓ " if kind == "ok" else "✗ ") + verdict)
        self.verdict.setProperty("verdict", kind)
        for model, caps, sources in rows:
            context = (f"context {caps.max_context:,} tokens (from {sources['context']})" if caps.max_context
                       else "context length not reported")
            if sources["vision"] == "your setting":
                item = QListWidgetItem(f"{model_label(model)}\n    no server says whether it sees images · {context}")
                self.models.addItem(item)
                box = QCheckBox(f"{model_label(model)} can see images")
                box.setObjectName("canSeeImages")
                box.setChecked(caps.vision)
                # Fusion draws the indicator's frame darker than the window: invisible in the dark theme.
                box.setStyleSheet("QCheckBox::indicator { width: 12px; height: 12px; border: 1px solid palette(mid);"
                                  " border-radius: 2px; background: palette(base); }"
                                  "QCheckBox::indicator:checked { background: palette(highlight); }")
                box.toggled.connect(lambda on, m=model: self._toggle_vision(m, on))
                holder = QListWidgetItem()
                self.models.addItem(holder)
                holder.setSizeHint(box.sizeHint())
                self.models.setItemWidget(holder, box)
                self.vision_boxes[model] = box
            else:
                video = " · video: yes" if caps.video else ""  # (a SmolVLM2 behind smolchat serve)
                item = QListWidgetItem(f"{model_label(model)}\n    images: {'yes' if caps.vision else 'no'} "
                                       f"(from {sources['vision']}){video} · {context}")
                self.models.addItem(item)
            item.setData(Qt.ItemDataRole.UserRole, model)
        self.models.setVisible(self.models.count() > 0)
        self.tested.emit(kind, verdict)

    def _toggle_vision(self, model: str, on: bool) -> None:
        """The user's answer for a model no server describes; used when it next loads."""
        name = self.selected_name()
        if not name:
            self.verdict.setText("Save the server first to keep per-model settings.")
            return
        entry = next(s for s in remote_settings.load_servers() if s["name"] == name)
        remote_settings.upsert_server({**entry, "vision": {**(entry.get("vision") or {}), model: on}})
        self.servers_changed.emit(name, False)


def _identity(server: Server) -> tuple[str, str, str]:
    """What makes two tests the same: the server's name, URL (password and all) and API key."""
    return server.name, server.url, server.api_key
