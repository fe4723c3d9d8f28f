"""A text-only Llama model (SmolLM2-shaped tiny checkpoint) behind the server: text works, images are a 400,
and what it can do is read from its capabilities."""

from __future__ import annotations

import httpx
import pytest

from server import ServerConfig, create_app
from tests.engine.conftest import llama_tiny_checkpoint  # noqa: F401 - a fixture
from tests.server.helpers import ThreadServer, data_uri, png_bytes, wait_ready


@pytest.fixture(scope="module")
def llama_url(llama_tiny_checkpoint):  # noqa: F811
    srv = ThreadServer(create_app(ServerConfig(model=str(llama_tiny_checkpoint), model_id="smollm2",
                                               load_options={"device": "cpu", "weights": "int4"})))
    try:
        wait_ready(srv.url, timeout=60)
        yield srv.url
    finally:
        srv.stop()


def test_text_only_model_reports_text_input_and_answers(llama_url):
    [model] = httpx.get(f"{llama_url}/v1/models").json()["data"]
    assert model["architecture"]["input_modalities"] == ["text"]
    info = httpx.get(f"{llama_url}/v1/model/info").json()["data"][0]["model_info"]
    assert info["supports_vision"] is False and info["supports_video"] is False and info["max_input_tokens"] > 0
    # Which weights answer (trial 57: a quantized server said nothing of it).
    assert model["meta"]["weights"] == info["weights"] == "int4" and info["device"] == "cpu"
    reply = httpx.post(f"{llama_url}/v1/chat/completions", timeout=60, json={
        "model": "smollm2", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 3, "temperature": 0})
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] >= 1
    embedded = httpx.post(f"{llama_url}/v1/embeddings", json={"model": "smollm2", "input": "hello"}, timeout=60)
    assert embedded.status_code == 200 and len(embedded.json()["data"][0]["embedding"]) > 0


def test_images_for_a_text_only_model_are_a_400(llama_url, tmp_path):
    photo = tmp_path / "p.png"
    photo.write_bytes(png_bytes())
    content = [{"type": "image_url", "image_url": {"url": data_uri(photo)}}, {"type": "text", "text": "What?"}]
    reply = httpx.post(f"{llama_url}/v1/chat/completions",
                       json={"model": "smollm2", "messages": [{"role": "user", "content": content}]})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "images_not_supported"
    embedded = httpx.post(f"{llama_url}/v1/embeddings", json={"model": "smollm2", "input": [
        {"text": "x", "image_url": data_uri(photo)}]})
    assert embedded.status_code == 400 and embedded.json()["error"]["code"] == "images_not_supported"


def test_an_embeddings_request_whose_client_left_stops_between_inputs(llama_url, monkeypatch):
    """Trial 66: 256 inputs abandoned by their client ran to the end for nobody, and a chat waited
    101 s behind them; the request now stops before its next input."""
    import time

    from engine.embeddings import Embedder

    real, encoded = Embedder.encode, []

    def encode(self, text, *args, **kwargs):
        encoded.append(text)
        time.sleep(0.05)  # 256 inputs: 13 s at least, run whole
        return real(self, text, *args, **kwargs)
    monkeypatch.setattr(Embedder, "encode", encode)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{llama_url}/v1/embeddings", json={"model": "smollm2", "input": [f"line {i}" for i in range(256)]},
                   timeout=1.0)
    seen, deadline = -1, time.monotonic() + 15
    while len(encoded) != seen and time.monotonic() < deadline:  # until no input has begun for 0.5 s
        seen = len(encoded)
        time.sleep(0.5)
    assert 0 < len(encoded) < 256 and len(encoded) == seen
    r = httpx.post(f"{llama_url}/v1/chat/completions", timeout=30, json={
        "model": "smollm2", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    r = httpx.post(f"{llama_url}/v1/embeddings", json={"model": "smollm2", "input": ["a", "b"]}, timeout=30)
    assert r.status_code == 200 and len(r.json()["data"]) == 2


def test_a_smaller_context_size_leaves_the_training_context_as_it_is(llama_url, llama_tiny_checkpoint):  # noqa: F811
    """Trial 66 F6: --context-size 256 made /v1/models say n_ctx_train 256 too."""
    own = httpx.get(f"{llama_url}/v1/models").json()["data"][0]["meta"]
    srv = ThreadServer(create_app(ServerConfig(model=str(llama_tiny_checkpoint), model_id="smollm2",
                                               load_options={"device": "cpu", "context_size": 64})))
    try:
        wait_ready(srv.url, timeout=60)
        [entry] = httpx.get(f"{srv.url}/v1/models").json()["data"]
    finally:
        srv.stop()
    assert own["n_ctx"] == own["n_ctx_train"] > 64
    assert (entry["context_length"], entry["meta"]["n_ctx"], entry["meta"]["n_ctx_train"]) == (64, 64, own["n_ctx_train"])


def test_embeddings_count_what_the_model_reads_and_refuse_token_ids_in_words(llama_url):
    """Trial 66 F12: usage said 28 tokens for "hello world" (the input is read as a user message of the
    chat template: those are its tokens), and token ids got a schema error about strings."""
    got = httpx.post(f"{llama_url}/v1/embeddings", json={"model": "smollm2", "input": "hello world"}, timeout=30)
    read = httpx.post(f"{llama_url}/tokenize", json={"messages": [{"role": "user", "content": "hello world"}],
                                                     "add_generation_prompt": False}, timeout=30).json()["count"]
    assert got.status_code == 200 and got.json()["usage"] == {"prompt_tokens": read, "total_tokens": read}
    for many in (["a"] * 600_000, [7] * 600_000):  # refused before each is checked (trial 67: minutes, Ctrl+C too)
        refused = httpx.post(f"{llama_url}/v1/embeddings", json={"model": "smollm2", "input": many}, timeout=30)
        assert refused.status_code == 400 and refused.json()["error"]["message"] == \
            "input: 600,000 inputs; the limit is 256"
    for ids in ([1, 2, 3], [[1, 2], [3]]):
        refused = httpx.post(f"{llama_url}/v1/embeddings", json={"model": "smollm2", "input": ids}, timeout=30)
        assert refused.status_code == 400 and refused.json()["error"] == {
            "message": "input: token ids are not taken here; send the text (the server's chat template and tokenizer "
                       "read it as a user message)", "type": "invalid_request_error", "param": "input",
            "code": "unsupported_parameter"}
