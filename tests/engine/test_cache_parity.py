"""Model-level KV cache parity: SmolVlmModel (tiny random fp32 checkpoint) driven step by step through
the contiguous and the paged cache must give the logits of a no-cache run (one full prefill of the
whole sequence into a fresh cache) within 1e-5, and the two caches must agree bitwise.

"Within 1e-5" is measured relative to the logits' scale: ``max |cached - no_cache| / std(no_cache)``.
The random checkpoint's logits have a std of about 8 and reach 20, where a few fp32 ulps from
different matmul shapes (one prefill vs chunks and decodes) already exceed an absolute 1e-5 (seen:
1.1e-5 absolute, about 1.5e-6 relative).

Covers text and image prompts, lengths around a block boundary, truncate then continue, and forked
branches that diverge; the paged arena starts at one block so every run also grows it.
"""

from __future__ import annotations

import pytest
import torch

from engine.cache import CacheConfig, KVCache, PagedKVCache
from engine.models.smolvlm import SmolVlmModel
from engine.sources import LocalDirSource

BS = 8  # block size of the paged caches here
RTOL = 1e-5
IMAGE, FAKE, GLOBAL = 49190, 49189, 49152


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"), torch.float32)


def new_cache(model, kind: str, max_tokens: int = 400) -> KVCache:
    return model.create_kv_cache(CacheConfig(kind=kind, max_tokens=max_tokens, block_size=BS, num_blocks=1))


def text_embeds(model, n: int, seed: int) -> torch.Tensor:
    ids = torch.randint(0, 49000, (1, n), generator=torch.Generator().manual_seed(seed))
    return model.embed(ids)


def image_embeds(model, seed: int, tiles: int = 2) -> torch.Tensor:
    """``User:`` text, ``tiles`` image spans of 64 tokens, then text: ~160 positions with image features."""
    g = torch.Generator().manual_seed(seed)
    words = lambda n: torch.randint(0, 49000, (n,), generator=g).tolist()  # noqa: E731
    ids = words(5)
    for _ in range(tiles):
        ids += [FAKE, GLOBAL] + [IMAGE] * 64
    ids += [FAKE] + words(9)
    pixels = [torch.randn(1, 3, 512, 512, generator=g) for _ in range(tiles)]
    return model.embed_multimodal(torch.tensor([ids]), pixels)


def no_cache_logits(model, embeds: torch.Tensor) -> torch.Tensor:
    """Logits of the last position of ``embeds``, from one prefill into a fresh cache."""
    cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=embeds.shape[1]))
    return model.prefill(embeds, cache, range(0, embeds.shape[1]))


def run(model, cache: KVCache, embeds: torch.Tensor, bounds: list[int]) -> list[torch.Tensor]:
    """Feed positions ``bounds[i]:bounds[i+1]`` of ``embeds`` step by step (decode for single tokens)."""
    out = []
    for a, b in zip(bounds, bounds[1:]):
        assert cache.seq_len == a
        if b - a == 1:
            out.append(model.decode(embeds[:, a:b], cache))
        else:
            out.append(model.prefill(embeds[:, a:b], cache, range(a, b)))
    return out


def check(model, embeds: torch.Tensor, bounds: list[int], results: dict[str, list[torch.Tensor]]) -> None:
    for b, paged, contiguous in zip(bounds[1:], results["paged"], results["contiguous"]):
        assert torch.equal(paged, contiguous), f"paged and contiguous differ after {b} tokens"
        ref = no_cache_logits(model, embeds[:, :b])
        err = float((paged - ref).abs().max() / ref.std())
        assert err < RTOL, f"after {b} tokens: cached logits differ from no-cache by {err:.2e} of their std"


@pytest.mark.parametrize("prompt_len", [BS - 1, BS, BS + 1])
def test_text_prompt_around_a_block_boundary(model, prompt_len):
    embeds = text_embeds(model, prompt_len + 2 * BS + 1, seed=prompt_len)
    bounds = [0, prompt_len, prompt_len + 1, prompt_len + 2, prompt_len + BS + 1, prompt_len + 2 * BS + 1]
    results = {kind: run(model, new_cache(model, kind), embeds, bounds) for kind in ("paged", "contiguous")}
    check(model, embeds, bounds, results)


def test_image_prompt_in_chunks_that_split_image_spans(model):
    embeds = image_embeds(model, seed=1)  # 5 + 2 * 66 + 10 = 147 positions
    n = embeds.shape[1]
    bounds = [0, 13, 40, 71, 100, n - 1, n]  # chunk ends inside both image spans and on block edges
    caches = {kind: new_cache(model, kind) for kind in ("paged", "contiguous")}
    results = {kind: run(model, cache, embeds, bounds) for kind, cache in caches.items()}
    check(model, embeds, bounds, results)
    paged = caches["paged"]
    assert paged.nbytes == -(-n // BS) * paged.bytes_per_block
    assert paged.arena_version > 0 and paged.num_blocks >= -(-n // BS)  # grew from one block


@pytest.mark.parametrize("keep", [BS - 1, BS, BS + 1, 20])
def test_truncate_then_continue_equals_a_fresh_run(model, keep):
    first = image_embeds(model, seed=2, tiles=1)[:, :30]  # text, then part of an image span
    other = text_embeds(model, 12, seed=3)
    spliced = torch.cat([first[:, :keep], other], dim=1)
    results = {}
    for kind in ("paged", "contiguous"):
        cache = new_cache(model, kind)
        run(model, cache, first, [0, 25, 26, 30])
        cache.truncate(keep)
        if isinstance(cache, PagedKVCache):
            assert len(cache.block_table) == -(-keep // BS)
        results[kind] = run(model, cache, spliced, [keep, keep + 1, keep + 9, keep + 12])
    check(model, spliced, [keep, keep + 1, keep + 9, keep + 12], results)


@pytest.mark.parametrize("fork_at", [3 * BS + 3, 4 * BS])  # mid-block (copy-on-write) and on a boundary
def test_forked_branches_diverge_and_each_equals_a_fresh_run(model, fork_at):
    trunk = image_embeds(model, seed=4, tiles=1)[:, :fork_at]  # ends inside the image span
    branches = {name: torch.cat([trunk, text_embeds(model, 2 * BS, seed=5 + i)], dim=1)
                for i, name in enumerate(("parent", "child"))}
    bounds = [fork_at, fork_at + 1, fork_at + 5, fork_at + 2 * BS]
    out = {}
    for kind in ("paged", "contiguous"):
        parent = new_cache(model, kind)
        run(model, parent, trunk, [0, fork_at])
        caches = {"parent": parent, "child": parent.fork()}
        out[kind] = {name: [] for name in caches}
        for a, b in zip(bounds, bounds[1:]):
            for name in ("child", "parent"):  # the child writes first into the shared block
                out[kind][name] += run(model, caches[name], branches[name], [a, b])
        if kind == "paged":
            shared = fork_at // BS  # full blocks before the fork stay shared
            assert caches["child"].block_table[:shared] == parent.block_table[:shared]
            assert caches["child"].block_table[shared] != parent.block_table[shared]
    for name, embeds in branches.items():
        check(model, embeds, bounds, {kind: out[kind][name] for kind in out})
