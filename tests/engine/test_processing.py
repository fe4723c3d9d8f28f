"""engine.models.smolvlm.processing against transformers' Idefics3 PIL-backend image processor (the oracle).

Pixel tiles must match within 1e-6 (they match exactly in practice), with the same grid and tile
count. Note: transformers 5 converts to RGB (compositing alpha over white) BEFORE resizing, unlike
transformers 4's slow processor, so grayscale and palette images are LANCZOS-resized as RGB there;
we follow transformers 5, the oracle these tests run against.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from engine.api.errors import ConfigError, ImageError
from engine.models.smolvlm.processing import (
    IMAGE_PLACEHOLDER,
    ImageProcessor,
    ProcessedImage,
    expand_prompt,
    frame_count,
    image_prompt,
    load_image,
    to_rgb,
)


@pytest.fixture(scope="module")
def processor(model_config_dir) -> ImageProcessor:
    return ImageProcessor.from_pretrained(model_config_dir)


@pytest.fixture(scope="module")
def photo(images_dir) -> Image.Image:
    return load_image(images_dir / "chelsea.png")  # 451 x 300 RGB


def _palette_with_transparency() -> Image.Image:
    image = Image.new("P", (40, 30), 0)
    image.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    image.paste(1, (10, 5, 30, 25))
    image.info["transparency"] = 0  # red background is transparent -> white after compositing
    return image


def _cases(images_dir) -> dict[str, Image.Image]:
    base = load_image(images_dir / "chelsea.png")
    logo = Image.open(images_dir / "logo.png")
    logo.load()
    return {
        "photo_path": load_image(images_dir / "rocket.jpg"),
        "tiny_9x13": base.resize((9, 13)),
        "wide_1600x300": base.resize((1600, 300)),
        "tall_300x1600": base.resize((300, 1600)),
        "rgba": logo,
        "grayscale_L": base.convert("L"),
        "palette_P": base.convert("P"),
        "palette_transparency": _palette_with_transparency(),
        "LA": logo.convert("LA"),
    }


CASE_NAMES = [
    "photo_path", "tiny_9x13", "wide_1600x300", "tall_300x1600", "rgba",
    "grayscale_L", "palette_P", "palette_transparency", "LA",
]


@pytest.fixture(scope="module")
def cases(images_dir):
    return _cases(images_dir)


def _reference(hf_processor, image, **kwargs):
    out = hf_processor.image_processor(image, return_tensors="np", return_row_col_info=True, **kwargs)
    return out["pixel_values"][0], out["rows"][0][0], out["cols"][0][0]


def test_from_pretrained_reads_checkpoint_config(processor):
    assert processor.longest_edge == 2048
    assert processor.max_image_size == 512
    assert processor.image_seq_len == 64
    assert processor.resample == Image.Resampling.LANCZOS
    assert processor.rescale_factor == pytest.approx(1 / 255)
    assert processor.image_mean == processor.image_std == (0.5, 0.5, 0.5)
    assert processor.do_resize and processor.do_image_splitting and processor.do_convert_rgb
    assert processor.do_rescale and processor.do_normalize


@pytest.mark.parametrize("name", CASE_NAMES)
def test_full_detail_matches_transformers(processor, hf_processor, cases, name):
    image = cases[name]
    ours = processor.preprocess(image)
    ref_tiles, ref_rows, ref_cols = _reference(hf_processor, image)
    assert (ours.rows, ours.cols) == (ref_rows, ref_cols)
    assert ours.tiles.shape == ref_tiles.shape
    assert ours.tiles.dtype == np.float32 and ours.tiles.flags.c_contiguous
    assert np.abs(ours.tiles - ref_tiles).max() <= 1e-6
    assert ours.num_tiles == ours.rows * ours.cols + 1


def test_known_grids(processor, cases):
    # 640x427 -> 2048x1366 -> 2048x1536: 3 rows x 4 cols + global = 13 tiles, 832 <image> tokens.
    photo = processor.preprocess(cases["photo_path"])
    assert (photo.rows, photo.cols, photo.num_tiles, photo.num_image_tokens) == (3, 4, 13, 832)
    wide = processor.preprocess(cases["wide_1600x300"])
    assert (wide.rows, wide.cols, wide.num_tiles, wide.num_image_tokens) == (1, 4, 5, 320)
    tall = processor.preprocess(cases["tall_300x1600"])
    assert (tall.rows, tall.cols) == (4, 1)


def test_rgba_is_composited_over_white(processor):
    image = Image.new("RGBA", (64, 64), (0, 0, 0, 0))  # fully transparent black
    tiles = processor.preprocess(image).tiles
    assert np.all(tiles == 1.0)  # white, normalized: (1 - 0.5) / 0.5
    corner = processor.preprocess(_palette_with_transparency(), detail="fast").tiles[0, :, 0, 0]
    assert np.all(corner == 1.0)  # the transparent palette index also becomes white


def test_fast_detail_is_one_tile_and_matches_no_splitting(processor, hf_processor, cases):
    image = cases["photo_path"]
    fast = processor.preprocess(image, detail="fast")
    assert (fast.rows, fast.cols, fast.num_tiles, fast.num_image_tokens) == (0, 0, 1, 64)
    ref_tiles, ref_rows, ref_cols = _reference(hf_processor, image, do_image_splitting=False)
    assert (ref_rows, ref_cols) == (0, 0)
    assert np.abs(fast.tiles - ref_tiles).max() <= 1e-6


def test_balanced_detail_uses_fewer_tiles_for_small_images(processor, images_dir, cases):
    small = cases["photo_path"]  # 640x427
    full, balanced = processor.preprocess(small), processor.preprocess(small, detail="balanced")
    assert balanced.num_tiles < full.num_tiles
    # 640x427 -> stage-1 edge 1024 -> 1024x684 -> 1024x1024: 2 x 2 + global (full: 3 x 4 + global)
    assert (balanced.rows, balanced.cols, balanced.num_tiles) == (2, 2, 5)
    tiny = processor.preprocess(cases["tiny_9x13"], detail="balanced")
    assert (tiny.rows, tiny.cols, tiny.num_tiles) == (0, 0, 1)
    hubble = load_image(images_dir / "hubble_deep_field.jpg")  # 1000x872 -> 1024 edge -> 2x2 + 1
    assert processor.preprocess(hubble, detail="balanced").num_tiles == 5
    big = Image.new("RGB", (2600, 1200), (10, 20, 30))  # already above 2048: same as full
    assert processor.preprocess(big, detail="balanced").tiles.shape == processor.preprocess(big).tiles.shape


def test_preprocess_rejects_unknown_detail(processor, photo):
    with pytest.raises(ValueError, match="detail"):
        processor.preprocess(photo, detail="ultra")


def test_image_prompt_matches_transformers(processor, hf_processor):
    for rows, cols in [(0, 0), (1, 4), (3, 4), (2, 1)]:
        expected = hf_processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0)
        assert processor.image_prompt(rows, cols) == expected == image_prompt(rows, cols, 64)


def test_image_prompt_layout():
    text = image_prompt(1, 2, 2)
    assert text == (
        "<fake_token_around_image><row_1_col_1><image><image>"
        "<fake_token_around_image><row_1_col_2><image><image>\n"
        "\n<fake_token_around_image><global-img><image><image><fake_token_around_image>"
    )
    assert image_prompt(0, 0, 3) == "<fake_token_around_image><global-img><image><image><image><fake_token_around_image>"


def test_expand_prompt_replaces_only_the_sentinel(processor, photo):
    image = processor.preprocess(photo, detail="fast")
    prompt = f"User typed <image> here:{IMAGE_PLACEHOLDER} end"
    expanded = expand_prompt(prompt, [image])
    assert expanded == "User typed <image> here:" + image.prompt + " end"
    assert expanded.count("<image>") == 1 + 64
    with pytest.raises(ValueError, match=r"1 image placeholders but 2 images"):
        processor.expand_prompt(prompt, [image, image])
    with pytest.raises(ValueError, match=r"0 image placeholders but 1 images"):
        expand_prompt("<image>", [image])


def test_processed_image_is_frozen(processor, photo):
    image = processor.preprocess(photo, detail="fast")
    assert isinstance(image, ProcessedImage)
    with pytest.raises(AttributeError):
        image.rows = 3


def test_tiles_tensor_normalizes_exactly_like_the_host_path(processor, photo):
    image = processor.preprocess(photo, detail="balanced")
    assert image.pixels.dtype == np.uint8 and image.pixels.shape == image.tiles.shape
    tiles = image.tiles_tensor("cpu")
    assert tiles.dtype == torch.float32
    assert torch.equal(tiles, torch.from_numpy(image.tiles))  # bit-identical: one table, two lookups
    # The table cast to bf16 gives the same values as casting the normalized tiles.
    assert torch.equal(image.tiles_tensor("cpu", torch.bfloat16), torch.from_numpy(image.tiles).bfloat16())
    # Every channel uses its own row of the table (SmolVLM's mean/std are 0.5 for all three, so a
    # table with distinct rows checks the indexing).
    assert image.lut.shape == (3, 256)
    skewed = dataclasses.replace(image, lut=image.lut * np.array([[1.0], [2.0], [3.0]], dtype=np.float32))
    assert torch.equal(skewed.tiles_tensor("cpu"), torch.from_numpy(skewed.tiles))
    assert torch.equal(skewed.tiles_tensor("cpu")[:, 2], tiles[:, 2] * 3)


def test_tile_digests_follow_the_pixels(processor, photo):
    a = processor.preprocess(photo, detail="fast")
    b = processor.preprocess(photo, detail="fast")
    assert a.tile_digests == b.tile_digests and len(a.tile_digests) == 1
    flipped = processor.preprocess(photo.transpose(0), detail="fast")  # mirrored: other pixels
    assert flipped.tile_digests != a.tile_digests


# -- load_image ------------------------------------------------------------------------------


def test_load_image_matches_transformers_load_image(images_dir):
    from transformers.image_utils import load_image as hf_load_image

    for name in ["rocket.jpg", "hubble_deep_field.jpg", "coffee.png"]:
        ours = load_image(images_dir / name)
        ref = hf_load_image(str(images_dir / name))
        assert ours.mode == "RGB" and ours.size == ref.size
        assert np.array_equal(np.asarray(ours), np.asarray(ref))


def _hf_convert_to_rgb(image):
    from transformers.image_transforms import convert_to_rgb

    return np.asarray(convert_to_rgb(image, return_numpy=True))


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_transparent_images_are_composited_on_white_from_every_source(tmp_path, images_dir, mode):
    """A path, bytes and a PIL image give the same pixels: alpha over white (``convert_to_rgb``),
    not the RGB hidden under transparent pixels (transformers' ``load_image`` drops alpha there)."""
    logo = Image.open(images_dir / "logo.png")  # RGBA with transparent corners
    image = logo.convert(mode) if mode != "P" else logo.convert("RGBA").convert("P", palette=Image.ADAPTIVE)
    if mode == "P":
        image.info["transparency"] = 0
    path = tmp_path / f"transparent-{mode}.png"
    image.save(path)
    expected = _hf_convert_to_rgb(Image.open(path))
    from_path, from_bytes = load_image(path), load_image(path.read_bytes())
    from_pil = to_rgb(load_image(Image.open(path)))
    for got in (from_path, from_bytes, from_pil):
        assert got.mode == "RGB" and np.array_equal(np.asarray(got), expected)
    clear = tmp_path / "clear.png"  # fully transparent black: white, not the black under it
    Image.new("RGBA", (4, 4), (0, 0, 0, 0)).save(clear)
    assert np.asarray(load_image(clear)).min() == 255


def test_16_and_32_bit_images_are_scaled_not_clipped(tmp_path):
    ramp16 = np.linspace(0, 65535, 256, dtype=np.uint16).reshape(16, 16)
    path = tmp_path / "ramp16.png"
    Image.fromarray(ramp16).save(path)
    assert Image.open(path).mode.startswith("I")
    got = np.asarray(load_image(path))[..., 0]
    assert np.array_equal(got, np.rint(ramp16 / 257.0).astype(np.uint8))  # convert("RGB") gives 98% 255
    assert (got == 255).mean() < 0.01
    floats = Image.fromarray(np.linspace(0.0, 1.0, 64, dtype=np.float32).reshape(8, 8), mode="F")
    assert np.array_equal(np.asarray(to_rgb(floats))[..., 0],
                          np.rint(np.linspace(0.0, 1.0, 64).reshape(8, 8) * 255).astype(np.uint8))
    wide = Image.fromarray(np.array([[-5.0, 5.0]], dtype=np.float32), mode="F")
    assert np.asarray(to_rgb(wide))[0, :, 0].tolist() == [0, 255]  # out of 0..1: min-max


def test_frame_count_tells_animated_images(tmp_path):
    frames = [Image.new("RGB", (8, 8), color) for color in [(255, 0, 0), (0, 0, 255), (0, 255, 0)]]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    assert frame_count(path) == 3
    frames[0].save(tmp_path / "still.png")
    assert frame_count(tmp_path / "still.png") == 1


def test_load_image_applies_exif_orientation(tmp_path):
    from transformers.image_utils import load_image as hf_load_image

    image = Image.new("RGB", (60, 20), (200, 10, 10))
    image.paste((10, 200, 10), (0, 0, 10, 20))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = tmp_path / "rotated.jpg"
    image.save(path, exif=exif)
    loaded = load_image(path)
    assert loaded.size == (20, 60)
    assert np.array_equal(np.asarray(loaded), np.asarray(hf_load_image(str(path))))
    assert load_image(path.read_bytes()).size == (20, 60)


def test_load_image_accepts_bytes_and_pil(images_dir):
    data = (images_dir / "rocket.jpg").read_bytes()
    assert np.array_equal(np.asarray(load_image(data)), np.asarray(load_image(images_dir / "rocket.jpg")))
    rgba = Image.new("RGBA", (4, 4), (1, 2, 3, 4))
    assert load_image(rgba).mode == "RGBA"  # PIL input keeps its mode; preprocess composites


def test_load_image_animated_gif_first_frame(tmp_path):
    frames = [Image.new("RGB", (8, 8), color) for color in [(255, 0, 0), (0, 0, 255)]]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    pixel = load_image(path).getpixel((0, 0))
    assert pixel[0] > 200 and pixel[2] < 50


def test_load_image_missing_file(tmp_path):
    with pytest.raises(ImageError, match="not found"):
        load_image(tmp_path / "nope.png")


def test_load_image_zero_byte_file(tmp_path):
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    with pytest.raises(ImageError, match="empty"):
        load_image(path)
    with pytest.raises(ImageError, match="empty"):
        load_image(b"")


def test_load_image_text_file_named_png(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("this is not an image\n")
    with pytest.raises(ImageError, match="Not a recognised image"):
        load_image(path)


def test_load_image_truncated_jpeg(tmp_path, images_dir):
    data = (images_dir / "rocket.jpg").read_bytes()
    path = tmp_path / "truncated.jpg"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError, match="truncated or corrupt"):
        load_image(path)


# -- configuration ---------------------------------------------------------------------------


def test_missing_preprocessor_config_raises_config_error(tmp_path):
    with pytest.raises(ConfigError, match="preprocessor_config.json"):
        ImageProcessor.from_pretrained(tmp_path)


def test_image_seq_len_falls_back_to_config_json(tmp_path, model_config_dir):
    for name in ["preprocessor_config.json", "config.json"]:  # temporary copies, outside the repo
        (tmp_path / name).write_bytes((model_config_dir / name).read_bytes())
    assert ImageProcessor.from_pretrained(tmp_path).image_seq_len == 64  # int((512 // 16) ** 2 / 4 ** 2)


@pytest.mark.parametrize("size", [(9, 13), (512, 512), (451, 300), (300, 451), (1600, 300), (513, 100),
                                  (1024, 1025), (2048, 2048), (5000, 700)])
@pytest.mark.parametrize("detail", ["full", "balanced", "fast"])
def test_token_count_from_size_equals_preprocessing(processor, size, detail):
    processed = processor.preprocess(Image.new("RGB", size, (90, 140, 200)), detail=detail)
    assert processor.grid(*size, detail) == (processed.rows, processed.cols)
    assert processor.count_image_tokens(*size, detail) == processed.num_image_tokens


def test_image_size_reads_the_header_and_applies_exif_rotation(processor, tmp_path):
    from engine.models.smolvlm.processing import image_size, load_image

    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    Image.new("RGB", (640, 200), (10, 20, 30)).save(path, exif=exif)
    assert image_size(path) == (200, 640) == load_image(path).size
    assert processor.count_image_tokens(*image_size(path)) == processor.preprocess(load_image(path)).num_image_tokens
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    with pytest.raises(ImageError):
        image_size(bad)
