"""The token loop: plain, pipelined (CUDA) and with speculative verification.

``token_stream`` turns a prefill's last logits into a stream of sampled token ids, feeding each one
back through ``decode`` (or, with a :class:`~engine.speculative.SpeculativeDecoder`, drafting and
verifying several at a time). It knows nothing of text, chats or stop strings: ``ChatSession``
decides when to stop consuming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from engine.api.errors import InvalidLogitsError
from engine.cache import KVCache
from engine.models.base import GenerativeModel
from engine.sampling import INVALID_TOKEN, TokenSampler
from engine.speculative import SpeculativeDecoder


def token_stream(model: GenerativeModel, cache: KVCache, sampler: TokenSampler, history: list[int],
                 logits: torch.Tensor, max_tokens: int, speculative: SpeculativeDecoder | None = None,
                 pipelined: bool | None = None, on_wait: Callable[[], None] | None = None) -> Iterator[int]:
    """Yield up to ``max_tokens`` tokens after a prefill whose last logits are ``logits [1, V]``.

    Each token is appended to ``history`` before it is yielded. Tokens are fed into the cache lazily,
    only when the next one is asked for, so a consumer that stops (end of utterance, cancel) leaves the
    cache holding the prompt plus the answer up to the stopping token, plus, with ``speculative``, the
    drafts accepted after it, or with ``pipelined`` the stopping token itself: callers truncate the
    cache to what they keep. Stops early when the cache cannot take another token.

    ``pipelined`` (default: on CUDA, without ``speculative``) launches the decode step of a token
    before reading that token back to the host, so the GPU computes the next step while the host
    yields this one (see :func:`pipelined_stream`).

    ``on_wait`` (optional) is called once, when the host is about to wait for the first token: with
    ``pipelined`` after the first token's sampling and the next decode step are launched, so the
    device computes while it runs. What it raises ends the stream before the first token.
    """
    if pipelined is None:
        pipelined = speculative is None and model.device.type == "cuda"
    if pipelined and speculative is None:
        yield from pipelined_stream(model, cache, sampler, history, logits, max_tokens, on_wait)
        return
    produced = 0
    if on_wait is not None:
        on_wait()
    try:
        pending = [sampler(logits[0], history)]
    except InvalidLogitsError:
        raise InvalidLogitsError(_invalid(1, model.dtype)) from None
    while True:
        for token in pending:
            history.append(token)
            produced += 1
            yield token
            if produced >= max_tokens:
                return
        if cache.seq_len + 1 >= cache.capacity:
            return
        last = history[-1]
        try:
            if speculative is not None:
                pending = speculative.step(last, history, limit=max_tokens - produced)
            else:
                out = model.decode(model.embed(torch.tensor([[last]], device=model.device)), cache)
                pending = [sampler(out[0], history)]
        except InvalidLogitsError:
            raise InvalidLogitsError(_invalid(produced + 1, model.dtype)) from None


def pipelined_stream(model: GenerativeModel, cache: KVCache, sampler: TokenSampler, history: list[int],
                     logits: torch.Tensor, max_tokens: int, on_wait: Callable[[], None] | None = None
                     ) -> Iterator[int]:
    """:func:`token_stream` without speculation, one step ahead of the host.

    At batch 1 a replayed decode step takes ~0.4 ms on an H200, about as long as the host's work
    per token (sampling launch, reading the token back, detokenizing, the event to the UI). Done in
    sequence the GPU idles during the host part; here the token stays on the device, its decode
    step is launched (embedding and graph replay read it there), and only then is it copied back
    (into pinned memory, waited on with an event that precedes the new step). The cost: when the
    answer stops on this token (end of utterance, cancel), one extra step was computed and the
    cache holds it, which callers truncate anyway. Tokens are identical to :func:`token_stream`'s.
    On the CPU everything is synchronous: same tokens, no overlap.

    Where the model has a token step (``supports_token_decode``: CUDA graphs), each step is fed the
    token id on the device and takes the greedy argmax in its own graph. Greedy decoding without a
    repetition penalty then launches one graph replay per token: the host work of the separate
    embedding, sampling kernels and slot bookkeeping (~0.2 ms a token on an H200 host, measured;
    more than the GPU step) no longer sets the pace. Where the step also stores its token in host
    memory (``token_report_host``), the loop reads it there: the 8-byte copy between two replays
    cost ~10 us of GPU time a token on the H200 (bench/results/h200-session21).
    """
    cuda = logits.device.type == "cuda"
    host = torch.empty(1, dtype=torch.long, pin_memory=cuda)
    ready = torch.cuda.Event() if cuda else None
    supports = getattr(model, "supports_token_decode", None)
    token_step = supports is not None and supports(cache)
    # The graph's argmax is the sampler's token exactly when the sampler is plain greedy.
    device_greedy = token_step and type(sampler) is TokenSampler and sampler.greedy \
        and sampler.params.repetition_penalty == 1.0
    report_host = getattr(model, "token_report_host", None) if device_greedy else None
    produced = 0
    token, reported = sampler.sample_checked(logits[0], history)  # [1] int64 each, on the device
    # Where the token being waited for lands: ``host[0]`` after a copy of ``reported``, or
    # ``ring[index]``, stored there by the token step that computed it.
    ring, index = None, 0
    while True:
        if ring is None:
            host.copy_(reported, non_blocking=cuda)
        if ready is not None:
            ready.record()  # behind the copy, or behind the step that stored the token
        more = produced + 1 < max_tokens and cache.seq_len + 1 < cache.capacity
        if more:  # queued behind the event
            if token_step:
                position = cache.seq_len
                logits, argmax, step_reported = model.decode_token(token, cache)
            else:
                logits = model.decode(model.embed(token.view(1, 1)), cache)
        if on_wait is not None:
            on_wait()  # once: the host's own work is launched, and it would wait for the device now
            on_wait = None
        if ready is not None:
            ready.synchronize()  # the token only, not the step launched after it
        value = int(host[0]) if ring is None else int(ring[index])
        if value == INVALID_TOKEN:
            raise InvalidLogitsError(_invalid(produced + 1, model.dtype))
        history.append(value)
        produced += 1
        yield value
        if not more:
            return
        if device_greedy:
            token, reported = None, step_reported  # the next step reads its input where this one left it
            # The step after next writes this element again; it is launched after the read above.
            ring = report_host() if report_host is not None else None
            index = position % 2
        else:
            token, reported = sampler.sample_checked(logits[0], history)


def _invalid(n: int, dtype: torch.dtype) -> str:
    """Why answer token ``n`` could not be chosen, and what may help for a model computing in ``dtype``:
    float16's range (65,504) is what activations overflow; bfloat16 and float32 have float32's, so
    there it is the weights (trial 62: a float32 model was told to try float32)."""
    if dtype == torch.float16:
        cause = "its weights may be damaged, or float16 overflowed (try the bfloat16 or float32 data type)"
    elif dtype == torch.bfloat16:
        cause = "its weights may be damaged (the float32 data type may help)"
    else:
        cause = "its weights may be damaged (check the model's files, or download it again)"
    return f"The model produced invalid numbers (NaN or infinity) at token {n}: {cause}"
