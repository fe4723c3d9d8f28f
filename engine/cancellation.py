"""Cooperative cancellation inside long model calls (the vision tower, the prefill) and model loads.

A cancel is a ``threading.Event`` set from another thread; these helpers turn it into a
:class:`Cancelled` raised at the next safe point, which :class:`~engine.chat.ChatSession` turns
into ``DoneEvent("cancelled")``. A load's cancel is its :class:`~engine.api.LoadTicket`, seen by
:func:`load_cancel_point` inside :func:`cancellable_load`. Torch-free at import.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from engine.api.backend import LoadTicket
from engine.api.errors import LoadCancelled

if TYPE_CHECKING:  # torch-free at import: the engine service (any thread) sets up a load's ticket
    from torch import nn

_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its stacks' layers
# The running load's ticket: a context variable, so that the loading thread's cancellation points see
# it without a parameter through every model class's ``load`` (DESIGN.md fixes that signature).
_LOAD: contextvars.ContextVar[LoadTicket | None] = contextvars.ContextVar("smolchat_load_ticket", default=None)


class Cancelled(Exception):
    """Internal: raised at a cancellation point before the first token; the answer ends "cancelled"."""


@contextlib.contextmanager
def layer_cancel_points(model: nn.Module, cancel: threading.Event) -> Iterator[None]:
    """While inside, every layer of ``model``'s layer stacks (each ``nn.ModuleList``) raises
    :class:`Cancelled` before it runs once ``cancel`` is set.

    A 256-token prefill chunk of the 256M model is 30 decoder layers: 0.4 s on a quiet 2-core CPU,
    several seconds on a busy one, so waiting for whole chunks is too slow. The decoder drops an
    aborted chunk's cache reservation; the caller truncates the cache to the chunks it finished.
    """
    from torch import nn

    def check(_module, _args) -> None:
        if cancel.is_set():
            raise Cancelled()

    layers = _LAYERS.get(model)
    if layers is None:  # walking ~1000 modules costs ~0.4 ms: once per model
        layers = _LAYERS[model] = [layer for stack in model.modules() if isinstance(stack, nn.ModuleList)
                                   for layer in stack]
    handles = [layer.register_forward_pre_hook(check) for layer in layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def cancellable_load(ticket: LoadTicket) -> Iterator[None]:
    """While inside (on this thread), :func:`load_cancel_point` raises :class:`LoadCancelled` once
    ``ticket`` is cancelled: the engine service wraps each model load in it."""
    token = _LOAD.set(ticket)
    try:
        yield
    finally:
        _LOAD.reset(token)


def load_cancel_point() -> None:
    """Raise :class:`~engine.api.errors.LoadCancelled` if the load running on this thread was
    cancelled (a no-op outside :func:`cancellable_load`: the command line, tests).

    Called between the load's steps that take long: each GGUF tensor dequantized, each decoder layer
    fused and quantized (0.6 s a layer for the SmolVLM2-2.2B shape's int8 load on a 2-core CPU), the
    vision tower, before the processor and before the CUDA warm-up."""
    ticket = _LOAD.get()
    if ticket is not None and ticket.cancelled:
        raise LoadCancelled("the load was stopped")

