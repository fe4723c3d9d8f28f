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
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic_core import from_json


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``, as ``json.loads(body)`` gives it.

    Raises:
        json.JSONDecodeError: the body is not JSON (the standard library's error and message), a
            string in it holds a lone UTF-16 surrogate, the body is not text in a Unicode encoding
            ``json.loads`` detects, it nests deeper than Python's recursion limit, or a number in it
            has more digits than Python converts (each with a message saying which).
    """
    try:
        return from_json(body)
    except ValueError:  # refused: the standard library decides (and words the error)
        value = _loads(body)
    # json.loads accepts an escaped lone UTF-16 surrogate ("\ud800"), which is not Unicode text: the
    # tokenizer would fail on it inside the engine (a 500). Refused here as invalid JSON (a 400).
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end].encode("unicode_escape").decode()
        raise json.JSONDecodeError(f"a string holds a lone UTF-16 surrogate ({bad}), which is not Unicode text",
                                   "", 0) from None
    return value


def _loads(body: bytes) -> Any:
    """``json.loads(body)``, with the errors it raises besides a syntax error (FastAPI answers those
    with one message for all) turned into ``JSONDecodeError``s that say what is wrong."""
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        _refuse_if_not_utf8(body)
        raise
    except UnicodeDecodeError as exc:
        _refuse_if_not_utf8(body)
        # (UTF-8 text that json.loads took for UTF-16 or UTF-32 by its zero bytes)
        codec = exc.encoding.upper().replace("-LE", "").replace("-BE", "")
        raise json.JSONDecodeError(f"it is not {codec} text (byte 0x{exc.object[exc.start]:02x} at offset "
                                   f"{exc.start})", "", 0) from None
    except RecursionError:
        raise json.JSONDecodeError("its arrays or objects are nested too deeply", "", 0) from None
    except ValueError:  # Python's limit on the digits of an integer it converts (CVE-2020-10735)
        raise json.JSONDecodeError(f"a number in it has more than {sys.get_int_max_str_digits()} digits",
                                   "", 0) from None


def _refuse_if_not_utf8(body: Any) -> None:
    """A ``JSONDecodeError`` "it is not UTF-8 text (byte 0x.. at offset N)" for a body that is not.

    json.loads reads a body that starts with a UTF-16 or UTF-32 byte-order mark (or has zero bytes
    among its first four) in that encoding; one that is no JSON there either ("\\xff\\xfe" before
    UTF-8 text) was "Expecting value at line 1, column 1" or "not UTF-16 text", about characters the
    client never sent. JSON bodies are UTF-8 (RFC 8259): said as for any other body that is not."""
    try:
        if isinstance(body, (bytes, bytearray)):
            body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"it is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                                   f"{exc.start})", "", 0) from None


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
