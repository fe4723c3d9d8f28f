"""Keeps the transcript and the store in step: which conversation is open, what it holds on disk,
and the answer being streamed, saved as it grows."""

from __future__ import annotations

import errno
import sqlite3
import time
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QTimer, Signal

from app.banner import Banner
from app.chat_view import ChatView, StoredMessage
from app.formatting import context_full, footer_text
from app.paths import (
    DATABASE_NAME,
    data_dir,
    data_dir_problem,
    data_dir_read_only,
    pasted_images_dir,
    use_temporary_data_dir,
)
from app.salvage import SalvageError, looks_damaged, salvage_database
from app.store import SCHEMA_VERSION, DeletedMessages, Message, NewerSchemaError, Store
from app.video_attachments import VIDEO_SUFFIXES

FLUSH_INTERVAL_S = 0.25
FLUSH_TOKENS = 32
#: How often a finished answer whose last save failed is written again (ms).
UNSAVED_RETRY_MS = 10_000
TITLE_LENGTH = 48
STORAGE_ERRORS = (OSError, sqlite3.Error)
#: The name kept for an image pasted or dropped as data (its file is named by its content hash).
PASTED_NAME = "pasted image"


def storage_problem(exc: BaseException, folder: str | Path | None = None) -> str:
    """Why a write failed, in words: the disk being full said plainly, naming ``folder`` (where the
    write went, e.g. the data folder) so that the user knows which disk needs space, and ``folder``
    missing said as that (Python's own words name the temporary file being written in it)."""
    if getattr(exc, "errno", None) == errno.ENOENT and folder is not None and not Path(folder).is_dir():
        return f"the folder {folder} does not exist"
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, sqlite3.OperationalError) and detail in ("database is locked", "database table is locked"):
        return ("another program holds Smolchat's database locked (a backup or sync tool, or a database "
                "viewer?): let it finish or close it, then try again")
    full = getattr(exc, "errno", None) == errno.ENOSPC or "disk is full" in detail or "No space left" in detail
    if not full:
        if isinstance(exc, OSError) and exc.strerror:  # "[Errno 21] Is a directory: 'x'" without the number
            return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
        return detail
    where = f"; free some space on the disk that holds {folder}" if folder is not None else ""
    return f"the disk is full ({detail}){where}"


def unsaved_answer(saved_chars: int, last: bool) -> str:
    """What is kept of an answer whose save failed, the store holding its first ``saved_chars``
    characters; ``last``: that was its final save (tried again later: ``ConversationKeeper.save_unsaved``)."""
    if last:
        kept = f"its first {saved_chars:,} characters" if saved_chars else "the question"
        return (f"Kept so far: {kept}. The answer stays on screen, and Smolchat saves it as soon as the disk "
                f"takes it (it tries every {UNSAVED_RETRY_MS // 1000} s and before your next question; a quit asks first).")
    kept = f"its first {saved_chars:,} characters, saved before that" if saved_chars else "nothing of it yet"
    return f"Kept: {kept}. The rest stays on screen, and Smolchat tries again to save it until the answer ends."


#: Unicode bidi embeddings, overrides and isolates (LRE RLE PDF LRO RLO, LRI RLI FSI PDI): one of them in
#: a title turns the rest of the line around where it shows ("9991# edirrevo live" in the sidebar).
BIDI_CONTROLS = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def display_title(title: str) -> str:
    """``title`` as the sidebar and banners show it: without bidi controls (:data:`BIDI_CONTROLS`), so
    it reads in its own characters' direction and cannot turn the text around it."""
    return title.translate(BIDI_CONTROLS)


def title_from(text: str, images: list[str]) -> str:
    """A new chat's title from its first message: one line, at most TITLE_LENGTH characters, no bidi controls."""
    line = " ".join(display_title(text).split())
    if not line:
        if images and all(Path(p).suffix.lower() in VIDEO_SUFFIXES for p in images):  # a question-less video
            return "Video" if len(images) == 1 else f"{len(images)} videos"
        return "Image" if len(images) == 1 else f"{len(images)} images" if images else "New chat"
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def attached_name(source: str | Path, store: Store) -> str:
    """The name to keep with a message for a file attached from ``source`` (exports name it so): its base
    name; ``pasted image.png`` for a pasted image (:func:`app.paths.pasted_images_dir` holds it under
    its content hash); "" (unknown) for a copy already in the image store, e.g. a message's image
    attached again by Edit after a restart: a hash names nothing the user chose."""
    path = Path(source)
    folder = path.parent.resolve()
    if folder == store.images_dir.resolve():
        return ""
    if folder == pasted_images_dir().resolve():
        return PASTED_NAME + path.suffix
    return path.name


def deleted_words(deleted: DeletedMessages) -> str:
    """What a message deletion removed, in words (the Undo banner's line)."""
    what = "your message" if deleted.role == "user" else "the answer"
    others = len(deleted.rows) - 1
    if deleted.role == "user" and others == deleted.answers:
        return f"Deleted {what}" + ("" if not others else " and its answer" if others == 1 else
                                    f" and its {others} answers (versions)") + "."
    if not others:
        return f"Deleted {what}."
    return (f"Deleted this version of {what} and the {others} message{'s' if others > 1 else ''} that followed it "
            "in its branch.")


def engine_history(messages: list[Message], model: str = "") -> list[dict]:
    """The turns the engine should see: each user message followed by a non-empty answer.

    (A question whose answer failed with no text never reached the engine's conversation.)
    An answer's token ids go along only when ``model`` (a path or repo id) generated it: another
    model's tokenizer would read them as other words.
    """
    history: list[dict] = []
    for i, message in enumerate(messages):
        if message.role != "user":
            continue
        answer = messages[i + 1] if i + 1 < len(messages) else None
        if answer is not None and answer.role == "assistant" and answer.text.strip():
            question = message.as_history()
            question["images"] = [p for p in question["images"] if Path(p).is_file()]  # (said by missing_files_said)
            reply = answer.as_history()
            if answer.stats.get("model") != model:
                reply.pop("token_ids", None)
            history += [question, reply]
    return history


def missing_files_said(messages: list[Message], folder: str | Path) -> str:
    """The banner's line for the photos and videos of ``messages`` gone from ``folder`` (the image
    store), by the names they were attached as; "" when none is."""
    gone = [(path, (names[i] if i < len(names) and names[i] else "") or Path(path).name)
            for m in messages for names in [m.attached_names or []] for i, path in enumerate(m.images)
            if not Path(path).is_file()]
    if not gone:
        return ""
    videos = sum(1 for path, _ in gone if Path(path).suffix.lower() in VIDEO_SUFFIXES)
    kind = "video" if videos == len(gone) else "photo" if not videos else "photo or video"
    kinds = {"video": "videos", "photo": "photos", "photo or video": "photos and videos"}[kind]
    which = f"1 {kind} of this chat is" if len(gone) == 1 else f"{len(gone)} {kinds} of this chat are"
    names = ", ".join(name for _, name in gone[:3]) + (", …" if len(gone) > 3 else "")
    return f"{which} missing from {folder} ({names}): the model sees those messages without them."


def answer_footer(message: Message) -> str:
    if message.status == "interrupted" and not message.text.strip():
        return "unanswered — Smolchat closed before this answer started"
    if message.status == "interrupted":
        return "interrupted — Smolchat closed (or could not save) before this answer was complete"
    return footer_text({"finish_reason": _reason(message.status), **message.stats})


def _reason(status: str) -> str:
    return "stop" if status == "done" else status


def connect_store() -> tuple[Store, str]:
    """The store in the data folder and what the user must know about it ("" when all is well).

    A database of a newer Smolchat, one locked by another program for more than ``store.OPEN_TIMEOUT_S`` (2 s), or
    one in a folder that cannot be written, opens read-only (never a silent new database, never a write
    to it). A damaged database (SQLite says "malformed", or "not a database" of a file that starts as one)
    is salvaged (:func:`app.salvage.salvage_database`): the damaged file is kept as a copy beside it and
    replaced by what could be read of it, and the message says how much that was. A folder or file that
    cannot be used at all (not a database, a file in the way, a damaged one that could not be salvaged)
    is left as it is and a temporary folder serves this run. Never raises for what is on disk."""
    folder = data_dir()
    read_only = data_dir_read_only()
    try:
        if read_only:
            return Store(folder, read_only=f"the data folder cannot be written ({read_only})"), (
                f"Your conversations in {folder} are shown read-only: the folder cannot be written "
                f"({read_only}). Sending is off; make the folder writable, or start Smolchat with "
                "SMOLCHAT_DATA_DIR set to another folder.")
        emptied = _empty_database(folder)
        store = Store(folder)
        return store, " ".join(line for line in (data_dir_problem(), emptied) if line)
    except NewerSchemaError as exc:
        why = (f"they were saved by a newer version of Smolchat (database schema {exc.version}; this one reads "
               f"up to {SCHEMA_VERSION})")
        try:
            return Store(folder, read_only=why), (
                f"Your conversations in {folder} are shown read-only: {why}. Nothing is changed on disk; "
                "update Smolchat to continue them.")
        except STORAGE_ERRORS as exc:
            reason = f"{why}, and it could not be opened read-only: {exc}"
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            reason = _database_problem(folder, exc)
        else:  # another program (another Smolchat, a backup tool) is writing to it: read what is there
            why = "another program holds the database locked"
            try:
                return Store(folder, read_only=why), (
                    f"Your conversations in {folder} are shown read-only: {why} ({exc}). Sending is off; "
                    "close the other program and restart Smolchat.")
            except STORAGE_ERRORS as again:
                reason = _database_problem(folder, again)
    except STORAGE_ERRORS as exc:
        if isinstance(exc, sqlite3.Error):
            salvaged = _salvage(folder, exc)
            if salvaged is not None:
                return salvaged
            reason = _database_problem(folder, exc)
        else:  # e.g. "images" is a file: name what is in the way
            reason = getattr(exc, "strerror", None) or str(exc)
            if getattr(exc, "filename", None):
                reason = f"{exc.filename}: {reason}"
    store = Store(use_temporary_data_dir(reason))
    problem = data_dir_problem()
    if reason.startswith(str(folder / DATABASE_NAME)):  # the database file itself: what to do about it
        problem += (f" To keep conversations again, close Smolchat and move {DATABASE_NAME} aside (or put a "
                    "backup in its place): the next start makes a new one.")
    return store, problem


def _empty_database(folder: Path) -> str:
    """What to say of a database file of 0 bytes (and no -wal holding its pages), which SQLite opens as
    a new, empty database without a word (trial 69 F2): "" for any other."""
    database = folder / DATABASE_NAME
    wal = Path(f"{database}-wal")
    try:
        if not database.is_file() or database.stat().st_size or (wal.is_file() and wal.stat().st_size):
            return ""
    except OSError:
        return ""
    return (f"{database} was an empty file (0 bytes), holding no chats: Smolchat made a new database in it. If you "
            "had chats, they were lost before this start (a copy or a sync that did not finish?); to get them "
            "back, close Smolchat and put a backup in its place.")


def _salvage(folder: Path, exc: sqlite3.Error) -> tuple[Store, str] | None:
    """The store opened on what could be salvaged of the damaged database in ``folder`` that raised
    ``exc``, and the message saying so; None (nothing changed on disk) when ``exc`` is not about damage or
    the salvage failed, for the caller to go on as it did before salvages existed."""
    if not looks_damaged(exc, folder / DATABASE_NAME):
        return None
    try:
        report = salvage_database(folder, DATABASE_NAME)
    except (SalvageError, *STORAGE_ERRORS):
        return None  # it removed what it made: the damaged file stands as it was
    try:
        store = Store(folder)
    except STORAGE_ERRORS:  # the new file is not usable either: the temporary folder serves this run
        return None
    return store, " ".join(line for line in (report.words(), data_dir_problem()) if line)


def _database_problem(folder, exc: sqlite3.Error) -> str:
    """Why the database file cannot be opened, naming it (the file, not the folder, is the problem)."""
    database = folder / DATABASE_NAME
    if database.is_dir():
        return f"{database} is a folder"
    return f"{database}: {exc}; it is left as it is"


def open_store(chat_banner: Banner, notices: list[str] = ()) -> tuple[Store, Banner]:
    """The store (:func:`connect_store`) and a lasting banner above ``chat_banner`` that says what the
    user must know about it and ``notices`` (settings that were ignored): the chat's banner is cleared
    on every send; this one stays until dismissed."""
    store, problem = connect_store()
    storage_banner = Banner()
    storage_banner.setAccessibleName("Data folder problem")
    layout = chat_banner.parentWidget().layout()
    layout.insertWidget(layout.indexOf(chat_banner), storage_banner)
    lines = [line for line in (problem, *notices) if line]
    if lines:
        storage_banner.show_error("\n".join(lines))
    return store, storage_banner


class ConversationKeeper(QObject):
    """Owns the :class:`Store` for the window; the transcript shows :attr:`current_id`.

    Saves made while an answer streams or finishes never raise: a failure is reported through
    :attr:`storage_error` (once while it streams, again if its last save fails too) saying what is
    kept: the text saved before the failure stays in the store, the rest stays on screen, and each
    later flush tries again. When a later save works after all, :attr:`storage_recovered` says so.
    """

    storage_error = Signal(str)
    storage_recovered = Signal(str)

    def __init__(self, store: Store, transcript: ChatView, qsettings: QSettings) -> None:
        super().__init__()
        self.store = store
        self.transcript = transcript
        self.qsettings = qsettings
        self.current_id: int | None = None
        self._streaming_id: int | None = None
        self._created = False  # the last begin() started the chat (withdraw_last then drops it)
        self._pending = 0
        self._last_flush = 0.0
        self._save_failed = False
        self._saved_chars = 0  # how much of the streaming answer the store holds
        # A finished answer whose last save failed (a full disk): (id, text, fields), written again
        # every UNSAVED_RETRY_MS, before the next question and at quit, until a write works.
        self._unsaved: tuple[int, str, dict] | None = None
        self._retry = QTimer(self)
        self._retry.setInterval(UNSAVED_RETRY_MS)
        self._retry.timeout.connect(self.save_unsaved)
        # The answer being continued, as it was (begin_continue; None: the streaming answer is new),
        # and its ids the continuation's follow (None: unknown, or another model's).
        self._before_continue: Message | None = None
        self._continued_ids: list[int] | None = None
        # The last chat's id names a row of this database: kept only where the settings file sits
        # beside it (not for a temporary stand-in, whose ids would open the wrong chat of the real
        # database once it is restored).
        self._remembers_last = Path(store.folder).resolve() == Path(qsettings.fileName()).parent.resolve()

    # -- opening -----------------------------------------------------------------------------------
    def _set_last(self, conversation_id: int | None) -> None:
        if self._remembers_last:
            self.qsettings.setValue("conversations/last", conversation_id or "")

    def last_opened(self) -> int | None:
        wanted = self.qsettings.value("conversations/last") if self._remembers_last else None
        try:
            wanted = int(wanted)
        except (TypeError, ValueError):
            wanted = None
        if wanted is not None and abs(wanted) < 2**63 and self.store.conversation(wanted) is not None:
            return wanted
        return self.store.newest_conversation_id()

    def open(self, conversation_id: int | None) -> dict:
        """Show conversation ``conversation_id`` (None: an empty new chat); returns its settings. When it
        cannot be read or shown (the error is raised) the chat open before is still the current one,
        though the transcript may have been cleared."""
        conv = self.store.conversation(conversation_id) if conversation_id is not None else None
        messages = self.store.messages(conv.id) if conv else []
        self.transcript.clear()
        before, self.current_id = self.current_id, conv.id if conv else None
        try:
            if conv is not None:
                self._render(messages)
        except BaseException:
            self.current_id = before  # the next question must not go to a chat the user does not see
            raise
        self._set_last(self.current_id)
        return conv.settings if conv else {}

    def _render(self, messages: list[Message]) -> None:
        """Append stored ``messages`` to the transcript, then show every message's versions."""
        records = []
        for message in messages:
            record = StoredMessage(message.role, message.text, list(message.images), message.id, message.status,
                                   created=message.created, attached_names=list(message.attached_names))
            if message.role == "assistant":
                record.model_name = message.stats.get("model_name") or "Smolchat"
                record.engine = str(message.stats.get("engine") or "")
                record.finish_reason = _reason(message.status)
                record.footer = answer_footer(message)
                record.can_continue = not context_full({"finish_reason": record.finish_reason, **message.stats})
            records.append(record)
        self.transcript.add_stored(records)
        self.show_versions()

    def show_versions(self) -> None:
        """Set each shown message's "‹ n / m ›" switcher from the store."""
        if self.current_id is not None:
            self.transcript.set_versions(self.store.versions(self.current_id))

    def switch_version(self, index: int, step: int) -> bool:
        """Show the previous (``step`` -1) or next (+1) version of message ``index`` with the branch that
        continues it; False when there is none. The caller gives the backend the new history."""
        widgets = self.transcript.widgets()
        if self.current_id is None or not 0 <= index < len(widgets):
            return False
        siblings = [m.id for m in self.store.siblings(widgets[index].message_id)]
        if widgets[index].message_id not in siblings:
            return False
        target = siblings.index(widgets[index].message_id) + step
        if not 0 <= target < len(siblings):
            return False
        self.store.select(siblings[target])
        self.transcript.remove_from(index)
        self._render(self.store.messages(self.current_id)[index:])
        return True

    def show_branch_of(self, message_id: int) -> int | None:
        """Show the branch that holds ``message_id`` (a version not shown: the chat search found its
        words there), re-rendering from where it parts from the branch shown; its index in the
        transcript, or None when it is not in the open chat. The caller gives the backend the history."""
        if self.current_id is None:
            return None
        before = [m.id for m in self.store.messages(self.current_id)]
        self.store.select_branch(message_id)
        after = self.store.messages(self.current_id)
        ids = [m.id for m in after]
        if message_id not in ids:
            return None
        keep = next((i for i, (a, b) in enumerate(zip(before, ids)) if a != b), min(len(before), len(ids)))
        self.transcript.remove_from(keep)
        self._render(after[keep:])
        return ids.index(message_id)

    def messages(self) -> list[Message]:
        return self.store.messages(self.current_id) if self.current_id is not None else []

    def unanswered(self) -> tuple[int, int | None] | None:
        """``(question index, answer index or None)`` in the open chat's transcript when it ends with a
        question without an answer: an empty one marked interrupted (Smolchat closed during its
        prefill), or none at all (closed between the two saves, or the answer was deleted); else None."""
        messages = self.messages()
        if messages and messages[-1].role == "user":
            return len(messages) - 1, None
        if (len(messages) >= 2 and messages[-2].role == "user" and messages[-1].status == "interrupted"
                and not messages[-1].text.strip()):
            return len(messages) - 2, len(messages) - 1
        return None

    def unreadable_lines(self) -> list[str]:
        """Lines for what the open chat holds but could not be read (damaged rows, images gone from disk)."""
        messages = self.messages()
        ids = {m.id for m in messages}
        bad = sum(1 for kind, i in self.store.unreadable if kind == "message" and i in ids)
        lines = []
        if bad:
            which = "1 message of this chat has" if bad == 1 else f"{bad} messages of this chat have"
            lines.append(f"{which} stored data that could not be read (its role, text, images, their names, "
                         "statistics or token ids): shown with what could be read, and left unchanged on disk.")
        stray = len(self.store.stray.get(self.current_id, ()))
        if stray:
            lines.append(f"{stray} stored message{'' if stray == 1 else 's'} cannot be placed in this chat (a message "
                         "before it is missing, or messages follow one another in a loop): not shown, and left "
                         "unchanged on disk.")
        if self.current_id is not None:
            self.store.conversation(self.current_id)  # reads its settings: noted when they do not parse
            if ("conversation", self.current_id) in self.store.unreadable:
                lines.append("This chat's stored settings could not be read: the current settings apply (and are "
                             "stored with its next answer).")
        gone = missing_files_said(messages, self.store.images_dir)
        if gone:
            lines.append(gone)
        return lines

    def engine_history(self, model: str = "") -> list[dict]:
        """What the engine should hold for the open conversation with ``model`` (see :func:`engine_history`)."""
        return engine_history(self.messages(), model)

    def ensure_conversation(self, text: str, images: list[str], model: str, settings: dict) -> int:
        if self.current_id is None:
            conv = self.store.create_conversation(title_from(text, images), model=model, settings=settings)
            self.current_id = conv.id
            self._set_last(conv.id)
        return self.current_id

    # -- the answer being streamed -----------------------------------------------------------------
    def begin(self, user_text: str, images: list[str], model_name: str, model: str, settings: dict,
              replace_index: int | None = None, names: list[str] | None = None) -> tuple[list[dict], list[str]]:
        """Save the user's message and an empty streaming answer; returns (engine history, stored images).

        ``replace_index``: the message is a new version of user message ``replace_index`` (an edit):
        it follows the same message, the old version and its branch stay in the store, and the
        transcript shows the new branch from there. ``names``: the name each of ``images`` was attached
        as (:func:`attached_name`; "" or None: unknown); a file the old version had keeps its name there."""
        self.save_unsaved()  # the last answer first: it comes before this question
        created = self.current_id is None
        conv_id = self.ensure_conversation(user_text, images, model, settings)
        self._created = created
        try:
            return self._begin(conv_id, user_text, images, list(names or [""] * len(images)), model_name, model,
                               settings, replace_index)
        except STORAGE_ERRORS:
            if created:  # a new chat whose first message could not be saved is not kept (see _drop_new)
                self._drop_new(conv_id)
            raise

    def _drop_new(self, conv_id: int) -> None:
        """Undo the chat that :meth:`begin` created for a message it then failed to save: else the
        window would go on with an empty chat the sidebar never listed, named after that message.
        If even that write fails the chat stays the open one, so the next send fills it."""
        try:
            self.store.delete_conversation(conv_id)  # hidden now, removed at the next start
        except STORAGE_ERRORS:
            return
        self.current_id = None
        self._set_last(None)

    def _begin(self, conv_id: int, user_text: str, images: list[str], names: list[str], model_name: str, model: str,
               settings: dict, replace_index: int | None) -> tuple[list[dict], list[str]]:
        messages = self.store.messages(conv_id)
        widgets = self.transcript.widgets()
        known: dict[str, str] = {}  # stored file -> the name the version edited has for it
        if replace_index is not None and 0 <= replace_index < len(widgets) and replace_index < len(messages):
            edited = messages[replace_index]
            known = {image: name for image, name in zip(edited.images, edited.attached_names) if name}
            messages = messages[:replace_index]
        else:
            replace_index = None
        parent = messages[-1].id if messages else None
        history = engine_history(messages, model)
        stored = [self.store.store_image(p) for p in images]
        # Edit and Resend attach the stored copies again; after a restart only the store knows their names.
        names = [name or known.get(copy, "") for name, copy in zip(names, stored)]
        user = self.store.add_message(conv_id, "user", user_text, stored, parent_id=parent, names=names)
        try:
            answer = self._save_answer(conv_id, model_name, model, settings, user.id)
        except STORAGE_ERRORS:
            self._forget(user.id)  # the composer keeps the text: resending must not duplicate it
            if replace_index is not None:  # the version on screen stays the selected one
                self._forget_errors(self.store.select, widgets[replace_index].message_id)
            raise
        if replace_index is not None:
            self.transcript.remove_from(replace_index)  # only once saved: a failed save keeps it shown
        self.transcript.add_user_message(user_text, stored, user.attached_names).message_id = user.id
        self._show_answer(answer.id, model_name)
        self.show_versions()
        return history, stored

    def begin_regenerate(self, index: int, model_name: str, model: str, settings: dict
                         ) -> tuple[list[dict], Message] | None:
        """Start a new version of answer ``index`` (the old one stays, one "‹ ›" step away); returns
        (history, the user message to resend), or None when ``index`` is no answer to a question."""
        widgets = self.transcript.widgets()
        if not (0 < index < len(widgets)) or widgets[index - 1].role != "user":
            return None
        messages = self.store.messages(self.current_id)
        user = messages[index - 1]
        history = engine_history(messages[:index - 1], model)
        answer = self._save_answer(self.current_id, model_name, model, settings, user.id)
        self.transcript.remove_from(index)  # only once saved: a failed save keeps the old answer shown
        self._show_answer(answer.id, model_name)
        self.show_versions()
        return history, user

    def begin_continue(self, index: int, model: str, settings: dict) -> list[dict] | None:
        """Continue answer ``index``, the chat's last message, where its text ends: marked streaming
        again, the transcript streams into it; returns the engine history, that answer last (with its
        token ids when ``model`` generated it), or None when ``index`` is not the last answer."""
        widgets = self.transcript.widgets()
        if index != len(widgets) - 1 or widgets[index].role != "assistant" or not widgets[index].text.strip():
            return None
        messages = self.store.messages(self.current_id)
        answer = messages[index]
        history = engine_history(messages[:index + 1], model)
        self.store.update_conversation(self.current_id, model=model, settings=settings)
        # Its ids would not match its text while it grows (a quit mid-way keeps the text only).
        self.store.update_message(answer.id, status="streaming", forget_token_ids=True)
        self.transcript.resume_answer(index)
        self._show_answer_state(answer.id)
        self._saved_chars = len(answer.text)
        self._continued_ids = history[-1].get("token_ids") if history else None
        self._before_continue = answer  # put back as it was if the continuation adds nothing
        return history

    def count_continued(self, result: dict) -> None:
        """A continuation's finished ``result`` counts the answer's tokens in all (its own part's
        speed and prompt stay): the footer had said 20 generated under an answer of 40."""
        if self._before_continue is not None:
            before = self._before_continue.stats.get("generated_tokens")
            if isinstance(before, int) and not isinstance(before, bool) and before > 0:
                result["generated_tokens"] = int(result.get("generated_tokens") or 0) + before

    def _save_answer(self, conv_id: int, model_name: str, model: str, settings: dict, parent: int) -> Message:
        self.store.update_conversation(conv_id, model=model, settings=settings)
        return self.store.add_message(conv_id, "assistant", "", status="streaming",
                                      stats={"model_name": model_name}, parent_id=parent)

    def _forget(self, message_id: int) -> None:
        self._forget_errors(self.store.delete_message, message_id)

    @staticmethod
    def _forget_errors(write, *args) -> None:
        """Undo work after a failed save: the first error is the one reported."""
        try:
            write(*args)
        except STORAGE_ERRORS:
            pass

    def _show_answer(self, answer_id: int, model_name: str) -> None:
        self.transcript.begin_answer(model_name).message_id = answer_id
        self._show_answer_state(answer_id)
        self._before_continue = None

    def _show_answer_state(self, answer_id: int) -> None:
        self._streaming_id = answer_id
        self._pending = 0
        self._last_flush = time.monotonic()
        self._save_failed = False
        self._saved_chars = 0

    def _save_answer_text(self, text: str, last: bool = False, **fields) -> None:
        """Write the streaming answer's ``text`` (and ``fields``); on failure say what the store keeps:
        the text of the last save that worked. Reported once while it streams (each later flush tries
        again), and again when the ``last`` save fails too, since only then is the rest lost."""
        try:
            self.store.update_message(self._streaming_id, text=text, **fields)
        except STORAGE_ERRORS as exc:
            if not self._save_failed or last:
                self._save_failed = True
                self.storage_error.emit(f"Could not save the answer: {storage_problem(exc, self.store.folder)}. "
                                        + unsaved_answer(self._saved_chars, last))
            if last:
                self._unsaved = (self._streaming_id, text, fields)
                self._retry.start()
            return
        self._saved_chars = len(text)
        if self._save_failed and last:
            self.storage_recovered.emit("The answer was saved in full after all: a later save worked.")

    def unsaved_text(self) -> str | None:
        """The text of the finished answer whose last save failed and is still not saved (None: none)."""
        return self._unsaved[1] if self._unsaved is not None else None

    def save_unsaved(self) -> bool:
        """Write the finished answer whose last save failed, again (see ``_unsaved``); True when nothing
        is left unsaved. Said in the banner when it works."""
        if self._unsaved is None:
            return True
        message_id, text, fields = self._unsaved
        try:
            there = self.store.message(message_id) is not None  # (deleted meanwhile: nothing to save)
            if there:
                self.store.update_message(message_id, text=text, **fields)
        except STORAGE_ERRORS:
            return False
        self._unsaved = None
        self._retry.stop()
        if there:
            self.storage_recovered.emit("The answer was saved in full after all: a later save worked.")
        return True

    def token_arrived(self) -> None:
        """Flush the growing answer every FLUSH_TOKENS tokens or FLUSH_INTERVAL_S seconds."""
        if self._streaming_id is None:
            return
        self._pending += 1
        now = time.monotonic()
        if self._pending >= FLUSH_TOKENS or now - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        answer = self.transcript.last_assistant()
        if self._streaming_id is not None and answer is not None:
            self._save_answer_text(answer.text)
        self._pending = 0
        self._last_flush = time.monotonic()

    def finish(self, result: dict, model_name: str) -> None:
        if self._streaming_id is None:
            return
        answer = self.transcript.last_assistant()
        reason = result.get("finish_reason", "error")
        stats = {k: v for k, v in result.items() if k not in ("finish_reason", "token_ids")}
        stats["model_name"] = model_name
        token_ids = result.get("token_ids")
        before, self._before_continue = self._before_continue, None
        if answer is not None:
            answer.set_engine(str(result.get("engine") or ""))
        if before is not None and answer is not None and answer.text == before.text:
            # Nothing was added (a refusal, a server that is down, Stop before the first word): the
            # answer stays as it was, status, footer and ids; the banner says what went wrong.
            self._save_answer_text(before.text, last=True, status=before.status, stats=before.stats,
                                   token_ids=before.token_ids)
            answer.finish(_reason(before.status), answer_footer(before))
            answer.status = before.status
            self.transcript.mark_continuable()
            self._streaming_id = None
            return
        if before is not None:  # the answer's ids are those it had, then the continuation's
            token_ids = None if token_ids is None or self._continued_ids is None else \
                list(self._continued_ids) + list(token_ids)
            written_by = before.stats.get("model_name") or ""
            if written_by and model_name not in written_by.split(" + "):
                stats["model_name"] = f"{written_by} + {model_name}"  # both wrote it
                if answer is not None:
                    answer.set_model_name(stats["model_name"])
        self._save_answer_text(answer.text if answer else "", last=True, status="done" if reason == "stop" else reason,
                               stats=stats, token_ids=token_ids)
        self._streaming_id = None

    def abandon(self) -> None:
        """The window closes (mid-answer, or not): keep what arrived, marked interrupted as a crash leaves
        it ("stopped by you" is for Stop). An answer that had not started leaves its question unanswered,
        offered again with Resend when the chat is next opened."""
        self.save_unsaved()  # an answer of before whose last save failed: a last try
        if self._streaming_id is not None:
            answer = self.transcript.last_assistant()
            self._save_answer_text(answer.text if answer else "", last=True, status="interrupted")
            self._streaming_id = None
        self._retry.stop()

    def withdraw_last(self) -> None:
        """Take back the last question (a new one, or an edit's new version) and its answer that failed
        before its first word, as if never sent: the window gives it back to the composer
        (``MainWindow._take_back``), so sending it again stores it once. A chat that this question
        started goes with it; an edit's other version is shown again. Raises the store's error
        (:data:`STORAGE_ERRORS`) when the delete fails; nothing changes then."""
        widgets = self.transcript.widgets()
        if len(widgets) < 2 or widgets[-2].role != "user":
            return
        self.delete_message(len(widgets) - 2)  # an edit's other version (and its branch) takes its place
        self._streaming_id = None  # its answer went with it: nothing left to finish
        if self._created and not self.store.messages(self.current_id):
            self._drop_new(self.current_id)
            self.transcript.clear()

    def withdraw_failed_version(self) -> bool:
        """Take back the last answer, a new version (Regenerate) that failed before its first word: the
        version it was to replace is shown again, with its branch, as if Regenerate had not been
        pressed. False (nothing changes) where the answer has no other version: it stays, failed, with
        Regenerate beside it. Raises the store's error (:data:`STORAGE_ERRORS`) when the delete fails."""
        widgets = self.transcript.widgets()
        if not widgets or widgets[-1].role != "assistant" or widgets[-1].text:
            return False
        _number, count = self.store.versions(self.current_id).get(widgets[-1].message_id, (1, 1))
        if count < 2:
            return False
        self.delete_message(len(widgets) - 1)
        self._streaming_id = None
        self.show_versions()
        return True

    # -- edits -------------------------------------------------------------------------------------
    def delete_message(self, index: int) -> DeletedMessages | None:
        """Delete message ``index`` as :meth:`Store.delete_message` does (a question with its answers, a
        version with its branch); returns what went, for :meth:`restore_messages`."""
        widget = self.transcript.widgets()[index]
        deleted = self.store.delete_message(widget.message_id)
        # The branch closes up; if the shown version went, another one (and its branch) takes its place.
        self.transcript.remove_from(index)
        self._render(self.store.messages(self.current_id)[index:])
        return deleted

    def restore_messages(self, deleted: DeletedMessages) -> None:
        """Undo a :meth:`delete_message`; the open chat is shown again if it is the one it was in."""
        self.store.restore_messages(deleted)
        if deleted.conversation_id == self.current_id:
            messages = self.store.messages(self.current_id)
            self.transcript.clear()
            self._render(messages)
            at = next((i for i, m in enumerate(messages) if m.id == deleted.message_id), None)
            if at is not None and at < len(messages) - 1:  # back where it was, not at the chat's end
                self.transcript.show_message(at, self.transcript.viewport().height() // 3)
