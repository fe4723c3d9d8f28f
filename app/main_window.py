"""Smolchat's main window: builds the widgets and wires them to the :class:`~app.controller.ChatController`.

The chat logic (send, stop, regenerate, edit, model switches, what is stored when) is the controller's;
attachments are :mod:`app.window_attachments`', the sidebar's chats :mod:`app.window_chats`'; the engine
runs behind a :class:`~engine.api.ChatBackend`.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent, QIcon, QTextCursor
from PySide6.QtWidgets import QApplication, QMainWindow

from app.a11y import announce
from app.backends import backend_from_env, ignored_backend
from app.backends.remote import model_label, parse_spec
from app.backends.switch import EngineSwitch, make_remote_backend
from app.chat_view import EMPTY_TEXT, EMPTY_TEXT_ONLY, LOCAL_LINE
from app.controller import RELOAD_NOTE, ChatController
from app.conversations import ConversationKeeper, open_store
from app.drafts import DraftKeeper
from app.formatting import context_full, footer_text, model_summary, progress_summary, stats_summary
from app.local_server import install as install_local_server
from app.menus import build_menus
from app.model_picker import shown_name
from app.paths import resource
from app.remote_models import RemoteModels
from app.remote_settings import move_passwords_out_of_the_file, unreadable_servers
from app.settings import (
    add_known_model,
    engine_hint,
    known_models,
    last_model,
    load_settings,
    open_settings,
    set_aside_unreadable_settings,
    set_last_model,
    theme_from_environment,
    unreadable_models,
    weights_from_environment,
)
from app.wait_estimate import record_answer
from app.window_attachments import AttachmentsMixin
from app.window_chats import ChatsMixin
from app.window_layout import (
    SEND_TIP,
    STOP_ACTION,
    STOP_LOAD_ACTION,
    STOP_LOAD_TIP,
    STOP_TIP,
    build_ui,
    fit_small_window,
    restore_geometry,
    save_geometry,
    show_attach_kinds,
)
from app.zoom import ZoomMixin, saved_zoom
from engine.api import ChatBackend

log = logging.getLogger(__name__)

#: Seconds without a word from a server mid-answer before the status bar says it has gone quiet, and
#: how often that is looked at (ms).
QUIET_S = 20
QUIET_CHECK_MS = 5000
#: What a screen reader is told when an answer ends (app.a11y.announce), by finish reason.
ANSWER_ENDS = {"stop": "Answer finished", "cancelled": "Answer stopped",
               "length": "Answer stopped at the token limit", "interrupted": "Answer interrupted"}

NO_MODEL_NOTE = ("No model is loaded: your message stays here. Choose a model at the top right (or Model ▸ "
                 "Manage models…, Ctrl+M) to send it.")
LOADING_NOTE = "The model is still loading: your message stays here, to send once the status bar says ready."
READY_NOTE = "The model is ready: press Enter to send your message."
STOPPED_NOTE = "Stopped loading"
NO_MODEL_TEXT = "No model loaded.\nChoose or download a model with the button at the top right (or Model ▸ Manage models…)."


@dataclass
class Draft:
    """The composer's contents set aside while a message is edited."""

    text: str = ""
    cursor: int = 0
    attachments: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # attached file -> its copy in the image store
    detail: str | None = None  # the status bar's image detail for this message
    names: dict[str, str] = field(default_factory=dict)  # stored copy put back -> the name it was attached as
    # A chat left in the middle of an edit: (the id of the message edited, the edit as it was), resumed when
    # that chat opens again (trial 56: switching chats dropped the edit without a word).
    edit: tuple[int, Draft] | None = None


class MainWindow(ChatsMixin, AttachmentsMixin, ZoomMixin, QMainWindow):
    """The chat window. ``model_path`` starts loading at once; without it the last used model loads,
    and with none the model manager opens. ``backend`` replaces the engine (tests: a FakeBackend);
    by default :func:`app.backends.backend_from_env` picks one."""

    answer_finished = Signal(dict)  # the answer's result, once the window has shown it

    def __init__(self, model_path: str | None = None, backend: ChatBackend | None = None,
                 device: str | None = None, dtype: str | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Smolchat")
        self.setWindowIcon(QIcon(str(resource("smolchat.svg"))))
        self.setAcceptDrops(True)
        self.resize(1080, 720)
        set_aside = set_aside_unreadable_settings()  # before QSettings reads (and later rewrites) it
        self.qsettings = open_settings()
        self.settings = load_settings(self.qsettings)
        move_passwords_out_of_the_file(self.qsettings)  # an earlier Smolchat wrote URL passwords into the file
        self.engine_in_use: dict | None = None  # engine settings of the model in use while a reload for new ones runs
        self.settings_dialog = None
        self.model_manager = None
        self._editing: int | None = None  # the transcript index of the message being edited
        self._draft = Draft()  # what the composer held when Edit was clicked; back after the edit
        # The unsent message of each chat not shown (None: a new chat's), back in the composer when it
        # opens again (trial 55: one composer for all chats sent a question taken back after a failure
        # to the next chat opened, joined to what was typed there).
        self._chat_drafts: dict[int | None, Draft] = {}
        self._deleted_chats: list[tuple[int, str]] = []  # (id, title) deleted this session, oldest first
        # Message deletes not undone yet, and when each delete was (chats' and messages' in one count):
        # Ctrl+Z without a banner's Undo undoes the newest of either (window_chats.undo_delete).
        self._deleted_messages: list = []  # DeletedMessages, oldest first
        self._delete_order: dict[tuple[str, int], int] = {}
        self._deletes = itertools.count()  # (the numbers _delete_order holds)
        self._sent: tuple[int | None, Draft] | None = None  # (index edited, composer) of the question answered
        self._token_counts: dict[tuple, int] = {}  # (path, detail) of images, (path, "video", fps, frames)
        self._send_when_counted: str | None = None  # a text whose Send waits for its token count
        self._kept: dict[str, str] = {}  # attached file -> its copy in the image store (AttachmentsMixin)
        self._names: dict[str, str] = {}  # stored copy put back by Edit or Resend -> the name it was attached as
        build_ui(self)
        restore_geometry(self)
        ignored = ""
        if backend is None:  # before the banner, which says if SMOLCHAT_BACKEND was ignored
            backend = backend_from_env()
            ignored = ignored_backend[0]
        self.store, self.storage_banner = open_store(self.banner, [set_aside, *self.settings.problems,
                                                                  unreadable_models(self.qsettings),
                                                                  unreadable_servers(self.qsettings),
                                                                  theme_from_environment()[1],
                                                                  weights_from_environment()[1], ignored])
        self.keeper = ConversationKeeper(self.store, self.transcript, self.qsettings)
        self.keeper.storage_error.connect(self.banner.show_error)
        self.keeper.storage_recovered.connect(self.banner.show_success)
        self.actions = build_menus(self)
        self.set_zoom(saved_zoom(self.qsettings))
        self.transcript.zoom_requested.connect(self.zoom_text)
        self.composer.zoom_requested.connect(self.zoom_text)
        self.local_server = install_local_server(self)
        self.remote_models = RemoteModels(self)
        self.model_picker.remote_models = self.remote_models
        # One backend for the controller: the local engine, or a server's model once one is chosen.
        self.engines = EngineSwitch(backend, make_remote_backend)
        self.controller = ChatController(self.engines, self.keeper)
        self.controller.image_detail = self.settings.image_detail  # what a reopened chat's images are read at
        self.reset_message_detail()
        self._connect_controller()
        self._open_last_chat()
        self.watch_the_date()
        self.drafts = DraftKeeper(self)
        gone = self.drafts.restore()  # what was being written when Smolchat last closed
        if gone:  # in the lasting banner: a model that fails to load at start would replace it in the other
            self.storage_banner.add_info(f"Your unsent message is back without {', '.join(gone)}: "
                                         f"{'that file is' if len(gone) == 1 else 'those files are'} gone "
                                         "or unreadable.")
        if self.drafts.lost:
            self.storage_banner.add_info("Unsent messages of chats this database no longer holds are back in a new "
                                         "chat, so that nothing typed is lost.")
        self.composer.textChanged.connect(self.drafts.changed)
        self.attachments.changed.connect(self.drafts.changed)
        self._remove_unused_media()
        self._update_actions()
        self.remote_models.refresh()
        path = model_path or last_model(self.qsettings)
        if path:
            self.load_model(path, device, dtype)
        else:
            self._show_no_model("No model loaded — choose or download one to start.")
            QTimer.singleShot(0, self.open_model_manager)

    def _remove_unused_media(self) -> None:
        """At start, before anything can be deleted or sent: the stored files no message names any more
        (:meth:`Store.remove_unused_media`), those of the unsent message and of an edit kept."""
        parked = [p for d in self._chat_drafts.values() for p in (*d.attachments, *d.kept.values())]
        keep = [*self.attachments.paths(), *self._draft.attachments, *self._kept, *self._kept.values(), *parked]
        try:
            removed, freed = self.store.remove_unused_media(keep)
        except (OSError, sqlite3.Error) as exc:  # a folder or database that cannot be read: nothing is lost
            log.warning("could not look for stored files no message uses: %s", exc)
            return
        if removed:
            log.info("removed %d stored file(s) no message uses (%.1f MB)", removed, freed / 1e6)

    def _connect_controller(self) -> None:
        self._last_heard, self._said_quiet = time.monotonic(), False
        self._quiet = QTimer(self)  # watches a server that goes quiet mid-answer (_check_quiet)
        self._quiet.setInterval(QUIET_CHECK_MS)
        self._quiet.timeout.connect(self._check_quiet)
        c = self.controller
        c.model_loading.connect(self._on_model_loading)
        c.model_loaded.connect(self._on_model_loaded)
        c.model_load_failed.connect(self._on_model_load_failed)
        c.model_load_stopped.connect(self._on_model_load_stopped)
        c.token.connect(self.transcript.append_token)
        c.token.connect(self._heard)
        c.progress.connect(self._heard)
        c.progress.connect(self.transcript.show_progress)
        c.progress.connect(self._on_progress)
        c.finished.connect(self._on_finished)
        c.busy_changed.connect(self._update_actions)
        c.notice.connect(self.banner.show_info)
        c.failed.connect(self.banner.show_error)

    # -- state the tests and tools read ----------------------------------------------------------
    @property
    def model_info(self) -> dict:
        return self.controller.model_info

    @property
    def _busy(self) -> bool:
        return self.controller.busy

    @property
    def generation_params(self) -> dict:
        """Extra GenerationParams fields on top of the settings (tests, screenshots)."""
        return self.controller.extra_params

    @generation_params.setter
    def generation_params(self, value: dict) -> None:
        self.controller.extra_params = dict(value)

    def current_params(self) -> dict:
        params = self.settings.generation_params(self.model_info.get("defaults"))
        params.update(self.controller.extra_params)
        return params

    # -- sending -------------------------------------------------------------------------------
    @Slot()
    def send_message(self) -> None:
        """Send the composer's text and pending images, if the model is ready and idle."""
        text, images = self.composer.toPlainText().strip(), self.attachments.paths()
        if not self.send_button.isEnabled():
            if self.controller.loading and (text or images):  # Enter did nothing, and said nothing
                self.banner.show_info(LOADING_NOTE)
            elif not self.controller.ready and not self._busy and (text or images):
                self.banner.add_info(NO_MODEL_NOTE)  # under the load's error, if one shows
            return
        if images and self.refuse_attachments():  # attached for another model, or a video this one cannot take
            return
        if self.refuse_too_long(text):
            return
        self.banner.dismiss()
        params = self.current_params()
        if images:
            params["image_detail"] = self.message_detail()  # the status bar's choice for this message
        sent = self._take_draft()
        if self.controller.send(text, self.kept_paths(), self.chat_settings(), params, self._editing,
                                self.attached_names()):
            self._sent = (self._editing, sent)  # back in the composer if it fails (_take_back)
            edited, self._editing = self._editing is not None, None
            self.banner.end_lasting()
            self.composer.clear()
            self.attachments.clear()
            self._kept.clear()
            self._names.clear()
            self.reset_message_detail()
            if edited:  # the draft that Edit set aside comes back, as it was
                self._restore_draft()
            self._count_pending_tokens()
            self._answer_started()

    def _open_last_chat(self) -> None:
        """Reopen the chat open when Smolchat last closed. One that cannot be shown (stored data no check
        foresaw) must not stop Smolchat from starting on every later start: a new chat opens instead,
        the banner says so, and the chat stays in the list (:meth:`open_conversation`)."""
        self.open_conversation(self.keeper.last_opened())

    def _answer_started(self) -> None:
        self.refresh_sidebar()
        self.stats_label.setText(f"{model_summary(self.model_info)} · generating…")
        self._heard()
        self._quiet.start()
        ahead = self.controller.backend.answers_ahead()
        widgets = self.transcript.widgets()
        if ahead and widgets and hasattr(widgets[-1], "waiting"):
            # The engine answers the local server's clients too, one answer at a time (trial 53: seven
            # seconds of "Waiting for the first word…" behind an API client's answer said nothing of it).
            widgets[-1].waiting.set_queued(ahead)

    def _heard(self, *_event) -> None:
        """A word or a progress event of the answer came: the server is not quiet (any more)."""
        self._last_heard = time.monotonic()
        if self._said_quiet:
            self._said_quiet = False
            self.stats_label.setText(f"{model_summary(self.model_info)} · generating…")

    def _check_quiet(self) -> None:
        """A server that stopped sending mid-answer showed "generating…" until the stall timeout, 2 minutes
        later (trial 52): after QUIET_S without a word the status bar says so, and how to stop."""
        if not self._busy:
            self._quiet.stop()
            return
        quiet, info = time.monotonic() - self._last_heard, self.model_info
        if str(info.get("backend", "")).startswith("remote:") and quiet >= QUIET_S:
            server = info.get("device") or "the server"
            self.stats_label.setText(f"{model_summary(info)} · {server} has sent nothing for {int(quiet)} s · "
                                     "Esc stops the answer")
            self._said_quiet = True

    @Slot()
    def stop(self) -> None:
        """Stop the current answer (within ~200 ms, also before its first token). Esc in the chat search
        holding text clears it (also while an answer runs: the next Esc stops it); with no answer
        running, Esc cancels an edit."""
        if self.sidebar.search.hasFocus() and self.sidebar.search.text():
            self.sidebar.search.clear()  # every chat listed again
        elif self._busy:
            self.controller.stop()
        elif self.controller.loading:  # a large model picked by mistake: no waiting for it to load
            self.controller.cancel_load()
        else:
            self._cancel_edit()

    @Slot(str, int)
    def _on_message_action(self, action: str, index: int) -> None:
        if self._busy and action != "copy":
            return
        if action not in ("copy", "edit"):  # a delete, regenerate or switch moves or hides the message edited
            self._cancel_edit()
        if action == "delete":
            self.delete_message(index)
        elif action in ("previous_version", "next_version"):
            switched: list[bool] = []
            step = -1 if action == "previous_version" else 1
            offset = self.transcript.screen_offset(index)
            if self._storage("switch versions", lambda: switched.append(self.controller.switch_version(index, step))):
                if switched[0]:
                    self.transcript.hold_at(index, offset)  # the switched message stays where it was clicked
                    shown = self.transcript.message_widget(index)
                    announce(self.transcript, f"{shown.actions_row.versions.label.accessibleName()} shown")
                if self.controller.ready:
                    self.stats_label.setText(f"{model_summary(self.model_info)} · ready")  # not the other branch's stats
        elif action == "regenerate":
            self.regenerate_answer(index)
        elif action == "continue":
            self.dismiss_error()
            if self.controller.continue_answer(index, self.chat_settings(), self.current_params()):
                self._answer_started()
        elif action == "edit":
            message = self.transcript.widgets()[index]
            self.begin_edit(index, message.text, message.images, self.keeper.messages()[index].attached_names)

    def dismiss_error(self) -> None:
        """An answer is asked for again (Continue, Regenerate): the error of the last try goes (trial 60:
        "Connection refused" stayed over the answer that then came), a note with a button stays."""
        if self.banner.tone() == "error" and not self.banner.isHidden():
            self.banner.dismiss()

    def begin_edit(self, index: int, text: str, files: list[str], names: list[str], again: bool = False) -> None:
        """Edit the transcript's message ``index`` in the composer, holding ``text`` and ``files``
        (attached as ``names``); what the composer held is set aside until the edit ends. ``again``:
        an edit kept through a quit (:mod:`app.drafts`), said as such."""
        self.transcript.message_widget(index)  # built now if it was not yet (an edit kept through a quit)
        if self._editing is None:  # editing another message instead keeps the draft set aside first
            self._draft = self._take_draft()
        self._fill_composer(text, files, names)
        self._editing = index
        back = " puts back what you were writing" if self._draft.text.strip() or self._draft.attachments else \
            " ends the edit"
        what = "Still editing a message, as when Smolchat closed" if again else "Editing a message"
        self.banner.show_lasting(f"{what}: sending adds a new version of it; ‹ › switches back. "
                                 f"Cancel edit (Esc){back}.", "Cancel edit", self._cancel_edit)
        self.composer.moveCursor(QTextCursor.MoveOperation.End)  # to go on writing it (it was at its start)
        self.composer.setFocus()
        # The edit's banner appears above the transcript and pushes it down: keep the message in view.
        QTimer.singleShot(0, self.transcript, lambda: self._editing == index
                          and self.transcript.show_message(index, self.banner.height() + 24))

    def _cancel_edit(self) -> None:
        """End the edit unsent (Cancel edit, Esc, or another change to the chat): the composer holds what
        it held before Edit again, text and attachments."""
        if self._editing is not None:
            self._editing = None
            self.banner.end_lasting()
            self.banner.dismiss()
            self._restore_draft()

    def _take_draft(self) -> Draft:
        """What the composer holds (text, cursor, attachments, the message's image detail)."""
        return Draft(self.composer.toPlainText(), self.composer.textCursor().position(), self.attachments.paths(),
                     dict(self._kept), self.detail_combo.currentData(), dict(self._names))

    def _fill_composer(self, text: str, images: list[str], names: list[str] | None = None) -> None:
        """Put ``text`` and ``images`` (attached as ``names``, see :meth:`reattach`) in the composer."""
        self.composer.setPlainText(text)
        self.attachments.clear()
        self._kept.clear()
        self._names.clear()
        self.reattach(images, names)

    def park_draft(self, chat: int | None, edit: tuple[int, Draft] | None = None) -> None:
        """Set the composer's message aside as ``chat``'s unsent one (a chat is being left), with the edit
        in progress there (``edit``: :attr:`Draft.edit`)."""
        draft = self._take_draft()
        draft.edit = edit
        if draft.text.strip() or draft.attachments or edit is not None:
            self._chat_drafts[chat] = draft
        else:
            self._chat_drafts.pop(chat, None)

    def unpark_draft(self, chat: int | None) -> None:
        """Put ``chat``'s unsent message in the composer (empty when it has none), and resume the edit it
        was left in, if its message is still shown: the chat opened."""
        self.reset_message_detail()
        draft = self._chat_drafts.pop(chat, None) or Draft()
        self._restore_draft(draft)
        self.composer.moveCursor(QTextCursor.MoveOperation.End)
        if draft.edit is not None:
            message_id, edit = draft.edit
            shown = [getattr(m, "message_id", None) for m in self.transcript.widgets()]
            files, names = [edit.kept.get(p, p) for p in edit.attachments], [edit.names.get(p, "") for p in edit.attachments]
            if message_id in shown:
                self.begin_edit(shown.index(message_id), edit.text, files, names)
            else:
                self.keep_edit_text(edit.text, files, names)

    def keep_edit_text(self, text: str, files: list[str], names: list[str]) -> None:
        """An edit left in progress whose message this chat no longer shows (deleted meanwhile, another
        version shown, a database restored from a backup) cannot be resumed: its text and attachments go
        into the message box, under what is there, and the banner says so (trial 70 N4: it was dropped
        without a word)."""
        if not text.strip() and not files:
            return
        typed = self.composer.toPlainText()
        self.composer.setPlainText(f"{typed}\n\n{text}" if typed.strip() and text.strip() else typed or text)
        self.reattach(files, names)
        self.composer.moveCursor(QTextCursor.MoveOperation.End)
        self.banner.add_info("The message you were editing is not in this chat any more: your edit is in the message "
                             "box, to send as a new message.")

    def edit_in_progress(self) -> tuple[int, Draft] | None:
        """The edit being written, as :attr:`Draft.edit` keeps it; None when no message is edited."""
        if self._editing is None:
            return None
        message_id = getattr(self.transcript.widgets()[self._editing], "message_id", None)
        return (message_id, self._take_draft()) if message_id is not None else None

    def _restore_draft(self, draft: Draft | None = None) -> None:
        """Put ``draft`` (by default the one set aside by Edit, after the edit is cancelled or sent) back
        into the composer."""
        if draft is None:
            draft, self._draft = self._draft, Draft()
        self._fill_composer(draft.text, draft.attachments, [draft.names.get(p) for p in draft.attachments])
        self._kept.update(draft.kept)
        cursor = self.composer.textCursor()
        cursor.setPosition(min(draft.cursor, len(draft.text)))
        self.composer.setTextCursor(cursor)
        index = self.detail_combo.findData(draft.detail)
        if draft.detail is not None and index >= 0:
            self.detail_combo.setCurrentIndex(index)
        self._count_pending_tokens()

    def _update_actions(self) -> None:
        busy, has_input = self._busy, bool(self.composer.toPlainText().strip() or self.attachments.paths())
        loading = self.controller.loading and not busy
        writable = not self.store.read_only  # a read-only store: the banner says why; nothing to send into
        self.send_button.setEnabled(self.controller.ready and not busy and has_input and writable)
        self.send_button.setToolTip(SEND_TIP if writable else f"Sending is off: {self.store.read_only}")
        # Stop takes Send's place while answering, and while a model loads (it stops the load).
        self.stop_button.setEnabled(busy or loading)
        self.stop_button.setVisible(busy or loading)
        self.stop_button.setToolTip(STOP_LOAD_TIP if loading else STOP_TIP)
        self.stop_button.setAccessibleName(self.stop_button.toolTip())
        self.actions["stop"].setEnabled(busy or loading)
        self.actions["stop"].setText(STOP_LOAD_ACTION if loading else STOP_ACTION)
        self.send_button.setVisible(not (busy or loading))
        self.new_chat_button.setEnabled(not busy)
        # On while a model loads: picking another one stops that load and loads this one.
        self._set_picker_enabled(not busy)
        self.transcript.set_changes_enabled(not busy)
        self.update_regenerate_note()  # the loaded model's defaults may set the temperature

    def _set_picker_enabled(self, enabled: bool) -> None:
        """The model picker is off while a model loads, and Qt moves the focus off a widget turned off
        (trial 51: a model chosen from the keyboard left the focus on the Settings button). It comes
        back to the picker when it is on again, unless the user took the focus elsewhere meanwhile."""
        # The window's focus widget, not the application's: just after a file dialog the window is
        # not active again yet on X11 (activation is asynchronous), and has no application focus.
        picker = self.model_picker
        if not enabled and picker.isEnabled() and self.focusWidget() is picker:
            picker.setEnabled(False)
            self._focus_moved_to = self.focusWidget()  # where Qt put it
            return
        picker.setEnabled(enabled)
        if not enabled:
            return
        moved_to, self._focus_moved_to = getattr(self, "_focus_moved_to", None), None
        if moved_to is not None and self.focusWidget() is moved_to:
            picker.setFocus(Qt.FocusReason.OtherFocusReason)

    # -- models and settings -----------------------------------------------------------------------
    @Slot(str)
    def load_model(self, path: str, device: str | None = None, dtype: str | None = None) -> None:
        """Load ``path`` (a model folder or Hub repo id) in the backend."""
        self.controller.load(path, device or self.settings.device_arg(), dtype or self.settings.dtype_arg(),
                             self.settings.load_options())

    def model_in_use(self) -> str:
        """The model in use as the picker names it ("NAME · SERVER" for a server's: trial 61), for the
        banners that say it still answers."""
        info = self.controller.model_info
        return shown_name(info.get("model_name") or "the model before", str(info.get("path") or ""))

    def open_model(self, model: str) -> None:
        """``smolchat --model X`` while this window is open: load X as a pick in the model menu would,
        unless it is the model in use or loading; not under a running answer (said)."""
        if model in (self.controller.model_info.get("path"), self.controller.asked if self.controller.loading else None):
            return
        if self.controller.busy:
            remote = parse_spec(model)  # named as the picker and the manager name it, not by its path
            what = f"{model_label(remote[1])} on {remote[0]}" if remote else Path(model).name or model
            self._not_loaded_note = (f"An answer is being written: {what} was not loaded. Stop the answer (Esc), "
                                     "then pick the model again.")
            self.banner.show_info(self._not_loaded_note)
            return
        self.load_model(model)

    def open_model_manager(self):
        from app.model_manager import ModelManager

        first = self.model_manager is None
        if first:
            self.model_manager = ModelManager(self)
            # As --model: not under a running answer (said; the manager's Use closed it without a word,
            # and nothing loaded: trial 79 P1), and nothing to do for the model in use.
            self.model_manager.use_requested.connect(self.open_model)
        self.model_manager.show()
        if first:  # over the window; at start (no model) the window may not be placed yet: the screen's middle
            placed = self.isVisible() and not self.pos().isNull()
            middle = self.frameGeometry().center() if placed else self.screen().availableGeometry().center()
            frame = self.model_manager.frameGeometry()
            frame.moveCenter(middle)
            self.model_manager.move(frame.topLeft())
        self.model_manager.raise_()
        return self.model_manager

    def open_local_server(self):
        from app.local_server import open_dialog

        return open_dialog(self)

    def _servers_changed(self, name: str, reached: bool = True) -> None:
        """A server was added, edited or removed: new model lists; the model in use on it loads again
        (now, or when the answer ends), so a new key or address applies to the next question, not only
        after another model was picked. ``reached``: its address, key or password may have changed (or
        it is gone): a fresh backend, and the one in use is not gone back to if that load fails; not for
        a "can see images" answer alone, which a failed reload leaves the model in use over."""
        if reached:
            self.engines.forget_server(name)
            self.controller.server_changed(name)
        self.remote_models.refresh()
        if self.model_info.get("backend") == f"remote:{name}":
            s = self.settings
            self.controller.reload_when_idle(s.device_arg(), s.dtype_arg(), s.load_options())

    # -- controller signals ------------------------------------------------------------------------
    @Slot(str)
    def _on_model_loading(self, path: str) -> None:
        self.model_picker.set_loading(path)
        if self.banner.message().startswith(STOPPED_NOTE):  # about a load before this one (trial 58)
            self.banner.dismiss()
        remote = parse_spec(path)
        if remote is not None:  # said as the user chose it, not as the internal "remote:SERVER::MODEL"
            where = f"{model_label(remote[1])} on {remote[0]}"
            self.transcript.set_placeholder(f"Connecting…\n{where}\n\nEsc stops.")
            self.stats_label.setText(f"Connecting to {where}… · Esc stops")
            return
        self.transcript.set_placeholder(f"Loading model…\n{path}\n\nEsc stops the load.")
        self.stats_label.setText(f"Loading model from {path}… · Esc stops")

    @Slot(dict)
    def _on_model_loaded(self, info: dict) -> None:
        self.engine_in_use = None
        self._token_counts.clear()
        self.text_counter.forget()  # another tokenizer
        path = info.get("path", "")
        set_last_model(path, self.qsettings)
        remembered = [m["path"] for m in known_models(self.qsettings)]
        if path and path not in remembered and not str(info.get("backend", "")).startswith("remote:") \
                and Path(path).exists():  # a folder or GGUF opened by --model or the picker: one of "Your models"
            add_known_model(path, info.get("model_name", ""), qs=self.qsettings)
        if self.model_manager is not None:
            self.model_manager.refresh()  # which model is in use
        self.model_picker.set_model(info.get("model_name", ""), info.get("path", ""))
        vision = info.get("capabilities", {}).get("vision", True)
        video = info.get("capabilities", {}).get("video", False)
        placeholder = EMPTY_TEXT if vision else EMPTY_TEXT_ONLY
        if str(info.get("backend", "")).startswith("remote:"):  # not "Everything runs on this computer"
            placeholder = placeholder.replace(LOCAL_LINE, f"Answers come from the server {info.get('device')}.")
        self.transcript.set_placeholder(placeholder)
        self.composer.setPlaceholderText("Ask about an image or a video…" if video else
                                         "Ask about an image…" if vision else "Ask a question…")
        self.composer.viewport().update()  # an empty editor does not repaint its new placeholder by itself
        show_attach_kinds(self, video, vision)
        shown = self.banner.message() or ""
        # What was said about the model before, or its load, is not true now: images refused by a text
        # model while this one loaded, a load that failed, Enter pressed during the load.
        if (vision and "cannot read images" in shown) or shown.startswith(("Could not load the model: ",
                                                                           LOADING_NOTE, NO_MODEL_NOTE, RELOAD_NOTE)):
            self.banner.dismiss()
        waiting = shown.startswith(LOADING_NOTE) and bool(self.composer.toPlainText().strip())
        self.stats_label.setText(f"{model_summary(info)} · ready")
        self.controller.conversation_opened()
        self.match_animations()
        self._count_pending_tokens()
        self.attach_files_after_load()
        refusal = self.images_refusal()
        if refusal and any(chip.kind == "image" for chip in self.attachments.chips()):
            # Photos attached before this model loaded (trial 54: said only at Send).
            self.banner.show_error(f"The attached photos cannot be sent: {refusal} Remove them, or load one that does.")
        if str(info.get("backend", "")).startswith("remote:") and not info.get("capabilities", {}).get("max_context"):
            self.banner.show_info(f"{info.get('device')} does not say how many tokens {info.get('model_name')} "
                                  "takes: Smolchat assumes no limit and the server decides what fits.")
        if waiting:  # Enter was pressed during the load: the message waits for it (trial 55: with the note
            # gone, or replaced by the line above, it sat there unsent without a word)
            self.banner.add_info(READY_NOTE)

    @Slot(str)
    def _on_model_load_failed(self, message: str) -> None:
        if self.controller.ready:  # the model loaded before is still there: the chat goes on with it
            reverted = self.revert_engine_settings(message)
            self._on_model_loaded(self.controller.model_info)
            self.banner.show_error(f"Could not load the model: {message}\n" + (
                reverted or f"Still using {self.model_in_use()}."))
            return
        self.engine_in_use = None
        self._show_no_model()
        self.banner.show_error(f"Could not load the model: {message}{self._dropped_note()}{engine_hint(self.settings)}")
        self.attach_files_after_load()
        self._count_pending_tokens()  # no longer "counting…": no model will

    @Slot(str)
    def _on_model_load_stopped(self, path: str) -> None:
        remote = parse_spec(path)
        what = f"{model_label(remote[1])} on {remote[0]}" if remote else Path(path).name or path
        if remote is None and Path(path).exists():  # in the model menu, to pick again (trial 58: --model)
            self.model_picker.remember(path)
        if self.controller.ready:  # the model before is still loaded: the chat goes on with it
            self._on_model_loaded(self.controller.model_info)
            before = self.model_in_use()
            if path == self.controller.model_info.get("path"):  # a reload for new engine settings (trial 59)
                self.banner.show_info(f"{STOPPED_NOTE} {what} again: it still runs on the engine settings it was "
                                      "loaded with. Pick it again to use the new ones.")
                return
            outdated = (" It runs on the engine settings it was loaded with: pick it again to use the new ones."
                        if self.controller.before_outdated else "")
            self.banner.show_info(f"{STOPPED_NOTE} {what}. Still using {before}.{outdated}")
            return
        self._show_no_model()
        self.banner.show_info(f"{STOPPED_NOTE} {what}: no model is loaded.{self._dropped_note()}")
        self.attach_files_after_load()
        self._count_pending_tokens()  # no longer "counting…": no model will

    def _dropped_note(self) -> str:
        """For a load that failed or stopped after the server of the model in use was edited: why that
        model is not in use any more ("" otherwise)."""
        dropped = self.controller.dropped
        if not dropped:
            return ""
        name = shown_name(dropped.get("model_name") or "the model before", str(dropped.get("path") or ""))
        return (f"\n{name} is not used any more: its server's settings changed (its earlier address, key "
                "or password are not sent again). Fix them in Settings ▸ Engines, then choose the model again.")

    def _show_no_model(self, status: str = "No model loaded") -> None:
        """No model in use (none yet, a first load failed or stopped): nothing says what it could read.
        (Trial 57: after a text-only model's failed reload the box still asked about an image.)"""
        self.model_picker.set_none()
        self.transcript.set_placeholder(NO_MODEL_TEXT)  # not "Drop a photo here…": nothing could read it
        self.composer.setPlaceholderText("Load a model to ask a question…")
        self.composer.viewport().update()
        self.stats_label.setText(status)

    @Slot(object)
    def _on_progress(self, event) -> None:
        done = event.stage == "prefill" and event.done >= event.total  # the prompt is read: words come next
        self.stats_label.setText(f"{model_summary(self.model_info)} · {'generating…' if done else progress_summary(event)}")

    @Slot(dict)
    def _on_finished(self, result: dict) -> None:
        record_answer(self.qsettings, self.model_info, result)  # this machine's speed, for the next estimate
        note, self._not_loaded_note = getattr(self, "_not_loaded_note", ""), ""
        if note:  # "An answer is being written": no longer (trial 80 P4); the model can be picked now
            self.banner.withdraw([note])
        # Ready for the next question, unless the user went on elsewhere meanwhile: to a message's
        # buttons (‹ › and Regenerate from the keyboard), the chat list or its search.
        reading = self._reading()
        answer = self.transcript.last_assistant()
        if answer is not None:
            answer.can_continue = not context_full(result)
        self.transcript.end_answer(result.get("finish_reason", "error"), footer_text(result))
        never_started = result.get("finish_reason") == "error" and answer is not None and not answer.text
        if never_started and self._sent is not None:
            self._take_back(*self._sent)
        elif never_started and getattr(self, "_regenerated", (None, ""))[0] is not None:
            # A new version that never started (a server down) is not added: the answer it was to replace
            # stays shown (trial 55: an empty "(failed)" 2 / 2 hid it).
            self._storage("take back the failed version", self.keeper.withdraw_failed_version)
        self._sent = None
        summary = " · ".join(p for p in (model_summary(self.model_info), stats_summary(result)) if p)
        reason = result.get("finish_reason")
        self.stats_label.setText(summary if reason == "stop" else f"{summary} · {reason}")
        announce(self.transcript, ANSWER_ENDS.get(reason, ""))  # (an error is said by its banner)
        if not reading:
            self.composer.setFocus()
        elif not self._reading() and answer in self.transcript.widgets():  # the streamed text had it
            self.transcript.focus_message(self.transcript.widgets().index(answer), "regenerateMessage")
        self.answer_finished.emit(result)

    def _reading(self) -> bool:
        """Whether the focus is in the chat (a message's text or buttons) or the sidebar."""
        focused = QApplication.focusWidget()
        return focused is not None and (focused is self.transcript or self.transcript.isAncestorOf(focused)
                                        or self.sidebar.isAncestorOf(focused))

    def _take_back(self, edited: int | None, sent: Draft) -> None:
        """A message whose answer failed before its first word is taken back from the chat as not sent
        (sending it again must not store it twice), and the composer gets it back as it was at Send
        (``sent``: text as typed, each file as attached), for the user to fix and send again (the
        composer's draft outlives a quit). Anything typed meanwhile follows it. An edit (``edited``:
        the index of the message edited) goes back to editing that message, its other version shown
        again. A regenerate stays, failed: its question is in the chat, with Regenerate beside it."""
        typed = self._take_draft()
        if not self._storage("take back the message", self.keeper.withdraw_last):
            return
        self.refresh_sidebar()
        if edited is not None:
            self._draft = typed  # the draft set aside for the edit, as after Edit
            typed = Draft()
        self._restore_draft(sent)
        if typed.text.strip() or typed.attachments:
            self.composer.moveCursor(QTextCursor.MoveOperation.End)
            self.composer.insertPlainText(("\n\n" if sent.text.strip() else "") + typed.text)
            self.reattach(typed.attachments, [typed.names.get(p) for p in typed.attachments])
            self._kept.update(typed.kept)
        if edited is not None:
            self._editing = edited
            # Lasting, as Edit's own notice: once the error is closed, "Cancel edit" is back (trial 54).
            self.banner.add_lasting("Still editing that message: change it and send again, or press Esc to cancel "
                                    "the edit.", "Cancel edit", self._cancel_edit)

    # -- shutdown ------------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Cancel any answer (kept, marked interrupted), stop the engine thread within ~1 s, close the
        store (idempotent). False when the engine thread is still finishing a kernel."""
        if self.controller.closed:
            return self.controller.shutdown()  # what the first call found
        self.drafts.save()  # at once: the timer would not fire again
        self._day_timer.stop()  # midnight would read the closed store
        self.local_server.stop()  # before the engine thread it serves from
        stopped = self.controller.shutdown()
        if self.model_manager is not None:
            self.model_manager.shutdown()
        self.store.close()
        return stopped

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        fit_small_window(self, event.oldSize())

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.controller.closed and not self.may_close():
            event.ignore()  # the question about an answer not saved decides (ChatsMixin.may_close)
            return
        if not self.controller.closed:
            save_geometry(self)
        self.shutdown()
        super().closeEvent(event)
