"""``server.errors.engine_result``: the one place an engine call's failure becomes the API's error
(``/tokenize`` with messages and ``/v1/embeddings`` both go through it)."""

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

    from server import routes_info, routes_tokenize

    for module in (routes_info, routes_tokenize):
        source = inspect.getsource(module)
        assert "engine_result(" in source and "from_engine(" not in source, module.__name__


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
