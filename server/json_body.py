"""Request bodies parsed by pydantic-core's JSON parser instead of the standard library's.

An OpenAI client re-sends the whole conversation on every turn, photos included as base64: a
follow-up question about one photo is a 0.6 MB body. ``json.loads`` of those bytes took 0.76 ms
(0.38 ms of it decoding the bytes with the ``surrogatepass`` handler), pydantic-core's ``from_json``
0.04 ms (measured on the 2-core dev VM). FastAPI still validates the parsed value against the
route's pydantic model as before, so the OpenAPI schema, the validation and its errors are
unchanged.

Where ``from_json`` refuses a body (a syntax error, a byte-order mark, UTF-16, a lone surrogate,
nesting deeper than its limit) the standard library parses it again: either it accepts what
``from_json`` did not and the request goes on exactly as before, or its ``JSONDecodeError`` gives
the 400 ``invalid_json`` answer, message included, as before. A lone surrogate, which only the
standard library accepts, is refused as invalid JSON too: it is not Unicode text. Where both accept
a body they give the same value (``NaN`` and ``Infinity`` included, which the models then refuse).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic_core import from_json


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``, as ``json.loads(body)`` gives it.

    Raises:
        json.JSONDecodeError: the body is not JSON (the standard library's error and message), or a
            string in it holds a lone UTF-16 surrogate.
        UnicodeDecodeError: the body is not in a Unicode encoding ``json.loads`` detects.
    """
    try:
        return from_json(body)
    except ValueError:  # refused: the standard library decides (and words the error)
        value = json.loads(body)
    # json.loads accepts an escaped lone UTF-16 surrogate ("\ud800"), which is not Unicode text: the
    # tokenizer would fail on it inside the engine (a 500). Refused here as invalid JSON (a 400).
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end].encode("unicode_escape").decode()
        raise json.JSONDecodeError(f"a string holds a lone UTF-16 surrogate ({bad}), which is not Unicode text",
                                   "", 0) from None
    return value


class JSONBodyRequest(Request):
    """A request whose ``json()`` is :func:`parse_json` of its body."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):  # Starlette's own cache attribute, as Request.json uses it
            self._json = parse_json(await self.body())
        return self._json


class JSONBodyRoute(APIRoute):
    """An APIRoute whose handler gets a :class:`JSONBodyRequest` (FastAPI's documented way to
    customise the request: "Custom Request and APIRoute class")."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            return await handler(JSONBodyRequest(request.scope, request.receive))
        return route_handler
