"""Log-probabilities of a prompt's own tokens: the legacy completions API's ``echo`` with ``logprobs``,
which scoring tools (lm-evaluation-harness's ``loglikelihood``) use to score a text.

The prompt is run again from an empty contiguous cache of its own, through ``prefill_all_logits`` in
chunks, rather than through the session's cache: a prefix of the prompt may be there already (prefix
caching, paged blocks shared with other conversations), and its logits were never computed; a cache
of its own leaves the session's blocks as they are. The logits of position ``t`` score token
``t + 1``, so the last prompt position is not run here (the answer's own prefill computes it), and
the first token is never scored: nothing comes before it. Log-softmax is taken in float32 (as
:class:`~engine.sampling.LogprobSampler` does for generated tokens and ``engine.perplexity`` for
texts), and a token's log-probability and its alternatives' come from the same float32 row, so a
greedy token's value equals the best alternative's exactly (lm-eval's ``is_greedy`` compares them).
"""

from __future__ import annotations

import contextlib
import threading

import torch

from engine.cache import CacheConfig
from engine.cancellation import layer_cancel_points
from engine.models.base import GenerativeModel

#: Positions per ``prefill_all_logits`` call: bounds the float32 logits held at once (512 x 49k
#: vocabulary = 100 MB).
CHUNK = 512


@torch.inference_mode()
def score_prompt(model: GenerativeModel, ids: list[int], top: int, cancel: threading.Event | None = None,
                 chunk: int = CHUNK) -> list[tuple[float, list[tuple[int, float]]]]:
    """For each ``t`` in ``[1, len(ids))``: ``(log p(ids[t] | ids[:t]), alternatives)``, the
    alternatives being the ``top`` most likely ``(id, logprob)`` at ``t``, most likely first.

    ``cancel``: checked before every layer (:func:`~engine.cancellation.layer_cancel_points`);
    raises :class:`~engine.cancellation.Cancelled` once set.

    Raises:
        UnsupportedOperation: the model has no ``prefill_all_logits``.
    """
    if len(ids) < 2:
        return []
    scored = len(ids) - 1  # positions whose logits are needed: 0 .. len - 2
    cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=scored))
    embeds = model.embed(torch.tensor([ids[:scored]], device=model.device))
    targets = torch.tensor(ids[1:], device=model.device)
    out: list[tuple[float, list[tuple[int, float]]]] = []
    with layer_cancel_points(model, cancel) if cancel is not None else contextlib.nullcontext():
        for start in range(0, scored, chunk):
            stop = min(start + chunk, scored)
            logits = model.prefill_all_logits(embeds[:, start:stop], cache, range(start, stop))[0]
            logp = torch.log_softmax(logits.float(), dim=-1)
            chosen = logp.gather(1, targets[start:stop, None])[:, 0].tolist()
            if top:
                values, best = torch.topk(logp, min(top, logp.shape[-1]), dim=-1)
                alternatives = [list(zip(i, v)) for i, v in zip(best.tolist(), values.tolist())]
            else:
                alternatives = [[] for _ in chosen]
            out += zip(chosen, alternatives)
    return out

