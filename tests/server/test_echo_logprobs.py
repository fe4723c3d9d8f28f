"""``/v1/completions`` with ``echo`` and ``logprobs``: the prompt's own tokens scored, as OpenAI's
legacy API and vLLM return them and as lm-evaluation-harness's ``local-completions`` reads them for
``loglikelihood`` requests (``token_logprobs[ctxlen:]``, ``top_logprobs`` for ``is_greedy``).

On SmolLM2-135M-Instruct's real weights (skipped without the GGUF file) the values are checked
against the float32 log-softmax of the engine's own ``prefill_all_logits`` over the whole prompt
(1e-4) and of transformers' logits (5e-4, the tolerance of tests/engine/test_real_weights.py for
other kernels' summation orders); on the tiny random checkpoint, a prompt whose emoji is split
over byte tokens and the refusals that hold with echo too."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from engine import load_model
from engine.cache import CacheConfig
from engine.chat import ChatSession
from engine.sources import resolve_source
from engine.tokenizer import Tokenizer
from server import ServerConfig, create_app
from server.routes_generate import token_text
from tests.engine.conftest import smollm2_gguf  # noqa: F401 - a fixture
from tests.server.helpers import ThreadServer

PROMPT = "The capital of France is Paris. The capital of Italy is Rome"


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):  # noqa: F811
    model = load_model(smollm2_gguf, "cpu", "float32")
    tokenizer = Tokenizer.from_pretrained(resolve_source(smollm2_gguf).folder)
    session = ChatSession(model, tokenizer, None, CacheConfig(kind="paged", max_tokens=2048))
    srv = ThreadServer(create_app(ServerConfig(model=str(smollm2_gguf)), loader=lambda model, options: session))
    try:
        yield srv.url, httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"], session
    finally:
        srv.stop()


def complete(url: str, **body) -> dict:
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def reference(model, ids: list[int]) -> torch.Tensor:
    """float32 log-softmax of the logits of every position: one prefill from an empty cache."""
    cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=len(ids)))
    with torch.inference_mode():
        logits = model.prefill_all_logits(model.embed(torch.tensor([ids])), cache, range(len(ids)))[0]
    return torch.log_softmax(logits.float(), -1)


def check_scored(lp: dict, ids: list[int], ref: torch.Tensor, tokenizer, top: int, tol: float) -> None:
    """``lp``'s first ``len(ids)`` entries are the prompt's: null first, then ``ref``'s values."""
    assert lp["tokens"][:len(ids)] == [token_text(tokenizer.token_bytes(i)) for i in ids]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    for t in range(1, len(ids)):
        assert abs(lp["token_logprobs"][t] - float(ref[t - 1, ids[t]])) < tol, t
        values, best = torch.topk(ref[t - 1], top)
        alternatives = lp["top_logprobs"][t]
        assert list(alternatives) == [token_text(tokenizer.token_bytes(i)) for i in best.tolist()]
        assert max(abs(a - float(v)) for a, v in zip(alternatives.values(), values)) < tol


def raw(token: str) -> bytes:
    """A logprobs ``token`` string's bytes (``bytes:\\xf0\\x9f`` for part of a character)."""
    return bytes.fromhex(token[6:].replace("\\x", "")) if token.startswith("bytes:") else token.encode()


def check_offsets(text: str, lp: dict) -> None:
    """Each token's ``text_offset`` is where its text starts in the choice's text: the characters
    that the tokens before it complete (a token that begins with part of a character starts where
    that character does, its first byte being the character's)."""
    pieces = [raw(token) for token in lp["tokens"]]
    assert b"".join(pieces).decode() == text
    for n, offset in enumerate(lp["text_offset"]):
        assert offset == len(b"".join(pieces[:n]).decode("utf-8", errors="ignore")), n


def test_echo_scores_the_prompt(smollm2):
    url, model_id, session = smollm2
    ids = session.tokenizer.encode(PROMPT, allow_special=True)
    out = complete(url, model=model_id, prompt=PROMPT, echo=True, logprobs=3, max_tokens=0, temperature=0)
    choice = out["choices"][0]
    assert choice["text"] == PROMPT and choice["finish_reason"] == "length"
    assert out["usage"]["prompt_tokens"] == len(ids) and out["usage"]["completion_tokens"] == 0
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids)
    check_scored(lp, ids, reference(session.model, ids), session.tokenizer, 3, 1e-4)
    check_offsets(choice["text"], lp)


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_echo_logprobs_equal_transformers(smollm2, smollm2_gguf):  # noqa: F811
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files only with accelerate")
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, dtype=torch.float32).eval()
    url, model_id, session = smollm2
    ids = session.tokenizer.encode(PROMPT, allow_special=True)
    with torch.no_grad():
        ref = torch.log_softmax(ref_model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    out = complete(url, model=model_id, prompt=PROMPT, echo=True, logprobs=2, max_tokens=0, temperature=0)
    check_scored(out["choices"][0]["logprobs"], ids, ref, session.tokenizer, 2, 5e-4)


def lm_eval_loglikelihood(choice: dict, ctxlen: int, drop_last: bool) -> tuple[float, bool]:
    """lm-evaluation-harness's parsing (lm_eval/models/openai_completions.py, 0.4.13's
    LocalCompletionsAPI.parse_logprobs, which asks for max_tokens 1 and drops that token's entry
    with ``[ctxlen:-1]``; its older OpenaiCompletionsLM asked for max_tokens 0 and read ``[ctxlen:]``)."""
    end = -1 if drop_last else None
    token_logprobs = choice["logprobs"]["token_logprobs"][ctxlen:end]
    top_logprobs = choice["logprobs"]["top_logprobs"][ctxlen:end]
    is_greedy = all(tok == max(top.values()) for tok, top in zip(token_logprobs, top_logprobs))
    return sum(token_logprobs), is_greedy


@pytest.mark.parametrize("max_tokens", [0, 1])
@pytest.mark.parametrize(("context", "continuation"), [("The capital of France is", " Paris"),
                                                       ("The capital of France is", " Rome, of course")])
def test_lm_eval_loglikelihood_request(smollm2, max_tokens, context, continuation):
    url, model_id, session = smollm2
    ctx = session.tokenizer.encode(context)
    ids = ctx + session.tokenizer.encode(continuation)
    assert session.tokenizer.encode(context + continuation) == ids
    body = {"model": model_id, "prompt": context + continuation, "temperature": 0, "max_tokens": max_tokens,
            "logprobs": 1, "seed": 1234, "echo": True}  # lm-eval's payload
    choice = complete(url, **body)["choices"][0]
    assert len(choice["logprobs"]["tokens"]) == len(ids) + max_tokens
    logprob, is_greedy = lm_eval_loglikelihood(choice, len(ctx), drop_last=max_tokens == 1)
    ref = reference(session.model, ids)
    targets = torch.tensor(ids[len(ctx):])
    expected = float(ref[len(ctx) - 1:-1].gather(1, targets[:, None]).sum())
    assert abs(logprob - expected) < 1e-4
    assert is_greedy == bool((ref[len(ctx) - 1:-1].argmax(-1) == targets).all())
    assert is_greedy == (continuation == " Paris")  # the model knows its capitals


def test_echo_logprobs_streamed(smollm2):
    """The first chunk is the prompt with its scored tokens (as vLLM streams it), then the tokens;
    together they are the answer that is not streamed."""
    url, model_id, session = smollm2
    body = {"model": model_id, "prompt": PROMPT, "echo": True, "logprobs": 2, "max_tokens": 4, "temperature": 0,
            "ignore_eos": True}
    whole = complete(url, **body)["choices"][0]
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    choices = [c["choices"][0] for c in chunks]
    ids = session.tokenizer.encode(PROMPT, allow_special=True)
    assert choices[0]["text"] == PROMPT and len(choices[0]["logprobs"]["tokens"]) == len(ids)
    joined = {key: [v for c in choices if c["logprobs"] for v in c["logprobs"][key]] for key in whole["logprobs"]}
    # The same tokens; the values within float32 noise (the second answer reuses the cached prompt,
    # its first token's logits come from another prefill).
    assert joined["tokens"] == whole["logprobs"]["tokens"]
    assert joined["text_offset"] == whole["logprobs"]["text_offset"]
    for a, b in zip(joined["token_logprobs"][1:], whole["logprobs"]["token_logprobs"][1:]):
        assert abs(a - b) < 1e-4
    assert joined["token_logprobs"][0] is None and joined["top_logprobs"][0] is None
    for a, b in zip(joined["top_logprobs"][1:], whole["logprobs"]["top_logprobs"][1:]):
        assert list(a) == list(b) and max(abs(x - y) for x, y in zip(a.values(), b.values())) < 1e-4
    assert "".join(c["text"] for c in choices) == whole["text"]
    assert len(whole["logprobs"]["tokens"]) == len(ids) + 4
    check_offsets(whole["text"], whole["logprobs"])
    check_scored(whole["logprobs"], ids, reference(session.model, ids), session.tokenizer, 2, 1e-4)


def test_echo_logprobs_with_the_prompt_in_the_cache(smollm2):
    """A prompt whose prefix the server's cache holds (prefix caching) is scored all the same."""
    url, model_id, session = smollm2
    body = {"model": model_id, "prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": 2, "temperature": 0}
    first = complete(url, **body)
    complete(url, model=model_id, prompt=PROMPT + " and", max_tokens=1, temperature=0)
    again = complete(url, **body)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    lp = again["choices"][0]["logprobs"]
    assert lp == first["choices"][0]["logprobs"]
    ids = session.tokenizer.encode(PROMPT, allow_special=True)
    assert len(lp["tokens"]) == len(ids) + 2 and lp["token_logprobs"][0] is None
    check_scored(lp, ids, reference(session.model, ids), session.tokenizer, 1, 1e-4)


def test_echo_without_logprobs_and_no_tokens(smollm2):
    url, model_id, _ = smollm2
    choice = complete(url, model=model_id, prompt=PROMPT, echo=True, max_tokens=0)["choices"][0]
    assert choice == {"index": 0, "text": PROMPT, "logprobs": None, "finish_reason": "length"}


def test_no_tokens_without_echo_is_refused(smollm2):
    url, model_id, _ = smollm2
    r = httpx.post(f"{url}/v1/completions", json={"model": model_id, "prompt": PROMPT, "max_tokens": 0, "logprobs": 1})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_value" and r.json()["error"]["param"] == "max_tokens"
    assert "echo" in r.json()["error"]["message"]  # what would make it valid


# -- the tiny random checkpoint: byte tokens, the image token, the context --------------------------


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint):
    session = ChatSession.load(tiny_checkpoint)
    srv = ThreadServer(create_app(ServerConfig(model=str(tiny_checkpoint)), loader=lambda model, options: session))
    try:
        yield srv.url, httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"], session
    finally:
        srv.stop()


def test_echo_offsets_of_a_character_split_over_tokens(tiny):
    """An emoji split over two tokens (the first with the space before it): each is written
    ``bytes:\\xNN...``, and the one that completes the emoji starts where the emoji does."""
    url, model_id, session = tiny
    prompt = "Hi 😀 there"
    ids = session.tokenizer.encode(prompt, allow_special=True)
    choice = complete(url, model=model_id, prompt=prompt, echo=True, logprobs=2, max_tokens=0)["choices"][0]
    lp = choice["logprobs"]
    assert [t for t in lp["tokens"] if t.startswith("bytes:")]  # the tokenizer splits the emoji
    check_offsets(choice["text"], lp)
    # The SmolVLM tokenizer's pieces: " " and the emoji's first three bytes, then its last byte.
    assert lp["tokens"] == ["Hi", "bytes:\\x20\\xf0\\x9f\\x98", "bytes:\\x80", " there"]
    assert lp["text_offset"] == [0, 2, 3, 4]  # the last byte's token starts where the emoji does
    check_scored(lp, ids, reference(session.model, ids), session.tokenizer, 2, 1e-4)


def test_echo_keeps_the_refusals(tiny):
    url, model_id, session = tiny
    body = {"model": model_id, "echo": True, "logprobs": 1, "max_tokens": 0}
    r = httpx.post(f"{url}/v1/completions", json={**body, "prompt": "Look: <image> what?"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_value", r.text
    assert r.json()["error"]["param"] == "prompt" and r.json()["error"]["message"].startswith("the prompt holds")
    assert "image token" in r.json()["error"]["message"]
    capacity = session.cache.capacity
    r = httpx.post(f"{url}/v1/completions", json={**body, "prompt": "a " * (capacity + 8)}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "context_length_exceeded" and r.json()["error"]["param"] == "prompt"
