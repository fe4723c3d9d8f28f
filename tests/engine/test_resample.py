"""engine.models.smolvlm.resample: Pillow's 8-bit resize in torch, byte for byte, and the processor's
device path giving the same tiles as its Pillow path (so the same prompt ids and cache digests)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from PIL import Image

from engine.models.smolvlm import resample
from engine.models.smolvlm.processing import ImageProcessor, load_image

FILTERS = [Image.Resampling.LANCZOS, Image.Resampling.BICUBIC, Image.Resampling.BILINEAR]

# (in w, in h, out w, out h): enlarging, shrinking by 4 (a global tile), one axis only, 1 pixel, both
# directions at once, and a height shrinking more than twice the width (Pillow 13+ then goes vertical first).
SIZES = [(600, 400, 2048, 1366), (2048, 1536, 512, 512), (2048, 1366, 2048, 1536), (1, 1, 5, 3),
         (7, 3, 1, 1), (10, 10, 11, 9), (100, 100, 110, 90), (300, 1600, 290, 400), (513, 511, 512, 512)]


def _pillow(array: np.ndarray, w: int, h: int, filt) -> np.ndarray:
    return np.asarray(Image.fromarray(array).resize((w, h), resample=filt))


@pytest.mark.parametrize("filt", FILTERS, ids=lambda f: f.name)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_resize_is_byte_identical_to_pillow(size, filt):
    w, h, out_w, out_h = size
    array = np.random.default_rng(w * 31 + h).integers(0, 256, (h, w, 3), dtype=np.uint8)
    ours = resample.resize(torch.from_numpy(array), out_w, out_h, filt)
    assert ours.dtype == torch.uint8 and tuple(ours.shape) == (out_h, out_w, 3)
    np.testing.assert_array_equal(ours.numpy(), _pillow(array, out_w, out_h, filt))


@pytest.mark.parametrize("name", ["coffee.png", "rocket.jpg", "astronaut.png"])
def test_resize_real_photos(images_dir, name):
    array = np.asarray(load_image(images_dir / name).convert("RGB"))
    h, w = array.shape[:2]
    for out_w, out_h in [(2048, 2048 * h // w), (512, 512), (w // 3, h // 5)]:
        ours = resample.resize(torch.from_numpy(array.copy()), out_w, out_h)
        np.testing.assert_array_equal(ours.numpy(), _pillow(array, out_w, out_h, Image.Resampling.LANCZOS))


def test_resize_small_chunks_give_the_same_bytes(monkeypatch):
    """A huge photo is resampled in row chunks (bounded device memory): the chunks join exactly."""
    array = np.random.default_rng(1).integers(0, 256, (97, 203, 3), dtype=np.uint8)
    monkeypatch.setattr(resample, "CHUNK_ELEMENTS", 1000)
    ours = resample.resize(torch.from_numpy(array), 512, 250)
    np.testing.assert_array_equal(ours.numpy(), _pillow(array, 512, 250, Image.Resampling.LANCZOS))


def test_resize_rejects_bad_input():
    with pytest.raises(ValueError, match="uint8"):
        resample.resize(torch.zeros(4, 4, 3), 2, 2)
    with pytest.raises(ValueError, match="filter"):
        resample.coefficients(4, 2, int(Image.Resampling.NEAREST))
    assert not resample.supports(Image.Resampling.NEAREST)


@pytest.fixture(scope="module")
def processors(model_config_dir):
    host = ImageProcessor.from_pretrained(model_config_dir)
    device = copy.copy(host)
    device.resize_device = torch.device("cpu")  # the CUDA path's code, run on the CPU
    return host, device


@pytest.mark.parametrize("detail", ["full", "balanced", "fast"])
def test_device_path_gives_the_pillow_path_tiles(processors, images_dir, detail):
    host, device = processors
    base = load_image(images_dir / "chelsea.png")
    for image in [base, load_image(images_dir / "rocket.jpg"), base.resize((9, 13)), base.resize((300, 1600)),
                  base.resize((1600, 300)), Image.open(images_dir / "logo.png")]:
        ours, ref = device.preprocess(image, detail), host.preprocess(image, detail)
        assert (ours.rows, ours.cols) == (ref.rows, ref.cols)
        np.testing.assert_array_equal(ours.pixels, ref.pixels)
        assert ours.tile_digests == ref.tile_digests


def test_device_path_falls_back_to_pillow_for_other_filters(processors, images_dir):
    host, device = processors
    image = load_image(images_dir / "chelsea.png")
    nearest_host, nearest_device = copy.copy(host), copy.copy(device)
    nearest_host.resample = nearest_device.resample = int(Image.Resampling.NEAREST)
    np.testing.assert_array_equal(nearest_device.preprocess(image).pixels, nearest_host.preprocess(image).pixels)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton pass runs where the image is on CUDA")
@pytest.mark.parametrize("name", ["coffee.png", "astronaut.png"])
def test_cuda_resize_gives_pillows_bytes(images_dir, name):
    """On CUDA each pass is one Triton kernel (``resample_triton``) unless ``SMOLCHAT_TRITON=0``."""
    array = np.asarray(load_image(images_dir / name).convert("RGB"))
    h, w = array.shape[:2]
    x = torch.from_numpy(array.copy()).cuda()
    for out_w, out_h in [(2048, 2048 * h // w), (512, 512), (w // 3, h // 5)]:
        ours = resample.resize(x, out_w, out_h)
        assert ours.is_cuda
        np.testing.assert_array_equal(ours.cpu().numpy(), _pillow(array, out_w, out_h, Image.Resampling.LANCZOS))
