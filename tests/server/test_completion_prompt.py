"""``/v1/completions``' prompt: special tokens written as text are their ids (transformers'
``tokenizer(prompt)``, vLLM, llama-server), while a chat message's text stays text."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

from engine.api.events import GenerationParams
from engine.completion import complete_text
from engine.tokenizer import Tokenizer
from tests.engine.conftest import _config_dir

MODEL = "tiny-f32"
#: SmolLM2's ChatML as a client renders it itself: <|im_start|> and <|im_end|> are special tokens of
#: the SmolVLM tokenizer too (ids 1 and 2).
CHATML = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_pretrained(_config_dir())


def _prompt_ids(tokenizer: Tokenizer, prompt: str, image_id: int | None = None) -> list[int]:
    """The ids complete_text hands to the session's token loop (a stand-in session records them)."""
    seen = []
    session = SimpleNamespace(tokenizer=tokenizer, _image_id=image_id, cache=SimpleNamespace(capacity=8192),
                              turns=[], _cancel=SimpleNamespace(clear=lambda: None),
                              _generate=lambda p, *_: seen.append(p) or iter(()))
    complete_text(session, prompt, GenerationParams())
    return seen[0].ids


@pytest.mark.parametrize("prompt", [
    CHATML,
    "User:<fake_token_around_image><global-img> Hi<end_of_utterance>\nAssistant: <|endoftext|>x",
    "no special tokens at all, but <|im_start (half of one) and <|not_a_token|>",
])
def test_a_completion_prompt_encodes_special_tokens_as_transformers_does(tokenizer, prompt):
    from transformers import AutoTokenizer

    expected = AutoTokenizer.from_pretrained(_config_dir())(prompt)["input_ids"]
    assert _prompt_ids(tokenizer, prompt) == expected
    if prompt == CHATML:
        assert len(expected) == 16 and expected[0] == expected[12] == tokenizer.token_to_id("<|im_start|>")


def test_a_completion_prompt_with_the_image_token_is_refused(tokenizer):
    image_id = tokenizer.token_to_id("<image>")
    with pytest.raises(ValueError, match="image token <image>"):
        _prompt_ids(tokenizer, "Describe <image> please", image_id)
    # A text-only model's tokenizer may have the string as a token without any image slot.
    assert image_id in _prompt_ids(tokenizer, "Describe <image> please", None)


def test_the_server_counts_a_chatml_completion_prompt_as_16_tokens(url, tokenizer):
    r = httpx.post(f"{url}/v1/completions", timeout=60,
                   json={"model": MODEL, "prompt": CHATML, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 16  # 33 when <|im_start|> was read as "<", "|", "im", ...

    r = httpx.post(f"{url}/v1/completions", timeout=60,
                   json={"model": MODEL, "prompt": "What is in <image>?", "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_value"
    assert "image token <image>" in r.json()["error"]["message"]


def test_a_chat_messages_special_token_text_stays_text(url, tokenizer):
    messages = [{"role": "user", "content": CHATML}]
    r = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                   json={"model": MODEL, "messages": messages, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    encoded = tokenizer.encode_chat(messages).input_ids
    assert r.json()["usage"]["prompt_tokens"] == len(encoded)
    # Only the template's own <|im_start|> (its first token) is special; the user's three are text.
    assert encoded.count(tokenizer.token_to_id("<|im_start|>")) == 1
    assert tokenizer.token_to_id("<|im_end|>") not in encoded
