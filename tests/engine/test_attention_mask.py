"""The lazy bottom-right causal bias (what CUDA prefill uses) equals the materialized boolean mask."""

import pytest
import torch
import torch.nn.functional as F

from engine.layers.attention import attention, bottom_right_mask, causal_attention


@pytest.mark.parametrize("n,past", [(1, 0), (5, 0), (5, 7), (12, 864), (64, 3)])
def test_lazy_mask_matches_boolean_mask(n, past):
    torch.manual_seed(n + past)
    q = torch.randn(1, 9, n, 64)
    k = torch.randn(1, 9, past + n, 64)
    v = torch.randn(1, 9, past + n, 64)
    dense = bottom_right_mask(n, past, q.device, lazy=False)
    assert dense.shape == (n, past + n)
    assert dense.sum().item() == n * past + n * (n + 1) // 2  # query i sees past + i + 1 keys
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    b = F.scaled_dot_product_attention(q, k, v, attn_mask=bottom_right_mask(n, past, q.device, lazy=True))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_with_past_equals_full_causal_rows():
    """New queries after ``past`` cached positions attend like the last rows of a full causal pass."""
    torch.manual_seed(0)
    q = torch.randn(1, 9, 20, 64)
    k = torch.randn(1, 3, 20, 64)
    v = torch.randn(1, 3, 20, 64)
    full = causal_attention(q, k, v, past=0)
    tail = causal_attention(q[:, :, 13:], k, v, past=13)
    torch.testing.assert_close(tail, full[:, :, 13:], rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash attention is a CUDA kernel")
@pytest.mark.parametrize("n,past", [(5, 7), (12, 864), (24, 40), (900, 0)])
def test_cuda_prefill_after_cached_tokens_matches_the_boolean_mask(n, past):
    """On CUDA (bf16) ``causal_attention`` calls flash attention with its causal flag, which aligns
    to the bottom right when there are fewer queries than keys, on the 3 KV heads of 9 query heads
    as they are (grouped-query attention, no repeated copies)."""
    torch.manual_seed(n)
    q = torch.randn(1, 9, n, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 3, past + n, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 3, past + n, 64, device="cuda", dtype=torch.bfloat16)
    got = causal_attention(q, k, v, past)
    want = F.scaled_dot_product_attention(q.float(), k.repeat_interleave(3, 1).float(), v.repeat_interleave(3, 1).float(),
                                          attn_mask=bottom_right_mask(n, past, q.device, lazy=False))
    torch.testing.assert_close(got.float(), want, rtol=0, atol=2e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash attention is a CUDA kernel")
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_attention_without_a_mask_matches_float32_sdpa(causal):
    """The vision tower's (bidirectional) and a first prefill's (causal) attention, which call flash
    attention themselves on CUDA instead of letting SDPA pick cuDNN attention."""
    torch.manual_seed(int(causal))
    q, k, v = (torch.randn(2, 12, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    got = attention(q, k, v, causal=causal)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    assert got.shape == (2, 12, 1024, 64) and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=0, atol=2e-2)


def test_loading_a_model_does_not_import_torch_dynamo(tiny_checkpoint):
    """torch.nn.attention.bias imports torch._dynamo and sympy at module level: ~1.3 s of every
    start on a 2-core CPU (load to ready 2.8-3.1 s against 1.4-1.5 s without it)."""
    import subprocess
    import sys

    code = ("import sys; from engine.chat import ChatSession; from engine.api.events import GenerationParams; "
            f"s = ChatSession.load({str(tiny_checkpoint)!r}, device='cpu'); "
            "p = GenerationParams(max_new_tokens=2); list(s.send('hi', params=p)); list(s.send('and?', params=p)); "
            "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
