"""The main window's conversations (the sidebar: opening, renaming, deleting chats) and their settings."""

from __future__ import annotations

import datetime as dt
import time
import traceback
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app import safe_files
from app.conversations import STORAGE_ERRORS, deleted_words, display_title, storage_problem
from app.formatting import model_summary
from app.settings import chat_values, load_settings
from app.window_attachments import system_share
from engine.api.errors import SYSTEM_PROMPT_TOO_LONG

# Settings a conversation keeps for itself (the rest are global).
CHAT_KEYS = ("system_prompt", "overrides", "seed", "image_detail")


def regenerate_note(params: dict) -> str:
    """Why Regenerate would give the very same answer with these generation ``params`` ("" when it
    would not): at temperature 0 the model always takes its likeliest word, and a fixed seed repeats
    the same draw."""
    if float(params.get("temperature") or 0.0) <= 0.0:
        return ("Temperature is 0, so a regenerated answer comes out the same: raise Temperature in "
                "Settings (Sampling) for a different one.")
    if params.get("seed") is not None:
        return ("The seed is fixed, so a regenerated answer comes out the same: clear Seed in "
                "Settings (Sampling) for a different one.")
    return ""


class ChatsMixin:
    """Methods of :class:`~app.main_window.MainWindow` for ``self.sidebar`` and ``self.keeper``."""

    def chat_settings(self) -> dict:
        return {key: getattr(self.settings, key) for key in CHAT_KEYS}

    def refresh_sidebar(self) -> None:
        self.sidebar.set_conversations(self.store.conversations(self.sidebar.search.text()), self.keeper.current_id)

    @Slot(int)
    def open_conversation(self, conversation_id: int | None) -> None:
        """Show chat ``conversation_id`` (None: a new chat). One that cannot be shown (stored data no check
        foresaw, a database error while reading it) leaves the chat open before it open (a new chat when
        there was none, or it was that chat), says so, and stays in the list: trial 60's chat read as
        empty, and the next question went into the chat open before."""
        leaving = self.keeper.current_id
        try:
            self._open_conversation(conversation_id)
            return
        except Exception as exc:  # noqa: BLE001 - any failure: the window stays usable
            traceback.print_exc()
            error = exc
        try:
            conv = self.store.conversation(conversation_id) if conversation_id is not None else None
            title = display_title(conv.title) if conv is not None else ""
        except STORAGE_ERRORS:
            title = ""
        fallback = leaving if leaving != conversation_id else None
        try:
            self._open_conversation(fallback)
        except Exception:  # noqa: BLE001 - the chat before cannot be shown either (its draft stays set aside)
            traceback.print_exc()
            fallback = None
            self.keeper.open(None)
        if conversation_id != leaving and fallback == leaving:  # its unsent message, set aside as the other began to open
            self.unpark_draft(leaving)
        self.refresh_sidebar()
        where = "a new chat is open instead" if fallback is None else "the chat open before stays open"
        self.storage_banner.add_error(f"The chat “{title or 'New chat'}” could not be shown ({type(error).__name__}: "
                                      f"{str(error)[:200]}); {where}, and that chat is still in the list.")

    def _open_conversation(self, conversation_id: int | None) -> None:
        if self._busy:
            self.sidebar.select(self.keeper.current_id)
            if conversation_id != self.keeper.current_id:
                self._say_busy("open another chat")
            return
        leaving = self.keeper.current_id
        edit = self.edit_in_progress() if conversation_id != leaving else None
        self._cancel_edit()
        self.banner.dismiss()  # what it said was about the chat being left (the storage banner stays)
        if conversation_id != leaving:
            self.park_draft(leaving, edit)
        saved = self.keeper.open(conversation_id)
        self.settings = load_settings(self.qsettings)  # global defaults, then what this chat used
        title = display_title(self.store.conversation(conversation_id).title) if saved else ""
        where = f"Chat “{title or 'New chat'}”"
        values, problems = chat_values(saved, where)
        for key in CHAT_KEYS:
            if key in values:
                setattr(self.settings, key, values[key])
        if conversation_id != leaving:  # at this chat's image detail
            self.unpark_draft(conversation_id)
        # The chat named once, not before each value (trial 79 P5: six times in a row for a hand-made export).
        lines = [f"{where}: " + " · ".join(p.removeprefix(f"{where}: ") for p in problems)
                 + "; the defaults apply instead."] if problems else []
        lines += self.keeper.unreadable_lines()
        context = self.context_size() if self.controller.ready else 0
        overhead = self.prompt_overhead() if context else 0
        # Said when the chat opens, not first at Send (trial 79 P5: an imported chat's 200,000-character
        # system prompt). At half the context a short message still fits (a warning); past it none does.
        full = bool(context) and overhead >= context
        roomy = not context or overhead < context // 2
        room = "" if roomy else system_share(overhead, context) + (
            f": no message fits beside them{SYSTEM_PROMPT_TOO_LONG}." if full else
            ": little room is left for the chat (older messages are left out sooner); shorten it in Settings.")
        if lines:  # what this chat could not use, said when it is opened
            self.banner.show_error("\n".join(lines + ([room] if room else [])))
        elif full:
            self.banner.show_error(room)
        elif self.keeper.unanswered() is not None:
            self._offer_resend()
        elif room:
            self.banner.show_info(room)
        self.update_regenerate_note()  # this chat's sampling settings
        if self.controller.ready:  # the last answer's "error" / stats belong to the chat just left
            self.stats_label.setText(f"{model_summary(self.model_info)} · ready")
        self.controller.conversation_opened()
        if conversation_id is not None and conversation_id in self.sidebar.ids():
            self.sidebar.select(conversation_id)  # (refilling a list of thousands took 0.1 s a switch)
        else:
            self.refresh_sidebar()
        if conversation_id is not None and conversation_id not in self.sidebar.ids() and self.sidebar.search.text():
            self.sidebar.search.clear()  # a chat opened by Undo or a link, hidden by the search: list them all
        self.update_find(show_newest=True)  # opened from the search's list: where it holds the text

    def _say_busy(self, what: str) -> None:
        """A chat action refused while an answer is written: said, not silent (trial 55: clicks on the chat
        list and its Delete did nothing, and a server gone quiet looked like a frozen window)."""
        self.banner.show_info(f"An answer is being written in this chat: stop it (Esc) to {what}.")

    def step_conversation(self, step: int) -> None:
        """Open the chat ``step`` places down (+1) or up (-1) the sidebar's list (Ctrl+PgDown/PgUp,
        Ctrl+Tab); not while an answer runs, as a click on the list is not."""
        target = self.sidebar.step(self.keeper.current_id, step)
        if target is not None and target != self.keeper.current_id:
            self.open_conversation(target)  # (refused while an answer runs, and said)

    def watch_the_date(self) -> None:
        """At each local midnight (and once more after a sleep past it: timers wait), the list's headings
        and the messages' times are said again: "Today" and "16:30" were yesterday's."""
        now = dt.datetime.now()
        midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time())
        timer = getattr(self, "_day_timer", None)
        if timer is None:
            # Held, so that shutdown stops it: a closed window's store is closed, and midnight would
            # otherwise read it.
            timer = self._day_timer = QTimer(self)
            timer.setSingleShot(True)
            timer.timeout.connect(self._new_day)
        timer.start(int((midnight - now).total_seconds() * 1000) + 2000)

    def _new_day(self) -> None:
        if self.controller.closed:
            return  # the window was shut (its store is closed)
        self.refresh_sidebar()
        self.transcript.refresh_times()
        self.watch_the_date()

    def search_typed(self) -> None:
        """The chat search's text changed: list the chats holding it and mark it in the open chat. When
        the last search took long (a database of hundreds of MB, a word beyond A-Z that SQLite cannot
        match by index: ~0.7 s), after a pause in typing instead of at every key."""
        timer = getattr(self, "_search_timer", None)
        if timer is None:
            timer = self._search_timer = QTimer(self)
            timer.setSingleShot(True)
            timer.timeout.connect(self._search_now)
        if getattr(self, "_search_slow", False):
            timer.start(300)
        else:
            self._search_now()

    def search_if_due(self) -> None:
        """Run the search put off to a pause in typing now, if one is (before the list or the hits are
        used: Enter straight after the last key opened a chat of the previous words' list, one that
        did not hold the new words, trial 74 F3)."""
        timer = getattr(self, "_search_timer", None)
        if timer is not None and timer.isActive():
            timer.stop()
            self._search_now()

    def _search_now(self) -> None:
        started = time.perf_counter()
        self.refresh_sidebar()
        self.update_find()
        self._search_slow = time.perf_counter() - started > 0.1

    def update_find(self, show_newest: bool = False) -> None:
        """Mark the chat search's text in the open chat and count its hits (the row under the search,
        F3); ``show_newest``: scroll to the newest of them (a chat opened from the search's list)."""
        hits = self.transcript.set_query(self.sidebar.search.text().strip())
        if show_newest and hits:
            self.transcript.show_hit(*hits[-1])
        self._show_find_count(hits)

    def _show_find_count(self, hits: list[tuple[int, int]]) -> None:
        """The row under the search ("2 of 5 in this chat") and F3's actions, for the open chat's ``hits``;
        with none shown but some in a version not shown, the row says so and F3 shows that version."""
        current = self.transcript.current_hit()
        elsewhere = [] if hits else self._other_version_hits()
        if elsewhere:
            self.sidebar.find_row.show_elsewhere(len(elsewhere))
        else:
            self.sidebar.find_row.show_count(len(hits) - hits.index(current) if current in hits else None, len(hits),
                                             current in hits and self.transcript.hit_not_shown())
        for name in ("find_older", "find_newer"):
            self.actions[name].setEnabled(bool(hits or elsewhere))

    def _other_version_hits(self) -> list[int]:
        words = self.sidebar.search.text().strip()
        if not words or self.keeper.current_id is None:
            return []
        return self.store.other_version_hits(self.keeper.current_id, words)

    def step_find(self, step: int) -> None:
        """Show the open chat's next hit of the search's text: ``step`` +1 the next older (F3), -1 the
        next newer (Shift+F3), within a message too; round from the oldest to the newest. The first
        step shows the newest. Where the shown versions hold none, the newest version holding the words
        is shown (trial 53: the chat was listed, and nothing in it was found)."""
        self.search_if_due()
        hits = self.transcript.set_query(self.sidebar.search.text().strip())
        if not hits:
            elsewhere = self._other_version_hits()
            if not elsewhere:
                # The open chat holds none: Enter opens the newest chat listed as holding the words
                # (trial 60: Enter did nothing), its newest hit shown (open_conversation).
                listed = self.sidebar.ids()
                if listed and self.keeper.current_id not in listed:
                    self.open_conversation(listed[0])
                return
            if self.controller.busy:  # the versions shown stay while an answer runs
                self.banner.show_info("The words are in another version of a message: F3 shows it after this answer.")
                return
            shown: list[int | None] = []
            if not self._storage("show that version", lambda: shown.append(self.controller.show_branch_of(elsewhere[-1]))) \
                    or shown[0] is None:
                return
            if self.controller.ready:
                self.stats_label.setText(f"{model_summary(self.model_info)} · ready")  # not the other branch's stats
            hits = self.transcript.set_query(self.sidebar.search.text().strip())
            if not hits:  # (the stored text held the words, the shown one not: Markdown's marks)
                self._show_find_count(hits)
                return
        current = self.transcript.current_hit()
        at = (hits.index(current) - step) % len(hits) if current in hits else len(hits) - 1
        self.transcript.show_hit(*hits[at])
        self._show_find_count(hits)  # (the hits just counted: not counted again)

    def focus_search(self) -> None:
        """Ctrl+F: the cursor in the sidebar's search field, its text selected to type over."""
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    def update_regenerate_note(self) -> None:
        """Regenerate's tooltip says when it would give the same answer (the chat's settings, the model's defaults)."""
        self.transcript.set_regenerate_note(regenerate_note(self.current_params()))

    def regenerate_answer(self, index: int) -> None:
        """A new version of answer ``index``. If it comes out the same as the one it replaces because the
        settings make answers repeat (temperature 0, a fixed seed), the banner says so and how to change it."""
        widgets = self.transcript.widgets()
        before = widgets[index].text if 0 <= index < len(widgets) else None
        params = self.current_params()
        self.dismiss_error()
        self.controller.regenerate(index, self.chat_settings(), params)
        if not self._busy:
            return
        self._answer_started()
        if not getattr(self, "_regenerate_check_connected", False):
            self._regenerate_check_connected = True
            self.answer_finished.connect(self._after_regenerate)
        self._regenerated = (before, regenerate_note(params))

    def _after_regenerate(self, result: dict) -> None:
        (before, note), self._regenerated = getattr(self, "_regenerated", (None, "")), (None, "")
        answer = self.transcript.last_assistant()
        if note and result.get("finish_reason") == "stop" and answer is not None and answer.text == before:
            self.banner.show_info(f"The same answer again. {note}")

    def _offer_resend(self, note: str = "") -> None:
        """The open chat ends with a question that was never answered: say so, with one-click Resend."""
        found = self.keeper.unanswered()
        why = ("Your last question was never answered: Smolchat closed before the answer started."
               if found and found[1] is not None else "Your last question has no answer.")
        self.banner.show_info(note or f"{why} It is not part of the model's context until it is answered.",
                              "Resend", self.resend_unanswered)

    def resend_unanswered(self) -> None:
        """Ask the open chat's unanswered last question again (its text and images, as stored)."""
        found = self.keeper.unanswered()
        if found is None or self._busy:
            return
        if not self.controller.ready:
            self._offer_resend("The model is not loaded yet: Resend when it is ready.")
            return
        question, answer = found
        if answer is not None:  # an empty interrupted answer: answer the question again in its place
            self._on_message_action("regenerate", answer)
            return
        stored = self.keeper.messages()[question]  # no answer row: send the question again, replacing it
        self._editing = question
        if self.controller.send(stored.text, list(stored.images), self.chat_settings(), self.current_params(),
                                question, list(stored.attached_names)):
            self._editing = None
            self._answer_started()
        else:
            self._editing = None

    @Slot()
    def new_chat(self) -> None:
        if not self._busy:
            self.open_conversation(None)
            self.composer.setFocus()

    @Slot(int, str)
    def rename_conversation(self, conversation_id: int, title: str) -> None:
        from app.import_chat import clean_title

        # As a title taken from the first message or an import: one line, no bidi controls, and no
        # control characters (a NUL showed as a box, went raw into Markdown exports, and was dropped by
        # an import, so the copy's title differed: trial 69 F11).
        title = clean_title(title)
        if title:
            self._storage("rename the chat", self.store.rename_conversation, conversation_id, title)
        self.refresh_sidebar()

    def delete_open_chat(self) -> None:
        """Chat ▸ Delete chat: the open chat, as its row's Delete in the list (undone from the banner)."""
        if self.keeper.current_id is None:
            if not self.banner.offers_undo():  # a second press keeps the first delete's Undo (trial 63)
                self.banner.show_info("This chat has no message yet: there is nothing to delete.")
            return
        self.delete_conversation(self.keeper.current_id)

    @Slot(int)
    def delete_conversation(self, conversation_id: int) -> None:
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        if self._busy and conversation_id == self.keeper.current_id:
            self._say_busy("delete this chat")
            return
        listed = self.sidebar.ids()
        from_list = self.sidebar.list.hasFocus()
        if not self._storage("delete the chat", self.store.delete_conversation, conversation_id):
            return
        if conversation_id == self.keeper.current_id:
            # Deleting with the Delete key in the list goes on to the chat that takes its row, so that
            # the next Delete deletes that one (one chat after another); otherwise a new chat opens.
            at = listed.index(conversation_id) if conversation_id in listed else -1
            rest = [c for c in listed if c != conversation_id]
            self.open_conversation(rest[min(at, len(rest) - 1)] if from_list and rest and at >= 0 else None)
        self.sidebar.remove(conversation_id)
        title = display_title(conv.title) or "New chat"
        self._deleted_chats.append((conversation_id, title))
        self._delete_order[("chat", conversation_id)] = next(self._deletes)
        self.banner.show_info(f"Deleted “{title}”.", "Undo", lambda: self._undo_delete_chat(conversation_id))

    def undo_delete(self) -> None:
        """Ctrl+Z outside a text field: the banner's Undo where it shows one, else the newest delete of
        this session whose Undo another message took the banner from (trial 75 N7: an import's "Imported
        …" replaced "Deleted … Undo", and the chat was out of reach): a chat's, or a message's (trial 76
        P2: an older chat came back instead, and the message could no longer be)."""
        if self.banner.undo():
            return
        # (a message of a chat deleted since cannot come back on its own: its chat's Undo brings it)
        self._deleted_messages[:] = [d for d in self._deleted_messages
                                     if self.store.conversation(d.conversation_id) is not None]
        order = self._delete_order
        chat = order.get(("chat", self._deleted_chats[-1][0]), -1) if self._deleted_chats else -2
        message = order.get(("message", id(self._deleted_messages[-1])), -1) if self._deleted_messages else -2
        if message > chat:
            self._undo_delete(self._deleted_messages[-1])
        elif self._deleted_chats:
            self._undo_delete_chat(self._deleted_chats[-1][0])

    def _undo_delete_chat(self, conversation_id: int) -> None:
        """Undo of a chat's delete: back in the list, and opened unless an answer is being written in the chat
        shown (trial 56: the open was refused then, and the chat, restored, stayed out of the list). The chat
        deleted before it, if any this session, is offered next: Undo (Ctrl+Z) again brings back one after
        another, as they were deleted (trial 69 F11: only the last of several could be)."""
        if not self._storage("restore the chat", self.store.undelete_conversation, conversation_id):
            return
        deleted = self._deleted_chats
        restored = next((title for chat, title in deleted if chat == conversation_id), "the chat")
        deleted[:] = [(chat, title) for chat, title in deleted if chat != conversation_id]
        self.refresh_sidebar()
        if not self._busy:
            self.open_conversation(conversation_id)
        elif not deleted:  # (not opened while an answer is written: said, trial 76 P3)
            self.banner.show_info(f"Restored “{restored}”.")
        if deleted:
            before, title = deleted[-1]
            self.banner.show_info(f"Restored “{restored}”. Deleted before it: “{title}”.", "Undo",
                                  lambda: self._undo_delete_chat(before))

    def delete_message(self, index: int) -> None:
        """Delete message ``index`` of the open chat (see ConversationKeeper.delete_message), with Undo."""
        try:
            deleted = self.keeper.delete_message(index)
        except STORAGE_ERRORS as exc:
            self.banner.show_error(f"Could not delete the message: {storage_problem(exc, self.store.folder)}.")
            return
        if deleted is not None:
            self._deleted_messages.append(deleted)
            self._delete_order[("message", id(deleted))] = next(self._deletes)
            self.banner.show_info(deleted_words(deleted), "Undo", lambda: self._undo_delete(deleted))

    def _undo_delete(self, deleted) -> None:
        if self._busy:  # the transcript is streaming an answer: it is redrawn only when that ends
            self.banner.show_info("Undo the delete when the answer has finished.", "Undo",
                                  lambda: self._undo_delete(deleted))
            return
        self._cancel_edit()  # the messages move back under the one edited
        if not self._storage("restore the message", self.keeper.restore_messages, deleted):
            return
        if deleted in self._deleted_messages:
            self._deleted_messages.remove(deleted)
        if deleted.conversation_id != self.keeper.current_id:
            self.open_conversation(deleted.conversation_id)
        self.controller.conversation_opened()  # the engine holds the branch shown now
        self.refresh_sidebar()
        self.update_find()  # (the restored messages may hold the search's words)
        if all(m.id != deleted.message_id for m in self.store.messages(deleted.conversation_id)):
            # Back in a version not shown (another version was written in its place, or an earlier answer
            # regenerated since): said, with the way to it (trial 78 R7: Ctrl+Z seemed to do nothing).
            self.banner.show_info("Restored the message, in a version of the chat not shown now.", "Show",
                                  lambda: self._show_version_of(deleted.message_id))
        elif self._deleted_chats:  # the chats deleted before stay in reach of Undo (trial 70 N6)
            before, title = self._deleted_chats[-1]
            self.banner.show_info(f"Restored the message. Deleted before it: “{title}”.", "Undo",
                                  lambda: self._undo_delete_chat(before))

    def _show_version_of(self, message_id: int) -> None:
        """Show the branch holding ``message_id`` (a restored message's), unless an answer is running."""
        if self.controller.busy:
            self.banner.show_info("Show the restored message when the answer has finished.", "Show",
                                  lambda: self._show_version_of(message_id))
            return
        self._storage("show that version", self.controller.show_branch_of, message_id)

    def may_close(self) -> bool:
        """Whether the window may close now: yes, unless an answer's last save failed (a full disk) and
        fails again now. Then a question offers to save the answer as a file, quit without it, or stay
        (trial 51: the quit went ahead, and the answer's end with it); it closes the window itself."""
        if getattr(self, "_closing_anyway", False) or self.keeper.save_unsaved():
            return True
        asking = self.findChild(QMessageBox, "unsavedAnswerBox")
        if asking is not None and asking.isVisible():  # asked already (the close button pressed again)
            asking.raise_()
            return False
        box = QMessageBox(QMessageBox.Icon.Warning, "The last answer is not saved",
                          "The last answer could not be saved: the disk is still full. Free some space and quit "
                          "again, save the answer as a file elsewhere, or quit without it (the chat keeps what was "
                          "saved before).", parent=self)
        box.setObjectName("unsavedAnswerBox")
        save = box.addButton("Save as a file…", QMessageBox.ButtonRole.AcceptRole)
        drop = box.addButton("Quit without it", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)

        def chosen() -> None:
            box.setObjectName("")  # answered
            box.deleteLater()
            if box.clickedButton() is save and not self._save_answer_as_file():
                return
            if box.clickedButton() in (save, drop):
                self._closing_anyway = True
                self.close()
        box.finished.connect(lambda _result: chosen())
        box.open()
        return False

    def _save_answer_as_file(self) -> bool:
        """Ask where, and write the unsaved answer there as text; False when cancelled or not written."""
        path, _ = QFileDialog.getSaveFileName(self, "Save the answer as", str(Path.home() / "answer.md"),
                                              "Markdown (*.md);;Text (*.txt)")
        if not path:
            return False
        from app.export import data_folder_holding

        own = data_folder_holding(path, self.store.folder)
        if own is not None:  # (as an export there: it could replace the database)
            self.banner.show_error(f"Could not save the answer to {path}: it is inside Smolchat's data folder "
                                   f"({own}), which holds its database and settings: choose another folder.")
            return False
        try:
            safe_files.write_text(path, self.keeper.unsaved_text() or "")
        except OSError as exc:
            self.banner.show_error(f"Could not save the answer to {path}: {storage_problem(exc)}.")
            return False
        return True

    def _storage(self, what: str, write, *args) -> bool:
        """Run one store write; a failure shows in the banner. True when it worked."""
        try:
            write(*args)
        except STORAGE_ERRORS as exc:
            self.banner.show_error(f"Could not {what}: {storage_problem(exc, self.store.folder)}.")
            return False
        return True

    # -- settings (global, and what each chat keeps) -------------------------------------------------
    def open_settings_dialog(self):
        from app.settings_dialog import SettingsDialog

        dialog = getattr(self, "settings_dialog", None)
        if dialog is not None and dialog.isVisible():  # a second Ctrl+, brings it forward, not another one
            dialog.raise_()
            dialog.activateWindow()
            return dialog
        dialog = self.settings_dialog = SettingsDialog(self.settings, self.model_info.get("defaults", {}), self,
                                                       self.model_info.get("devices") or ())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # each closed one was kept until the window went

        def forget(_=None, closed=dialog) -> None:
            if self.settings_dialog is closed:
                self.settings_dialog = None

        dialog.destroyed.connect(forget)
        dialog.applied.connect(self._apply_settings)
        dialog.engines.servers_changed.connect(self._servers_changed)
        dialog.show()
        return dialog

    def _apply_settings(self, settings) -> None:
        from app.settings import ENGINE_KEYS, save_settings
        from app.theme import apply_theme

        engine_changed = any(getattr(settings, k) != getattr(self.settings, k) for k in ENGINE_KEYS)
        theme_changed = settings.theme != self.settings.theme
        if engine_changed and self.controller.ready and self.engine_in_use is None:
            # What the model in use was loaded with: back to these if the reload fails (trial 60: a
            # device this computer lacks stayed saved, and every later start had no model).
            self.engine_in_use = {k: getattr(self.settings, k) for k in ENGINE_KEYS}
        self.settings = settings
        save_settings(settings, self.qsettings)
        if self.keeper.current_id is not None:
            self._storage("save this chat's settings", lambda: self.store.update_conversation(
                self.keeper.current_id, settings=self.chat_settings()))
        if theme_changed:  # else $SMOLCHAT_THEME's theme, applied at start, stays (trial 45)
            apply_theme(settings.theme)
        self.update_regenerate_note()
        self.reset_message_detail()
        self._count_pending_tokens()
        if engine_changed:
            self.controller.reload_when_idle(settings.device_arg(), settings.dtype_arg(), settings.load_options())

    def revert_engine_settings(self, message: str) -> str:
        """A reload for new engine settings failed and the model before still answers: its engine
        settings are saved again (a failing choice kept would fail every later start), an open
        Settings dialog shows them and why. Returns the banner's second line; "" when the failed load
        was not such a reload."""
        from app.settings import ENGINE_KEYS, describe_engine, save_settings

        before, self.engine_in_use = self.engine_in_use, None
        if before is None or self.controller.asked != self.controller.model_info.get("path"):
            return ""
        tried = {k: getattr(self.settings, k) for k in ENGINE_KEYS if getattr(self.settings, k) != before[k]}
        if not tried:
            return ""
        for key, value in before.items():
            setattr(self.settings, key, value)
        save_settings(self.settings, self.qsettings)
        line = (f"Still using {self.model_in_use()} with the engine settings it was loaded with; Settings are back to those "
                f"({describe_engine(before, tried)}).")
        dialog = getattr(self, "settings_dialog", None)
        if dialog is not None and dialog.isVisible():
            dialog.engine_settings_failed(self.settings, f"The model could not load with "
                                                         f"{describe_engine(tried, tried)}: {message}")
        return line
