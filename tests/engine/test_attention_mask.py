"""The lazy bottom-right causal bias (what CUDA prefill uses) equals the materialized boolean mask."""

import pytest
import torch
import torch.nn.functional as F

from engine.layers.attention import bottom_right_mask, causal_attention


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
