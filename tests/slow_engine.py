"""A real engine made slow enough that Stop and close land in the middle of the vision tower or the
prefill (on a fast machine the tiny checkpoint would finish before the test could press anything).

``SMOLCHAT_BACKEND=tests.slow_engine:slow_local_backend`` starts the app on it; ``SMOLCHAT_SLOW_S``
sets the sleep per vision layer and per prefill chunk (default 0.02 s).
"""

from __future__ import annotations

import os
import time


def slow_down(session, seconds: float, chunk: int = 16) -> None:
    """Sleep ``seconds`` in each vision encoder layer and each prefill chunk of ``chunk`` tokens."""
    for layer in session.model.model.vision_model.encoder.layers:
        layer.register_forward_hook(lambda *args: time.sleep(seconds))
    prefill = session.model.prefill

    def slow_prefill(*args, **kwargs):
        time.sleep(seconds)
        return prefill(*args, **kwargs)

    session.model.prefill = slow_prefill
    session.prefill_chunk = chunk


def slow_loader(model: str, options: dict):
    """:func:`engine.service.default_loader`, on the CPU, then slowed down (engine thread only)."""
    from engine.service import default_loader

    session = default_loader(model, {**options, "device": "cpu"})
    slow_down(session, float(os.environ.get("SMOLCHAT_SLOW_S", "0.02")))
    return session


def slow_local_backend():
    """A :class:`~app.backends.local.LocalBackend` over :func:`slow_loader`."""
    from app.backends.local import LocalBackend

    return LocalBackend(slow_loader)


def stuck_loading_backend():
    """A :class:`~app.backends.local.LocalBackend` whose load never ends (like a huge checkpoint on a
    slow disk): closing the window must not wait for it."""
    from app.backends.local import LocalBackend

    def loader(model: str, options: dict):
        import torch  # busy inside torch kernels (releasing the GIL), as a real load is

        a = torch.randn(1500, 1500)
        while True:
            a = torch.tanh(a @ a)

    return LocalBackend(loader)
