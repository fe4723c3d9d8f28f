"""Stopping a model load (the app's Esc while a large model loads): EngineService.cancel_load and the
load's cancellation points, on the tiny checkpoint and the real SmolLM2 GGUF file.

The cancel is set from inside the load (a spy on the first decoder layer's fusing, or on the GGUF
dequantizer), where another thread's cancel would land, so each test knows which step it stopped."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from engine.api import LOAD_CANCELLED, DoneEvent, GenerationParams, LoadCancelled, LoadTicket
from engine.cancellation import cancellable_load, load_cancel_point
from engine.models.llama.decoder import DecoderLayer
from engine.service import EngineService


class Loads:
    """``on_done`` of several loads: each ``(info, message)`` in order."""

    def __init__(self) -> None:
        self.results: list[tuple] = []
        self._arrived = threading.Semaphore(0)

    def __call__(self, info, message) -> None:
        self.results.append((info, message))
        self._arrived.release()

    def next(self) -> tuple:
        assert self._arrived.acquire(timeout=60), "the load never ended"
        return self.results[-1]


def answer(service: EngineService) -> list:
    events, done = [], threading.Event()

    def sink(event) -> None:
        events.append(event)
        if isinstance(event, DoneEvent):
            done.set()
    service.send("Hello", [], GenerationParams(max_new_tokens=3, temperature=0.0), sink)
    assert done.wait(60)
    return events


def test_a_load_stopped_between_layers_keeps_the_model_before_and_frees_what_it_built(tiny_checkpoint, monkeypatch):
    service = EngineService()
    loads = Loads()
    service.load(str(tiny_checkpoint), {"device": "cpu"}, loads)
    before, message = loads.next()
    assert message is None and before is not None

    built = []
    real_fuse = DecoderLayer.fuse

    def fuse_then_stop(layer, dtype=None):
        built.append(weakref.ref(layer))
        real_fuse(layer, dtype)
        assert service.cancel_load()  # (the window's Esc, while the first layer is being built)
    monkeypatch.setattr(DecoderLayer, "fuse", fuse_then_stop)
    service.load(str(tiny_checkpoint), {"device": "cpu", "dtype": "bfloat16"}, loads)
    assert loads.next() == (None, LOAD_CANCELLED)
    assert len(built) == 1  # the second of the 2 layers was never built
    # Freed by the service before it answered, not held by the stopped load's traceback.
    assert built[0]() is None

    assert service.info == before and service.info.dtype == "float32"  # the model before stays
    events = answer(service)
    assert events[-1].finish_reason in ("stop", "length"), events[-1]
    assert not service.cancel_load()  # nothing left to stop
    assert service.shutdown()


def test_stopped_loads_install_nothing_queued_or_past_their_last_cancellation_point(tiny_checkpoint):
    from engine.service import default_loader

    built, released, calls, made = threading.Event(), threading.Event(), [], []

    def loader(model, options):
        calls.append(model)
        if model != "/slow":
            return default_loader(model, options)
        # A session built past every cancellation point, then a wait for the cancel to land.
        session = default_loader(str(tiny_checkpoint), {"device": "cpu", "dtype": "bfloat16"})
        made.append(weakref.ref(session))
        built.set()
        assert released.wait(30)
        return session

    service = EngineService(loader)
    loads = Loads()
    service.load(str(tiny_checkpoint), {"device": "cpu"}, loads)
    first, message = loads.next()
    assert message is None
    assert not service.cancel_load()  # it has ended: its model stays
    service.load("/slow", {}, loads)
    service.load("/never", {}, loads)  # queued behind it
    assert built.wait(60)
    assert service.cancel_load()
    released.set()
    assert loads.next() == (None, LOAD_CANCELLED)
    assert loads.next() == (None, LOAD_CANCELLED)
    assert calls == [str(tiny_checkpoint), "/slow"]  # the queued one never started
    assert service.info == first
    gc.collect()
    assert made[0]() is None  # the dropped session is freed
    assert answer(service)[-1].finish_reason in ("stop", "length")
    assert service.shutdown()


def test_load_cancel_point_is_a_no_op_outside_a_cancellable_load():
    load_cancel_point()  # the command line and tests load without a ticket
    ticket = LoadTicket()
    with cancellable_load(ticket):
        load_cancel_point()
        assert ticket.cancel() and ticket.cancelled
        with pytest.raises(LoadCancelled):
            load_cancel_point()
    load_cancel_point()
    assert not ticket.finish(lambda: pytest.fail("a cancelled load installs nothing"))
    done = LoadTicket()
    installed = []
    assert done.finish(lambda: installed.append(1)) and installed == [1]
    assert not done.cancel()  # too late: its result stands


def test_a_gguf_file_stops_dequantizing_at_the_next_tensor(smollm2_gguf, monkeypatch):
    from engine import gguf
    from engine.registry import load_model

    read = []
    ticket = LoadTicket()
    real = gguf._GGUFFile.dequantize

    def dequantize(self, tensor):
        read.append(tensor.name)
        if len(read) == 3:
            ticket.cancel()
        return real(self, tensor)
    monkeypatch.setattr(gguf._GGUFFile, "dequantize", dequantize)
    with cancellable_load(ticket), pytest.raises(LoadCancelled):
        load_model(str(smollm2_gguf), device="cpu")
    assert len(read) == 3  # of 272 tensors


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_a_cuda_load_stopped_in_its_warm_up_gives_its_memory_back(tiny_checkpoint, monkeypatch):
    import torch

    from engine.models.llama.lm import LlamaLM

    service = EngineService()
    loads = Loads()
    service.load(str(tiny_checkpoint), {"device": "cuda"}, loads)
    before, message = loads.next()
    assert message is None and before.device.startswith("cuda")
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()

    warmed = []
    real_warmup = LlamaLM.warmup

    def warmup_then_stop(model, cache, *args, **kwargs):
        warmed.append(type(model).__name__)  # (not the model: the service's own collection must free it)
        real_warmup(model, cache, *args, **kwargs)
        assert service.cancel_load()
    monkeypatch.setattr(LlamaLM, "warmup", warmup_then_stop)
    service.load(str(tiny_checkpoint), {"device": "cuda", "dtype": "float32"}, loads)
    assert loads.next() == (None, LOAD_CANCELLED)
    assert warmed == ["SmolVlmModel"]  # stopped before the photo question that follows the model's warm-up
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= held  # the stopped model's weights and cache are gone
    assert service.info == before
    assert answer(service)[-1].finish_reason in ("stop", "length")
    assert service.shutdown()


def test_a_load_that_fails_after_being_stopped_still_answers_stopped():
    """The front end was told "stopped" and may have begun another load: the failure it no longer
    waits for must not come as news (a window's switch would move back to the model before)."""
    from engine.api import ModelLoadError

    def loader(model, options):
        assert service.cancel_load()
        raise ModelLoadError(f"{model}: config.json is missing")

    service = EngineService(loader)
    loads = Loads()
    service.load("/broken", {}, loads)
    assert loads.next() == (None, LOAD_CANCELLED)
    assert service.info is None
    assert service.shutdown()


def test_a_stopped_loads_garbage_is_collected_where_the_front_end_says():
    """With ``collect_garbage`` (the app: its UI thread collects, app/main_thread_gc.py) a stopped load
    asks for the collection and runs none on the engine thread, where a Qt object in the garbage would
    be destroyed; without it the engine thread collects at once, freeing the half-built model."""
    collected_on, asked_on = [], []

    def note(phase, info):
        if phase == "start":
            collected_on.append(threading.current_thread().name)

    class Cycle:
        def __init__(self):
            self.me = self

    made = []

    def loader(model, options):
        garbage = Cycle()  # what a half-built model leaves: a reference cycle
        made.append(weakref.ref(garbage))
        raise LoadCancelled("the load was stopped")

    gc.callbacks.append(note)
    try:
        for collect in (lambda: asked_on.append(threading.current_thread().name), None):
            if collect is not None:
                gc.disable()  # as the app runs: no automatic collection on any thread
            service = EngineService(loader, name="engine", collect_garbage=collect)
            loads = Loads()
            service.load("/stopped", {}, loads)
            assert loads.next() == (None, LOAD_CANCELLED)
            assert service.shutdown()
            if collect is not None:
                assert asked_on == ["engine"] and "engine" not in collected_on
                assert made[-1]() is not None  # left for the front end's collection
                gc.enable()
            else:
                assert "engine" in collected_on and made[-1]() is None
    finally:
        gc.enable()
        gc.callbacks.remove(note)
