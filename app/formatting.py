"""Text for the status bar and message footers, from the worker's plain-dict results."""

from __future__ import annotations

FINISH_LABELS = {
    "stop": "",
    "length": "stopped at the token limit (length)",
    "cancelled": "stopped by you (cancelled)",
    "error": "failed (error)",
}


def model_summary(info: dict) -> str:
    """``"SmolVLM-256M-Instruct · cpu · float32"`` from a ``model_loaded`` dict."""
    parts = [info.get("model_name") or "model", info.get("device") or "", info.get("dtype") or ""]
    return " · ".join(p for p in parts if p)


def stats_summary(result: dict) -> str:
    """TTFT, decode speed and token counts from a ``finished`` dict ("" when there are none)."""
    if "generated_tokens" not in result:
        return ""
    parts = [
        f"TTFT {result.get('ttft_s', 0.0):.2f} s",
        f"{result.get('decode_tokens_per_s', 0.0):.1f} tok/s",
        f"{result.get('prompt_tokens', 0)} prompt / {result.get('generated_tokens', 0)} generated tokens",
    ]
    if result.get("cached_tokens"):
        parts.append(f"{result['cached_tokens']} cached")
    return " · ".join(parts)


def finish_footer(result: dict) -> str:
    """The muted line under an answer: why it ended when that is not a normal stop."""
    reason = result.get("finish_reason", "error")
    if reason == "error" and result.get("error"):
        return f"failed (error): {result['error']}"
    return FINISH_LABELS.get(reason, reason)
