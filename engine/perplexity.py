"""Perplexity of a text with a sliding window, through ``prefill_all_logits``.

The loop is the one of the transformers perplexity guide (https://huggingface.co/docs/transformers/perplexity):
windows of ``context`` tokens start every ``stride`` tokens; each window is run from an empty cache and
only its last ``trg_len = end - prev_end`` tokens are scored, so every token is scored once, with up to
``context - stride`` tokens of left context. The first token of the text has no left context and is not
scored (transformers' loss shifts labels by one). ``ppl = exp(sum of token NLL / tokens scored)``.

Unlike the guide, which weights each window's mean loss by ``valid labels - 1`` (one too few for every
window but the first), the sum here is exact; the test computes transformers' reference the same way.

Each window is prefilled in chunks: positions whose logits are not needed go through ``prefill``
(logits of one position), the rest through ``prefill_all_logits``; log-softmax is taken in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.cache import CacheConfig
from engine.models.base import GenerativeModel


@dataclass(frozen=True, slots=True)
class PerplexityResult:
    perplexity: float
    nll: float  # mean negative log-likelihood per scored token (nats)
    tokens: int  # tokens scored
    windows: int

    def to_dict(self) -> dict:
        return {"perplexity": self.perplexity, "nll": self.nll, "tokens": self.tokens, "windows": self.windows}


def windows(n: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """``(begin, end, trg_len)`` of each window over ``n`` tokens, as in the transformers guide."""
    if context < 2 or not 1 <= stride <= context:
        raise ValueError(f"need context >= 2 and 1 <= stride <= context, got context={context}, stride={stride}")
    out, prev_end = [], 0
    for begin in range(0, n, stride):
        end = min(begin + context, n)
        out.append((begin, end, end - prev_end))
        prev_end = end
        if end == n:
            break
    return out


@torch.inference_mode()
def token_nll(model: GenerativeModel, ids: list[int], score_from: int, chunk: int = 512) -> torch.Tensor:
    """NLL (float32, nats) of ``ids[t]`` given ``ids[:t]`` for ``t`` in ``[max(score_from, 1), len(ids))``,
    running ``ids`` from an empty cache."""
    score_from = max(score_from, 1)
    cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=len(ids)))
    embeds = model.embed(torch.tensor([ids], device=model.device))
    targets = torch.tensor(ids, device=model.device)
    out = []
    for start in range(0, len(ids), chunk):
        stop = min(start + chunk, len(ids))
        x, pos = embeds[:, start:stop], range(start, stop)
        # Logits at position p predict token p + 1: positions [score_from - 1, len - 1) are needed.
        if stop <= score_from - 1:
            model.prefill(x, cache, pos)
            continue
        logits = model.prefill_all_logits(x, cache, pos)[0].float()
        lo, hi = max(start, score_from - 1), min(stop, len(ids) - 1)
        if hi > lo:
            logp = torch.log_softmax(logits[lo - start:hi - start], dim=-1)
            out.append(-logp.gather(1, targets[lo + 1:hi + 1, None])[:, 0])
    return torch.cat(out) if out else torch.zeros(0)


def perplexity(model: GenerativeModel, ids: list[int], context: int | None = None, stride: int | None = None,
               chunk: int = 512) -> PerplexityResult:
    """Sliding-window perplexity of token ids ``ids`` (see the module docstring).

    ``context`` defaults to the model's context, ``stride`` to ``context`` (disjoint windows).

    Raises:
        ValueError: fewer than two tokens, or bad ``context``/``stride`` (a context longer than the
            model's is refused, not cut to it: the figure would not be for the windows asked).
    """
    if len(ids) < 2:
        raise ValueError(f"perplexity needs at least 2 tokens, got {len(ids)}")
    limit = model.metadata.max_context
    if context is not None and context > limit:
        raise ValueError(f"context {context} is longer than the model's context of {limit} tokens")
    context = limit if context is None else context
    stride = context if stride is None else stride
    total, count = 0.0, 0
    wins = windows(len(ids), context, stride)
    for begin, end, trg_len in wins:
        window = ids[begin:end]
        nll = token_nll(model, window, len(window) - trg_len, chunk)
        total += float(nll.double().sum())
        count += nll.numel()
    mean = total / count
    return PerplexityResult(perplexity=math.exp(mean), nll=mean, tokens=count, windows=len(wins))
