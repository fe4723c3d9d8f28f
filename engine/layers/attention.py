"""Causal attention of new queries over the keys and values a :class:`~engine.cache.KVCache` hands back.

The cache stores and returns K/V (``KVCache.update``); attention is computed here, so a cache knows
nothing of queries and a model can pick another attention kernel without touching the cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
    """Causal attention of ``n`` new queries at positions ``[past, past+n)`` over ``past+n`` keys.

    ``q [B, H, n, D]``, ``k``/``v [B, H_kv, past+n, D]`` -> ``[B, H, n, D]``. Grouped-query heads are
    expanded with ``repeat_interleave`` (transformers ``repeat_kv``).
    """
    n = q.shape[2]
    if n == 1:
        return single_query_attention(q, k, v)
    groups = q.shape[1] // k.shape[1]
    if q.device.type == "cuda" and _flash_ok(q, k, v, gqa=groups > 1):
        # Flash attention reads each KV head for its group of query heads in place: no
        # repeat_interleave copies (two kernels a layer, 60 of a 256M prefill's launches). With
        # fewer queries than keys its causal flag aligns the mask to the bottom right: the kernel
        # torch's causal_lower_right bias dispatches to, called without importing
        # torch.nn.attention.bias (which imports torch._dynamo and sympy: ~1.3 s at every start).
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)[0]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    if past == 0:
        return attention(q, k, v, causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right_mask(n, past, q.device))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D)) v`` without a mask (``causal``: query ``i`` sees keys ``0..i``);
    ``q``/``k``/``v [B, H, S, D]`` (as many heads each) -> ``[B, H, S, D]``.

    On CUDA this calls flash attention (Dao 2023) itself whenever it takes the inputs. On Hopper,
    ``F.scaled_dot_product_attention`` picks cuDNN attention instead, which builds an execution
    plan for every new sequence length: on the H200 ~2.4 ms per layer, ~70 ms of each prompt of a new
    length, and 0.17-0.84 s inside the first photo's vision tower after a start (0.8 s when the
    machine's CUDA JIT cache is cold). Elsewhere, and for inputs flash attention does not take,
    SDPA chooses as usual.
    """
    if q.device.type == "cuda" and _flash_ok(q, k, v):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)[0]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _flash_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool = False) -> bool:
    """Whether SDPA's flash kernel takes these inputs (GPU generation, dtype, head size, strides;
    ``gqa``: fewer KV heads than query heads, a divisor of them)."""
    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    return bool(can_use_flash_attention(SDPAParams(q, k, v, None, 0.0, False, gqa)))


def bottom_right_mask(n: int, past: int, device: torch.device, lazy: bool | None = None):
    """Mask of ``n`` queries at positions ``[past, past+n)`` over ``past+n`` keys: query ``i`` sees keys
    ``0..past+i`` (causal, aligned to the bottom right).

    ``lazy`` (default: on CUDA) gives torch's ``causal_lower_right`` bias, which SDPA runs in the
    memory-efficient kernel without building the mask. A boolean ``[n, past+n]`` tensor would be sent to
    cuDNN attention on Hopper, which builds an execution plan for every new (n, past) shape: ~2 ms per
    layer, 66 ms of the 108 ms prefill of a 12-token follow-up on the H200 (18 ms once the plans exist).
    Both forms give the same attention (tests/engine/test_attention_mask.py)."""
    if lazy if lazy is not None else device.type == "cuda":
        from torch.nn.attention.bias import causal_lower_right  # imports torch._dynamo: only when needed

        return causal_lower_right(n, past + n)
    key_pos = torch.arange(past + n, device=device)
    query_pos = torch.arange(past, past + n, device=device)
    return key_pos[None, :] <= query_pos[:, None]


def single_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode-step attention: ``q [B, H, 1, D]`` over ``k``/``v [B, H_kv, T, D]`` -> ``[B, H, 1, D]``.

    The ``H/H_kv`` query heads sharing a KV head become the rows of one small matmul, so the cache is
    read in place (strided views are fine) and never expanded by ``repeat_interleave``; a plain
    matmul + float32 softmax + matmul (transformers' eager order) beats SDPA's per-call setup for
    one query on the CPU.
    """
    b, h, _, d = q.shape
    hkv = k.shape[1]
    scores = torch.matmul(q.reshape(b, hkv, h // hkv, d), k.transpose(-1, -2)) * d**-0.5  # [B, Hkv, G, T]
    probs = scores.softmax(-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v).view(b, h, 1, d)
