"""``/tokenize``, ``/detokenize`` and ``/tokenizer_info`` (vLLM's shapes): a text's ids are the ones
``/v1/completions`` reads its prompt as, chat messages' ids the ones ``/v1/chat/completions`` prefills
(images included), and lm-evaluation-harness's ``local-completions`` finds and uses them (its
``tokenizer_backend="auto"`` probe and its ``RemoteTokenizer``)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from engine.chat import ChatSession
from engine.tokenizer import Tokenizer
from server import ServerConfig, create_app
from server.routes_generate import token_text
from server.routes_tokenize import MAX_TOKENIZE_CHARS
from tests.engine.conftest import _shared, smollm2_gguf, tiny_checkpoint  # noqa: F401 - fixtures
from tests.server.helpers import ThreadServer, data_uri

TEXTS = [
    "The capital of France is Paris.",
    # special-token strings are those tokens, as /v1/completions reads them
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "naïve café, an emoji 🙂 split over byte tokens, and <|not_a_token|>",
]


@pytest.fixture(scope="module")
def tiny_session(tiny_checkpoint):  # noqa: F811
    return ChatSession.load(tiny_checkpoint)


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint, tiny_session):  # noqa: F811
    session = tiny_session
    srv = ThreadServer(create_app(ServerConfig(model=str(tiny_checkpoint)), loader=lambda model, options: session))
    try:
        yield srv.url, httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"], session.tokenizer
    finally:
        srv.stop()


def post(url: str, path: str, **body) -> dict:
    r = httpx.post(f"{url}{path}", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def refused(url: str, path: str, body) -> dict:
    r = httpx.post(f"{url}{path}", json=body, timeout=60)
    assert r.status_code == 400, r.text
    return r.json()["error"]


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_has_the_ids_a_completion_reads(tiny, text):
    url, model, tokenizer = tiny
    got = post(url, "/tokenize", model=model, prompt=text, add_special_tokens=False)
    ids = tokenizer.encode(text, allow_special=True)
    assert got["tokens"] == ids and got["count"] == len(ids) > 0
    assert got["max_model_len"] == httpx.get(f"{url}/v1/models").json()["data"][0]["max_model_len"] > 0
    # vLLM's default (add_special_tokens true): the same for this tokenizer, whose post-processor adds none
    assert post(url, "/tokenize", prompt=text)["tokens"] == ids
    # /v1/completions with echo and logprobs lists the prompt's tokens: the same ones, as many
    done = post(url, "/v1/completions", model=model, prompt=text, max_tokens=0, echo=True, logprobs=0)
    assert done["usage"]["prompt_tokens"] == len(ids)
    assert done["choices"][0]["logprobs"]["tokens"] == [token_text(tokenizer.token_bytes(i)) for i in ids]
    # return_token_strs: the vocabulary's strings
    strs = post(url, "/tokenize", prompt=text, return_token_strs=True)["token_strs"]
    assert strs == [tokenizer.id_to_token(i) for i in ids]


def test_the_special_tokens_are_parsed_as_transformers_does(tiny):
    from transformers import AutoTokenizer

    url, _, _ = tiny
    reference = AutoTokenizer.from_pretrained(_shared() / "models" / "SmolVLM-256M-Instruct")
    for text in TEXTS:
        assert post(url, "/tokenize", prompt=text)["tokens"] == reference(text)["input_ids"]
    assert post(url, "/tokenize", prompt=TEXTS[1])["count"] == 16  # <|im_start|> is 1 token, not 5


@pytest.mark.parametrize("text", TEXTS)
def test_detokenize_round_trips_and_is_the_echo_of_token_ids(tiny, text):
    url, model, _ = tiny
    ids = post(url, "/tokenize", prompt=text)["tokens"]
    assert post(url, "/detokenize", model=model, tokens=ids) == {"prompt": text}
    echoed = post(url, "/v1/completions", model=model, prompt=ids, max_tokens=0, echo=True)
    assert echoed["choices"][0]["text"] == text
    assert post(url, "/detokenize", tokens=[]) == {"prompt": ""}


CHAT = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": [{"type": "text", "text": "And of Italy?"}, {"type": "text", "text": "<image>"}]}]


def chat_prompt_tokens(url: str, model: str, messages: list) -> int:
    return post(url, "/v1/chat/completions", model=model, messages=messages, max_tokens=1,
                temperature=0)["usage"]["prompt_tokens"]


def test_chat_messages_have_the_ids_a_chat_request_prefills(tiny):
    url, model, tokenizer = tiny
    got = post(url, "/tokenize", model=model, messages=CHAT)
    # a message's text parts are joined by a line break, as a chat request joins them; the "<image>" typed
    # by the user stays text
    joined = [*CHAT[:3], {"role": "user", "content": "And of Italy?\n<image>"}]
    assert got["tokens"] == tokenizer.encode_chat(joined).input_ids
    assert tokenizer.token_to_id("<image>") not in got["tokens"]
    assert got["count"] == chat_prompt_tokens(url, model, CHAT)
    # without the generation prompt: the template's rendering without it
    bare = post(url, "/tokenize", messages=CHAT, add_generation_prompt=False)["tokens"]
    assert bare == tokenizer.encode_chat(joined, add_generation_prompt=False).input_ids
    assert got["tokens"][:len(bare)] == bare and len(bare) < len(got["tokens"])
    # a last assistant message is continued, as a chat request continues it (vLLM's continue_final_message)
    prefill = [*CHAT[:2], {"role": "assistant", "content": "The capital is"}]
    open_ = post(url, "/tokenize", messages=prefill, add_generation_prompt=False, continue_final_message=True)
    assert open_["tokens"] == tokenizer.encode_chat(prefill, continue_final_message=True).input_ids
    assert post(url, "/tokenize", messages=prefill)["tokens"] == open_["tokens"]
    assert open_["count"] == chat_prompt_tokens(url, model, prefill)


PREFILL = [*CHAT[:2], {"role": "assistant", "content": "The capital is"}]
USER = [*CHAT[:3], {"role": "user", "content": "And of Italy?"}]


@pytest.mark.parametrize("messages, flags, expected, raw", [
    # vLLM's fields, given (raw: a prompt the engine's chat answers do not build, completed as ids)
    (USER, {"add_generation_prompt": False}, {"add_generation_prompt": False}, True),
    (USER, {"add_generation_prompt": True}, {}, False),
    (PREFILL, {"continue_final_message": False}, {}, True),  # closed, and a new assistant turn after it
    (PREFILL, {"add_generation_prompt": True}, {}, True),
    (PREFILL, {"continue_final_message": False, "add_generation_prompt": False}, {"add_generation_prompt": False}, True),
    (PREFILL, {"continue_final_message": True, "add_generation_prompt": False}, {"continue_final_message": True}, False),
    # neither says otherwise: a last assistant message is continued, as before (Open WebUI, llama-server)
    (PREFILL, {}, {"continue_final_message": True}, False),
    (PREFILL, {"add_generation_prompt": False}, {"continue_final_message": True}, False),
], ids=["user, no opening", "user, opening", "answer closed", "answer closed by add_generation_prompt",
        "answer closed, no opening", "answer continued", "answer continued by default",
        "answer continued without the opening"])
def test_chat_completions_read_the_template_fields_as_tokenize(tiny, messages, flags, expected, raw):
    """Found by a trial: /v1/chat/completions ignored add_generation_prompt and continue_final_message
    (a prompt of 37 tokens where /tokenize counted 33, and a last assistant message continued with
    continue_final_message false). Both endpoints read them alike: the same ids, the same count."""
    url, model, tokenizer = tiny
    ids = tokenizer.encode_chat(messages, **expected).input_ids
    assert post(url, "/tokenize", messages=messages, **flags)["tokens"] == ids
    body = {"model": model, "messages": messages, "max_tokens": 3, "temperature": 0, "ignore_eos": True}
    chat = post(url, "/v1/chat/completions", **body, **flags)
    assert chat["usage"]["prompt_tokens"] == len(ids)
    if raw:  # the answer goes on from where the prompt ends: /v1/completions' answer to the same ids
        completion = post(url, "/v1/completions", model=model, prompt=ids, max_tokens=3, temperature=0,
                          ignore_eos=True)
        assert chat["choices"][0]["message"]["content"] == completion["choices"][0]["text"]


@pytest.mark.parametrize("messages, flags, code, param, message", [
    (USER, {"continue_final_message": True}, "invalid_value", "continue_final_message",
     "add_generation_prompt and continue_final_message cannot both be true: set add_generation_prompt to false "
     "to continue the last message"),
    (USER, {"continue_final_message": True, "add_generation_prompt": False}, "invalid_value",
     "continue_final_message", "continue_final_message needs the last message to be the assistant's"),
    (PREFILL, {"continue_final_message": True, "add_generation_prompt": True}, "invalid_value",
     "continue_final_message", "add_generation_prompt and continue_final_message cannot both be true: set "
     "add_generation_prompt to false to continue the last message"),
])
def test_chat_completions_refuse_the_template_fields_as_tokenize(tiny, messages, flags, code, param, message):
    """Found by a trial: continue_final_message true with a last user message was a 400 from /tokenize
    and answered by /v1/chat/completions."""
    url, model, _ = tiny
    for path in ("/tokenize", "/v1/chat/completions"):
        error = refused(url, path, {"model": model, "messages": messages, "max_tokens": 2, **flags})
        assert (error["code"], error["param"], error["message"]) == (code, param, message), path


def test_a_prompt_built_as_ids_takes_no_images(tiny, shared_dir):
    """A prompt the engine's chat answers do not build is completed as token ids, which carry no
    pixels: with an image, add_generation_prompt false and a closed last answer are refused by a chat
    request, and by /tokenize as it (trial 78 R3: /tokenize counted the first)."""
    url, model, tokenizer = tiny
    photo = {"type": "image_url", "image_url": {"url": data_uri(shared_dir / "images" / "coffee.png")}}
    with_image = [{"role": "user", "content": [photo, {"type": "text", "text": "What is it?"}]}]
    for path in ("/tokenize", "/v1/chat/completions"):
        error = refused(url, path, {"model": model, "messages": with_image, "add_generation_prompt": False})
        assert (error["code"], error["param"]) == ("unsupported_parameter", "add_generation_prompt"), path
        assert error["message"] == ("add_generation_prompt false takes a conversation without images or videos: "
                                    "the server builds that prompt as token ids, which carry no pictures")
    answered = [*with_image, {"role": "assistant", "content": "Coffee."}]
    for path in ("/tokenize", "/v1/chat/completions"):
        error = refused(url, path, {"model": model, "messages": answered, "continue_final_message": False})
        assert (error["code"], error["param"]) == ("unsupported_parameter", "continue_final_message"), path
        assert error["message"].startswith("continue_final_message false with a last assistant message"), error


def test_an_answer_this_server_generated_counts_as_its_generated_ids(tiny):
    """A re-sent answer is replayed as the ids it was generated as (server.conversation.AnswerIds),
    which re-tokenizing its text may not give: /tokenize counts what the chat request prefills."""
    url, model, _ = tiny
    first = [{"role": "user", "content": "Tell me something."}]
    reply = post(url, "/v1/chat/completions", model=model, messages=first, max_tokens=12, temperature=0)
    answer = reply["choices"][0]["message"]["content"]
    follow_up = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "More."}]
    assert post(url, "/tokenize", model=model, messages=follow_up)["count"] == \
        chat_prompt_tokens(url, model, follow_up)
    # Sent back changed, it is its text for both (trial 66: the chat still read the cached answer).
    for changed in (answer + " ", answer + "\n", " " + answer):
        edited = [*first, {"role": "assistant", "content": changed}, {"role": "user", "content": "More."}]
        post(url, "/v1/chat/completions", model=model, messages=follow_up, max_tokens=1)  # the answer cached again
        assert post(url, "/tokenize", model=model, messages=edited)["count"] == chat_prompt_tokens(url, model, edited)
        # and back unchanged after the edit (trial 67: read as the edited text cached by the request before)
        assert post(url, "/tokenize", model=model, messages=follow_up)["count"] == \
            chat_prompt_tokens(url, model, follow_up)


def test_an_image_counts_as_the_chat_reads_it(tiny):
    url, model, _ = tiny
    photo = data_uri(_shared() / "images" / "chelsea.png")
    for detail in ("low", "high"):
        messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": photo, "detail": detail}},
                                                 {"type": "text", "text": "What is this?"}]}]
        got = post(url, "/tokenize", model=model, messages=messages)
        assert got["count"] == chat_prompt_tokens(url, model, messages) > 64  # a tile is 64 image tokens
    broken = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                           {"type": "text", "text": "?"}]}]
    error = refused(url, "/tokenize", {"messages": broken})
    assert error["param"] == "messages[0].content[0]" and error["code"] in ("invalid_image", "unsupported_image_format")


def test_chat_messages_are_counted_while_an_answer_runs(tiny, tiny_session):
    """/tokenize with messages used to wait on the engine thread behind a running answer (a long one:
    for minutes). The template, the tokenizer and the images' grids need none of the model, so it
    answers at once, the same count as after the answer."""
    url, model, _ = tiny
    photo = data_uri(_shared() / "images" / "chelsea.png")
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi! How can I help?"},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": photo, "detail": "high"}},
                                             {"type": "text", "text": "What is this?"}]}]
    model_ = tiny_session.model
    decoding, release = threading.Event(), threading.Event()
    real = model_.decode

    def held(*args, **kwargs):  # the answer's decode steps wait until the test lets them go
        decoding.set()
        release.wait(60)
        return real(*args, **kwargs)

    answered = []
    answer = threading.Thread(target=lambda: answered.append(post(
        url, "/v1/chat/completions", model=model, messages=[{"role": "user", "content": "Count to ten."}],
        max_tokens=4, temperature=0)))
    model_.decode = held
    try:
        answer.start()
        assert decoding.wait(60)  # the answer is generating, held at a decode step
        r = httpx.post(f"{url}/tokenize", json={"model": model, "messages": messages}, timeout=20)
        assert answer.is_alive() and not answered  # answered while the answer still runs
    finally:
        release.set()
        answer.join(60)
        del model_.decode
    assert r.status_code == 200, r.text
    assert answered and answered[0]["choices"][0]["finish_reason"] in ("length", "stop")
    got = r.json()
    assert got["count"] == len(got["tokens"]) == chat_prompt_tokens(url, model, messages) > 13 * 64  # 12 crops + 1
    assert got["tokens"] == post(url, "/tokenize", model=model, messages=messages)["tokens"]


def test_tokenizer_info_has_what_lm_eval_reads(tiny):
    url, _, tokenizer = tiny
    info = httpx.get(f"{url}/tokenizer_info").json()
    assert info["eos_token"] == "<end_of_utterance>" and info["bos_token"] == "<|im_start|>"
    assert info["pad_token"] == "<|im_end|>" and info["chat_template"] == tokenizer.chat_template
    assert info["model_max_length"] > 0 and info["tokenizer_class"]


def test_lm_eval_finds_and_uses_the_servers_tokenizer(tiny):
    """lm-evaluation-harness's own code: the probe of ``tokenizer_backend="auto"`` (GET /tokenizer_info,
    POST /tokenize {"prompt": "test", "add_special_tokens": false}) and its RemoteTokenizer."""
    utils = pytest.importorskip("lm_eval.utils", reason="lm-eval not installed (pip install lm_eval --no-deps)")
    url, _, tokenizer = tiny
    base_url = f"{url}/v1/completions"
    assert utils.check_remote_tokenizer_support(base_url)
    remote = utils.RemoteTokenizer(base_url)
    assert remote.encode("Paris is") == tokenizer.encode("Paris is", allow_special=True)
    assert remote.eos_token_id == tokenizer.token_to_id("<end_of_utterance>")
    assert remote.bos_token_id == tokenizer.token_to_id("<|im_start|>")
    assert remote.batch_decode([remote.encode(t) for t in TEXTS]) == TEXTS
    # lm-eval renders the template itself, with the messages as it has them: SmolVLM's template reads
    # a list of parts (SmolLM2's, a string: test_smollm2_tokenize_matches_its_completions_and_chats)
    chat = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert remote.apply_chat_template(chat) == tokenizer.apply_chat_template(chat)


def test_lm_eval_probe_requests_as_it_sends_them(tiny):
    """The requests lm-eval 0.4.13 sends (lm_eval/utils.py), without lm-eval: no model, no key."""
    url, _, tokenizer = tiny
    info = httpx.get(f"{url}/tokenizer_info", headers={"Content-Type": "application/json"})
    assert info.status_code == 200 and "eos_token" in info.json()
    probe = post(url, "/tokenize", prompt="test", add_special_tokens=False)
    assert probe["tokens"] == tokenizer.encode("test", allow_special=True)
    eos = post(url, "/tokenize", prompt=info.json()["eos_token"], add_special_tokens=False)["tokens"]
    assert eos == [tokenizer.token_to_id("<end_of_utterance>")]


@pytest.mark.parametrize("body, param, says", [
    ({"tokens": [1, True]}, "tokens", "tokens[1] is true"),
    ({"tokens": [1, 2.0]}, "tokens", "tokens[1] is 2.0"),
    ({"tokens": [-1]}, "tokens", "tokens[0] is -1"),
    ({"tokens": [10**30]}, "tokens", "integers in [0,"),
    ({"tokens": [[1, 2]]}, "tokens", "tokens[0] is [1, 2]"),
    ({"tokens": "1 2"}, "tokens", ""),
    ({}, "tokens", ""),
])
def test_bad_token_ids_are_a_400_on_tokens(tiny, body, param, says):
    url, _, tokenizer = tiny
    error = refused(url, "/detokenize", body)
    assert error["param"] == param and error["code"] == "invalid_value" and says in error["message"]


def test_an_id_past_the_vocabulary_is_a_400(tiny):
    url, _, tokenizer = tiny
    error = refused(url, "/detokenize", {"tokens": [0, tokenizer.vocab_size]})
    assert error["param"] == "tokens" and f"tokens[1] is {tokenizer.vocab_size}" in error["message"]


@pytest.mark.parametrize("body, param", [
    ({}, "prompt"),
    ({"prompt": "a", "messages": [{"role": "user", "content": "a"}]}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": "a", "add_special_tokens": "yes"}, "add_special_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "a"}], "continue_final_message": True}, "continue_final_message"),
    ({"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": False,
      "continue_final_message": True}, "continue_final_message"),
    ({"prompt": "x" * (MAX_TOKENIZE_CHARS + 1)}, "prompt"),
    ({"messages": [{"role": "user", "content": "x" * (MAX_TOKENIZE_CHARS + 1)}]}, "messages"),
])
def test_bad_tokenize_requests_are_a_400_naming_the_field(tiny, body, param):
    url, _, _ = tiny
    error = refused(url, "/tokenize", body)
    assert error["param"] == param and error["code"] == "invalid_value", error


def test_another_model_is_a_404_as_on_the_other_routes(tiny):
    url, _, _ = tiny
    for path, body in (("/tokenize", {"prompt": "a"}), ("/detokenize", {"tokens": [1]})):
        r = httpx.post(f"{url}{path}", json={**body, "model": "gpt-4"}, timeout=30)
        assert r.status_code == 404 and r.json()["error"]["param"] == "model"
        assert r.json()["error"]["code"] == "model_not_found"


def test_a_long_text_is_counted_even_past_the_context(tiny):
    url, _, tokenizer = tiny
    text = "The quick brown fox jumps over the lazy dog. " * (MAX_TOKENIZE_CHARS // 45)
    got = post(url, "/tokenize", prompt=text)
    assert got["count"] == len(tokenizer.encode(text)) > got["max_model_len"]


def test_encoding_aside_lets_other_threads_run():
    """tokenizers' ``encode`` holds the GIL for the whole call (a server's event loop would wait);
    ``encode_aside``, which /tokenize uses, lets it go, and gives the same ids."""
    tokenizer = Tokenizer.from_pretrained(_shared() / "models" / "SmolLM2-135M-Instruct")
    text = "The quick brown fox jumps over the lazy dog. " * 20000  # 900k characters: ~0.5 s
    done, ids, ticks = threading.Event(), [], 0

    def work() -> None:
        ids.append(tokenizer.encode_aside(text))
        done.set()
    thread = threading.Thread(target=work)
    thread.start()
    while not done.is_set():
        time.sleep(0.002)
        ticks += 1
    thread.join()
    assert ticks >= 20, ticks  # held, it was 1 or 2
    assert ids[0] == tokenizer.encode(text, allow_special=True)


def test_the_key_cors_and_loading_apply(tiny_checkpoint):  # noqa: F811
    release = threading.Event()

    def loader(model, options):
        release.wait(30)
        return ChatSession.load(tiny_checkpoint)
    srv = ThreadServer(create_app(ServerConfig(model=str(tiny_checkpoint), api_key="k",
                                               cors_origins=["http://localhost:3000"]), loader=loader))
    try:
        key = {"Authorization": "Bearer k"}
        # (and what describes the model: its capabilities are unknown until it has loaded; trial 59)
        for method, path, body in (("POST", "/tokenize", {"prompt": "a"}), ("POST", "/detokenize", {"tokens": [1]}),
                                   ("GET", "/tokenizer_info", None), ("GET", "/v1/models", None),
                                   ("GET", "/v1/models/tiny-f32", None), ("GET", "/v1/model/info", None)):
            r = httpx.request(method, f"{srv.url}{path}", json=body)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            r = httpx.request(method, f"{srv.url}{path}", json=body, headers=key)
            assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading"
            assert r.headers["retry-after"] == "5"  # (trial 66: the openai package gave up at once without it)
        health = httpx.get(f"{srv.url}/health")
        assert health.status_code == 503 and health.headers["retry-after"] == "5"
        preflight = httpx.options(f"{srv.url}/tokenize", headers={
            "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
        release.set()
        deadline = time.monotonic() + 60
        while httpx.get(f"{srv.url}/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        r = httpx.post(f"{srv.url}/tokenize", json={"prompt": "a"}, headers={**key, "Origin": "http://localhost:3000"})
        assert r.status_code == 200 and r.json()["count"] == 1
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
    finally:
        release.set()
        srv.stop()


# -- SmolLM2-135M-Instruct's real tokenizer and weights (skipped without the GGUF) ---------------------------


def test_smollm2_tokenize_matches_its_completions_and_chats(smollm2):
    url, model, session = smollm2
    tokenizer = session.tokenizer
    for text in TEXTS:
        got = post(url, "/tokenize", model=model, prompt=text, add_special_tokens=False)
        done = post(url, "/v1/completions", model=model, prompt=text, max_tokens=0, echo=True, logprobs=0)
        assert got["tokens"] == tokenizer.encode(text, allow_special=True)
        assert got["count"] == done["usage"]["prompt_tokens"]
        assert done["choices"][0]["logprobs"]["tokens"] == [token_text(tokenizer.token_bytes(i)) for i in got["tokens"]]
        assert post(url, "/detokenize", tokens=got["tokens"])["prompt"] == text
    messages = CHAT[:3] + [{"role": "user", "content": "And of Italy?"}]
    got = post(url, "/tokenize", model=model, messages=messages)
    assert got["tokens"] == tokenizer.encode_chat(messages).input_ids
    assert got["count"] == chat_prompt_tokens(url, model, messages)
    info = httpx.get(f"{url}/tokenizer_info").json()
    assert info["eos_token"] == "<|im_end|>" and "<|im_start|>" in info["chat_template"]
    utils = pytest.importorskip("lm_eval.utils", reason="lm-eval not installed (pip install lm_eval --no-deps)")
    remote = utils.RemoteTokenizer(f"{url}/v1/completions")
    assert remote.eos_token_id == tokenizer.token_to_id("<|im_end|>")
    rendered = remote.apply_chat_template(messages)
    assert post(url, "/tokenize", prompt=rendered, add_special_tokens=False)["tokens"] == got["tokens"]


def test_a_long_text_is_encoded_as_a_short_one_is():
    """``Tokenizer.encode`` takes tokenizers' GIL-releasing call from RELEASE_GIL_CHARS on: the same ids,
    special-token strings read as text or as their tokens as asked."""
    from engine.tokenizer import RELEASE_GIL_CHARS

    tokenizer = Tokenizer.from_pretrained(_shared() / "models" / "SmolVLM-256M-Instruct")
    text = "hello <image> <|im_end|> naïve 🙂 " * (RELEASE_GIL_CHARS // 20)
    assert len(text) >= RELEASE_GIL_CHARS
    image = tokenizer.token_to_id("<image>")
    for allow in (False, True):
        ids = tokenizer.encode(text, allow_special=allow)
        held = tokenizer._tok  # the held call itself, as encode makes it
        held.encode_special_tokens = not allow
        try:
            assert ids == held.encode(text, add_special_tokens=False).ids
        finally:
            held.encode_special_tokens = False
        assert (image in ids) is allow
