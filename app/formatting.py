"""Text for the status bar and message footers, from an answer's plain-dict result (``app.controller.result_of``)."""

from __future__ import annotations

import datetime as dt
import re

from app.backends.remote_http import VERDICTS
from engine.api.errors import MEDIA_KINDS, SYSTEM_PROMPT_TOO_LONG, media_kind

FINISH_LABELS = {
    "stop": "",
    "length": "stopped at the token limit (length)",
    "cancelled": "stopped by you (cancelled)",
    "error": "failed (error)",
}


def model_summary(info: dict) -> str:
    """``"SmolVLM-256M-Instruct · cpu · float32"`` (``· int8`` / ``· int4`` with quantized weights) from a
    ``model_loaded`` dict."""
    weights = info.get("weights") or ""
    backend = str(info.get("backend") or "")
    if backend.startswith("remote:"):  # "model · on my-gpu-box": the answer comes from elsewhere
        return f"{info.get('model_name') or 'model'} · on {backend[len('remote:'):]}"
    parts = [info.get("model_name") or "model", info.get("device") or "", info.get("dtype") or "",
             weights if weights in ("int8", "int4") else ""]
    return " · ".join(p for p in parts if p)


def footer_text(result: dict) -> str:
    """The line under an answer: why it ended and what its engine noted (:func:`finish_footer`), then
    its numbers (:func:`stats_summary`), the count of old messages left out only where the note does
    not already say it (trial 56: "the 282 oldest messages were left out. · … · 282 old messages
    dropped to fit the context")."""
    said = finish_footer(result)
    return " · ".join(p for p in (said, stats_summary(result, dropped="oldest message" not in said)) if p)


def stats_summary(result: dict, dropped: bool = True) -> str:
    """TTFT, decode speed and token counts from a ``finished`` dict ("" when there are none, or when
    nothing was read or generated: an answer refused before its prefill has only zeros to show).
    A time or rate that was never measured (0: an answer stopped before its first token has no TTFT,
    one of fewer than two tokens no decode rate) is left out, not shown as "0.00 s" or "0.0 tok/s"; so
    is a prompt count of 0 (a server's answer stopped before the usage that says it). ``dropped``: with
    the count of old messages left out to fit the context."""
    if "generated_tokens" not in result:
        return ""
    if not result.get("prompt_tokens") and not result.get("generated_tokens"):
        return ""
    parts = []
    if result.get("ttft_s"):
        parts.append(f"TTFT {result['ttft_s']:.2f} s")
    if result.get("decode_tokens_per_s"):
        parts.append(f"{result['decode_tokens_per_s']:.1f} tok/s")
    generated = result.get("generated_tokens", 0)
    words = f"{generated} generated token{'s' if generated != 1 else ''}"
    if result.get("prompt_tokens"):
        parts.append(f"{result['prompt_tokens']} prompt / {result.get('cached_tokens', 0)} cached / {words}")
    else:  # a server's answer cut off or stopped before its usage came: the prompt's count is unknown, not 0
        parts.append(words)
    if result.get("dropped_turns") and dropped:
        parts.append(dropped_summary(result["dropped_turns"]))
    return " · ".join(parts)


def dropped_summary(messages: int) -> str:
    """``"4 old messages dropped to fit the context"``: the engine's ``dropped_turns`` counts messages
    (a user's and the answers to it), as its notice says ("the 4 oldest messages were dropped")."""
    return f"{messages} old {'message' if messages == 1 else 'messages'} dropped to fit the context"


def pending_summary(counts: list[int | None]) -> str:
    """``"2 images · 1,152 image tokens"`` for pending attachments (None / -1: not known yet)."""
    if not counts:
        return ""
    label = "1 image" if len(counts) == 1 else f"{len(counts)} images"
    known = [c for c in counts if c is not None and c >= 0]
    if len(known) < len(counts):
        return f"{label} · counting image tokens…" if any(c is None for c in counts) else label
    return f"{label} · {sum(known):,} image tokens"


# What to do where the engine says the media take what does not fit (engine.api.errors.media_kind).
_FEWER_MEDIA = dict(zip(MEDIA_KINDS, [
    "Attach fewer images or pick a lower image detail, shorten it, or send it in parts",
    "Attach a shorter video or fewer frames (Settings ▸ Video frames), shorten it, or send it in parts",
    "Attach fewer images or a shorter video, shorten it, or send it in parts"]))


# The error types of a prompt beyond the context: the engine's, and a server's refusal (app.backends.remote).
CONTEXT_ERRORS = ("PromptTooLongError", "Remote:context")


def error_words(error_type: str, message: str) -> str:
    """An engine error as the window says it: a sentence, and for a prompt beyond the context what
    to do about it (the engine's message is worded for every front end, the server's clients too).
    A server's refusal comes after the backend has left out every earlier message (app.backends.remote):
    this message alone is too long; a Smolchat server's words hold the engine's "the prompt has"."""
    if error_type not in CONTEXT_ERRORS:
        return message
    # A server's words start with its name ("Box: The conversation is longer..."): kept in front.
    server = message.partition(VERDICTS["context"])[0] if VERDICTS["context"] in message else ""
    return server + _context_words(error_type, message)


def _context_words(error_type: str, message: str) -> str:
    at = message.find("the prompt has ")
    if at < 0:
        if error_type == "Remote:context":  # "<server>: <verdict>: <the server's words>"
            said = message.partition(VERDICTS["context"])[2].removeprefix(": ")
            return ("Too long for the model's context: the server refused this message even without the earlier "
                    f"ones{f' (“{said}”)' if said else ''}. Shorten it or send it in parts.")
        return message
    # "the prompt has N tokens but the context holds M[; why][: the server's advice]"
    said = message[at:]
    if "; the system prompt alone" in said:  # the setting fails every answer; it says so
        head = said.split(": ", 1)[0]  # a server words its own advice there
        return head[0].upper() + head[1:] + SYSTEM_PROMPT_TOO_LONG + "."
    head = re.split(r"[;:]", said, maxsplit=1)[0].removeprefix("the prompt has ")
    fix = _FEWER_MEDIA.get(media_kind(head), "Shorten it or send it in parts")
    return (f"Too long for the model's context: this message makes a prompt of {head}. {fix} "
            "(a long chat keeps only the earlier messages that fit).")


def context_full(result: dict) -> bool:
    """An answer that stopped at the end of the model's context (``result["context"]``, tokens, as
    the controller records it), not at the token limit: it cannot be continued."""
    context = result.get("context") or 0
    tokens = (result.get("prompt_tokens") or 0) + (result.get("generated_tokens") or 0)
    return result.get("finish_reason") == "length" and isinstance(context, int) and 0 < context <= tokens


def finish_footer(result: dict) -> str:
    """The muted line under an answer: why it ended when that is not a normal stop, and the answer's
    notice (a video read in part, old messages left out): said in a banner while it ran, and kept
    here after it (trial 52: gone once the banner was dismissed, or after a restart)."""
    reason = result.get("finish_reason", "error")
    if reason == "error" and result.get("error"):
        why = f"failed (error): {result['error']}"
    elif context_full(result):
        why = f"stopped: the model's context is full ({result['context']:,} tokens)"
    else:
        why = FINISH_LABELS.get(reason, reason)
    notice = str(result.get("notice") or "") if reason != "error" else ""
    return " · ".join(part for part in (why, notice) if part)


def progress_summary(event) -> str:
    """What the engine is doing before the first token (an ``engine.api.ProgressEvent``), for the status bar."""
    return describe_progress(event)[0]


def describe_progress(event) -> tuple[str, int, int]:
    """``(text, done, total)`` for a ProgressEvent: the words to show and the bar's position.

    The bar follows the stage's own count (tiles over every image read, or prompt tokens); the text
    names the tile being read now (``tile + 1``, at most ``tiles``).
    """
    if event.stage == "server_thinking":  # (its thoughts are not the answer: they are not shown)
        return f"The model is thinking ({int(event.done):,} characters so far)", 0, 0
    if event.stage == "server_loading":  # (a busy bar: the server does not say how far its load is)
        return f"The server is loading its model — asking again ({int(event.done)} s so far)", 0, 0
    total = max(0, int(event.total))
    done = min(max(0, int(event.done)), total)
    if event.stage == "prefill":
        return f"Reading your question ({total:,} tokens)", done, total
    if event.stage == "frames":  # decoding the sampled frames of a video, before the vision tower reads them
        which = f"video {event.index + 1} of {event.count}" if event.count > 1 else "the video"
        return f"Taking frames from {which} — frame {min(done + 1, total)} of {total}", done, total
    media = getattr(event, "media", "image")
    part = "frame" if media == "video" else "tile"
    count = getattr(event, "count", 0)
    if count:
        current = min(event.tile + 1, event.tiles)
        return f"Reading {media} {event.index + 1} of {count} — {part} {current} of {event.tiles}", done, total
    return f"Reading the {media} — {part} {min(done + 1, total)} of {total}", done, total



_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def message_time(when: float, now: float) -> tuple[str, str]:
    """``(shown, tooltip)`` for a message sent at ``when`` (seconds since the epoch, local time) as of
    ``now``: "16:30" the same day, "Yesterday 16:30", "3 Dec 16:30" this year, "3 Dec 2025" before;
    the tooltip always has the full date and time ("Sat 5 Dec 2026, 16:30:12"). English words, as the
    rest of the window; 24-hour times."""
    moment, today = dt.datetime.fromtimestamp(when), dt.datetime.fromtimestamp(now).date()
    clock = f"{moment:%H:%M}"
    date = f"{moment.day} {_MONTHS[moment.month - 1]}"
    days = (today - moment.date()).days
    if days < -1:  # a date ahead (an import from a machine whose clock was wrong): said whole (trial 56)
        shown = f"{date} {moment.year}"
    elif days <= 0:
        shown = clock  # (a clock set back: a time ahead of now is shown as today's)
    elif days == 1:
        shown = f"Yesterday {clock}"
    elif moment.year == today.year:
        shown = f"{date} {clock}"
    else:
        shown = f"{date} {moment.year}"
    weekday = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")[moment.weekday()]
    return shown, f"{weekday} {date} {moment.year}, {moment:%H:%M:%S}"
