"""``server.errors.engine_result``: the one place an engine call's failure becomes the API's error
(``/tokenize`` with messages, through ``conversation.prompt_ids``, and ``/v1/embeddings`` both go through it)."""

from __future__ import annotations

import asyncio

import pytest

from server.errors import APIError, engine_result, from_engine


async def _gives(value=None, error: BaseException | None = None):
    if error is not None:
        raise error
    return value


def _outcome(error: BaseException) -> APIError:
    with pytest.raises(APIError) as caught:
        asyncio.run(engine_result(_gives(error=error)))
    return caught.value


def test_an_engine_result_comes_back_as_it_is():
    assert asyncio.run(engine_result(_gives([1, 2, 3]))) == [1, 2, 3]


def test_engine_failures_are_the_requests_400_or_the_servers_500():
    bad = _outcome(ValueError("the image is broken"))
    assert (bad.status, bad.code, bad.message) == (400, "invalid_value", "the image is broken")
    failed = _outcome(RuntimeError("CUDA out of memory"))
    assert (failed.status, failed.code, failed.message) == (500, "engine_error", "CUDA out of memory")
    media = _outcome(ValueError("cannot read /tmp/smolchat-media-ab12/9f.png"))
    assert media.message == "cannot read the uploaded media"


def test_an_api_error_on_the_way_stays_as_it_is():
    refused = APIError(413, "too many images", "too_many_images", "messages")
    assert _outcome(refused) is refused


def test_both_routes_use_it():
    import inspect

    from server import conversation, routes_info, routes_tokenize

    # (/tokenize's messages, and a chat request's prompt built as ids, go through conversation.prompt_ids)
    assert "prompt_ids(state, turns)" in inspect.getsource(routes_tokenize)
    for module in (routes_info, conversation):
        source = inspect.getsource(module)
        assert "engine_result(" in source and "from_engine(" not in source, module.__name__
    assert "from_engine(" not in inspect.getsource(routes_tokenize)


@pytest.mark.parametrize("share, advice", [
    ("", ""),
    (" (640 of them for images)", ", or send fewer images (or 'detail': 'low')"),
    (" (384 of them for video frames)", ", or send fewer or shorter videos"),
    (" (448 of them for images and video frames)", ", or send fewer images or videos (or images with 'detail': 'low')"),
])
def test_a_prompt_too_long_says_what_to_send_instead(share, advice):
    """Fewer media are suggested only where the engine says they are what does not fit (the text
    alone fits), and as what the media are: 'detail' does nothing for a video's frames."""
    message = f"the prompt has 700 tokens{share} but the context holds 512"
    error = from_engine("PromptTooLongError", message)
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert error.message == f"{message}: shorten the prompt or the conversation{advice}"


@pytest.mark.parametrize("share, advice", [
    (" (640 of them for images)", ", or send fewer images"),
    (" (384 of them for video frames)", ", or send fewer or shorter videos"),
    (" (448 of them for images and video frames)", ", or send fewer images or videos"),
])
def test_images_all_sent_at_low_detail_are_not_told_to_use_it(share, advice):
    """'detail': 'low' is advice only to a request with an image sent finer: to one whose images all
    were, it suggests what it already did."""
    message = f"the prompt has 700 tokens{share} but the context holds 512"
    error = from_engine("PromptTooLongError", message, all_images_low=True)
    assert error.message == f"{message}: shorten the prompt or the conversation{advice}"


@pytest.mark.parametrize("message, said", [
    ("the prompt has 8192 tokens but the context holds 8192",
     "the prompt has 8192 tokens but the context holds 8192 for the prompt and at least one new token together: "
     "shorten the prompt or the conversation"),
    ("the prompt has 512 tokens (448 of them for images) but the context holds 512",
     "the prompt has 512 tokens (448 of them for images) but the context holds 512 for the prompt and at least one "
     "new token together: shorten the prompt or the conversation, or send fewer images (or 'detail': 'low')"),
    ("the prompt has 8193 tokens but the context holds 8192",
     "the prompt has 8193 tokens but the context holds 8192: shorten the prompt or the conversation"),
])
def test_a_prompt_as_long_as_the_context_is_told_why_it_does_not_fit(message, said):
    """Found by a trial: "the prompt has 8192 tokens but the context holds 8192" read as a contradiction.
    The words the app's remote backend reads both numbers from stay as they were."""
    from app.backends.remote_http import _PROMPT_HAS

    error = from_engine("PromptTooLongError", message)
    assert error.message == said
    found = _PROMPT_HAS.search(error.message)
    assert found is not None and found.group(1) == message.split()[3]
