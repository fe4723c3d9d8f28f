"""Helpers both benchmarks use (bench/compare.py and bench/triton_decode.py): machine facts, our
session built and streamed the way the app does it, medians."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def median(xs):
    return statistics.median(xs) if xs else None


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def load_ours(ck: str, device: str, dtype: torch.dtype):
    from engine.chat import ChatSession

    return ChatSession.load(ck, device=device, dtype=str(dtype).removeprefix("torch."))


def new_session(session, cache_kind: str, max_tokens: int | None):
    from engine.cache import CacheConfig
    from engine.chat import ChatSession

    session.cache.release()
    return ChatSession(session.model, session.tokenizer, session.processor,
                       CacheConfig(kind=cache_kind, max_tokens=max_tokens), name="bench")


def ours_generate(session, text: str, images, n: int, device: str):
    """Streams one answer; returns (token ids, ttft_s wall, decode tok/s wall, prompt ids)."""
    from engine.api.events import DoneEvent, GenerationParams, TokenEvent

    params = GenerationParams(max_new_tokens=n, ignore_eos=True, temperature=0.0)
    sync(device)
    t0 = time.perf_counter()
    tokens, stamps, done = [], [], None
    for ev in session.send(text, images=images, params=params):
        if isinstance(ev, TokenEvent) and ev.token_id >= 0:
            tokens.append(ev.token_id)
            stamps.append(time.perf_counter())
        elif isinstance(ev, DoneEvent):
            done = ev
    if done is None or done.error:
        raise RuntimeError(f"our generation failed: {done and done.error}")
    ttft = stamps[0] - t0
    rate = (len(tokens) - 1) / (stamps[-1] - stamps[0]) if len(tokens) > 1 else None
    return tokens, ttft, rate, done.stats.prompt_tokens


def machine(device: str) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        info["cpu_model"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                                 if line.startswith("model name"))
        info["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
    except (OSError, StopIteration):
        pass
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info
