"""Raw text completion (``/v1/completions``): continue a prompt without the chat template.

Runs on a :class:`~engine.chat.ChatSession`'s model and cache through its token loop, so sampling,
stop tokens, cancellation, stats and prefix reuse (a prompt that extends the last one prefills only
the new tokens) behave exactly as in chat. It drops the session's turns: a following chat request
rebuilds its conversation (the service's ``set_history`` does that).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from engine.api.errors import PromptTooLongError
from engine.api.events import GenerationEvent, GenerationParams
from engine.chat import Prompt


def complete_text(session: Any, prompt: str, params: GenerationParams) -> Iterator[GenerationEvent]:
    """Stream the continuation of ``prompt`` (events as :meth:`ChatSession.send`).

    Special-token strings in ``prompt`` (``<|im_start|>``, ``<end_of_utterance>``) are their ids, as
    transformers' ``tokenizer(prompt)`` encodes added tokens and as vLLM and llama-server read a
    completion prompt: a client that renders a chat template itself sends them as text. (A chat
    message's text never becomes a special token: :meth:`Tokenizer.encode_chat`.)

    Raises (before anything is yielded):
        ValueError: the prompt is empty, or holds the model's image token (``<image>``): a
            completion has no image to fill its slot.
        PromptTooLongError: the prompt does not fit the context.
    """
    t0 = time.perf_counter()
    ids = session.tokenizer.encode(prompt, allow_special=True)
    if not ids:
        raise ValueError("the prompt is empty")
    image_id = session._image_id  # None: a text-only model
    if image_id is not None and image_id in ids:
        # The model fills every image-token position with an image's features; without one it
        # could only fail (or read a slot no image was meant for).
        name = session.tokenizer.id_to_token(image_id)
        raise ValueError(f"the prompt holds the image token {name}, but a text completion takes no images "
                         "(send images in a chat message)")
    capacity = session.cache.capacity
    if len(ids) >= capacity:
        raise PromptTooLongError(f"the prompt has {len(ids)} tokens but the context holds {capacity}")
    session.turns.clear()
    # ChatSession's own loop: keys of plain tokens are the ids themselves, so the cache's common
    # prefix with the last prompt (chat or raw) is found and reused as for a chat turn.
    session._cancel.clear()
    return session._generate(Prompt(ids, list(ids), [], []), params, t0, [])
