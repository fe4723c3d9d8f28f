"""How long the first word will take on this machine, from how fast earlier answers started.

Measured, not guessed: after each local answer, the prompt tokens it read (those not already in the
KV cache) divided by its time to first token — vision tower and prefill together, what the user waits
through — is kept in the settings per model, device, data type and weights, averaged with the earlier
measurements (half each). Answers with fewer than :data:`MIN_TOKENS` new prompt tokens are not measured
(fixed costs dominate them). Until a model has a measurement nothing is shown: a default would be
wrong by 10x between an H200 and a laptop. Remote servers are not estimated.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings

MIN_TOKENS = 64
#: Prompt tokens besides the images: the chat template and a typical question (an estimate's floor).
QUESTION_TOKENS = 40
#: Shorter waits are not worth announcing.
MIN_SHOWN_S = 1.0


def speed_key(info: dict) -> str | None:
    """The settings key for the loaded model's measured speed; None for a remote model or none loaded."""
    name = info.get("model_name") or ""
    if not name or str(info.get("backend") or "local").startswith("remote:"):
        return None
    parts = (name, info.get("device") or "", info.get("dtype") or "", info.get("weights") or "")
    return "speed/" + "|".join(p.replace("/", "_").replace("\\", "_") for p in parts)


def measured_speed(qs: QSettings, info: dict) -> float | None:
    """Prompt tokens per second of waiting for the first word, as measured so far (None: never)."""
    key = speed_key(info)
    if key is None:
        return None
    try:
        value = float(qs.value(key, 0) or 0)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def record_answer(qs: QSettings, info: dict, result: dict) -> float | None:
    """Fold one finished answer (``app.controller.result_of``) into the model's speed; the new speed,
    or None when the answer does not measure it (remote, failed, cancelled early, too short)."""
    key = speed_key(info)
    read = int(result.get("prompt_tokens", 0)) - int(result.get("cached_tokens", 0))
    ttft = float(result.get("ttft_s", 0.0) or 0.0)
    if key is None or result.get("finish_reason") == "error" or read < MIN_TOKENS or ttft <= 0:
        return None
    measured = read / ttft
    old = measured_speed(qs, info)
    speed = measured if old is None else (old + measured) / 2
    qs.setValue(key, round(speed, 2))
    return speed


def estimate_seconds(qs: QSettings, info: dict, image_tokens: int) -> float | None:
    """Seconds until the first word for a question with ``image_tokens`` of new images (None: unknown)."""
    speed = measured_speed(qs, info)
    return None if speed is None else (image_tokens + QUESTION_TOKENS) / speed


def estimate_text(seconds: float | None) -> str:
    """``"≈ 25 s on this machine"``, ``"≈ 1 min 10 s on this machine"``; "" when unknown or under a second."""
    if seconds is None or seconds < MIN_SHOWN_S:
        return ""
    whole = round(seconds)
    if whole < 60:
        return f"≈ {whole} s on this machine"
    minutes, rest = divmod(round(seconds / 5) * 5, 60)  # minutes: to 5 s, no false precision
    return f"≈ {minutes} min {rest} s on this machine" if rest else f"≈ {minutes} min on this machine"
