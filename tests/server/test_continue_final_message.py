"""A last assistant message in /v1/chat/completions is continued (a prefill, Open WebUI's "Continue
response"): the prompt leaves it open, as transformers' ``apply_chat_template(continue_final_message=True)``
renders it, and the answer holds only the continuation."""

from __future__ import annotations

import json

import httpx
import pytest

from engine.tokenizer import Tokenizer
from tests.engine.conftest import _config_dir, _llama_config_dir

MODEL = "tiny-f32"
QUESTION = "What is the capital of France?"
PREFILL = "The capital of France is"
CONVERSATIONS = [
    [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": PREFILL}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Count to five"},
     {"role": "assistant", "content": "1, 2, "}],  # trailing space kept, as transformers keeps it
]


def transformers_ids(folder, messages: list[dict]) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    if "SmolVLM" in str(folder):  # its template reads content parts
        messages = [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in messages]
    text = tok.apply_chat_template(messages, tokenize=False, continue_final_message=True,
                                   chat_template=Tokenizer.from_pretrained(folder).chat_template)
    return tok(text)["input_ids"]


@pytest.mark.parametrize("config", ["SmolVLM", "SmolLM2"])
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_continue_final_message_encodes_as_transformers(config, messages):
    folder = _config_dir() if config == "SmolVLM" else _llama_config_dir()
    ours = Tokenizer.from_pretrained(folder).encode_chat(messages, continue_final_message=True).input_ids
    assert ours == transformers_ids(folder, messages)
    tokenizer = Tokenizer.from_pretrained(folder)
    assert tokenizer.decode(ours).endswith(messages[-1]["content"])  # open: no end-of-utterance after it


def test_a_last_assistant_message_is_continued(url):
    messages = CONVERSATIONS[0]
    body = {"model": MODEL, "messages": messages, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text  # was a 400: "the last message must be a user message"
    reply = r.json()
    expected_ids = transformers_ids(_config_dir(), messages)
    assert reply["usage"]["prompt_tokens"] == len(expected_ids)

    # The same prompt as raw text through /v1/completions (special tokens parsed): the same tokens
    # follow, and the chat answer is only them, not the prefill.
    prompt = Tokenizer.from_pretrained(_config_dir()).decode(expected_ids)
    completion = httpx.post(f"{url}/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True}).json()
    assert completion["usage"]["prompt_tokens"] == len(expected_ids)
    assert reply["choices"][0]["message"]["content"] == completion["choices"][0]["text"]
    assert reply["usage"]["completion_tokens"] == 6

    lines = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=60).text.splitlines()
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == \
        reply["choices"][0]["message"]["content"]

    # The client sends the continued message back whole, with a new question: an ordinary follow-up.
    follow = [*messages[:1], {"role": "assistant", "content": PREFILL + reply["choices"][0]["message"]["content"]},
              {"role": "user", "content": "Thanks"}]
    r = httpx.post(f"{url}/v1/chat/completions", json={**body, "messages": follow}, timeout=60)
    assert r.status_code == 200, r.text
    expected = Tokenizer.from_pretrained(_config_dir()).encode_chat(follow).input_ids
    assert r.json()["usage"]["prompt_tokens"] == len(expected)
