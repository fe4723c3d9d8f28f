"""The vision tower and connector as fixed-shape steps: one CUDA graph per chunk size, replayed.

A 13-tile photo through SmolVLM-256M's tower in chunks of 4 tiles is ~1,000 eager kernel launches,
and on an H200 issuing them from Python took about as long as the GPU took to run them (the whole
vision + prefill phase of a first photo question: 19-25 ms of kernels in 42-45 ms of wall time, and
0.9-1.35x from one process to the next with the host thread's speed). A tile is always a full
``image_size`` square, so a chunk of ``k`` tiles has one shape: each ``k`` in ``1..max_tiles`` is
captured once (at the load's warm-up, or at its first use) and every later chunk is a copy into a
static input buffer and one replay. ``sizes`` limits the captured sizes: a chunk of another size runs
the next larger one, its extra rows computing on whatever the buffer holds and dropped (each tile's
output depends on that tile only), which trades a captured graph at load for those rows' compute.

The same steps run eagerly on any device (``use_graph=False``), which is how the CPU tests check the
chunking, the copies and the callbacks against the tower run as modules.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.models.cuda_graph import capture, capture_stream


class GraphCaptureError(RuntimeError):
    """A chunk size's graph could not be captured here (the caller runs the tower as modules instead)."""


class VisionGraphs:
    """``tower(x [k, C, M, M]) -> [k, image_seq_len, H]`` (the vision tower and connector), run in chunks
    of at most ``max_tiles`` tiles through a static input buffer, one fixed-shape step per chunk size.

    ``use_graph`` (default: on CUDA) replays a CUDA graph per size, captured on ``stream`` (default: the
    device's capture stream, :func:`engine.models.cuda_graph.capture_stream`, which shares cuBLAS's
    per-stream workspace) into a memory pool of its own.
    ``sizes`` (default: every size ``1..max_tiles``) are the chunk sizes that get a step; it must hold
    ``max_tiles``. ``tower`` must compute each tile's output from that tile alone.

    Raises:
        ValueError: ``max_tiles < 1``, or ``sizes`` outside ``1..max_tiles`` or without ``max_tiles``.
    """

    def __init__(self, tower: Callable[[torch.Tensor], torch.Tensor], tile_shape: tuple[int, int, int],
                 device: torch.device, dtype: torch.dtype, max_tiles: int, use_graph: bool | None = None,
                 stream: torch.cuda.Stream | None = None, sizes: tuple[int, ...] | None = None):
        if max_tiles < 1:
            raise ValueError(f"max_tiles must be >= 1, got {max_tiles}")
        self.sizes = tuple(sorted(set(sizes))) if sizes is not None else tuple(range(1, max_tiles + 1))
        if not self.sizes or self.sizes[-1] != max_tiles or self.sizes[0] < 1:
            raise ValueError(f"sizes must lie in 1..{max_tiles} and include {max_tiles}, got {sizes}")
        self.tower = tower
        self.max_tiles = max_tiles
        self.use_graph = device.type == "cuda" if use_graph is None else use_graph
        # Every size reads the first ``k`` tiles of one buffer: a slice starts at the buffer's address.
        self.input = torch.zeros(max_tiles, *tile_shape, device=device, dtype=dtype)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.use_graph else None
        self.stream = (stream or capture_stream(torch.device(device))) if self.use_graph else None

    def supports(self, tiles: torch.Tensor) -> bool:
        """Whether ``tiles [N, C, M, M]`` fit the input buffer's tile shape, dtype and device."""
        return (tiles.dim() == 4 and tiles.shape[1:] == self.input.shape[1:]
                and tiles.dtype == self.input.dtype and tiles.device == self.input.device)

    def size_for(self, k: int) -> int:
        """The step that runs a chunk of ``k`` tiles: the smallest of :attr:`sizes` >= ``k``."""
        return next(s for s in self.sizes if s >= k)

    def capture_all(self) -> None:
        """Capture every size of :attr:`sizes` now (the largest first), so no later chunk pays for one.

        Raises:
            GraphCaptureError: a capture failed.
            LoadCancelled: the model load that captures them was stopped.
        """
        from engine.cancellation import load_cancel_point  # (a no-op outside a model load)

        if self.use_graph:
            for k in reversed(self.sizes):
                load_cancel_point()  # at load (the model's warm-up): a stopped load ends between sizes
                if k not in self.graphs:
                    self._capture(k)

    def _capture(self, k: int) -> torch.Tensor:
        """Raises GraphCaptureError when the capture fails (e.g. out of memory, or a kernel that
        synchronizes): the tower as modules still works."""
        try:
            graph, warm, out = capture(lambda: self.tower(self.input[:k]), self.stream, self.pool)
        except Exception as exc:  # noqa: BLE001 - a CUDA or allocator error from inside the capture
            raise GraphCaptureError(f"the vision tower's graph for {k} tiles could not be captured: {exc!r:.200}") from exc
        self.graphs[k] = (graph, out)
        return warm

    def _step(self, k: int) -> torch.Tensor:
        """The tower's output for ``input[:k]`` (run as ``input[:size_for(k)]``); a graph's static
        output, valid until the next step."""
        s = self.size_for(k)
        if not self.use_graph:
            return self.tower(self.input[:s])[:k]
        entry = self.graphs.get(s)
        if entry is None:
            return self._capture(s)[:k]
        entry[0].replay()
        return entry[1][:k]

    @torch.inference_mode()
    def run(self, tiles: torch.Tensor, out: torch.Tensor, on_chunk: Callable[[int], None] | None = None
            ) -> torch.Tensor:
        """Write ``tower(tiles)`` into ``out [N, image_seq_len, H]`` (any float dtype: the copy converts)
        and return it; ``tiles [N, C, M, M]`` as :meth:`supports` requires.

        ``on_chunk(done)`` runs after each chunk is issued, with the tiles issued so far; it may raise
        (a cancel) to stop there. On CUDA it first waits for the chunk before (the GPU still has this
        one to run), so the work a Stop leaves queued is at most two chunks, and progress follows the GPU.

        Raises:
            ValueError: ``tiles`` do not fit (:meth:`supports`), or ``out`` has another tile count.
            GraphCaptureError: a chunk size's first capture failed.
        """
        if not self.supports(tiles):
            raise ValueError(f"tiles {tuple(tiles.shape)} {tiles.dtype} on {tiles.device} do not fit the "
                             f"vision graphs' input {tuple(self.input.shape[1:])} {self.input.dtype} "
                             f"on {self.input.device}")
        if out.shape[0] != tiles.shape[0]:
            raise ValueError(f"out holds {out.shape[0]} tiles' features, tiles are {tiles.shape[0]}")
        done, previous = 0, None
        for chunk in tiles.split(self.max_tiles):
            k = int(chunk.shape[0])
            self.input[:k].copy_(chunk)
            out[done:done + k].copy_(self._step(k))
            done += k
            if self.use_graph:
                issued = torch.cuda.Event()
                issued.record()
                if previous is not None:
                    previous.synchronize()  # releases the GIL while it waits
                previous = issued
            if on_chunk is not None:
                on_chunk(done)
        return out
