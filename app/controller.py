"""The chat state machine between the window and one :class:`~engine.api.ChatBackend`.

It decides what happens on send, stop, regenerate, edit, switching conversation (``set_history``),
switching model and reloading after a settings change; it keeps the busy state and says what is
stored when (through :class:`~app.conversations.ConversationKeeper`). It never probes the backend:
it calls the protocol's methods and receives its events as queued Qt signals (:mod:`app.backends.qt`).
The window only connects its widgets to the signals below.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.backends.qt import BackendBridge
from app.conversations import STORAGE_ERRORS, ConversationKeeper, storage_problem
from app.formatting import error_words
from app.settings import generation_defaults
from app.video_attachments import attachment_kind, attachments_for
from engine.api import Attachment, ChatBackend, DoneEvent, GenerationParams, HistoryMessage, ProgressEvent, TokenEvent

log = logging.getLogger(__name__)


def history_messages(history: list[dict], takes_video: bool = False, detail: str | None = None) -> list[HistoryMessage]:
    """The keeper's ``[{"role", "text", "images", "token_ids"?}]`` as the backend's messages.

    ``images`` holds videos too: each becomes an attachment of its kind
    (:func:`app.video_attachments.attachment_kind`); images are read at ``detail`` (the image detail
    of the answers, so a rebuilt conversation has the tiles the live one had). An answer's stored
    ``token_ids`` go with it, so the engine replays the ids it generated (not a re-tokenization)."""
    def ids(m: dict) -> tuple[int, ...] | None:
        token_ids = m.get("token_ids")
        return tuple(token_ids) if m.get("role") == "assistant" and token_ids is not None else None

    return [HistoryMessage(m.get("role", "user"), m.get("text", ""),
                           tuple(attachments_for(list(m.get("images") or ()), takes_video, detail)
                                 if m.get("role") == "user" else ()), ids(m))
            for m in history]


def result_of(done: DoneEvent) -> dict:
    """A finished answer as the plain dict the window, footers and store use (``token_ids``: a list, or
    None when the backend did not say)."""
    return {"finish_reason": done.finish_reason, "error": done.error, "error_type": done.error_type,
            **done.stats.to_dict(),
            "token_ids": list(done.token_ids) if done.token_ids else None}


#: Said while engine settings wait for the running answer; withdrawn once the model is loaded again.
RELOAD_NOTE = "The new engine settings apply when this answer finishes."

class ChatController(QObject):
    """One window's conversation with one backend (see the module docstring)."""

    model_loading = Signal(str)  # path
    model_loaded = Signal(dict)  # {"model_name", "device", "dtype", "weights", "path", "folder", "defaults"}
    model_load_failed = Signal(str)
    model_load_stopped = Signal(str)  # the path whose load cancel_load stopped
    token = Signal(str)
    progress = Signal(object)  # ProgressEvent
    finished = Signal(dict)  # result_of(DoneEvent)
    busy_changed = Signal()  # busy, ready or loading changed
    notice = Signal(str)  # something to tell the user (info banner)
    failed = Signal(str)  # something went wrong (error banner)

    def __init__(self, backend: ChatBackend, keeper: ConversationKeeper) -> None:
        super().__init__()
        self.backend = backend
        self.keeper = keeper
        self.bridge = BackendBridge(self)
        self.bridge.event.connect(self._on_event)
        self.bridge.loaded_as.connect(self._on_loaded)
        self._loads = 0  # loads asked for: only the last one's result counts
        self.asked = ""  # the last model asked for: loaded again with new engine settings if it failed
        self._before: dict = {}  # the model in use when a load began (kept if that load fails)
        self._gone: set[str] = set()  # backends ("remote:NAME") whose settings changed: not gone back to
        self.dropped: dict = {}  # the model in use that the running load does not go back to (see server_changed)
        self.before_outdated = False  # engine settings changed since that model loaded (during the load)
        self.model_info: dict = {}
        self.busy = self.ready = self.loading = self.closed = False
        self._stopped = True  # the backend's thread ended at shutdown
        self.extra_params: dict = {}  # GenerationParams fields on top of the settings (tests, screenshots)
        self.image_detail = "full"  # of the last answer: the detail a reopened chat's images are read at
        self.reload_pending: tuple | None = None  # (path, device, dtype, options): after the answer
        self._said = ""  # the running answer's notice, said already by its first progress event
        # Stored copy -> the user's file it was made from: errors name the file the user attached.
        self.display_names: dict[str, str] = {}

    # -- models --------------------------------------------------------------------------------------
    def load(self, path: str, device: str | None, dtype: str | None, options: dict) -> bool:
        """Load ``path`` in the backend unless an answer is running; False when refused."""
        if self.busy or self.closed:
            return False
        # The backends keep the model they have until another one has loaded: one that fails to load
        # (a folder missing a tensor, an unreachable server) leaves this one in use. A model picked
        # while another loads replaces that load (stopped, not waited for) and keeps the same one before.
        if self.loading:
            self.backend.cancel_load()
        else:
            self._before = dict(self.model_info) if self.ready else {}
            self.before_outdated = False
            self.dropped = {}
        if self._before.get("backend") in self._gone:
            self.dropped, self._before = self._before, {}
        self.loading, self.ready = True, False
        self.busy_changed.emit()
        self.model_loading.emit(path)
        self._loads += 1
        self.asked = path
        self.backend.load(path, {"device": device, "dtype": dtype, **options}, self.bridge.load_callback(self._loads))
        return True

    def reload_when_idle(self, device: str | None, dtype: str | None, options: dict) -> None:
        """Engine settings changed: reload the model now, or when the running answer ends. A model
        whose load failed or is under way is asked for again with them (the settings may be the
        fix: a device this computer lacks, a dtype it cannot run)."""
        path = self.model_info.get("path") if self.ready else self.asked
        if not path:
            return
        if self.loading and self._before:  # a stopped load leaves that model on the settings before
            self.before_outdated = True
        if self.busy:  # never swap the model under a running answer
            self.reload_pending = (path, device, dtype, options)
            self.notice.emit(RELOAD_NOTE)
        elif self.load(path, device, dtype, options) and self._before:
            self.before_outdated = True  # stopped, this reload leaves the model on the settings before

    def server_changed(self, name: str) -> None:
        """Server ``name``'s address, key or password changed, or it was removed: a load that fails or is
        stopped from now on does not go back to a model on it (app.backends.switch closes that
        connection, as it would keep sending what the user took away); one that loads on it ends that."""
        self._gone.add(f"remote:{name}")
        if self.loading and self._before.get("backend") in self._gone:
            self.dropped, self._before = self._before, {}

    def cancel_load(self) -> bool:
        """Stop the model load under way (Esc, Stop): the model loaded before stays in use, or none
        (``model_load_stopped``). False when no load is under way, or it has just ended: its result,
        on its way, is shown as usual."""
        if not self.loading or self.closed or not self.backend.cancel_load():
            return False
        self._loads += 1  # its "stopped" answer is not news
        self.loading = False
        self.model_info = self._before
        self.ready = bool(self.model_info)
        stopped, self.asked = self.asked, self.model_info.get("path", "")  # new settings reload this one
        self.model_load_stopped.emit(stopped)
        self.busy_changed.emit()
        return True

    @Slot(int, object, object)
    def _on_loaded(self, number: int, info, message) -> None:
        # A model picked while another loads: the slower, earlier load (the last model at start, a
        # large local one) must not take over, unannounced, when it ends after the one picked.
        if self.closed or number != self._loads:
            if info is not None and not self.closed:
                # It ended before it could be stopped: the backend holds it now, and a later load
                # that fails leaves it, not the one before it, in use.
                self._before = self._info_dict(info)
            return
        self.loading = False
        if info is None:
            self.model_info = self._before
            self.ready = bool(self.model_info)  # still the model loaded before (see load)
            self.model_load_failed.emit(message or "unknown error")
        else:
            self.ready = True
            self.model_info = self._info_dict(info)
            self._gone.discard(self.model_info["backend"])  # (on the server's new settings)
            self.dropped = {}
            self.model_loaded.emit(dict(self.model_info))
        self.busy_changed.emit()

    @staticmethod
    def _info_dict(info) -> dict:
        """What :attr:`model_info` holds of a backend's :class:`~engine.api.ModelInfo`."""
        return {"model_name": info.name, "device": info.device, "dtype": info.dtype, "weights": info.weights,
                "path": info.path, "folder": info.folder, "backend": info.backend, "devices": list(info.devices),
                "sources": dict(info.sources),
                "capabilities": asdict(info.capabilities), "vision": info.capabilities.vision,
                "defaults": generation_defaults(info.folder)}

    # -- conversations -------------------------------------------------------------------------------
    def conversation_opened(self) -> None:
        """The keeper shows another conversation: the backend follows (it reuses what it can)."""
        if self.ready:
            self.backend.set_history(history_messages(self.keeper.engine_history(self.model_path), self.takes_video,
                                                      self.image_detail))

    def switch_version(self, index: int, step: int) -> bool:
        """Show another version of message ``index`` (see ConversationKeeper.switch_version) and give the
        backend exactly that branch's history (it keeps the prefix both branches share)."""
        if self.busy or not self.keeper.switch_version(index, step):
            return False
        self.conversation_opened()
        return True

    def show_branch_of(self, message_id: int) -> int | None:
        """Show the branch holding ``message_id`` (see ConversationKeeper.show_branch_of) and give the
        backend its history; its index, or None (while an answer runs, or not in the open chat)."""
        if self.busy:
            return None
        index = self.keeper.show_branch_of(message_id)
        if index is not None:
            self.conversation_opened()
        return index

    def count_tokens(self, path: str, detail: str, video_fps: float | None = None,
                     video_max_frames: int | None = None) -> int:
        """Prompt tokens the attachment at ``path`` takes (-1: unknown): an image's at ``detail``, a
        video's whole prompt (intro, time stamps, frames) sampled at ``video_fps`` / ``video_max_frames``
        when the model takes video (an animated GIF, WebP or PNG too, as it is sent: trial 77 Q2 counted
        its first frame alone)."""
        if self.takes_video and attachment_kind(path, True) == "video":
            return self.backend.count_attachment_tokens(
                Attachment(path, "video"), detail, GenerationParams(video_fps=video_fps, video_max_frames=video_max_frames))
        return self.backend.count_attachment_tokens(Attachment(path), detail)

    def count_text_tokens(self, text: str) -> int:
        """Tokens the loaded model's tokenizer makes of ``text`` (-1: unknown, e.g. a server's model)."""
        return self.backend.count_text_tokens(text)

    def count_prompt_overhead(self, system_prompt: str | None) -> int:
        """Tokens every prompt has besides its message (the system prompt, the template's markup; -1:
        unknown), see ``ChatBackend.count_prompt_overhead``."""
        return self.backend.count_prompt_overhead(system_prompt)

    # -- answers -------------------------------------------------------------------------------------
    def send(self, text: str, images: list[str], chat_settings: dict, params: dict, edit_index: int | None,
             names: list[str]) -> bool:
        """Store the user's message (as a new version of message ``edit_index``, whose old version and
        branch are kept) and ask for an answer. ``names``: the name each of ``images`` was attached as
        (:func:`~app.conversations.attached_name`; "": unknown), kept with the message for exports; it
        is given, not looked up by file, because identical files share one copy in the image store.
        False (nothing sent) when idle conditions fail or storage fails."""
        if self.busy or not self.ready or not (text or images):
            return False
        try:
            history, stored = self.keeper.begin(text, images, self.model_name, self.model_path, chat_settings,
                                                replace_index=edit_index, names=names)
        except STORAGE_ERRORS as exc:  # the composer keeps the text and images
            self.failed.emit(f"Could not save the message: {storage_problem(exc, self.keeper.store.folder)}.")
            return False
        for original, copy in zip(images, stored):  # a video is copied only now (an image when attached)
            self.display_names.setdefault(copy, original)
        attachments = attachments_for(stored, self.takes_video)
        self._start(history, params, lambda p, sp: self.backend.send(text, attachments, p, self.bridge.sink, sp))
        return True

    def regenerate(self, index: int, chat_settings: dict, params: dict) -> None:
        """A new version of answer ``index`` (the old one and its branch are kept) to the same question."""
        if self.busy or not self.ready:
            return
        try:
            found = self.keeper.begin_regenerate(index, self.model_name, self.model_path, chat_settings)
        except STORAGE_ERRORS as exc:
            self.failed.emit(f"Could not regenerate the answer: {storage_problem(exc, self.keeper.store.folder)}.")
            return
        if found is None:  # a damaged row (its role unreadable) above: no question to ask again
            self.failed.emit("This answer cannot be regenerated: it follows no question that Smolchat can read. "
                             "Ask the question again below.")
            return
        history, user = found
        # The backend holds the question and its answer: rebuild up to the question, then ask again.
        self._start(history, params, lambda p, sp: self.backend.send(
            user.text, attachments_for(user.images, self.takes_video), p, self.bridge.sink, sp))

    def continue_answer(self, index: int, chat_settings: dict, params: dict) -> bool:
        """Continue answer ``index`` (the chat's last message, cut short) where its text ends; the
        continuation streams into it. False when it is not one that can be continued, or busy."""
        if self.busy or not self.ready:
            return False
        try:
            history = self.keeper.begin_continue(index, self.model_path, chat_settings)
        except STORAGE_ERRORS as exc:
            self.failed.emit(f"Could not continue the answer: {storage_problem(exc, self.keeper.store.folder)}.")
            return False
        if history is None:
            return False
        self._start(history, params, lambda p, sp: self.backend.continue_answer(p, self.bridge.sink, sp))
        return True

    def _start(self, history: list[dict], params: dict, ask) -> None:
        self.busy = True
        self.busy_changed.emit()
        params = dict(params)
        system_prompt = params.pop("system_prompt", None)
        try:
            generation = GenerationParams(**params)
        except (TypeError, ValueError) as exc:
            self._on_event(DoneEvent("error", error=f"Invalid settings: {exc}"))
            return
        self.image_detail = generation.image_detail
        self.backend.set_history(history_messages(history, self.takes_video, self.image_detail))
        ask(generation, system_prompt)

    def stop(self) -> None:
        """Stop the running answer; it ends within ~200 ms, keeping the question and any text so far."""
        if self.busy:
            self.backend.cancel()

    @Slot(object)
    def _on_event(self, event) -> None:
        if self.closed:
            return
        if isinstance(event, TokenEvent):
            self.token.emit(event.text)
            self.keeper.token_arrived()
        elif isinstance(event, ProgressEvent):
            if event.notice:  # said while the prompt is read, not only once the answer has ended
                self._said = event.notice
                self.notice.emit(self.user_words(event.notice))
            self.progress.emit(event)
        elif isinstance(event, DoneEvent):
            result = result_of(event)
            # Which engine and model answered (a conversation may switch engines between answers).
            result["engine"], result["model"] = self.model_info.get("backend", "local"), self.model_path
            # The context the answer had (tokens): one that ends there is said so, and not continued.
            result["context"] = int(self.model_info.get("capabilities", {}).get("max_context") or 0)
            if event.error:
                result["error"] = self.user_words(error_words(event.error_type, event.error))
                self.failed.emit(result["error"])
            if result.get("notice"):  # kept under the answer (and stored) naming the files as attached
                result["notice"] = self.user_words(str(result["notice"]))
            self.keeper.count_continued(result)
            self.busy = False
            self.finished.emit(result)  # the window ends the answer on screen first
            self.keeper.finish(result, self.model_name)
            if event.stats.notice and not event.error and event.stats.notice != self._said:
                self.notice.emit(self.user_words(event.stats.notice))  # e.g. old messages dropped to fit the context
            self._said = ""
            self.busy_changed.emit()
            if self.reload_pending:
                path, device, dtype, options = self.reload_pending
                self.reload_pending = None
                self.load(path, device, dtype, options)

    # -- helpers -------------------------------------------------------------------------------------
    def user_words(self, message: str) -> str:
        """``message`` naming the files the user attached instead of their copies in the image store
        (whole paths, and the copies' names alone: content hashes, which no other text contains)."""
        for stored, original in self.display_names.items():
            message = message.replace(stored, original)
            if Path(stored).name != Path(original).name:
                message = message.replace(Path(stored).name, Path(original).name)
        return message

    @property
    def model_name(self) -> str:
        return self.model_info.get("model_name", "Smolchat")

    @property
    def takes_video(self) -> bool:
        """The loaded model takes videos (capabilities ``video``): animated images go as videos."""
        return bool((self.model_info.get("capabilities") or {}).get("video"))

    @property
    def model_path(self) -> str:
        return self.model_info.get("path", "")

    def shutdown(self) -> bool:
        """Cancel the answer, keep what arrived (marked interrupted), stop the backend within ~1 s.

        Returns False when the backend's thread is still finishing a kernel (it dies with the process).
        """
        if self.closed:
            return self._stopped  # the window's closeEvent already did it; main() asks again
        self.closed = True
        self.backend.cancel()
        self.keeper.abandon()
        self._stopped = bool(self.backend.close())
        return self._stopped
