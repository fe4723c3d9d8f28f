"""Next-token selection: greedy, temperature, top-k, top-p, min-p, repetition penalty; seeded.

Processors run in transformers' order (``RepetitionPenaltyLogitsProcessor`` -> temperature ->
top-k -> top-p -> min-p), then a token is drawn. ``temperature == 0`` is greedy (argmax).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from engine.api.errors import InvalidLogitsError
from engine.api.events import GenerationParams

#: What :meth:`TokenSampler.sample` returns for logits holding NaN or infinity (no host sync needed).
INVALID_TOKEN = -1


def check_finite(logits: torch.Tensor) -> None:
    """Raise :class:`InvalidLogitsError` if ``logits`` hold NaN or +-infinity (reads back one bool)."""
    if not bool(torch.isfinite(logits).all()):
        raise InvalidLogitsError("the model produced invalid numbers (NaN or infinity) in its logits")


def apply_repetition_penalty(logits: torch.Tensor, history: Sequence[int], penalty: float) -> torch.Tensor:
    """Divide positive and multiply negative logits of tokens in ``history`` by ``penalty``.

    CTRL (Keskar et al. 2019, arXiv 1909.05858) as in transformers ``RepetitionPenaltyLogitsProcessor``.
    ``logits [V] float32``; returns a new tensor.
    """
    if penalty == 1.0 or not history:
        return logits
    ids = torch.tensor(sorted(set(history)), device=logits.device, dtype=torch.long)
    score = logits.gather(0, ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(0, ids, score)


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """Set logits outside the top-k / nucleus (Holtzman et al. 2019) / min-p sets to ``-inf``.

    ``logits [V] float32`` (already divided by the temperature). The most likely token always survives.
    """
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove_sorted = cum <= (1 - top_p)
        remove_sorted[-1] = False
        remove = torch.zeros_like(remove_sorted).scatter(0, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    if min_p > 0.0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < min_p * probs.max(), float("-inf"))
    return logits


_MASK64 = 2**64 - 1


def generator_seed(seed: int, device: torch.device | str) -> int:
    """The seed a torch generator on ``device`` is given for ``seed`` (0 to 2**64 - 1).

    The CPU's Mersenne Twister keeps only the low 32 bits of a seed (5 and 2**32 + 5 sampled the same
    answer: trial 67); CUDA's Philox keeps all 64. Off CUDA, a seed of 2**32 or more is folded into
    32 bits that depend on all 64 by SplitMix64's finalizer (Steele, Lea & Flood, "Fast splittable
    pseudorandom number generators", OOPSLA 2014), so seeds that differ only in their high bits give
    different answers; smaller seeds are used as they are (the same answers as before)."""
    if seed < 2**32 or torch.device(device).type == "cuda":
        return seed
    z = seed & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) & 0xFFFFFFFF


class TokenSampler:
    """``(logits [V], history) -> token id`` for ``params``, with its own seeded generator.

    :meth:`probs` exposes the processed next-token distribution and :attr:`generator` the random
    stream, so that speculative verification can accept or resample drafted tokens exactly.
    """

    def __init__(self, params: GenerationParams, device: torch.device | str = "cpu"):
        self.params = params
        self.generator: torch.Generator | None = None
        if params.temperature > 0:
            self.generator = torch.Generator(device=device)
            if params.seed is not None:
                self.generator.manual_seed(generator_seed(params.seed, device))
            else:
                self.generator.seed()

    @property
    def greedy(self) -> bool:
        return self.params.temperature == 0

    def penalized(self, logits: torch.Tensor, history: Sequence[int]) -> torch.Tensor:
        """``logits [V]`` in float32 after the repetition penalty (what greedy takes the argmax of)."""
        return apply_repetition_penalty(logits.float(), history, self.params.repetition_penalty)

    def probs(self, logits: torch.Tensor, history: Sequence[int]) -> torch.Tensor:
        """The distribution ``[V]`` a token is drawn from (temperature > 0 only)."""
        p = self.params
        logits = filter_logits(self.penalized(logits, history) / p.temperature, p.top_k, p.top_p, p.min_p)
        return logits.softmax(-1)

    def draw(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def sample_checked(self, logits: torch.Tensor, history: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(token, reported)``: the next token as an int64 ``[1]`` tensor on ``logits``' device (always
        a valid id, safe to embed), and the same token or :data:`INVALID_TOKEN` when the logits hold
        NaN or +infinity. Neither is read back: no host synchronization, except to upload ``history``
        when a repetition penalty is set. Consumes the random stream exactly as :meth:`__call__` does.

        Greedy checks only the winning logit (NaN and +inf win an argmax, so a finite winner means
        no NaN or +inf anywhere); sampling checks them all and draws from a finite stand-in, since
        multinomial over NaN fails with a device error. ``-inf`` alone is a masked token, not an error.
        """
        if self.greedy:
            best, token = torch.max(self.penalized(logits, history), 0)  # one kernel: value and index
            token = token.view(1)
            ok = torch.isfinite(best).view(1)
        else:
            ok = (logits < float("inf")).all().view(1)  # False for NaN and +inf; -inf is a masked token
            safe = torch.where(ok, logits, torch.zeros((), dtype=logits.dtype, device=logits.device))
            token = torch.multinomial(self.probs(safe, history), 1, generator=self.generator).view(1)
        return token, torch.where(ok, token, INVALID_TOKEN)

    def sample(self, logits: torch.Tensor, history: Sequence[int]) -> torch.Tensor:
        """The reported token of :meth:`sample_checked` (``INVALID_TOKEN`` for NaN/inf logits)."""
        return self.sample_checked(logits, history)[1]

    def __call__(self, logits: torch.Tensor, history: Sequence[int]) -> int:
        """The next token id. Raises :class:`InvalidLogitsError` for NaN or infinite logits."""
        if self.greedy and logits.device.type == "cpu" and logits.dtype == torch.float32:
            # NumPy's argmax, one pass on this thread, where sample_checked's tensor ops (a max that
            # forks the intra-op pool, isfinite, where, the read back) cost ~0.2 ms of a 4-7 ms CPU
            # decode step. The same token: both take the first of equal maxima, and NaN or +inf wins.
            values = self.penalized(logits, history).numpy()
            token = int(values.argmax())
            if not math.isfinite(values[token]):
                raise InvalidLogitsError("the model produced invalid numbers (NaN or infinity) in its logits")
            return token
        token = int(self.sample(logits, history))
        if token == INVALID_TOKEN:
            raise InvalidLogitsError("the model produced invalid numbers (NaN or infinity) in its logits")
        return token


def make_sampler(params: GenerationParams, device: torch.device | str = "cpu") -> TokenSampler:
    """A function ``(logits [V], history) -> token id`` for ``params``, with its own seeded generator."""
    return TokenSampler(params, device)


class LogprobSampler:
    """A :class:`TokenSampler` that also records, per sampled token, its log-probability under the
    model's raw distribution (``log_softmax`` of the logits, before penalties and filters, as OpenAI
    reports it) and the ``top`` most likely tokens. Used only when an answer asks for logprobs, so the
    extra softmax and host reads stay off the ordinary decode path.
    """

    def __init__(self, sampler: TokenSampler, top: int = 0):
        self.inner, self.top = sampler, top
        self.records: list[tuple[int, float, list[tuple[int, float]]]] = []

    def _record(self, logits: torch.Tensor, token: int) -> None:
        logp = torch.log_softmax(logits.float(), -1)
        best = []
        if self.top:
            values, ids = torch.topk(logp, min(self.top, logp.shape[-1]))
            best = list(zip(ids.tolist(), values.tolist()))
        self.records.append((token, float(logp[token]), best))

    def __call__(self, logits: torch.Tensor, history: Sequence[int]) -> int:
        token = self.inner(logits, history)
        self._record(logits, token)
        return token

    def sample_checked(self, logits: torch.Tensor, history: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        token, reported = self.inner.sample_checked(logits, history)
        if int(reported) != INVALID_TOKEN:  # an invalid token is reported by the caller, not recorded
            self._record(logits, int(token))
        return token, reported

    def sample(self, logits: torch.Tensor, history: Sequence[int]) -> torch.Tensor:
        return self.sample_checked(logits, history)[1]

    def __getattr__(self, name: str):  # greedy, probs, generator, ...: the wrapped sampler's
        return getattr(self.inner, name)

    def pop(self, token: int) -> tuple[float, list[tuple[int, float]]] | None:
        """The record of ``token`` if it is the oldest one waiting (``None`` otherwise)."""
        if self.records and self.records[0][0] == token:
            _, logprob, best = self.records.pop(0)
            return logprob, best
        return None
