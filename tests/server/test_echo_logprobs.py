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

from engine.cache import CacheConfig
from engine.chat import ChatSession
from server import ServerConfig, create_app
from server.routes_generate import token_text
from tests.engine.conftest import smollm2_gguf  # noqa: F401 - a fixture
from tests.server.helpers import ThreadServer

PROMPT = "The capital of France is Paris. The capital of Italy is Rome"


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
    lp, before = again["choices"][0]["logprobs"], first["choices"][0]["logprobs"]
    # The same tokens and scores; the values within float rounding, not bit for bit: the cached prefix's
    # suffix is computed at another matrix shape, whose sums a busy machine's threads may split otherwise.
    assert (lp["tokens"], lp["text_offset"]) == (before["tokens"], before["text_offset"])
    assert lp["token_logprobs"][0] is None and before["token_logprobs"][0] is None
    assert lp["token_logprobs"][1:] == pytest.approx(before["token_logprobs"][1:], abs=1e-4)
    for now, then in zip(lp["top_logprobs"][1:], before["top_logprobs"][1:]):
        assert list(now) == list(then) and list(now.values()) == pytest.approx(list(then.values()), abs=1e-4)
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


# -- prompts of token ids: lm-eval's tokenized_requests (its default) --------------------------------


def lm_eval_payload(model_id: str, inp: list[int], generate: bool = False, until: list[str] | None = None) -> dict:
    """The body lm-evaluation-harness 0.4.13's local-completions posts with tokenized_requests and
    batch_size 1: create_message returns the batch of token lists as it is ([inp]), and
    LocalCompletionsAPI._create_payload puts it in ``prompt`` (loglikelihood: echo, logprobs 1,
    max_tokens 1; generate_until: max_tokens, temperature 0, stop, seed)."""
    if generate:
        return {"prompt": [inp], "model": model_id, "max_tokens": 8, "temperature": 0, "stop": until, "seed": 1234}
    return {"model": model_id, "prompt": [inp], "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234,
            "echo": True}


@pytest.mark.parametrize("shape", ["ids", "one list of ids"])
def test_a_token_id_prompt_is_answered_as_its_text(smollm2, shape):
    """The same completion, the same echoed text, tokens and offsets, the same scores (exactly:
    the prompt is scored on its own cache either way) and the same usage as the text prompt."""
    url, model_id, session = smollm2
    ids = session.tokenizer.encode(PROMPT, allow_special=True)
    body = {"model": model_id, "echo": True, "logprobs": 3, "max_tokens": 5, "temperature": 0, "ignore_eos": True}
    by_text = complete(url, **body, prompt=PROMPT)
    by_ids = complete(url, **body, prompt=ids if shape == "ids" else [ids])
    text, lp = by_ids["choices"][0]["text"], by_ids["choices"][0]["logprobs"]
    assert text == by_text["choices"][0]["text"] and text.startswith(PROMPT) and len(text) > len(PROMPT)
    assert by_ids["usage"]["prompt_tokens"] == by_text["usage"]["prompt_tokens"] == len(ids)
    assert by_ids["usage"]["completion_tokens"] == 5
    expected = by_text["choices"][0]["logprobs"]
    for key in ("tokens", "text_offset"):
        assert lp[key] == expected[key]
    n = len(ids)
    assert lp["token_logprobs"][:n] == expected["token_logprobs"][:n]
    assert lp["top_logprobs"][:n] == expected["top_logprobs"][:n]
    assert lp["token_logprobs"][n:] == pytest.approx(expected["token_logprobs"][n:], abs=1e-4)
    check_scored(lp, ids, reference(session.model, ids), session.tokenizer, 3, 1e-4)
    check_offsets(text, lp)
    # Without echo: only the completion.
    plain = complete(url, **{**body, "echo": False, "logprobs": None}, prompt=[ids])["choices"][0]
    assert plain["text"] == text[len(PROMPT):] and plain["logprobs"] is None


@pytest.mark.parametrize(("context", "continuation"), [("The capital of France is", " Paris"),
                                                       ("The capital of France is", " Rome, of course"),
                                                       ("The capital of France is Par", "is")])
def test_lm_eval_tokenized_loglikelihood_request(smollm2, context, continuation):
    """lm-eval's request as it builds it (context_enc + continuation_enc, each encoded alone) and
    its parse of the answer (sum of token_logprobs[ctxlen:-1], is_greedy from top_logprobs): the
    values of exactly those ids, also where encoding the joined text gives other ids ("Par" + "is")."""
    url, model_id, session = smollm2
    ctx, cont = session.tokenizer.encode(context), session.tokenizer.encode(continuation)
    ids = ctx + cont
    joined = session.tokenizer.encode(context + continuation)
    assert (joined != ids) == (continuation == "is")  # the case that text prompts could not score
    out = complete(url, **lm_eval_payload(model_id, ids))
    choice = out["choices"][0]
    assert out["usage"]["prompt_tokens"] == len(ids)
    assert len(choice["logprobs"]["tokens"]) == len(ids) + 1
    assert choice["text"].startswith(context + continuation)  # the ids decoded, then the one token
    logprob, is_greedy = lm_eval_loglikelihood(choice, len(ctx), drop_last=True)
    ref = reference(session.model, ids)
    targets = torch.tensor(cont)
    expected = float(ref[len(ctx) - 1:-1].gather(1, targets[:, None]).sum())
    assert abs(logprob - expected) < 1e-4
    assert is_greedy == bool((ref[len(ctx) - 1:-1].argmax(-1) == targets).all())
    assert is_greedy == ("Rome" not in continuation)  # "Par" goes on as "is" too
    if joined == ids:  # the same as the text prompt's request
        text_choice = complete(url, **{**lm_eval_payload(model_id, ids), "prompt": context + continuation})
        assert lm_eval_loglikelihood(text_choice["choices"][0], len(ctx), drop_last=True) == (logprob, is_greedy)


def test_lm_eval_tokenized_generate_until_request(smollm2):
    """generate_until's request (prompt [[ids]], stop sequences): the text the text prompt gets;
    lm-eval reads choices[index]["text"]."""
    url, model_id, session = smollm2
    context = "The capital of France is"
    ids = session.tokenizer.encode(context)
    body = lm_eval_payload(model_id, ids, generate=True, until=["\n\n", "."])
    by_ids, by_text = complete(url, **body), complete(url, **{**body, "prompt": context})
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"] == " Paris"  # cut at "."
    assert by_ids["choices"][0]["finish_reason"] == "stop"
    assert by_ids["usage"]["prompt_tokens"] == by_text["usage"]["prompt_tokens"] == len(ids)


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


def test_echo_of_token_ids_streamed_and_not(tiny):
    """The echo of token ids is their text as the tokenizer decodes them (as vLLM echoes them), first
    in a stream, with and without logprobs; ids ending inside the emoji echo its U+FFFD."""
    url, model_id, session = tiny
    ids = session.tokenizer.encode("Hi 😀 there", allow_special=True)
    for prompt in (ids, ids[:2]):  # the whole text; "Hi" and the emoji's first three bytes
        text = session.tokenizer.decode(prompt)
        for logprobs in (None, 2):
            body = {"model": model_id, "prompt": [prompt], "echo": True, "logprobs": logprobs, "max_tokens": 2,
                    "temperature": 0, "ignore_eos": True}
            whole = complete(url, **body)["choices"][0]
            assert whole["text"].startswith(text)
            if logprobs:
                assert len(whole["logprobs"]["tokens"]) == len(prompt) + 2
                assert whole["logprobs"]["text_offset"][:len(prompt) + 1][-1] == len(text)
                check_scored(whole["logprobs"], prompt, reference(session.model, prompt), session.tokenizer, 2, 1e-4)
            else:
                assert whole["logprobs"] is None
            with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}, timeout=60) as r:
                assert r.status_code == 200
                chunks = [json.loads(line[6:])["choices"] for line in r.iter_lines() if line.startswith("data: {")]
            assert chunks[0][0]["text"] == text
            assert "".join(c[0]["text"] for c in chunks if c) == whole["text"]
    assert session.tokenizer.decode(ids[:2]).endswith("\ufffd")
    lp = complete(url, model=model_id, prompt=ids, echo=True, logprobs=1, max_tokens=0)["choices"][0]
    assert lp["text"] == "Hi 😀 there" and lp["logprobs"]["text_offset"] == [0, 2, 3, 4]


@pytest.mark.parametrize(("prompt", "says"), [
    ([5, -1], "the prompt's token 1 is -1: token ids are integers in [0, 49280)"),
    ([[49280]], "the prompt's token 0 is 49280: token ids are integers in [0, 49280)"),
    ([2**70], f"the prompt's token 0 is {2**70}: token ids are integers in [0, 49280)"),
    ([5, 1.5], "prompt[1] is 1.5: a prompt's token ids are integers"),
    ([[5, 6.0]], "prompt[0][1] is 6.0: a prompt's token ids are integers"),
    ([True, 5], "prompt[0] is true: a prompt's token ids are integers"),
    ([[[5, 6]]], "prompt[0][0] is [5, 6]: a prompt's token ids are integers"),
    ([5, [6]], "prompt[1] is [6]: a prompt's token ids are integers"),
    ([5, "a"], "prompt[1] is \"a\": a prompt's token ids are integers"),
    ([[]], "prompt[0] is an empty list"),
    ([], "prompt: List should have at least 1 item after validation, not 0"),
    ([""], "the prompt is empty"),
    ([[5], [6]], "several prompts in one request are not supported"),
    (["a", "b"], "several prompts in one request are not supported"),
], ids=["negative", "past the vocabulary", "past int64", "float", "float in a list", "bool", "nested too deep",
        "a list among ids", "a string among ids", "empty list of ids", "empty list", "empty string",
        "two prompts of ids", "two prompts"])
def test_a_bad_token_id_prompt_is_a_400_on_prompt(tiny, prompt, says):
    url, model_id, _ = tiny
    r = httpx.post(f"{url}/v1/completions", json={"model": model_id, "prompt": prompt, "max_tokens": 1}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_value" and error["param"] == "prompt" and says in error["message"], error


def test_token_id_prompts_keep_the_refusals(tiny):
    """The image token's id is refused as its text is; a prompt of ids too long for the context is
    the same context_length_exceeded, scored or not."""
    url, model_id, session = tiny
    image = session.tokenizer.token_to_id("<image>")
    for body in ({"max_tokens": 1}, {"echo": True, "logprobs": 1, "max_tokens": 0}):
        r = httpx.post(f"{url}/v1/completions", json={"model": model_id, "prompt": [[5, image, 6]], **body})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_value", r.text
        assert r.json()["error"]["param"] == "prompt" and "image token <image>" in r.json()["error"]["message"]
        capacity = session.cache.capacity
        r = httpx.post(f"{url}/v1/completions", json={"model": model_id, "prompt": [5] * (capacity + 8), **body},
                       timeout=60)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "context_length_exceeded" and r.json()["error"]["param"] == "prompt"
        assert f"{capacity + 8} tokens" in r.json()["error"]["message"]
