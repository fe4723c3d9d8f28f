"""The official ``openai`` client against ``python -m engine serve`` on the tiny model."""

from __future__ import annotations

import openai
import pytest

from tests.server.helpers import data_uri

MODEL = "tiny-f32"


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def photo(images_dir):
    return data_uri(images_dir / "coffee.png")


def image_message(photo: str, text: str = "What is in this photo?") -> dict:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": photo, "detail": "low"}},
                                        {"type": "text", "text": text}]}


def test_models_lists_the_served_model_with_its_modalities(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    extra = models[0].model_extra
    assert extra["architecture"]["input_modalities"] == ["text", "image"] and extra["context_length"] > 0
    assert {k: extra["meta"][k] for k in ("device", "dtype", "weights")} == {
        "device": "cpu", "dtype": "float32", "weights": "float32"}  # trial 57: which weights answer
    one = client.models.retrieve(MODEL)  # GET /v1/models/{id}
    assert one.id == MODEL and one.model_extra["context_length"] == extra["context_length"]
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("another-model")


def test_chat_with_an_image_data_uri_streamed_and_not(client, photo):
    reply = client.chat.completions.create(model=MODEL, messages=[image_message(photo)], max_tokens=5, temperature=0)
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length") and reply.usage.completion_tokens <= 5
    assert reply.usage.prompt_tokens > 64  # the image's tokens are part of the prompt

    chunks = list(client.chat.completions.create(model=MODEL, messages=[image_message(photo)], max_tokens=5,
                                                 temperature=0, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content  # greedy: the same answer either way
    assert chunks[-1].choices[0].finish_reason == choice.finish_reason
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk


def test_include_usage_adds_one_usage_chunk_with_no_choices(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=4, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1
    assert all(c.choices for c in chunks[:-1])
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens


def test_seed_makes_sampling_reproducible(client):
    def ask(seed):
        return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell a story"}],
                                              max_tokens=8, temperature=1.0, seed=seed).choices[0].message.content
    first = ask(7)
    assert ask(7) == first
    assert any(ask(s) != first for s in (8, 9))


def test_a_tiny_temperature_is_greedy_not_nan(client):
    messages = [{"role": "user", "content": "Hi"}]
    tiny = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=4, temperature=1e-300)
    greedy = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=4, temperature=0)
    assert tiny.choices[0].text == greedy.choices[0].text
    assert client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, temperature=1e-300).choices


def test_stop_sequence_ends_the_answer_before_it(client):
    messages = [{"role": "user", "content": "Say something"}]
    full = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    text = full.choices[0].message.content
    stop = text[len(text) // 2:len(text) // 2 + 3]
    assert stop.strip(), text
    cut = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[:text.index(stop)]
    streamed = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0,
                                              stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == text[:text.index(stop)]


def test_logprobs_for_each_token(client):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                           temperature=0, logprobs=True, top_logprobs=2)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    for entry in content:  # greedy: the chosen token is the most likely one
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)


@pytest.mark.parametrize("stream", [False, True])
def test_a_completions_text_offsets_point_at_each_token_in_the_echoed_text(client, stream):
    prompt = "Once upon a time"
    result = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0, echo=True,
                                       logprobs=1, stream=stream, extra_body={"ignore_eos": True})
    chunks = list(result) if stream else [result]
    text = "".join(c.choices[0].text for c in chunks)
    tokens = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    offsets = [o for c in chunks if c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
    first = [lp for c in chunks if c.choices[0].logprobs for lp in c.choices[0].logprobs.token_logprobs][0]
    # The echoed prompt's tokens (scored: the first has nothing before it), then the 6 generated
    assert text.startswith(prompt) and len(tokens) == len(offsets) > 6 and first is None
    assert "".join(tokens[:-6]) == prompt and offsets[0] == 0
    assert offsets[-6] == len(prompt)  # the first generated token starts after the echoed prompt
    assert all(text[o:o + len(t)] == t for t, o in zip(tokens, offsets))


def test_embeddings_of_texts(client):
    result = client.embeddings.create(model=MODEL, input=["a cup of coffee", "a rocket"])
    vectors = [d.embedding for d in result.data]
    assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 0
    assert sum(x * x for x in vectors[0]) == pytest.approx(1.0, abs=1e-4)
    assert result.usage.prompt_tokens > 0


def test_a_bad_request_raises_the_clients_exception_types(client):
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2)
    assert bad.value.status_code == 400 and bad.value.body["param"] == "n"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
