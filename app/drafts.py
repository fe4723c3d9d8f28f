"""The unsent message outlives the window: the composer's text and attachments are kept in the
settings file (``composer/draft``, JSON) a moment after each change and when the window closes, and
come back at the next start, as a chat app keeps what was being written through a quit or a crash.

While a message is being edited, what is kept is the draft that Edit set aside (the edit itself is
a change to a sent message, ended by the quit). Attachments are kept as sent: an image's copy in
Smolchat's image store, a video's own path; one gone by the next start is left out, and said."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QTimer

from app.conversations import attached_name

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

    def changed(self) -> None:
        """The composer's text or attachments changed: save soon."""
        self._timer.start()

    def contents(self) -> dict:
        """``{"text", "files", "names"}`` of the message that is not sent yet (see the module docstring)."""
        w = self.window
        if w._editing is not None:
            draft = w._draft
            files = [draft.kept.get(p, p) for p in draft.attachments]
            names = [draft.names.get(p) or attached_name(p, w.store) for p in draft.attachments]
            return {"text": draft.text, "files": files, "names": names}
        return {"text": w.composer.toPlainText(), "files": w.kept_paths(), "names": w.attached_names()}

    def save(self) -> None:
        """Write the draft now. A settings file that cannot be written (read-only, a full disk) is said
        once in the window's banner: the message would otherwise be lost at quit without a word."""
        self._timer.stop()
        draft, qs = self.contents(), self.window.qsettings
        if draft["text"].strip() or draft["files"]:
            qs.setValue(KEY, json.dumps(draft))
        else:
            qs.remove(KEY)
        qs.sync()
        if qs.status() != QSettings.Status.NoError and not self._said:
            self._said = True
            self.window.banner.add_error(f"Your unsent message cannot be kept for the next start: the settings file "
                                         f"{qs.fileName()} cannot be written.")

    def restore(self) -> list[str]:
        """Put the kept draft in the composer; the names of attachments gone since (left out)."""
        try:
            draft = json.loads(str(self.window.qsettings.value(KEY, "") or "{}"))
            text, files, names = draft.get("text", ""), draft.get("files", []), draft.get("names", [])
            if not (isinstance(text, str) and isinstance(files, list) and isinstance(names, list)):
                raise TypeError("not a draft")  # another program's value, or a hand-edited one
            files = [str(f) for f in files]
            names = [str(n) if n else "" for n in names] + [""] * (len(files) - len(names))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return []  # unreadable: a draft is not worth a warning at start; the next save replaces it
        there = [(f, n) for f, n in zip(files, names) if Path(f).is_file()]
        gone = [n or Path(f).name for f, n in zip(files, names) if not Path(f).is_file()]
        if text or there:
            self.window._fill_composer(text, [f for f, _ in there], [n for _, n in there])
            self.window.composer.moveCursor(self.window.composer.textCursor().MoveOperation.End)
        return gone
