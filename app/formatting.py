"""Text for the status bar and message footers, from an answer's plain-dict result (``app.controller.result_of``)."""

from __future__ import annotations

FINISH_LABELS = {
    "stop": "",
    "length": "stopped at the token limit (length)",
    "cancelled": "stopped by you (cancelled)",
    "error": "failed (error)",
}


def model_summary(info: dict) -> str:
    """``"SmolVLM-256M-Instruct · cpu · float32"`` (``· int8`` with int8 weights) from a ``model_loaded`` dict."""
    weights = info.get("weights") or ""
    parts = [info.get("model_name") or "model", info.get("device") or "", info.get("dtype") or "",
             weights if weights == "int8" else ""]
    return " · ".join(p for p in parts if p)


def stats_summary(result: dict) -> str:
    """TTFT, decode speed and token counts from a ``finished`` dict ("" when there are none)."""
    if "generated_tokens" not in result:
        return ""
    parts = [
        f"TTFT {result.get('ttft_s', 0.0):.2f} s",
        f"{result.get('decode_tokens_per_s', 0.0):.1f} tok/s",
        f"{result.get('prompt_tokens', 0)} prompt / {result.get('cached_tokens', 0)} cached / "
        f"{result.get('generated_tokens', 0)} generated tokens",
    ]
    if result.get("dropped_turns"):
        parts.append(f"{result['dropped_turns']} old turns dropped to fit the context")
    return " · ".join(parts)


def pending_summary(counts: list[int | None]) -> str:
    """``"2 images · 1,152 image tokens"`` for pending attachments (None / -1: not known yet)."""
    if not counts:
        return ""
    label = "1 image" if len(counts) == 1 else f"{len(counts)} images"
    known = [c for c in counts if c is not None and c >= 0]
    if len(known) < len(counts):
        return f"{label} · counting image tokens…" if any(c is None for c in counts) else label
    return f"{label} · {sum(known):,} image tokens"


def finish_footer(result: dict) -> str:
    """The muted line under an answer: why it ended when that is not a normal stop."""
    reason = result.get("finish_reason", "error")
    if reason == "error" and result.get("error"):
        return f"failed (error): {result['error']}"
    return FINISH_LABELS.get(reason, reason)


def progress_summary(event) -> str:
    """What the engine is doing before the first token (an ``engine.api.ProgressEvent``)."""
    what = "Reading the image" if event.stage == "image" else "Reading the prompt"
    return f"{what}… {event.done}/{event.total}"
