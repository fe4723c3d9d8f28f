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
