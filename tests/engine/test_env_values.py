"""Issue 18: an environment variable with a value the engine cannot use never makes every answer fail."""

from __future__ import annotations

import logging

import pytest

from engine.device import DecodeThreads


@pytest.mark.parametrize("value", ["0", "lots", "-2"])
def test_an_unusable_decode_thread_count_is_ignored_with_a_warning(monkeypatch, caplog, value):
    monkeypatch.setenv("SMOLCHAT_DECODE_THREADS", value)
    with caplog.at_level(logging.WARNING, logger="engine.device"):
        threads = DecodeThreads(max_threads=4)
    assert threads.choices == [1, 4]  # tuned, as without the variable (before, "0" pinned 0 threads)
    assert caplog.messages == [f"$SMOLCHAT_DECODE_THREADS: ignored {value!r} (use auto or a number of threads >= 1); "
                               "tuning instead"]


def test_a_usable_decode_thread_count_is_pinned(monkeypatch):
    monkeypatch.setenv("SMOLCHAT_DECODE_THREADS", "3")
    assert DecodeThreads(max_threads=4).choices == [3]


def _drive(threads: DecodeThreads, seconds, steps: int) -> list[int]:
    """Run ``steps`` steps timed by ``seconds(n_threads, step)``; the thread counts picked."""
    picked = []
    for _ in range(steps):
        n = threads.pick()
        picked.append(n)
        threads.record(n, seconds(n, threads.step))
    return picked


def test_decode_threads_probe_less_often_while_the_choice_holds(monkeypatch):
    monkeypatch.delenv("SMOLCHAT_DECODE_THREADS", raising=False)
    threads = DecodeThreads(max_threads=2, probe=3, period=32, max_period=256)
    picked = _drive(threads, lambda n, _: 0.020 if n == 2 else 0.040, 2000)
    assert threads.best == 2 and threads.baseline == 0.020
    # Probes start at steps 0, 64, 192, 448, 704, ...: each one that keeps the choice doubles the
    # period, from 32 up to 256.
    starts = [i for i in range(1, len(picked)) if picked[i] == 1 and picked[i - 1] == 2]
    assert starts[:5] == [64, 192, 448, 704, 960], starts[:6]
    assert picked.count(1) == 3 * (1 + len(starts))  # 3 one-thread steps per probe, 30 in 2000 steps


def test_decode_threads_probe_at_once_when_steps_slow_down_and_switch(monkeypatch):
    monkeypatch.delenv("SMOLCHAT_DECODE_THREADS", raising=False)
    threads = DecodeThreads(max_threads=2, probe=3, period=32, max_period=256)
    _drive(threads, lambda n, _: 0.020 if n == 2 else 0.040, 300)  # idle machine: period grows
    assert threads.period > 32 and threads.best == 2
    # Another process takes a core at step 300: two threads now take 0.5 s a step, one 0.04 s.
    busy = lambda n, _: 0.5 if n == 2 else 0.040  # noqa: E731
    picked = _drive(threads, busy, 12)
    # Two slow steps, a probe (3 on one thread, 3 on two), then one thread from there on.
    assert picked == [2, 2, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1], picked
    assert threads.best == 1 and threads.period == 32
    # A single slow step (a one-off stall) does not start a probe.
    calm = DecodeThreads(max_threads=2, probe=3, period=32, max_period=256)
    _drive(calm, lambda n, _: 0.020 if n == 2 else 0.040, 70)  # probes at 0 and 64; the next at 192
    stall = lambda n, step: 0.5 if step == 100 else (0.020 if n == 2 else 0.040)  # noqa: E731
    assert _drive(calm, stall, 80) == [2] * 80
