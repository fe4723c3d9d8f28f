"""engine.models.smolvlm.resample_triton: the one-kernel resampling pass gives Pillow's bytes, run in
Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, as tests/engine/test_triton_decode.py does)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
from PIL import Image

# triton.jit reads this when a kernel is defined: set before anything imports Triton.
_TRITON_PREIMPORTED = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from engine.models.smolvlm import resample  # noqa: E402
from engine.models.smolvlm.processing import load_image  # noqa: E402

FILTERS = [Image.Resampling.LANCZOS, Image.Resampling.BICUBIC, Image.Resampling.BILINEAR]
# Enlarging (7 taps), shrinking by 4 (25 taps), one axis only, 1 pixel, both directions at once, and
# a height shrinking more than twice the width (Pillow 13+ then goes vertical first).
SIZES = [(60, 40, 205, 137), (205, 153, 51, 51), (205, 137, 205, 154), (1, 1, 5, 3), (7, 3, 1, 1),
         (10, 10, 11, 9), (30, 160, 29, 40)]


@pytest.fixture(autouse=True)
def triton_passes(monkeypatch):
    if _TRITON_PREIMPORTED or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton was imported before TRITON_INTERPRET=1 could be set; run with TRITON_INTERPRET=1")
    from engine.models.smolvlm import resample_triton

    calls = []
    real = resample_triton.resample_pass
    monkeypatch.setattr(resample_triton, "resample_pass", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    monkeypatch.setattr(resample, "USE_TRITON", True)
    return calls


def _pillow(array: np.ndarray, w: int, h: int, filt) -> np.ndarray:
    return np.asarray(Image.fromarray(array).resize((w, h), resample=filt))


@pytest.mark.parametrize("filt", FILTERS, ids=lambda f: f.name)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_the_kernel_gives_pillows_bytes(triton_passes, size, filt):
    w, h, out_w, out_h = size
    array = np.random.default_rng(w * 31 + h).integers(0, 256, (h, w, 3), dtype=np.uint8)
    ours = resample.resize(torch.from_numpy(array), out_w, out_h, filt)
    assert ours.dtype == torch.uint8 and tuple(ours.shape) == (out_h, out_w, 3)
    np.testing.assert_array_equal(ours.numpy(), _pillow(array, out_w, out_h, filt))
    assert len(triton_passes) == (out_w != w) + (out_h != h)  # every pass ran as the kernel


def test_a_real_photo_enlarged_and_shrunk(triton_passes, images_dir):
    array = np.asarray(load_image(images_dir / "coffee.png").convert("RGB").resize((150, 100)))
    for out_w, out_h in [(512, 341), (64, 64), (50, 20)]:
        ours = resample.resize(torch.from_numpy(array.copy()), out_w, out_h)
        np.testing.assert_array_equal(ours.numpy(), _pillow(array, out_w, out_h, Image.Resampling.LANCZOS))
    assert triton_passes == [1, 0] * 3


def test_an_image_beyond_int32_offsets_is_refused_clearly():
    from engine.models.smolvlm.resample_triton import resample_pass

    with pytest.raises(ValueError, match=r"contiguous uint8 \[H, W, C\], got torch.float32"):
        resample_pass(torch.zeros(2, 2, 3), 1, 4, torch.zeros(4, 1, dtype=torch.long),
                      torch.zeros(4, 1, dtype=torch.int32), 22)
    big = torch.empty(1, 2**30, 3, dtype=torch.uint8, device="meta")
    with pytest.raises(ValueError, match="too large for int32 offsets"):
        resample_pass(big, 1, 2**30, torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.int32), 22)


def test_a_kernel_that_fails_to_build_falls_back_to_torch_once(monkeypatch):
    """A GPU Triton cannot compile for (or a broken install): the photo is still resized, with
    Pillow's bytes, one warning, and no second try."""
    from engine.models.smolvlm import resample_triton

    tries = []

    def broken(*args, **kwargs):
        tries.append(1)
        raise RuntimeError("no kernel image for this GPU")

    monkeypatch.setattr(resample_triton, "resample_pass", broken)
    monkeypatch.setattr(resample, "_triton_failed", False)
    array = np.random.default_rng(5).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    with pytest.warns(RuntimeWarning, match="Triton resampling failed .*no kernel image for this GPU"):
        ours = resample.resize(torch.from_numpy(array), 41, 17)
    np.testing.assert_array_equal(ours.numpy(), _pillow(array, 41, 17, Image.Resampling.LANCZOS))
    again = resample.resize(torch.from_numpy(array), 41, 17)
    np.testing.assert_array_equal(again.numpy(), ours.numpy())
    assert tries == [1]
