"""An answer's events as text pieces: stop strings, token counts, the finish reason, engine errors.

The engine stops on end-of-utterance and on length; OpenAI's ``stop`` strings are matched here on
the streamed text. Text that could still become a stop string is held back until it cannot, so a
client never receives any part of a stop string; when one is found the answer is cancelled at once
(its KV blocks are freed), and the finish reason is "stop".
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from engine.api import DoneEvent, GenerationStats, PromptLogprobsEvent, TokenEvent
from server.bridge import Answer, shutting_down
from server.errors import APIError, client_text, from_engine


class StopMatcher:
    """Finds the earliest of ``stops`` in streamed text; :meth:`feed` returns what is safe to emit.

    Each stop string is followed by a Knuth-Morris-Pratt automaton, whose state is the length of the
    longest end of the text so far that begins that stop string: the text held back is the longest
    of these (at most ``len(stop) - 1`` characters), and a state reaching ``len(stop)`` is a match.
    So a token's work is linear in its own length (amortized), whatever the stop strings' lengths;
    building the tables is linear in them, once per answer. (Testing every prefix of every stop
    string per token was quadratic in their length: a 600 000-character stop string blocked the
    server's event loop for seconds per token.)"""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.buffer = ""
        self._fail = [_prefix_function(s) for s in self.stops]
        self._state = [0] * len(self.stops)

    def feed(self, text: str) -> tuple[str, bool]:
        """``(text to emit, stopped)``: with ``stopped`` the text ends just before the stop string."""
        if not self.stops:
            return text, False
        start = len(self.buffer)
        self.buffer += text
        first = None  # where the earliest match begins in the buffer
        for n, (stop, fail) in enumerate(zip(self.stops, self._fail)):
            state = self._state[n]
            for i in range(start, len(self.buffer)):
                c = self.buffer[i]
                while state and stop[state] != c:
                    state = fail[state - 1]
                if stop[state] == c:
                    state += 1
                if state == len(stop):  # this stop string's first match: later ones begin later
                    begin = i + 1 - len(stop)
                    first = begin if first is None else min(first, begin)
                    break
            self._state[n] = state
        if first is not None:
            out = self.buffer[:first]
            self._reset()
            return out, True
        cut = len(self.buffer) - max(self._state)
        out, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return out, False

    def flush(self) -> str:
        out = self.buffer
        self._reset()
        return out

    def _reset(self) -> None:
        self.buffer = ""
        self._state = [0] * len(self.stops)


def _prefix_function(s: str) -> list[int]:
    """KMP's table: ``p[i]`` is the length of the longest proper prefix of ``s[:i + 1]`` that is
    also its suffix."""
    p = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = p[k - 1]
        if s[i] == s[k]:
            k += 1
        p[i] = k
    return p


@dataclass
class Outcome:
    """How an answer ended: set when :func:`pieces` is exhausted."""

    finish_reason: str = "stop"
    stats: GenerationStats = field(default_factory=GenerationStats)
    completion_tokens: int = 0
    error: APIError | None = None
    token_ids: list[int] = field(default_factory=list)
    cut_at_stop: bool = False  # the text ends before its tokens do (a stop string matched)


def stops_of(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


async def pieces(answer: Answer, first: TokenEvent | DoneEvent | PromptLogprobsEvent | None, stops: list[str],
                 outcome: Outcome, is_disconnected: Callable[[], Any] | None = None
                 ) -> AsyncIterator[tuple[str, TokenEvent | PromptLogprobsEvent | None]]:
    """Yield ``(text, token event)`` pairs from ``first`` (``None``: the answer's next event) on; then
    ``outcome`` tells the end. Engine errors land in ``outcome.error``. A prompt's tokens (``echo``
    with ``logprobs``: scored; the ``echo`` of token ids: their text) come as ``("",
    PromptLogprobsEvent)`` before the first token: they are no part of the answer's text.

    A token event comes once all of its text has been given (its logprobs describe text the client
    has), with ``event`` None for text given alone and ``text`` "" for a further event of the same
    text. Text held back as the possible start of a stop string holds its tokens back with it: the
    tokens of a stop string that matched are not given (as the text is not; trial 66: a logprob
    for " 8" after text that ends before it), and one that began before it is."""
    matcher = StopMatcher(stops)
    held: deque[tuple[int, int, TokenEvent]] = deque()  # (start, end) of each one's text in the answer
    made = given = 0  # characters of the answer's text generated, and given out

    def ready(stopped: bool) -> list[TokenEvent]:
        """The held tokens whose text is given: whole, or (``stopped``) begun before the cut."""
        out = []
        while held and (held[0][0] < given if stopped else held[0][1] <= given):
            out.append(held.popleft()[2])
        return out

    event = first if first is not None else await answer.next(is_disconnected)
    while not isinstance(event, DoneEvent):
        if isinstance(event, PromptLogprobsEvent):
            yield "", event
            event = await answer.next(is_disconnected)
            continue
        if event.token_id >= 0:
            outcome.completion_tokens += 1
            outcome.token_ids.append(event.token_id)
        text, stopped = matcher.feed(event.text)
        held.append((made, made + len(event.text), event))
        made, given = made + len(event.text), given + len(text)
        for n, token in enumerate(ready(stopped) or [None]):
            yield (text if n == 0 else ""), token
        if stopped:
            outcome.cut_at_stop = True
            answer.cancel()
            while not isinstance(event, DoneEvent):  # the cancelled answer's last events, for its stats
                event = await answer.next()
            outcome.finish_reason, outcome.stats = "stop", event.stats
            return
        event = await answer.next(is_disconnected)
    tail = matcher.flush()
    for n, token in enumerate([e for _, _, e in held] or ([None] if tail else [])):
        yield (tail if n == 0 else ""), token
    outcome.stats = event.stats
    if event.finish_reason == "error":
        outcome.error = from_engine(event.error_type, event.error)
    elif event.finish_reason == "cancelled" and answer.shut_down:
        outcome.error = shutting_down(cut=True)
    outcome.finish_reason = "length" if event.finish_reason == "length" else "stop"


async def first_event(answer: Answer, is_disconnected: Callable[[], Any], stream: bool = False,
                      all_images_low: bool = False) -> TokenEvent | DoneEvent | PromptLogprobsEvent | None:
    """Wait for the answer's first event before any byte is sent, so that a refusal (a prompt too
    long, an unreadable image or video) still gets a real HTTP status; raises its APIError.

    ``stream``: wait only until the engine has read the prompt (then ``None``, the first event
    comes in the stream): past every refusal, and past the vision tower and the prefill, so an
    engine failure there (the GPU out of memory) still gets its status too. The response's
    headers go out while the engine thread waits for the GPU's first token. An error after that
    is the stream's error event. A prompt too long is refused here (before its prefill), with advice
    that knows whether the request's images were ``all_images_low`` (:func:`~server.errors.from_engine`)."""
    if stream:
        await answer.wait_prompt_read(is_disconnected)
        if not answer.events:
            return None
    event = await answer.next(is_disconnected)
    if isinstance(event, DoneEvent) and event.finish_reason == "error":
        raise from_engine(event.error_type, event.error, all_images_low)
    if isinstance(event, DoneEvent) and event.finish_reason == "cancelled" and answer.shut_down:
        raise shutting_down(cut=False)
    return event


def notice_of(outcome: Outcome, videos: Sequence[str] = ()) -> dict:
    """``{"notice": text}`` where the engine answered with something the client should know (only
    some of a video's frames could be read), ``{}`` otherwise: a field beside ``usage`` that OpenAI's
    clients keep as an extra. The server's own names for uploaded files are not said: each of the
    last message's ``videos`` (stored paths, in order) is "the video", or "video 2 of 3" where it
    sent several (the first place of a file sent twice)."""
    notice = getattr(outcome.stats, "notice", "")
    if not notice:
        return {}
    labels: dict[str, str] = {}
    for number, path in enumerate(videos, 1):
        labels.setdefault(PurePath(path).name, f"video {number} of {len(videos)}" if len(videos) > 1 else "the video")
    for name, label in labels.items():
        notice = notice.replace(name, label)
    return {"notice": client_text(notice, "the video")}


def usage(outcome: Outcome) -> dict:
    s = outcome.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "total_tokens": s.prompt_tokens + outcome.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": s.cached_tokens}}
