"""The unsent message outlives the window: the composer's text and attachments are kept in the
settings file (``composer/draft``, JSON) a moment after each change and when the window closes, and
come back at the next start, as a chat app keeps what was being written through a quit or a crash.

While a message is being edited, both are kept: the draft that Edit set aside, and the edit (under
``"edit"``, with the chat's and the message's ids); the edit resumes at the next start when that chat
opens with that message shown. The unsent messages of the other chats (each chat keeps its own) are
kept under ``"chats"``, each with its chat's id (null: a new chat's) and, for a chat left in the middle
of an edit, that edit (``"edit"``: the message's id, its text and attachments). Attachments are kept as sent: an
image's copy in Smolchat's image store, a video's own path; one gone by the next start is left out,
and said. A deleted chat's unsent message is not kept; one whose chat the database no longer holds
at the next start (damaged, emptied or replaced since) is put into a new chat, and said."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image
from PySide6.QtCore import QObject, QSettings, QTimer

from app.conversations import STORAGE_ERRORS, attached_name
from app.video_attachments import is_video_file

KEY = "composer/draft"
SAVE_DELAY_MS = 800  # after the last keystroke: a burst of typing is one write


class DraftKeeper(QObject):
    """Keeps ``window``'s unsent message (a :class:`~app.main_window.MainWindow`) in its QSettings."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self._timer = QTimer(self, singleShot=True, interval=SAVE_DELAY_MS)
        self._timer.timeout.connect(self.save)
        self._said = False  # that the settings file cannot be written
        self.lost = False  # set by restore: unsent messages of chats gone from the store are in a new chat

    def changed(self) -> None:
        """The composer's text or attachments changed: save soon."""
        self._timer.start()

    def contents(self) -> dict:
        """``{"text", "files", "names"}`` of the message that is not sent yet, and while a message is
        edited ``"edit": {"chat", "message", "text", "files", "names"}`` (see the module docstring)."""
        w = self.window
        typed = {"text": w.composer.toPlainText(), "files": w.kept_paths(), "names": w.attached_names()}
        # A deleted chat's is kept in the window (its Undo brings it back), not for the next start: a
        # kept one whose chat is gone then is taken for a chat lost with its database, and shown.
        parked = [{"chat": chat, **_kept(d, w.store), **_parked_edit(d, w.store)} for chat, d in w._chat_drafts.items()
                  if not _deleted(w.store, chat)]
        others = {"chat": w.keeper.current_id, **({"chats": parked} if parked else {})}
        if w._editing is None:
            return {**typed, **others}
        message = getattr(w.transcript.widgets()[w._editing], "message_id", None)
        return {**_kept(w._draft, w.store), **others,
                "edit": {"chat": w.keeper.current_id, "message": message, **typed}}

    def save(self) -> None:
        """Write the draft now. A settings file that cannot be written (read-only, a full disk) is said
        once in the window's banner: the message would otherwise be lost at quit without a word."""
        self._timer.stop()
        draft, qs = self.contents(), self.window.qsettings
        if draft["text"].strip() or draft["files"] or "edit" in draft or "chats" in draft:
            qs.setValue(KEY, json.dumps(draft))
        else:
            qs.remove(KEY)
        qs.sync()
        if qs.status() != QSettings.Status.NoError and not self._said:
            self._said = True
            self.window.banner.add_error(f"Your unsent message cannot be kept for the next start: the settings file "
                                         f"{qs.fileName()} cannot be written.")

    def restore(self) -> list[str]:
        """Put the kept draft in the composer, and resume a kept edit of a message of the chat open
        (:meth:`~app.main_window.MainWindow.begin_edit`); the names of attachments gone since (left
        out)."""
        try:
            draft = json.loads(str(self.window.qsettings.value(KEY, "") or "{}"))
            text, files, names = _message(draft)
            edit = draft.get("edit")
            edit = (edit.get("chat"), edit.get("message"), *_message(edit)) if isinstance(edit, dict) else None
        except (ValueError, TypeError, AttributeError, RecursionError):
            return []  # unreadable: a draft is not worth a warning at start; the next save replaces it
        w = self.window
        parked = draft.get("chats") if isinstance(draft.get("chats"), list) else []
        owner = draft.get("chat", w.keeper.current_id)  # (kept before each chat had its own: the one open)
        # Unsent messages of chats the store no longer holds (a database damaged, emptied or replaced
        # since: trial 69 F4 found them erased without a word) go to a new chat, together.
        lost = [e for e in parked if isinstance(e, dict) and _deleted(w.store, e.get("chat"))]
        if _deleted(w.store, owner):
            lost.append({"text": text, "files": files, "names": names})
            owner, text, files, names = None, "", [], []
        if edit is not None and _deleted(w.store, edit[0]):  # the text of an edit of a message gone with its chat
            lost.append({"text": edit[2], "files": [], "names": []})
            edit = None
        if lost:
            self.lost = True
            kept = [e for e in parked if isinstance(e, dict) and e.get("chat") is not None and e not in lost]
            new = [e for e in parked if isinstance(e, dict) and e.get("chat") is None]  # (a new chat's own: first)
            if owner is None:
                text, files, names = _together([{"text": text, "files": files, "names": names}, *new, *lost])
                parked = kept
            else:
                parked = [*kept, {"chat": None, **dict(zip(("text", "files", "names"), _together(new + lost)))}]
        if owner is None and w.keeper.current_id is not None and (text.strip() or files):
            w.open_conversation(None)  # written in a new chat, unsent at quit: that new chat again (trial 56)
        if owner != w.keeper.current_id:  # that chat did not open again (a new chat's, or one gone): set aside
            parked = [*parked, {"chat": owner, "text": text, "files": files, "names": names}]
            text, files, names = "", [], []
        gone = self._restore_parked(parked)
        there, missing = _present(files, names)
        gone += [n for n in missing if n not in gone]
        if text or there:
            w._fill_composer(text, [f for f, _ in there], [n for _, n in there])
            w.composer.moveCursor(w.composer.textCursor().MoveOperation.End)
        elif w.keeper.current_id in w._chat_drafts:
            w.unpark_draft(w.keeper.current_id)
        shown = [getattr(m, "message_id", None) for m in w.transcript.widgets()]
        if edit is not None and edit[0] == w.keeper.current_id:
            edit_there, edit_gone = _present(edit[3], edit[4])
            gone += [n for n in edit_gone if n not in gone]
            files, names = [f for f, _ in edit_there], [n for _, n in edit_there]
            if edit[1] is not None and edit[1] in shown:
                w.begin_edit(shown.index(edit[1]), edit[2], files, names, again=True)
                w.composer.moveCursor(w.composer.textCursor().MoveOperation.End)
            else:  # its message gone meanwhile: the text is not dropped
                w.keep_edit_text(edit[2], files, names)
        return gone

    def _restore_parked(self, parked) -> list[str]:
        """The other chats' unsent messages back in the window's keeping (a chat deleted since is left
        out); the names of their attachments gone since."""
        from app.main_window import Draft

        w, gone = self.window, []
        for entry in parked:
            try:
                chat = entry.get("chat")
                text, files, names = _message(entry)
                edit = entry.get("edit")
                edit = (edit["message"], *_message(edit)) if isinstance(edit, dict) and isinstance(
                    edit.get("message"), int) else None
            except (TypeError, AttributeError):
                continue  # one damaged entry costs only itself
            if not (chat is None or (isinstance(chat, int) and w.store.conversation(chat) is not None)):
                continue
            there, missing = _present(files, names)
            gone += [n for n in missing if n not in gone]
            if edit is not None:  # resumed when the chat opens with that message shown (unpark_draft)
                edit_there, edit_gone = _present(edit[2], edit[3])
                gone += [n for n in edit_gone if n not in gone]
                edit = (edit[0], Draft(edit[1], len(edit[1]), [f for f, _ in edit_there], {}, None,
                                       {f: n for f, n in edit_there if n}))
            if text.strip() or there or edit is not None:
                w._chat_drafts[chat] = Draft(text, len(text), [f for f, _ in there], {},
                                             None, {f: n for f, n in there if n}, edit)
        return gone


def _kept(draft, store) -> dict:
    """``{"text", "files", "names"}`` of a :class:`~app.main_window.Draft` set aside, its images as
    their copies in the image store."""
    return {"text": draft.text, "files": [draft.kept.get(p, p) for p in draft.attachments],
            "names": [draft.names.get(p) or attached_name(p, store) for p in draft.attachments]}


def _parked_edit(draft, store) -> dict:
    """``{"edit": {"message", "text", "files", "names"}}`` for a chat set aside in the middle of an
    edit (:attr:`~app.main_window.Draft.edit`), else ``{}``."""
    if draft.edit is None:
        return {}
    message, edit = draft.edit
    return {"edit": {"message": message, **_kept(edit, store)}}


def _deleted(store, chat) -> bool:
    """Whether ``chat`` (a chat id, or None for a new chat) names a chat ``store`` does not hold (a
    store that cannot be read says nothing: False)."""
    if not isinstance(chat, int) or isinstance(chat, bool):
        return False
    try:
        return store.conversation(chat) is None
    except (*STORAGE_ERRORS, OverflowError):
        return False


def _together(entries: list) -> tuple[str, list[str], list[str]]:
    """One message of several kept ones (their texts apart by a blank line, all their attachments); a
    damaged entry, or a message being edited in a chat gone (its text only), counts as it can."""
    texts, files, names = [], [], []
    for entry in entries:
        for part in (entry, entry.get("edit") if isinstance(entry.get("edit"), dict) else None):
            try:
                text, more, more_names = _message(part) if part is not None else ("", [], [])
            except (TypeError, AttributeError):
                continue
            if text.strip():
                texts.append(text)
            if part is entry:  # (an edit's attachments are the message's own, sent already)
                files += more
                names += more_names
    return "\n\n".join(texts), files, names


def _message(value: dict) -> tuple[str, list[str], list[str]]:
    """(text, files, names) of a kept message; TypeError when it is not one (another program's value,
    or a hand-edited one)."""
    text, files, names = value.get("text", ""), value.get("files", []), value.get("names", [])
    if not (isinstance(text, str) and isinstance(files, list) and isinstance(names, list)):
        raise TypeError("not a draft")
    files = [str(f) for f in files]
    return text, files, [str(n) if n else "" for n in names] + [""] * (len(files) - len(names))


def _present(files: list[str], names: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The (file, name) pairs still on disk as an image or a video, and the names of the others (gone,
    or no image: a settings file edited by hand named /etc/passwd, shown as a blank image chip)."""
    usable = [Path(f).is_file() and _attachable(f) for f in files]
    there = [(f, n) for f, n, ok in zip(files, names, usable) if ok]
    return there, [n or Path(f).name for f, n, ok in zip(files, names, usable) if not ok]


def _attachable(path: str) -> bool:
    """A video by its name, or a file Pillow takes for an image by its header (not decoded: a start
    with a draft of ten photos would wait for ten decodes; Send reads them whole)."""
    if is_video_file(path):
        return True
    try:
        with Image.open(path):
            return True
    except Image.DecompressionBombError:
        return True  # an image, only a very large one (the window shows such photos)
    except (OSError, SyntaxError, ValueError):
        return False
