"""``EngineService``: one engine thread that owns the loaded model and its conversation.

Front ends (the app's local backend, the HTTP server) never call the engine from their own threads:
they queue requests here and get results through callbacks that run on the engine thread. Qt-free and
torch-free at import (the engine itself is imported on the engine thread, at the first load).

- Requests run one at a time in the order they were queued.
- :meth:`cancel` ends the running answer within ~200 ms, also during the vision tower or the prefill
  (``ChatSession`` checks inside every vision layer and before every decoder layer), and answers every queued
  generation with ``DoneEvent("cancelled")`` without running it.
- :meth:`shutdown` cancels, stops the thread and returns within ``timeout``; the thread is a daemon,
  so the process can exit even while torch finishes a kernel.
- Each generation call returns a handle; :meth:`cancel_request` ends that one answer only (the HTTP
  server cancels one client's answer when it disconnects), :meth:`cancel` ends them all.
- A failing request never stops the thread: a generation ends with ``DoneEvent("error")``, a load
  reports its message, and the next request runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from engine.api.backend import LOAD_CANCELLED, Attachment, EventSink, HistoryMessage, LoadCallback, LoadTicket, ModelInfo
from engine.api.capabilities import Capabilities
from engine.api.errors import LoadCancelled, UnsupportedOperation, describe_error, is_engine_error
from engine.api.events import DoneEvent, GenerationParams, GenerationStats, TokenEvent
from engine.api.hub import looks_like_repo_id
from engine.api.images import withdraw

log = logging.getLogger(__name__)

#: ``loader(model, options) -> session``: builds a ChatSession-like object (tests pass slow or fake ones).
Loader = Callable[[str, dict], Any]
# Prompt tokens per prefill chunk on the CPU. ChatSession checks for a cancel before each decoder
# layer, so a cancel waits for one layer of one chunk: 256 tokens cost the same per token as 512
# (1.66 vs 1.71 ms/token for the 256M model on a 2-core CPU; 128: 2.25) at half the wait.
CANCELLABLE_PREFILL_CHUNK_CPU = 256


def default_loader(model: str, options: dict) -> Any:
    """A real :class:`engine.chat.ChatSession` (imports torch: engine thread only).

    ``options``: ``device``, ``dtype``, ``weights``, ``cache_kind``, ``context_size`` (all optional).
    """
    from engine.cache import CacheConfig
    from engine.chat import ChatSession

    cache = None  # the engine's default cache unless the caller chose otherwise
    if options.get("cache_kind") or options.get("context_size"):
        kind = {"kind": options["cache_kind"]} if options.get("cache_kind") else {}
        cache = CacheConfig(max_tokens=options.get("context_size") or None, **kind)
    session = ChatSession.load(model, device=options.get("device"), dtype=options.get("dtype"), cache_config=cache,
                               weights=options.get("weights"))
    if session.device == "cpu":
        session.prefill_chunk = min(session.prefill_chunk, CANCELLABLE_PREFILL_CHUNK_CPU)
    return session


@dataclass
class _Request:
    """One queued call: ``run(request)`` on the engine thread; ``sink`` set for generations."""

    run: Callable[[_Request], None]
    sink: EventSink | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    answered: bool = False  # cancelled while queued and told so at once: the engine thread skips it


_STOP = object()


def _split(attachments: Sequence[Attachment]) -> tuple[list[str], list[str]]:
    """Image paths and video paths (``Attachment.kind``), each in order."""
    return ([a.path for a in attachments if a.kind != "video"],
            [a.path for a in attachments if a.kind == "video"])


def _key(message: HistoryMessage) -> tuple:
    """What identifies a message for reuse (:func:`_same`)."""
    key = (message.role, message.text.strip() if message.role == "assistant" else message.text,
           tuple((a.path, a.kind, a.detail) for a in message.attachments), message.text_parts)
    return key + (message.token_ids is not None, message.text) if message.role == "assistant" else key


def _same(wanted: tuple, synced: tuple) -> bool:
    """Whether a session turn (``synced``, its :func:`_key`) is the message ``wanted`` asks for.
    Answers compare by stripped text, as the app stores them, where both come with the token ids they
    were generated as; otherwise only the very same text is the same answer, and the message is read
    as its text (trial 66: a server's client that sent an earlier answer back with a space added was
    answered from the cached turn, as if unchanged, while /tokenize counted the text it sent; trial 67:
    sent back unchanged after that, it was answered from the edited one)."""
    if wanted[0] != "assistant" or synced[0] != "assistant":
        return wanted == synced
    return wanted[:4] == synced[:4] and ((wanted[4] and synced[4]) or wanted[5] == synced[5])


def _sent_key(text: str, attachments: Sequence[Attachment], detail: str,
              text_parts: tuple[str, ...] | None = None) -> tuple:
    """:func:`_key` of a message sent with ``attachments``: its images were read at ``detail``."""
    kept = tuple(Attachment(a.path, a.kind, None if a.kind == "video" else (a.detail or detail)) for a in attachments)
    return _key(HistoryMessage("user", text, kept, text_parts=text_parts))


class EngineService:
    """The engine thread and its request queue (see the module docstring)."""

    def __init__(self, loader: Loader | None = None, name: str = "EngineService",
                 collect_garbage: Callable[[], None] | None = None) -> None:
        self._loader = loader or default_loader
        # What frees a stopped load's half-built model (it sits in reference cycles): None, a full
        # collection on the engine thread; a front end that collects on a thread of its own (the
        # app's UI thread, where a Qt object in the garbage may be destroyed: app/main_thread_gc.py)
        # gives the call that asks for one there.
        self._collect_garbage = collect_garbage
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()  # guards _current, _pending and _session against cancel()
        self._group = threading.RLock()  # held by atomic(): several requests queued back to back
        self._pending: list[_Request] = []  # queued generations (cancel answers them)
        self._loads: list[LoadTicket] = []  # queued or running loads (cancel_load stops them)
        self._current: _Request | None = None
        self._session: Any = None
        self._info: ModelInfo | None = None
        self._synced: list[tuple] = []  # keys of what the session's turns hold
        self._left_out: list[str] = []  # why media of earlier messages stayed out of the context (last sync)
        # The last answer's params: videos of a rebuilt history are sampled with its video_fps and
        # video_max_frames (the front end's settings), not the checkpoint's defaults.
        self._video_params: GenerationParams | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # -- state ---------------------------------------------------------------------------------
    @property
    def info(self) -> ModelInfo | None:
        return self._info

    @property
    def capabilities(self) -> Capabilities:
        return self._info.capabilities if self._info else Capabilities()

    @property
    def alive(self) -> bool:
        """The engine thread is still running (False after a completed :meth:`shutdown`)."""
        return self._thread.is_alive()

    # -- requests (any thread) -------------------------------------------------------------------
    def load(self, model: str, options: dict, on_done: LoadCallback) -> LoadTicket:
        """Load ``model`` (replacing the current one once it has loaded); ``on_done(info, None)``, or
        ``(None, message)`` (the current model stays), ``(None, LOAD_CANCELLED)`` when stopped by
        :meth:`cancel_load` or the returned ticket's ``cancel``."""
        ticket = LoadTicket()
        with self._lock:
            self._loads.append(ticket)
        self._put(_Request(lambda r: self._load(model, dict(options), on_done, ticket)))
        return ticket

    def cancel_load(self) -> bool:
        """Stop every queued or running load (thread-safe): the model loaded before stays for every
        request made after this call. A running load stops at its next cancellation point
        (:func:`engine.cancellation.load_cancel_point`: one decoder layer at most) and frees what it
        built. True when a load stopped in time, False when none was under way or it had ended."""
        with self._lock:
            tickets, self._loads = self._loads, []
        return any([ticket.cancel() for ticket in tickets])  # a list: every ticket is cancelled

    def set_history(self, messages: Sequence[HistoryMessage], system_prompt: str | None = None) -> None:
        """Make the conversation hold ``messages``, keeping the prefix it already holds."""
        self._put(_Request(lambda r: self._set_history(list(messages), system_prompt)))

    def send(self, text: str, attachments: Sequence[Attachment], params: GenerationParams, sink: EventSink,
             system_prompt: str | None = None, text_parts: Sequence[str] | None = None) -> _Request:
        """Add a user message and stream the answer into ``sink``; returns a handle for :meth:`cancel_request`.
        ``text_parts``: the text between the attachments (:class:`~engine.api.HistoryMessage`)."""
        images, videos = _split(attachments)
        more: dict[str, Any] = {"videos": videos} if videos else {}  # sessions without video take no such keyword
        parts = None if text_parts is None else tuple(text_parts)
        if parts is not None:
            more["text_parts"] = parts
        self._video_params = params
        return self._generate(sink, system_prompt, lambda s: s.send(text, images=images, params=params, **more),
                       after=lambda: [_sent_key(text, attachments, params.image_detail, parts)])

    def regenerate(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> _Request:
        return self._generate(sink, system_prompt, lambda s: s.regenerate(params), drop_answer=True)

    def continue_answer(self, params: GenerationParams, sink: EventSink, system_prompt: str | None = None) -> _Request:
        """Continue the conversation's last message, an assistant's, and stream only the continuation
        into ``sink`` (:meth:`ChatSession.continue_answer`; a conversation that does not end with an
        answer is a ``ValueError`` in the DoneEvent)."""
        return self._generate(sink, system_prompt, lambda s: s.continue_answer(params), drop_answer=True,
                              continuing=True)

    def edit(self, turn_index: int, text: str, attachments: Sequence[Attachment] | None, params: GenerationParams,
             sink: EventSink, system_prompt: str | None = None) -> _Request:
        images, videos = (None, None) if attachments is None else _split(attachments)
        more = {"videos": videos} if videos else {}
        return self._generate(sink, system_prompt, lambda s: s.edit(turn_index, text, images, params, **more),
                       edit_at=turn_index, after=lambda: [_sent_key(text, attachments or (), params.image_detail)])

    def complete(self, prompt: str | list[int], params: GenerationParams, sink: EventSink) -> _Request:
        """Continue the raw ``prompt`` (no chat template), text or token ids
        (:func:`~engine.completion.complete_text`), and stream into ``sink``.

        The conversation is dropped (its turns; the cache keeps what the next prompt shares), so the
        next chat request rebuilds it from its own history."""
        def start(session: Any) -> Any:
            from engine.completion import complete_text  # engine thread only (imports torch)

            return complete_text(session, prompt, params)
        return self._generate(sink, None, start)

    def call(self, fn: Callable[[Any], Any], on_done: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``fn(session)`` on the engine thread in queue order (embeddings, metrics); then
        ``on_done(result, None)``, or ``on_done(None, exc)`` when it raised or no model is loaded."""
        def run(_request: _Request) -> None:
            try:
                if self._session is None:
                    raise RuntimeError("No model is loaded yet.")
                result = fn(self._session)
            except Exception as exc:  # noqa: BLE001 - the caller reports it
                on_done(None, exc)
                return
            on_done(result, None)
        self._put(_Request(run))

    def prompt_ids(self, history: Sequence[HistoryMessage], system_prompt: str | None, text: str,
                   attachments: Sequence[Attachment], params: GenerationParams,
                   on_done: Callable[[Any, BaseException | None], None], text_parts: Sequence[str] | None = None,
                   continuing: bool = False, add_generation_prompt: bool = True) -> None:
        """``on_done(ids, None)``: the token ids the prompt of ``set_history(history, system_prompt)``
        then ``send(text, attachments, params, ..., text_parts=text_parts)`` (``continuing``:
        ``continue_answer(params, ...)``, the history's last message an assistant's) would have, the
        same images and videos read the same way; or ``on_done(None, exc)`` (an unreadable new image,
        a text-only model given one, no model). Changes neither the conversation nor the cache
        (:meth:`ChatSession.prompt_ids`).

        Without videos it runs on a thread of its own, at once, not behind a running answer: the
        template, the tokenizer (thread-safe) and each image's grid from its header
        (:meth:`ChatSession.image_grids`) are all it needs; nothing touches the model, the cache, the
        conversation or the processor's device. A video's frames (how many, their time stamps) are
        known exactly only once decoded, so with videos it runs on the engine thread in queue order,
        reading the media as an answer would."""
        session = self._session
        messages = list(history)
        if session is not None and hasattr(session, "image_grids") and not any(
                a.kind == "video" for a in [*attachments, *(a for m in messages for a in m.attachments)]):
            def aside() -> None:
                try:
                    turns = [self._grid_turn(session, m) for m in messages]
                    if not continuing:
                        from engine.chat import Turn  # (torch: the session's module has it loaded already)

                        parts = None if text_parts is None else tuple(text_parts)
                        grids = session.image_grids([a.path for a in attachments], params.image_detail)
                        turns.append(Turn("user", text, grids, text_parts=parts))
                        for a in attachments:  # a decode handed over for the engine (hand_over) is not needed
                            withdraw(a.path)
                    result = session.prompt_ids(turns, system_prompt, continuing, add_generation_prompt)
                except Exception as exc:  # noqa: BLE001 - the caller reports it
                    on_done(None, exc)
                    return
                on_done(result, None)
            threading.Thread(target=aside, name="PromptIds", daemon=True).start()
            return

        def run(_request: _Request) -> None:
            session, left_out = self._session, self._left_out
            try:
                if session is None:
                    raise RuntimeError("No model is loaded yet.")
                turns = [self._turn(session, message) for message in history]
                if not continuing:
                    from engine.chat import Turn  # engine thread only (imports torch)

                    images, videos = _split(attachments)
                    processed = session.preprocess(images, params.image_detail)
                    clips = session.preprocess_videos(videos, params) if videos else []
                    parts = None if text_parts is None else tuple(text_parts)
                    turns.append(Turn("user", text, processed, videos=clips, text_parts=parts))
                result = session.prompt_ids(turns, system_prompt, continuing, add_generation_prompt)
            except Exception as exc:  # noqa: BLE001 - the caller reports it
                on_done(None, exc)
                return
            finally:
                self._left_out = left_out  # the next answer's notice is about its own history
            on_done(result, None)
        self._put(_Request(run))

    def tokenizer(self) -> Any:
        """The loaded model's :class:`~engine.tokenizer.Tokenizer` (None before one is loaded), for
        the thread-safe, GIL-releasing calls a front end may make from any thread:
        ``encode_aside``, ``decode_aside``, ``special_affixes``, ``token_to_id``, ``id_to_token``,
        ``vocab_size``, ``chat_template``, ``special_tokens_map``."""
        session = self._session
        return None if session is None else session.tokenizer

    def vocab_size(self) -> int:
        """Token ids the loaded model takes, ``[0, vocab_size)``: what both its tokenizer and its
        embeddings have (as a completion's token-id prompt is checked); 0 before a model is loaded."""
        session = self._session
        if session is None:
            return 0
        return min(session.tokenizer.vocab_size, session.model.metadata.text.vocab_size)

    def count_tokens(self, attachment: Attachment, detail: str, params: GenerationParams | None = None) -> int:
        """Prompt tokens ``attachment`` will take at ``detail`` (-1: no model, or unreadable); a
        video's whole prompt (intro, time stamps, frames) at ``params``' frame sampling.

        Runs on the calling thread, outside the queue, so it answers during a long answer: it reads
        the image's header (a video's container headers) and does arithmetic on the loaded
        processor's settings, nothing more.
        """
        session = self._session
        if session is None:
            return -1
        try:
            if attachment.kind == "video":  # from the headers: frames, timestamps, no decoding
                return int(session.count_video_tokens(attachment.path, params))
            return int(session.count_image_tokens(attachment.path, detail))
        except Exception:  # noqa: BLE001 - the send itself reports unreadable images
            log.debug("cannot count image tokens of %s", attachment.path, exc_info=True)
            return -1

    def count_text_tokens(self, text: str) -> int:
        """Tokens the loaded tokenizer makes of ``text`` (-1: no model). On the calling thread, outside
        the queue, with the GIL released while the tokenizer works (``encode_aside``): a window checks a
        long message against the context before sending it, also during an answer. A special-token
        string typed into ``text`` (``<image>``) counts as its one id here; the prompt reads it as
        text, a few tokens more."""
        session = self._session
        if session is None:
            return -1
        return len(session.tokenizer.encode_aside(text))

    def count_prompt_overhead(self, system_prompt: str | None) -> int:
        """Tokens a one-message prompt has besides the message (-1: no model): ``system_prompt`` and
        the chat template's markup, which every prompt keeps whatever old turns are dropped
        (:meth:`ChatSession._fit_context`). A message fits the context when its own tokens and these
        are fewer than the context holds; with them the count is the prompt's or one more, never
        fewer. On the calling thread, outside the queue (the template and the tokenizer only, as
        :meth:`prompt_ids` without media)."""
        session = self._session
        if session is None:
            return -1
        from engine.chat import Turn  # (torch: the session's module has it loaded already)

        # Where the markup's text meets the message's, the tokens may merge: SmolVLM's "User: " keeps
        # its space apart before "123" or "日本語" (the empty message's count), and a word takes it in
        # ("ĠHi": the one-word message's count, less the word). The larger of the two is never short.
        try:
            empty = len(session.prompt_ids([Turn("user", "")], system_prompt or None))
            probe = "Hi"
            word = len(session.prompt_ids([Turn("user", probe)], system_prompt or None)) \
                - len(session.tokenizer.encode_aside(probe))
        except Exception:  # noqa: BLE001 - a hint for the window's status bar: Send works without it
            log.debug("cannot count the prompt's overhead", exc_info=True)
            return -1
        return max(empty, word)

    def check_checkpoint(self, path: str, on_done: Callable[[dict], None]) -> None:
        """``on_done(report)``: :func:`engine.validate.check_checkpoint` as a dict (never raises)."""
        def run(_request: _Request) -> None:
            from engine.validate import check_checkpoint

            on_done(check_checkpoint(path).to_dict())
        self._put(_Request(run))

    def reset(self) -> None:
        """Forget the conversation (the model stays loaded)."""
        self._put(_Request(lambda r: self._set_history([], None, forget=True)))

    def cancel(self) -> None:
        """End the running answer soon and every queued one at once (thread-safe; no-op when idle)."""
        with self._lock:
            queued, self._pending = self._pending, []
            for request in queued:
                request.cancelled.set()
                request.answered = True
            if self._current is not None and self._current.sink is not None:
                self._current.cancelled.set()
                if self._session is not None:
                    self._session.cancel()
        for request in queued:
            request.sink(DoneEvent("cancelled"))

    def cancel_request(self, request: _Request) -> None:
        """End one answer (a handle from :meth:`send` & co): answered "cancelled" at once if still queued
        (a window's Stop behind the local server's answer to another program waited for that answer
        to end), stopped soon if running, a no-op when it has finished (thread-safe)."""
        with self._lock:
            request.cancelled.set()
            queued = request in self._pending
            if queued:
                self._pending.remove(request)
                request.answered = True
            elif self._current is request and self._session is not None:
                self._session.cancel()
        if queued:
            request.sink(DoneEvent("cancelled"))

    def shutdown(self, timeout: float = 1.0) -> bool:
        """Cancel, stop the engine thread and wait at most ``timeout`` s; True when it has ended.

        Never blocks longer: a thread still inside a torch call is a daemon and dies with the process.
        """
        with self._lock:
            self._closed = True
        self.cancel()
        loading = self.cancel_load()  # a 2B model's load on a CPU takes 15 s: it stops within a layer
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive() and loading:  # nothing is lost: what it built goes with the process
            log.info("a stopped model load is still ending after %.1f s; leaving it to exit with the process",
                     timeout)
        elif self._thread.is_alive():
            log.warning("the engine thread is still busy after %.1f s; leaving it to exit with the process", timeout)
        return not self._thread.is_alive()

    # -- the engine thread -----------------------------------------------------------------------
    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """Queue several requests with nothing from other threads in between: a front end that
        shares this service with another (the app and its local server) wraps ``set_history`` and
        ``send`` in it, so its answer runs on its own conversation."""
        with self._group:
            yield

    def answers_ahead(self, request: _Request, own: Sequence[_Request] = ()) -> int:
        """How many answers run or wait before ``request`` (a handle from :meth:`send` & co) that are not
        cancelled and not in ``own`` (the asking client's earlier ones): other clients' (the local
        server's, beside a window), which this one waits for; 0 once it runs."""
        with self._lock:
            if request not in self._pending or request.cancelled.is_set():
                return 0
            before = self._pending[:self._pending.index(request)]
            if self._current is not None and self._current.sink is not None:
                before.append(self._current)
            return sum(1 for r in before if not r.cancelled.is_set() and all(r is not o for o in own))

    def _put(self, request: _Request) -> None:
        with self._group, self._lock:
            if self._closed:
                if request.sink is not None:
                    request.sink(DoneEvent("cancelled"))
                return
            if request.sink is not None:
                self._pending.append(request)
        self._queue.put(request)

    def _loop(self) -> None:
        while True:
            request = self._queue.get()
            if request is _STOP:
                return
            with self._lock:
                if request in self._pending:
                    self._pending.remove(request)
                self._current = request
            try:
                if request.answered:
                    pass  # told "cancelled" when it was cancelled in the queue
                elif request.sink is not None and request.cancelled.is_set():
                    request.sink(DoneEvent("cancelled"))
                else:
                    request.run(request)
            except Exception:  # noqa: BLE001 - a bug in one request must not stop the service
                log.exception("engine request failed")
            finally:
                with self._lock:
                    self._current = None

    def _load(self, model: str, options: dict, on_done: LoadCallback, ticket: LoadTicket) -> None:
        from engine.cancellation import cancellable_load

        cancelled = False
        try:
            if ticket.cancelled:  # stopped while queued
                raise LoadCancelled("the load was stopped")
            with cancellable_load(ticket):
                session = self._loader(model, options)
            info = model_info(session, model)

            def install() -> None:
                with self._lock:
                    self._session, self._info, self._synced = session, info, []
            if not ticket.finish(install):  # stopped after its last cancellation point: dropped
                del session
                raise LoadCancelled("the load was stopped")
        except LoadCancelled:
            cancelled = True  # handled below, once the traceback no longer holds the half-built model
        except Exception as exc:  # noqa: BLE001 - every failure goes to the caller
            if not ticket.finish():  # stopped first: its caller was told so, and may have moved on
                cancelled = True
            elif is_engine_error(exc):
                log.warning("loading %s failed: %s", model, describe_error(exc))
            else:
                log.error("loading %s failed", model, exc_info=exc)
            if not cancelled:
                on_done(None, describe_error(exc))
                return
        finally:
            with self._lock:
                if ticket in self._loads:
                    self._loads.remove(ticket)
        if cancelled:
            log.info("loading %s was stopped", model)
            _free_memory(self._collect_garbage)
            on_done(None, LOAD_CANCELLED)
            return
        on_done(info, None)

    def _set_history(self, messages: list[HistoryMessage], system_prompt: str | None, forget: bool = False) -> None:
        # ``forget`` empties the cache too; an empty history alone keeps it, so a new conversation that
        # starts like the last one (the same system prompt, the same photo) still reuses its prefill.
        session = self._session
        if session is None:
            return
        if system_prompt is not None:
            session.system_prompt = system_prompt or None  # the cache keeps what still matches
        wanted = [_key(m) for m in messages]
        if len(session.turns) != len(self._synced):
            self._synced = []  # the session dropped old turns to fit the context: rebuild
        keep = 0
        while keep < min(len(wanted), len(self._synced)) and _same(wanted[keep], self._synced[keep]):
            keep += 1
        if forget:
            session.reset()
        if forget or keep < len(self._synced):
            # Turns go: what they left out no longer applies. Kept, it is still unsaid when the same
            # history is set again before the next answer (a front end re-states it with each request):
            # cleared there, the files an image chat lost on a text model went unsaid.
            self._left_out = []
        del session.turns[keep:]
        for message in messages[keep:]:
            session.turns.append(self._turn(session, message))
        self._synced = self._synced[:keep] + wanted[keep:]  # (a kept turn is as it was: its own text, ids)
        if self._left_out:  # one line, not one per file (an image chat reopened on a text model)
            log.warning("%s", self._describe_left_out())

    def _turn(self, session: Any, message: HistoryMessage) -> Any:
        """Engine thread: the session's ``Turn`` of an earlier message, its media read (those that
        cannot be are left out, the reason kept in :attr:`_left_out`)."""
        from engine.chat import Turn  # engine thread only (imports torch)

        user = message.role == "user"
        _, video_paths = _split(message.attachments)
        images = []
        for a in message.attachments if user else ():
            if a.kind != "video":  # each image at the detail it was read at live
                images += self._readable(lambda p, d=a.detail or "full": session.preprocess(p, d), [a.path])
        videos = self._readable(lambda p: session.preprocess_videos(p, self._video_params),
                                video_paths) if video_paths and user else []
        ids = None if message.token_ids is None else list(message.token_ids)
        parts = message.text_parts if user and len(images) + len(videos) == len(message.attachments) else None
        return Turn(message.role, message.text, images, token_ids=ids, videos=videos, text_parts=parts)

    @staticmethod
    def _grid_turn(session: Any, message: HistoryMessage) -> Any:
        """:meth:`_turn` with each image's grid for its tiles (no pixels: any thread), for a
        message without videos; an image that cannot be read is left out, as there."""
        from engine.chat import Turn

        user = message.role == "user"
        images = []
        for a in message.attachments if user else ():
            try:
                images += session.image_grids([a.path], a.detail or "full")
            except Exception as exc:  # noqa: BLE001 - ImageError / OSError alike, as _readable
                if not is_engine_error(exc) and not isinstance(exc, OSError):
                    raise
        ids = None if message.token_ids is None else list(message.token_ids)
        parts = message.text_parts if user and len(images) == len(message.attachments) else None
        return Turn(message.role, message.text, images, token_ids=ids, text_parts=parts)

    def _readable(self, preprocess: Callable[[list[str]], list], paths: list[str]) -> list:
        """The media of an earlier message that can still be read: a stored image deleted since (or a
        damaged file, or any image for a model that takes none) is left out of the context, the
        reason kept for the next answer's notice, instead of failing the whole history and leaving
        the conversation half rebuilt (the front end says which files are missing)."""
        out = []
        for path in paths:
            try:
                out += preprocess([path])
            except Exception as exc:  # noqa: BLE001 - ImageError / VideoError / OSError alike
                if not is_engine_error(exc) and not isinstance(exc, OSError):
                    raise
                # A text-only model's refusal is the same for every file and asks to remove one: in a
                # chat's history there is nothing to remove (trial 60: "3 earlier files …: it takes no
                # images (got 1); remove the image").
                self._left_out.append("the model reads text only" if isinstance(exc, UnsupportedOperation)
                                      else describe_error(exc))
        return out

    def _left_out_notice(self) -> str:
        """The words for the media :meth:`_set_history` left out (once: cleared here)."""
        notice = self._describe_left_out()
        self._left_out = []
        return notice

    def _describe_left_out(self) -> str:
        """One sentence: how many earlier files are out of the context and why (the first 3 reasons)."""
        files, reasons = len(self._left_out), list(dict.fromkeys(self._left_out))
        if not files:
            return ""
        why = "; ".join(r.rstrip(".") for r in reasons[:3]) + (" …" if len(reasons) > 3 else "")
        return (f"{files} earlier file{'s' if files > 1 else ''} of this chat {'are' if files > 1 else 'is'} not in "
                f"the model's context: {why}.")

    def _generate(self, sink: EventSink, system_prompt: str | None, start: Callable[[Any], Any],
                  after: Callable[[], list] | None = None, drop_answer: bool = False, edit_at: int | None = None,
                  continuing: bool = False) -> _Request:
        """Queue one answer: ``start(session)`` returns its event iterator (ChatSession.send & co)."""
        def run(request: _Request) -> None:
            self._run_answer(request, system_prompt, start, after, drop_answer, edit_at, continuing)
        request = _Request(run, sink)
        self._put(request)
        return request

    def _run_answer(self, request: _Request, system_prompt, start, after, drop_answer, edit_at,
                    continuing: bool = False) -> None:
        sink, session = request.sink, self._session
        done = None
        try:
            if session is None:
                raise RuntimeError("No model is loaded yet.")
            if system_prompt is not None:
                session.system_prompt = system_prompt or None
            session.progress = sink
            turns_before = list(session.turns)
            events = start(session)
            if request.cancelled.is_set():
                session.cancel()  # send() cleared the session's flag when it started
            pieces = []
            for event in events:
                if isinstance(event, DoneEvent):
                    done = event
                    continue
                if isinstance(event, TokenEvent):  # (not a raw completion's scored prompt)
                    pieces.append(event.text)
                sink(event)
            notice = self._left_out_notice()
            if done is not None and notice:
                done.stats.notice = f"{done.stats.notice} {notice}".strip()
            unchanged = len(session.turns) == len(turns_before) and all(
                a is b for a, b in zip(session.turns, turns_before))
            if not (done is not None and done.finish_reason == "cancelled" and unchanged):
                # (cancelled while its video frames were sampled: no turn was added, nothing to track)
                # A continued answer is one turn: the text it had plus the continuation.
                answer = session.turns[-1].text if continuing and session.turns else "".join(pieces)
                self._track(session, after, drop_answer, edit_at, answer)
        except Exception as exc:  # noqa: BLE001 - reported in the DoneEvent; the service keeps serving
            if is_engine_error(exc):
                log.warning("generation failed: %s", describe_error(exc))
            else:
                log.error("generation failed", exc_info=exc)
            done = DoneEvent("error", GenerationStats(), describe_error(exc), type(exc).__name__)
        finally:
            if session is not None:
                session.progress = None
        sink(done or DoneEvent("error", GenerationStats(), "The engine stopped without a final event."))

    def _track(self, session: Any, after, drop_answer: bool, edit_at: int | None, answer: str) -> None:
        """Keep :attr:`_synced` describing ``session.turns`` after an answer (else: rebuild next time)."""
        synced = list(self._synced)
        if drop_answer:
            while synced and synced[-1][0] == "assistant":
                synced.pop()
        if edit_at is not None:
            del synced[edit_at:]
        synced += (after() if after else []) + [_key(HistoryMessage("assistant", answer, token_ids=()))]
        self._synced = synced if len(synced) == len(session.turns) else []


def exit_process(code: int) -> NoReturn:
    """End the process now with exit status ``code``, skipping the interpreter's teardown: logging
    and stdout/stderr are flushed, ``atexit`` handlers do not run. Call it only once everything is
    saved and closed.

    For a front end that stops while torch is busy: an engine thread still inside a model load after
    :meth:`EngineService.shutdown` timed out (a daemon, but tearing the interpreter and torch's CUDA
    state down beside it aborted the process on the H200: "terminate called without an active
    exception", SIGABRT, in 5 of 9 Ctrl-Cs in the first 0.7 s of a server's load, docs/BENCHMARKS.md
    session 35), or a Ctrl-C while the command line runs torch on its main thread."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing left to lose
            stream.flush()
    os._exit(code)


def _exit_130(signum: int, frame: Any, last_words: Callable[[], None] | None = None) -> None:
    if last_words is not None:
        with contextlib.suppress(Exception):  # a closed pipe: exit all the same
            last_words()
    exit_process(130)


@contextlib.contextmanager
def ctrl_c_exits_process(restore: bool = True, last_words: Callable[[], None] | None = None) -> Iterator[None]:
    """For a program that runs torch on its main thread (the command line, the headless self-test):
    within this block Ctrl-C ends the process at once with 130 (:func:`exit_process`).

    Python raises KeyboardInterrupt at the next bytecode, which may be inside a Python callback that
    torch's C++ code is running; the exception cannot unwind through it, and the process aborted
    (SIGABRT, "terminate called after throwing an instance of 'pybind11::error_already_set'", seen
    with Ctrl-C 1.2 s into a CPU ``generate``). Nothing is lost by exiting at once: what was printed
    is flushed, and the files the engine writes (a GGUF file's derived folder, the native CPU
    library, the Triton key) appear by an atomic rename, so at most a temporary one is left. Only
    on the main thread and where Python's own handler is in place (a background job keeps SIGINT
    ignored). ``restore=False`` keeps the handler after the block, through the interpreter's exit
    (threading's joins and ``atexit``; Python puts the default back before its final teardown).
    ``last_words``: called first (the command line's ``--json`` ends with a "cancelled" record)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    previous = signal.signal(signal.SIGINT, functools.partial(_exit_130, last_words=last_words))
    try:
        yield
    finally:
        if restore:
            signal.signal(signal.SIGINT, previous)


def _free_memory(collect_garbage: Callable[[], None] | None = None) -> None:
    """Give back what a stopped load built (engine thread): its tensors are unreachable once the
    exception that stopped it is gone, but they sit in reference cycles and the allocators keep
    their memory cached.

    ``collect_garbage``: asks the front end's own thread for the collection (and the C library's
    trim after it: :func:`engine.host_memory.release_free_host_memory`) instead of running
    ``gc.collect()`` here. Collected here, a cycle holding a Qt object ran its destructor on this
    thread, which can deadlock Qt's connection lock against the GIL (app/main_thread_gc.py). CUDA's
    cached blocks then stay with torch's allocator, for the next load to reuse."""
    import gc

    if collect_garbage is not None:
        collect_garbage()
        return
    gc.collect()
    torch = sys.modules.get("torch")  # a fake loader in a test never imported it
    if torch is None:
        return
    from engine.host_memory import release_free_host_memory

    release_free_host_memory()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def model_info(session: Any, path: str) -> ModelInfo:
    """What a front end shows of a loaded session (engine thread)."""
    caps = session.model.capabilities() if hasattr(session, "model") else Capabilities()
    capacity = getattr(getattr(session, "cache", None), "capacity", 0)
    if capacity and (not caps.max_context or capacity < caps.max_context):
        # The conversation's room is the cache's (a context size set below the model's): what a
        # front end's budget and refusals must count against, not the checkpoint's maximum.
        caps = dataclasses.replace(caps, max_context=int(capacity))
    return ModelInfo(name=str(session.model_name), path=path, capabilities=caps, device=str(session.device),
                     dtype=str(session.dtype), weights=str(getattr(session, "weights", "")),
                     folder=model_folder(path), devices=_devices())


def _devices() -> tuple[str, ...]:
    """The devices the engine can run on here; none said for a session that never needed torch (a
    front end's stand-in, whose process stays free of it)."""
    if "torch" not in sys.modules:
        return ()
    from engine.device import present_devices

    return present_devices()


def model_folder(path: str) -> str:
    """The local folder of ``path`` (a folder, or a Hub id already in the HF cache); "" if unknown.

    Front ends read the checkpoint's generation_config.json from it for their default settings.
    """
    if os.path.isdir(path):
        return path
    if looks_like_repo_id(path):
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(path, local_files_only=True)
        except Exception:  # noqa: BLE001 - only a hint for defaults
            return ""
    return ""
