"""Capturing a function as a CUDA graph, the way every fixed-shape step of the engine does it."""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch

_CAPTURE_STREAMS: dict[int, torch.cuda.Stream] = {}  # device index -> the one capture stream


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream every capture on ``device`` runs on, shared by all models the process loads.

    cuBLAS keeps a workspace per stream (32 MiB on Hopper) that is never given back while the process
    lives: a stream of each model's own left one more workspace behind every model load, kept or
    stopped (measured on an H100: +33 MiB allocated per load). Captures run on the engine thread, one
    at a time, so sharing the stream is safe."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _CAPTURE_STREAMS.get(index)
    if stream is None:
        stream = _CAPTURE_STREAMS[index] = torch.cuda.Stream(device=index)
    return stream


def capture(run: Callable[[], torch.Tensor], stream: torch.cuda.Stream, pool
            ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
    """Run ``run()`` once on ``stream`` (a warm-up: cuBLAS handles, lazily loaded and compiled kernels),
    then capture it there into a graph allocating from ``pool`` (``torch.cuda.graph_pool_handle()``).

    Returns ``(graph, warm, out)``: ``warm`` is the warm-up's result (capture runs no kernel, so this
    call's result is that one) and ``out`` the captured result tensor, which every ``graph.replay()``
    overwrites. ``run`` must only read and write tensors that outlive the graph (static buffers).

    Raises:
        RuntimeError: the capture failed (e.g. ``run`` synchronized with the host).
    """
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        warm = run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    # A CUDA graph freed while another is being captured invalidates that capture ("operation
    # not permitted when stream is capturing"). Graphs of an earlier decoder or model that sit
    # in a reference cycle are freed by the cyclic collector, which may run at any allocation:
    # it stays off until the capture ends. (A gc.collect() first made every capture slower: in
    # the H200 bench, which recaptures per session, contiguous decode fell from 1554 to 377
    # tok/s. What is unreachable is collected later, outside a capture.)
    # capture_begin/capture_end rather than torch.cuda.graph: its entry synchronizes the device
    # and empties the allocator's and the pinned host memory's caches (each later allocation
    # then goes back to the driver), which made up most of the load-time warm-up's capture time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.stream(stream):
            graph.capture_begin(pool=pool)
            try:
                out = run()
            finally:
                graph.capture_end()
    finally:
        if enabled:
            gc.enable()
    return graph, warm, out
