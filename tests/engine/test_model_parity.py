"""Our SmolVLM against transformers' Idefics3 (fp32, eager attention) on the same random weights.

Tolerances: vision features and connector output 1e-4 (seen: ~1e-6), prefill logits 1e-4 (seen: ~4e-6);
greedy continuations must be identical token for token.
"""

from __future__ import annotations

import pytest
import torch

from engine.cache import CacheConfig
from engine.models.smolvlm import SmolVlmModel
from engine.sources import LocalDirSource

transformers = pytest.importorskip("transformers")

IMAGE, FAKE, GLOBAL = 49190, 49189, 49152


def load_pair(folder, dtype=torch.float32):
    ref = transformers.Idefics3ForConditionalGeneration.from_pretrained(
        folder, dtype=dtype, attn_implementation="eager").eval()
    ours = SmolVlmModel.load(LocalDirSource(folder), torch.device("cpu"), dtype)
    return ref, ours


def greedy(model, ids, tiles, n, cache_kind="contiguous"):
    cache = model.create_kv_cache(CacheConfig(kind=cache_kind, max_tokens=ids.shape[1] + n + 8))
    logits = model.prefill(model.embed_multimodal(ids, tiles), cache, range(0, ids.shape[1]))
    first = logits.clone()
    out = [int(logits.argmax(-1))]
    for _ in range(n - 1):
        logits = model.decode(model.embed(torch.tensor([[out[-1]]])), cache)
        out.append(int(logits.argmax(-1)))
    return first, out


def image_block(seq=64):
    return [FAKE, GLOBAL] + [IMAGE] * seq + [FAKE]


@pytest.fixture(scope="module")
def pair(tiny_checkpoint):
    return load_pair(tiny_checkpoint)


def test_vision_and_connector_match(pair):
    ref, ours = pair
    px = torch.randn(3, 3, 512, 512, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref_vision = ref.model.vision_model(px).last_hidden_state
        ref_conn = ref.model.connector(ref_vision)
    vision = ours.model.vision_model(px)
    conn = ours.model.connector(vision)
    assert vision.shape == (3, 1024, 32) and conn.shape == (3, 64, 64)
    assert (vision - ref_vision).abs().max() < 1e-4
    assert (conn - ref_conn).abs().max() < 1e-4
    assert (ours.encode_images(px) - ref_conn).abs().max() < 1e-4


def assert_two_image_parity(ref, ours, seed: int, n: int) -> None:
    """Two single-tile images (random pixels) in a prompt: prefill logits within 1e-4 and ``n``
    identical greedy tokens."""
    px = torch.randn(2, 3, 512, 512, generator=torch.Generator().manual_seed(seed))
    ids = torch.tensor([[1, 11126, 42] + image_block() + image_block() + [31, 45, 67, 2000]])
    with torch.no_grad():
        out = ref(input_ids=ids, pixel_values=px[None], attention_mask=torch.ones_like(ids))
        gen = ref.generate(input_ids=ids, pixel_values=px[None], attention_mask=torch.ones_like(ids),
                           max_new_tokens=n, min_new_tokens=n, do_sample=False)
    logits, tokens = greedy(ours, ids, [px[0:1], px[1:2]], n)
    assert (logits - out.logits[:, -1]).abs().max() < 1e-4
    assert tokens == gen[0, ids.shape[1]:].tolist()


def test_prefill_logits_and_greedy_24_tokens_match_with_two_images(pair):
    assert_two_image_parity(*pair, seed=2, n=24)


def test_text_only_greedy_matches(pair):
    ref, ours = pair
    ids = torch.tensor([[1, 4093, 42, 1159, 314, 253, 1345, 49279, 198, 9519, 42]])
    with torch.no_grad():
        gen = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=24,
                           min_new_tokens=24, do_sample=False)
    _, tokens = greedy(ours, ids, [], 24)
    assert tokens == gen[0, ids.shape[1]:].tolist()


def test_image_token_count_mismatch_names_both_numbers(pair):
    _, ours = pair
    ids = torch.tensor([[1] + image_block()])
    with pytest.raises(ValueError, match="tokens: 64, features: 128"):
        ours.embed_multimodal(ids, [torch.ones(1, 3, 512, 512)] * 2)  # (all-zero tiles are padding)


def test_prefill_position_rules(pair):
    _, ours = pair
    cache = ours.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=32))
    x = ours.embed(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="3 input positions but len\\(pos\\) == 2"):
        ours.prefill(x, cache, range(0, 2))
    with pytest.raises(ValueError, match="pos.start == 1 but cache.seq_len == 0"):
        ours.prefill(x, cache, range(1, 4))
    ours.prefill(x, cache, range(0, 3))
    assert cache.seq_len == 3
    with pytest.raises(ValueError, match="decode takes one position"):
        ours.decode(x, cache)


@pytest.mark.slow
def test_real_shape_prefill_logits_and_8_greedy_tokens(real_checkpoint):
    """SmolVLM-256M shape (random weights, loaded as fp32): two single-tile images, 8 greedy tokens."""
    assert_two_image_parity(*load_pair(real_checkpoint), seed=3, n=8)


@pytest.mark.parametrize("size", [512, 500])
def test_patch_embedding_as_a_matmul_equals_the_convolution(pair, size):
    """The patches x flattened kernel matmul against the stride-P convolution it replaces, on the
    tiny checkpoint's patch weights; at 500 pixels (not whole 16-pixel patches, like SmolVLM2-2.2B's
    384-pixel tiles of 14-pixel patches) the convolution drops the last pixels, and so must the matmul."""
    _, ours = pair
    emb = ours.model.vision_model.embeddings
    px = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(3))
    conv = torch.nn.functional.conv2d(px, emb.patch_embedding.weight, emb.patch_embedding.bias, stride=emb.patch_size)
    n = (size // emb.patch_size) ** 2
    expected = conv.flatten(2).transpose(1, 2) + emb.position_embedding.weight[None, :n]
    with torch.no_grad():
        got = emb(px)
    assert got.shape == expected.shape == (2, n, 32)
    assert (got - expected).abs().max() < 1e-5
