"""The vision tower as fixed-shape steps (``engine.models.smolvlm.vision_graphs``): on the CPU run eagerly
(the chunking, the static buffer, the copies and the callbacks), on CUDA as replayed graphs."""

from __future__ import annotations

import pytest
import torch

from engine.models.smolvlm import SmolVlmModel
from engine.models.smolvlm import model as smolvlm_model
from engine.models.smolvlm.vision_graphs import VisionGraphs
from engine.sources import LocalDirSource

CPU = torch.device("cpu")
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


class Tower:
    """A per-tile function of the input (each output row depends on its own tile only), counting calls."""

    def __init__(self):
        self.calls: list[int] = []
        self.weight = torch.randn(3, 3, generator=torch.Generator().manual_seed(0))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [k, 3, 2, 2] -> [k, 2, 3]
        self.calls.append(int(x.shape[0]))
        return (x.flatten(2).transpose(1, 2) @ self.weight)[:, :2] * 2 + 1


@pytest.mark.parametrize("n", [1, 3, 4, 5, 9])
def test_chunks_match_the_tower_on_all_tiles_and_report_each_chunk(n):
    tower = Tower()
    steps = VisionGraphs(tower, (3, 2, 2), CPU, torch.float32, max_tiles=4, use_graph=False)
    tiles = torch.randn(n, 3, 2, 2, generator=torch.Generator().manual_seed(n))
    expected = tower(tiles)
    tower.calls.clear()
    reported = []
    out = steps.run(tiles, torch.full((n, 2, 3), float("nan"), dtype=torch.float64), reported.append)
    assert out.dtype == torch.float64  # the copy converts to out's dtype
    torch.testing.assert_close(out, expected.double())
    assert tower.calls == [min(4, n - i) for i in range(0, n, 4)]
    assert reported == [min(i + 4, n) for i in range(0, n, 4)]


@pytest.mark.parametrize("n, calls", [(1, [1]), (2, [4]), (3, [4]), (5, [4, 1]), (6, [4, 4]), (7, [4, 4]),
                                      (13, [4, 4, 4, 1])])
def test_a_chunk_of_an_uncaptured_size_runs_the_next_larger_step(n, calls):
    """With steps for 1 and 4 tiles only, a chunk of 2 or 3 runs the 4-tile step over the buffer (its
    last rows still hold the previous chunk's tiles, or zeros) and keeps only its own rows."""
    tower = Tower()
    steps = VisionGraphs(tower, (3, 2, 2), CPU, torch.float32, max_tiles=4, use_graph=False, sizes=(4, 1))
    assert steps.sizes == (1, 4) and [steps.size_for(k) for k in (1, 2, 3, 4)] == [1, 4, 4, 4]
    tiles = torch.randn(n, 3, 2, 2, generator=torch.Generator().manual_seed(n))
    expected = tower(tiles)
    tower.calls.clear()
    reported = []
    out = steps.run(tiles, torch.full((n, 2, 3), float("nan")), reported.append)
    torch.testing.assert_close(out, expected)
    assert tower.calls == calls
    assert reported == [min(i + 4, n) for i in range(0, n, 4)]


@pytest.mark.parametrize("sizes", [(1, 2), (0, 4), (4, 5), ()])
def test_sizes_must_include_the_largest_chunk_and_lie_in_range(sizes):
    with pytest.raises(ValueError, match="sizes must lie in 1..4 and include 4"):
        VisionGraphs(Tower(), (3, 2, 2), CPU, torch.float32, max_tiles=4, use_graph=False, sizes=sizes)


def test_a_raise_in_the_callback_stops_after_that_chunk():
    tower = Tower()
    steps = VisionGraphs(tower, (3, 2, 2), CPU, torch.float32, max_tiles=2, use_graph=False)

    def stop(done):
        if done >= 4:
            raise KeyboardInterrupt

    out = torch.zeros(7, 2, 3)
    with pytest.raises(KeyboardInterrupt):
        steps.run(torch.ones(7, 3, 2, 2), out, stop)
    assert tower.calls == [2, 2]
    assert out[4:].abs().sum() == 0  # later chunks never ran


def test_tiles_that_do_not_fit_are_refused_clearly():
    steps = VisionGraphs(Tower(), (3, 2, 2), CPU, torch.float32, max_tiles=2, use_graph=False)
    assert steps.supports(torch.zeros(5, 3, 2, 2))
    assert not steps.supports(torch.zeros(5, 3, 4, 4))
    assert not steps.supports(torch.zeros(5, 3, 2, 2, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"tiles \(1, 3, 4, 4\) torch.float32 on cpu do not fit the vision "
                                         r"graphs' input \(3, 2, 2\) torch.float32 on cpu"):
        steps.run(torch.zeros(1, 3, 4, 4), torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"out holds 2 tiles' features, tiles are 3"):
        steps.run(torch.zeros(3, 3, 2, 2), torch.zeros(2, 2, 3))
    with pytest.raises(ValueError, match="max_tiles must be >= 1, got 0"):
        VisionGraphs(Tower(), (3, 2, 2), CPU, torch.float32, max_tiles=0)


def test_the_model_through_its_steps_matches_the_tower_as_modules(tiny_checkpoint):
    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), CPU, torch.float32)
    size = model.metadata.vision.image_size
    tiles = torch.randn(6, 3, size, size, generator=torch.Generator().manual_seed(1))
    model.vision_graphs = False
    expected = model.encode_images(tiles)
    model.vision_graphs = True
    progress = []
    got = model.encode_images(tiles, lambda done, total: progress.append((done, total)))
    assert model._vision_graphs is not None and not model._vision_graphs.use_graph  # eager steps on the CPU
    assert got.shape == expected.shape == (6, model.metadata.image_seq_len, model.metadata.text.hidden_size)
    assert got.dtype == expected.dtype == model.dtype
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    chunk = smolvlm_model.VISION_TILE_CHUNK_GPU
    assert progress == [(0, 6)] + [(min(i + chunk, 6), 6) for i in range(0, 6, chunk)]


def test_the_steps_are_off_on_the_cpu_and_by_the_environment(monkeypatch, tiny_checkpoint):
    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), CPU, torch.float32)
    assert model._vision_steps() is None  # default: CUDA only
    monkeypatch.setattr(SmolVlmModel, "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setenv(smolvlm_model.VISION_GRAPHS_ENV, "0")
    assert model._vision_steps() is None


@cuda_only
@pytest.mark.parametrize("n", [1, 4, 6, 7, 13])
def test_replayed_graphs_match_the_tower_as_modules_on_cuda(tiny_checkpoint, n):
    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cuda"), torch.bfloat16)
    size = model.metadata.vision.image_size
    tiles = torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(n)).cuda()
    model.vision_graphs = False
    expected = model.encode_images(tiles)
    model.vision_graphs = True
    model._vision_steps().capture_all()
    assert sorted(model._vision_graphs.graphs) == list(smolvlm_model.VISION_GRAPH_SIZES_GPU)
    for seed in (n, n + 100):  # a second photo through the same graphs: nothing stale from the first
        tiles = torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed)).cuda()
        model.vision_graphs = False
        expected = model.encode_images(tiles)
        model.vision_graphs = True
        got = model.encode_images(tiles)
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)  # bf16; a padded chunk's GEMMs differ in M


@cuda_only
def test_a_cancel_in_the_graphs_stops_the_tower_on_cuda(tiny_checkpoint):
    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cuda"), torch.bfloat16)
    size = model.metadata.vision.image_size
    seen = []

    def on_tiles(done, total):
        seen.append(done)
        if done >= 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model.encode_images(torch.zeros(13, 3, size, size, device="cuda"), on_tiles)
    assert seen == [0, 4, 8]


def test_a_failed_capture_runs_the_tower_as_modules_from_then_on(tiny_checkpoint, monkeypatch):
    from engine.models.smolvlm import vision_graphs

    model = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), CPU, torch.float32)
    size = model.metadata.vision.image_size
    tiles = torch.randn(5, 3, size, size, generator=torch.Generator().manual_seed(2))
    expected = model.encode_images(tiles)
    model.vision_graphs = True

    def fail(self, k):
        raise vision_graphs.GraphCaptureError(f"the vision tower's graph for {k} tiles could not be captured: OOM")

    monkeypatch.setattr(vision_graphs.VisionGraphs, "_step", fail)
    progress = []
    with pytest.warns(RuntimeWarning, match="graph for 4 tiles could not be captured: OOM; running the vision "
                                            "tower without CUDA graphs"):
        got = model.encode_images(tiles, lambda done, total: progress.append(done))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert model.vision_graphs is False and model._vision_steps() is None
    assert progress[-1] == 5  # the modules' run reported its tiles
