"""The SmolVLM family (every config folder in shared/models) against transformers 5.

- image prompt ids: our processor + tokenizer against transformers' processor (PIL backend), exactly;
- tiny random-weight variants (each config's tile size, patch size and scale_factor kept) in float32:
  prefill logits within 1e-4 and greedy tokens identical to ``AutoModelForImageTextToText.generate``;
- SmolVLM2 (model_type smolvlm): a video prompt's greedy tokens, and transformers' merge rules
  (all-zero padding tiles dropped, one kept when all are padding, whole ``image_seq_len`` blocks);
- real shapes (random weights) of the 500M and the SmolVLM2 256M/500M on the CPU: ``slow``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine.cache import CacheConfig
from engine.models.smolvlm import SmolVlmModel
from engine.models.smolvlm.processing import ImageProcessor, load_image
from engine.registry import read_metadata
from engine.sources import LocalDirSource
from engine.tokenizer import Tokenizer
from tests.engine.conftest import FAMILY
from tests.engine.oracle import hf_processor

transformers = pytest.importorskip("transformers")
from transformers.models.smolvlm.processing_smolvlm import DEFAULT_CHAT_TEMPLATE  # noqa: E402
from transformers.video_utils import VideoMetadata  # noqa: E402

SMOLVLM2 = [n for n in FAMILY if n.startswith("SmolVLM2")]
QUESTION = "What is in this image?"


def chat_template(folder) -> str:
    return json.loads((folder / "chat_template.json").read_text())["chat_template"]


def image_messages(n_images: int = 1, text: str = QUESTION) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}] * n_images + [{"type": "text", "text": text}]}]


def hf_image_inputs(folder, images):
    proc = hf_processor(folder)
    text = proc.tokenizer.apply_chat_template(image_messages(len(images)), chat_template=chat_template(folder),
                                             tokenize=False, add_generation_prompt=True)
    return proc(text=[text], images=[images], return_tensors="pt")


def load_pair(folder, dtype=torch.float32):
    ref = transformers.AutoModelForImageTextToText.from_pretrained(
        folder, dtype=dtype, attn_implementation="eager").eval()
    ours = SmolVlmModel.load(LocalDirSource(folder), torch.device("cpu"), dtype)
    return ref, ours


def greedy(model, ids, tiles, n):
    cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=ids.shape[1] + n + 8))
    logits = model.prefill(model.embed_multimodal(ids, tiles), cache, range(0, ids.shape[1]))
    first = logits.clone()
    out = [int(logits.argmax(-1))]
    for _ in range(n - 1):
        logits = model.decode(model.embed(torch.tensor([[out[-1]]])), cache)
        out.append(int(logits.argmax(-1)))
    return first, out


def assert_parity(ref, ours, ids, pixel_values, tiles, n, **extra):
    with torch.no_grad():
        gen = ref.generate(input_ids=ids, pixel_values=pixel_values, attention_mask=torch.ones_like(ids),
                           max_new_tokens=n, min_new_tokens=n, do_sample=False, output_logits=True,
                           return_dict_in_generate=True, **extra)
    logits, tokens = greedy(ours, ids, tiles, n)
    assert (logits - gen.logits[0]).abs().max() < 1e-4  # the prefill's last-position logits
    assert tokens == gen.sequences[0, ids.shape[1]:].tolist()
    return tokens


@pytest.fixture(scope="module")
def photo(images_dir):
    return load_image(images_dir / "chelsea.png")  # 451 x 300: several tiles in every family member


# -- configs and prompts (no weights) ----------------------------------------------------------------

@pytest.mark.parametrize("name", FAMILY)
def test_tiny_config_keeps_tiles_patches_and_scale(shared_dir, family_checkpoint, name):
    real = read_metadata(shared_dir / "models" / name)
    tiny = read_metadata(family_checkpoint(name))
    assert (tiny.model_type, tiny.vision.image_size, tiny.vision.patch_size, tiny.scale_factor, tiny.image_seq_len) \
        == (real.model_type, real.vision.image_size, real.vision.patch_size, real.scale_factor, real.image_seq_len)
    processor = ImageProcessor.from_pretrained(shared_dir / "models" / name)
    assert processor.image_seq_len == real.image_seq_len
    assert processor.max_image_size == real.vision.image_size


def test_2_2b_tiles_are_384_px_with_14_px_patches_and_81_tokens(shared_dir):
    meta = read_metadata(shared_dir / "models" / "SmolVLM2-2.2B-Instruct")
    assert (meta.vision.image_size, meta.vision.patch_size, meta.scale_factor, meta.image_seq_len) == (384, 14, 3, 81)


@pytest.mark.parametrize("name", FAMILY)
def test_image_prompt_ids_match_transformers(shared_dir, images_dir, photo, name):
    folder = shared_dir / "models" / name
    processor, tokenizer = ImageProcessor.from_pretrained(folder), Tokenizer.from_pretrained(folder)
    small = photo.resize((90, 60))
    images = [processor.preprocess(photo), processor.preprocess(small)]
    ours = tokenizer.encode_chat(image_messages(2), images)
    ref = hf_image_inputs(folder, [photo, small])
    assert ours.input_ids == ref["input_ids"][0].tolist()
    pixels = ref["pixel_values"][0].numpy()  # [tiles, 3, M, M] (padded to the batch's most tiles)
    tiles = np.concatenate([img.tiles for img in images])
    assert np.abs(pixels[: len(tiles)] - tiles).max() <= 1e-6
    assert not pixels[len(tiles):].any()  # the rest is padding (all zero)


# -- tiny models -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAMILY)
def test_tiny_greedy_matches_transformers(shared_dir, family_checkpoint, photo, name):
    folder = family_checkpoint(name)
    ref, ours = load_pair(folder)
    caps = ours.capabilities()
    assert caps.vision and caps.image_tokens_per_tile == ours.metadata.image_seq_len
    assert caps.video == (ours.metadata.model_type == "smolvlm")
    processor = ImageProcessor.from_pretrained(folder)
    image = processor.preprocess(photo)
    inputs = hf_image_inputs(folder, [photo])
    ids = inputs["input_ids"]
    assert ids[0].tolist() == Tokenizer.from_pretrained(folder).encode_chat(image_messages(1), [image]).input_ids
    assert_parity(ref, ours, ids, inputs["pixel_values"], [torch.from_numpy(image.tiles)], 12,
                  pixel_attention_mask=inputs["pixel_attention_mask"])


@pytest.fixture(scope="module")
def smolvlm2_tiny(family_checkpoint):
    return load_pair(family_checkpoint("SmolVLM2-256M-Video-Instruct"))


def video_ids(folder, video, question="Describe this video."):
    """transformers' text side of a video prompt: the SmolVLM default chat template (with the video
    branch), ``<video>`` replaced by ``replace_video_token``, then its tokenizer."""
    proc = hf_processor(folder)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
    text = proc.tokenizer.apply_chat_template(messages, chat_template=DEFAULT_CHAT_TEMPLATE, tokenize=False,
                                             add_generation_prompt=True)
    meta = VideoMetadata(total_num_frames=video.info.total_frames, fps=video.info.fps, duration=video.info.duration,
                         frames_indices=list(video.indices))
    replacement = proc.replace_video_token({"pixel_values": np.zeros((1, len(video.indices))),
                                            "video_metadata": [meta]}, 0)
    (expanded,), _ = proc.get_text_with_replacements([text], videos_replacements=[replacement])
    return proc.tokenizer(expanded, return_tensors="pt")["input_ids"]


def test_video_prompt_greedy_matches_transformers(shared_dir, smolvlm2_tiny, family_checkpoint):
    from engine.models.smolvlm.video import read_video

    ref, ours = smolvlm2_tiny
    folder = family_checkpoint("SmolVLM2-256M-Video-Instruct")
    path = shared_dir / "videos" / "moving_square.mp4"
    processed = ImageProcessor.from_pretrained(folder).preprocess_video(path)
    ids = video_ids(folder, read_video(path))
    assert int((ids == ours.metadata.image_token_id).sum()) == processed.num_image_tokens
    tiles = torch.from_numpy(processed.tiles)
    assert_parity(ref, ours, ids, tiles[None], [tiles], 8)


def _single_block_ids(meta, n_blocks=1):
    block = [49189, 49152] + [meta.image_token_id] * meta.image_seq_len + [49189]
    return torch.tensor([[1, 11126, 42] + block * n_blocks + [31, 45]])


def test_smolvlm_drops_all_zero_padding_tiles_like_transformers(smolvlm2_tiny):
    ref, ours = smolvlm2_tiny
    m = ours.metadata.vision.image_size
    real = torch.randn(1, 3, m, m, generator=torch.Generator().manual_seed(5))
    padded = torch.cat([real, torch.zeros(1, 3, m, m)])
    ids = _single_block_ids(ours.metadata)
    with torch.no_grad():
        expected = ref(input_ids=ids, pixel_values=padded[None]).logits[:, -1]
    got = ours.prefill(ours.embed_multimodal(ids, [padded]), ours.create_kv_cache(
        CacheConfig(kind="contiguous", max_tokens=ids.shape[1] + 4)), range(ids.shape[1]))
    assert (got - expected).abs().max() < 1e-4
    # Every tile padding: SmolVLM2 keeps one (its features fill the one block).
    zeros = torch.zeros(2, 3, m, m)
    with torch.no_grad():
        expected = ref(input_ids=ids, pixel_values=zeros[None]).logits[:, -1]
    got = ours.prefill(ours.embed_multimodal(ids, [zeros]), ours.create_kv_cache(
        CacheConfig(kind="contiguous", max_tokens=ids.shape[1] + 4)), range(ids.shape[1]))
    assert (got - expected).abs().max() < 1e-4


def test_smolvlm_rejects_image_tokens_that_are_not_whole_tiles(smolvlm2_tiny):
    _, ours = smolvlm2_tiny
    seq = ours.metadata.image_seq_len
    ids = torch.tensor([[1] + [ours.metadata.image_token_id] * (seq - 1) + [2]])
    with pytest.raises(ValueError, match=f"tokens: {seq - 1}, not a multiple of image_seq_len {seq}"):
        ours.embed_multimodal(ids, [torch.ones(1, 3, 8, 8)])


# -- real shapes (random weights, stored bf16 like the published checkpoints, run in float32) ----------

def assert_two_image_parity(folder, seed=3, n=8):
    ref, ours = load_pair(folder)
    meta = ours.metadata
    m = meta.vision.image_size
    px = torch.randn(2, 3, m, m, generator=torch.Generator().manual_seed(seed))
    ids = _single_block_ids(meta, 2)
    assert_parity(ref, ours, ids, px[None], [px[0:1], px[1:2]], n)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SmolVLM-500M-Instruct", "SmolVLM2-256M-Video-Instruct",
                                  "SmolVLM2-500M-Video-Instruct"])
def test_real_shape_prefill_logits_and_greedy_tokens(family_checkpoint, name):
    assert_two_image_parity(family_checkpoint(name, tiny=False, dtype="bfloat16"))
