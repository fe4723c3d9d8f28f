"""Speculative decoding with a prompt-lookup drafter, verified by one ``decode_all_logits`` call.

The drafter (:class:`PromptLookupDrafter`) finds the latest earlier occurrence of the conversation's
last n-gram and proposes the tokens that followed it (Saxena 2023, "Prompt Lookup Decoding";
transformers ``PromptLookupCandidateGenerator``). It costs no model: it pays off when the answer
repeats the prompt or itself -- transcribing or quoting text, describing, editing code.

:class:`SpeculativeDecoder` feeds the last sampled token plus ``k`` drafts in one
``decode_all_logits`` call (``k + 1`` positions at the cache tail), walks the drafts left to right and
keeps each one the target distribution accepts, then rolls the rejected tail back with
``cache.truncate``. Every step returns the accepted drafts plus one token sampled by the model (the
correction at the first rejection, or a bonus token after the last draft), so a step never yields
fewer tokens than plain decoding.

Acceptance (Leviathan et al. 2023, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318): greedy
keeps a draft iff it is the argmax, so the output is token for token that of plain greedy decoding.
With sampling the drafter is deterministic (``q`` is one-hot at the draft ``x``), so ``x`` is accepted
with probability ``min(1, p(x)/q(x)) = p(x)``; on rejection a token is drawn from the residual
``max(p - q, 0)``, i.e. ``p`` with ``x`` removed and renormalised. The output distribution is ``p``'s,
unchanged. ``p`` is the sampler's processed distribution (repetition penalty, temperature, top-k/p,
min-p) given the history up to that position.

Draft length adapts (transformers' "heuristic" schedule): ``k += 2`` after a step that accepted every
draft, ``k -= 1`` otherwise. After steps that accept nothing the decoder stops drafting for 1, 3, 7,
15 tokens, so text the drafter cannot predict costs little more than plain decoding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from engine.cache import KVCache
from engine.models.base import GenerativeModel
from engine.sampling import TokenSampler, check_finite


class PromptLookupDrafter:
    """Propose the continuation of the latest earlier match of the history's last n-gram.

    Longer n-grams are tried first (``max_ngram`` down to ``min_ngram``). The index is built
    incrementally: the history may only grow between calls (a shorter history rebuilds it).
    N-grams containing an ``ignore_ids`` token (the image token) are never indexed, and proposals
    stop before such a token.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2, ignore_ids: Iterable[int] = ()):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.ignore_ids = frozenset(ignore_ids)
        self._tokens: list[int] = []
        # n -> {n-gram: end} with tokens[end - n:end] == n-gram and tokens[end] its continuation.
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(min_ngram, max_ngram + 1)}

    def _sync(self, history: Sequence[int]) -> None:
        old = len(self._tokens)
        if len(history) < old or (old and history[old - 1] != self._tokens[-1]):
            self._tokens, old = [], 0
            for table in self._index.values():
                table.clear()
        self._tokens.extend(history[old:])
        toks, ignore = self._tokens, self.ignore_ids
        # An n-gram ending at `end` is indexable once its continuation toks[end] exists.
        for end in range(max(old, 1), len(toks)):
            for n, table in self._index.items():
                if end >= n:
                    gram = tuple(toks[end - n:end])
                    if not ignore.intersection(gram):
                        table[gram] = end

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` drafted tokens to follow ``history`` (empty when no n-gram matches)."""
        if k < 1:
            return []
        self._sync(history)
        toks = self._tokens
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(toks) <= n:
                continue
            end = self._index[n].get(tuple(toks[-n:]))
            if end is None:
                continue
            out = []
            for t in toks[end:end + k]:
                if t in self.ignore_ids:
                    break
                out.append(t)
            if out:
                return out
        return []


class SpeculativeDecoder:
    """Draft with ``drafter``, verify with one ``decode_all_logits`` call, keep what ``sampler`` accepts.

    Counters: ``draft_tokens`` (drafts verified), ``accepted_tokens`` (drafts kept), ``steps``
    (verification calls), ``plain_steps`` (single-token decodes when there was nothing to draft).

    Raises:
        UnsupportedOperation: the model has no ``decode_all_logits``.
    """

    def __init__(self, model: GenerativeModel, cache: KVCache, sampler: TokenSampler,
                 drafter: PromptLookupDrafter | None = None, max_draft: int = 8, initial_draft: int = 4,
                 adaptive: bool = True):
        if not model.supports_decode_all_logits():
            from engine.api.errors import UnsupportedOperation

            raise UnsupportedOperation(f"{type(model).__name__} does not support speculative decoding")
        self.model, self.cache, self.sampler = model, cache, sampler
        image_id = getattr(getattr(model, "metadata", None), "image_token_id", None)
        self.drafter = drafter or PromptLookupDrafter(ignore_ids=() if image_id is None else (image_id,))
        self.max_draft = max_draft
        self.k = min(initial_draft, max_draft)
        self.adaptive = adaptive
        self.draft_tokens = self.accepted_tokens = self.steps = self.plain_steps = 0
        self._cooldown = 0
        self._misses = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    def _embed(self, tokens: list[int]) -> torch.Tensor:
        return self.model.embed(torch.tensor([tokens], device=self.model.device))

    def step(self, token: int, history: Sequence[int], limit: int | None = None) -> list[int]:
        """Feed ``token`` (the last of ``history``, not yet in the cache) and return the next tokens.

        Returns 1 to ``k + 1`` tokens: the accepted drafts, then one token sampled by the model. All
        but the last returned token are in the cache afterwards (as after plain decoding, the last
        one is not). ``limit`` caps how many tokens the caller still wants.
        """
        room = self.cache.capacity - self.cache.seq_len - 1  # drafts that fit after `token`
        k = 0 if self._cooldown else min(self.k, room, (limit or self.max_draft + 1) - 1)
        draft = self.drafter.propose(history, k) if k > 0 else []
        if not draft:
            self._cooldown = max(0, self._cooldown - 1)
            self.plain_steps += 1
            logits = self.model.decode(self._embed([token]), self.cache)
            return [self.sampler(logits[0], history)]
        base = self.cache.seq_len
        logits = self.model.decode_all_logits(self._embed([token, *draft]), self.cache)[0]  # [k+1, V]
        out: list[int] = []
        for i, d in enumerate(draft):
            ctx = [*history, *out]
            nxt = self._verify(logits[i], ctx, d)
            out.append(nxt)
            if nxt != d:
                break
        else:
            out.append(self.sampler(logits[len(draft)], [*history, *out]))
        accepted = len(out) - 1
        self.cache.truncate(base + 1 + accepted)
        self.steps += 1
        self.draft_tokens += len(draft)
        self.accepted_tokens += accepted
        self._adapt(accepted, len(draft))
        return out

    def _verify(self, logits: torch.Tensor, history: Sequence[int], draft: int) -> int:
        """``draft`` if the target accepts it, else the replacement token."""
        s = self.sampler
        check_finite(logits)
        if s.greedy:
            return int(torch.argmax(s.penalized(logits, history)))
        p = s.probs(logits, history)
        u = torch.rand((), generator=s.generator, device=p.device)
        if u < p[draft]:
            return draft
        residual = p.clone()
        residual[draft] = 0.0
        return s.draw(residual / residual.sum())

    def _adapt(self, accepted: int, drafted: int) -> None:
        if accepted:
            self._misses = 0
        else:
            self._misses += 1
            self._cooldown = min(2 ** self._misses - 1, 15)
        if self.adaptive:
            self.k = min(self.max_draft, self.k + 2) if accepted == drafted else max(1, self.k - 1)
