"""The wire side of the remote engine: one OpenAI-compatible server reached with ``httpx``.

Qt-free and torch-free (the CLI uses it too). Everything here blocks, so the app calls it only from a
backend or helper thread. Failures become :class:`RemoteError` with a ``kind`` a UI can act on and a
message that says what happened in words; :func:`probe_capabilities` reads what a model can do from the
best source a server offers, and says which source it used.
"""

from __future__ import annotations

import functools
import html
import json
import re
import socket
import ssl
import time
import unicodedata
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from engine.api import Capabilities
from engine.api.servers import api_base, masked_url

#: Seconds to connect, and the longest silence between two streamed chunks before we call it a stall.
CONNECT_TIMEOUT = 10.0
STALL_TIMEOUT = 120.0

VERDICTS = {
    "ok": "Connected",
    "refused": "Connection refused: nothing is listening at that address and port",
    "dns": "Unknown host: the name does not resolve (DNS)",
    "tls": "TLS/SSL failed: the certificate or protocol was not accepted",
    "timeout": "Timed out: the server did not answer in time",
    "closed": "The server closed the connection",
    "unauthorized": "401 Unauthorized: the API key is missing or wrong",
    "unauthorized_url": "401 Unauthorized: the user name or password in the URL is missing or wrong (without a "
                        "system keyring a URL password is kept for one session only)",
    "forbidden": "403 Forbidden: the key is valid but not allowed to do this",
    "not_found": "404 Not found: check the base URL (it usually ends in /v1)",
    "no_model": "No such model on the server",
    "rate_limited": "429 Too many requests: the server asks to wait",
    "server_error": "Server error",
    "loading": "503 The server is loading its model",
    "too_large": "413 Too large for the server: attach less (a shorter or smaller video, fewer photos), or raise "
                 "the server's request size limit",
    "not_openai": "Not an OpenAI-compatible server (unexpected answer)",
    "context": "The conversation is longer than the model's context",
    "error": "The server reported an error",
    "network": "Network error",
    "redirected": "Redirected to another server",
}


class RemoteError(Exception):
    """A failure talking to a server. ``kind`` is a key of :data:`VERDICTS`; ``status`` the HTTP
    status (0 without one); ``retry_after`` the seconds a 429 asked to wait (``None`` if unsaid)."""

    def __init__(self, kind: str, detail: str = "", status: int = 0, retry_after: float | None = None,
                 overflow: Overflow | None = None) -> None:
        self.kind, self.detail, self.status, self.retry_after = kind, detail, status, retry_after
        self.overflow = overflow  # a "context" refusal's numbers, where the server said them
        text = VERDICTS.get(kind, kind)
        if kind == "server_error" and status:
            text = f"{status} {text}"
        if retry_after is not None:
            text += f" (Retry-After: {retry_after:g} s)"
        super().__init__(f"{text}: {detail}" if detail else text)


def _root(url: str) -> str:
    return api_base(url)[: -len("/v1")]


def _chain(exc: BaseException):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def from_exception(exc: BaseException) -> RemoteError:
    """Name a transport failure: refused, DNS, TLS, timeout, closed connection."""
    if isinstance(exc, RemoteError):
        return exc
    causes = list(_chain(exc))
    text = str(exc) or type(exc).__name__
    if isinstance(exc, RedirectedElsewhere):
        return RemoteError("redirected", text)
    if isinstance(exc, httpx.ConnectTimeout) and _scheme(exc) == "https":
        # A server that speaks plain http (llama-server's default) reads the TLS greeting as a request not
        # yet complete and waits: the handshake times out, and "Timed out" alone did not say why (trial 64).
        return RemoteError("timeout", "the secure (https) connection was never set up; " + PLAIN_HTTP)
    if "WRONG_VERSION_NUMBER" in text and _scheme(exc) == "https":  # one that answers it in plain http
        return RemoteError("tls", f"{text}; {PLAIN_HTTP}")
    if isinstance(exc, httpx.TimeoutException):  # httpx's own words ("timed out") add nothing to the verdict
        return RemoteError("timeout", "" if "timed out" in text.lower() else text)
    if any(isinstance(c, ssl.SSLError) for c in causes) or "SSL" in text or "certificate" in text.lower():
        return RemoteError("tls", text)
    if any(isinstance(c, socket.gaierror) for c in causes) or any(
            s in text for s in ("Name or service not known", "nodename nor servname", "getaddrinfo",
                                "Temporary failure in name resolution", "No address associated")):
        return RemoteError("dns", text)
    if any(isinstance(c, ConnectionRefusedError) for c in causes) or "refused" in text.lower():
        # "[Errno 111] Connection refused" says again what the verdict says: only other words are kept.
        return RemoteError("refused", "" if re.fullmatch(r"(\[Errno -?\d+\] )?Connection refused", text) else text)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        # httpx's words ("peer closed connection without sending complete message body (incomplete
        # chunked read)") in a user's: what was cut short.
        if "complete message body" in text or "incomplete" in text:
            text = "before the answer was complete"
        elif "without sending" in text and "response" in text:
            text = "without answering"
        return RemoteError("closed", text)
    return RemoteError("network", text)


PLAIN_HTTP = "if the server speaks plain http, give its address with http://"


def _scheme(exc: BaseException) -> str:
    try:
        return exc.request.url.scheme
    except (RuntimeError, AttributeError):  # raised without its request, or no httpx error
        return ""


_SURROGATE = re.compile("[\ud800-\udfff]")


def mend_surrogates(text: str, held: str = "", final: bool = False) -> tuple[str, str]:
    """``held + text`` made fit to encode: ``(text, high half held back)``.

    JSON strings are UTF-16 at heart: a server that slices them (JavaScript ones) may send an emoji as
    ``"\\ud83d"`` in one chunk and ``"\\ude00"`` in the next, which Python reads as two lone surrogates
    that no codec can write (the CLI died on them, the app lost them). A pair is joined
    into its character; a high half at the very end is held back for the next piece to complete; any
    other lone half (also that one, when ``final``: nothing follows) becomes U+FFFD."""
    text = held + text
    if not _SURROGATE.search(text):
        return text, ""
    held = text[-1] if not final and "\ud800" <= text[-1] <= "\udbff" else ""
    text = text[:len(text) - len(held)]
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"), held


def mended(value):
    """``value`` fit to encode if it is a string (a lone surrogate half becomes U+FFFD), else as it was."""
    return mend_surrogates(value, final=True)[0] if isinstance(value, str) else value


def error_message(body: str) -> str:
    """The human part of an error body (OpenAI ``{"error": {"message"}}``, ``{"error": "..."}``, text)."""
    return mend_surrogates(_error_message(body), final=True)[0]


# An HTML page's start, after a byte-order mark, an XML prolog, comments and blank space (trial 65:
# an XHTML proxy page, a captive portal's page with a BOM, and a page that opens with a comment).
_HTML = re.compile(r"\ufeff?\s*(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*(<!doctype html|<html|<head|<body|<title|<h1)",
                   re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_CODE = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL)


def html_page(text: str) -> str | None:
    """What an HTML page (a proxy's error page, a login page) says, in a few plain words: its title, else
    its first heading, else its text without tags (at most 120 characters); None when ``text`` is no
    HTML page. Trial 64: a 502 showed as "<html><body><h1>502 Bad Gateway</h1></body></html>"."""
    if not _HTML.match(text):
        return None
    text = _CODE.sub(" ", text)  # a page's scripts and styles are not what it says
    for tag in ("title", "h1"):
        found = re.search(rf"<{tag}\b[^>]*>(.*?)</{tag}\s*>", text, re.IGNORECASE | re.DOTALL)
        words = " ".join(html.unescape(_TAG.sub(" ", found.group(1))).split()) if found else ""
        if words:
            return words[:120]
    return " ".join(html.unescape(_TAG.sub(" ", text)).split())[:120]


def _error_message(body: str) -> str:
    page = html_page(body)
    if page is not None:
        return f"{page} (an HTML page)" if page else "an HTML page"
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body.strip()[:300]
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data))
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return str(data)[:300]


_LOADING = re.compile(r"^\s*loading model\b|\bmodel is (still )?loading\b", re.IGNORECASE)
_NO_MODEL = re.compile(r"\bmodel\b.*\b(does not exist|not found)", re.IGNORECASE | re.DOTALL)


def from_response(status: int, headers, body: str, url: str = "") -> RemoteError:
    """Name an HTTP failure from its status (401, 403, 404, 429 with Retry-After, 5xx); ``url`` the
    address asked (a 401 to one with a user name in it is about that user's password, which is sent in
    place of an API key: trial 65)."""
    detail = error_message(body)
    if status == 401:
        return RemoteError("unauthorized_url" if "@" in urlsplit(url).netloc else "unauthorized", detail, status)
    if status == 403:
        return RemoteError("forbidden", detail, status)
    if status == 404:
        # The base URL is right, the model is not (another one loaded since, or a typo): OpenAI and
        # vLLM "The model `x` does not exist", Ollama 'model "x" not found', Smolchat's own server.
        return RemoteError("no_model" if _NO_MODEL.search(detail) or '"model_not_found"' in body else "not_found",
                           detail, status)
    raw = headers.get("retry-after")
    try:
        retry = float(raw) if raw is not None else None
    except ValueError:  # (an HTTP date: not waited for)
        retry = None
    if retry is not None and not 0 <= retry < 86_400:
        retry = None
    if status == 413:  # (trial 77 Q10: a bare "HTTP 413: the request body has 90918876 bytes…")
        return RemoteError("too_large", detail, status)
    if status == 429:
        return RemoteError("rate_limited", detail, status, retry)
    if status == 503 and (_LOADING.search(detail) or '"model_loading"' in body):
        # Smolchat's server says "the model is still loading" (code model_loading, a Retry-After);
        # llama-server "Loading model". Not any 503 with a Retry-After (a proxy's maintenance page), nor
        # a load that failed ("error loading weights"): those are said at once.
        return RemoteError("loading", detail, status, retry)
    if status >= 500:
        return RemoteError("server_error", detail, status)
    if status == 400 and _too_long(body, detail):
        return RemoteError("context", detail, status, overflow=overflow_of(body, detail))
    return RemoteError("error", f"HTTP {status}: {detail}", status)


@dataclass(frozen=True)
class Overflow:
    """What a server said of a conversation it refused as longer than its context (tokens):
    ``prompt`` (the messages), ``context`` (the model's), ``completion`` (the answer's share it counted
    against the context too: vLLM counts ``max_tokens``; 0 where unsaid)."""

    prompt: int
    context: int
    completion: int = 0


# vLLM and OpenAI: "This model's maximum context length is 2048 tokens. However, you requested 12400 tokens
# (12000 in the messages, 400 in the completion)." / "... your request has 12000 input tokens" / "... your
# messages resulted in 130000 tokens".
_MAXIMUM = re.compile(r"maximum context length is (\d+) tokens.*?(?:requested|resulted in|request has) (\d+)(?: input)?"
                      r" tokens(?: \((\d+) in the messages, (\d+) in the completion\))?", re.IGNORECASE | re.DOTALL)
# llama-server: "request (12345 tokens) exceeds the available context size (2048 tokens)".
_REQUEST = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")
# Smolchat's own server: "the prompt has 9000 tokens (...) but the context holds 8192".
_PROMPT_HAS = re.compile(r"the prompt has (?:at least )?(\d+) tokens.*?but the context holds (\d+)", re.DOTALL)


def overflow_of(body: str, detail: str) -> Overflow | None:
    """The numbers of a context refusal (:class:`Overflow`), from llama-server's ``n_prompt_tokens`` and
    ``n_ctx`` or from the words of vLLM, OpenAI, llama-server and Smolchat's own server; None where the
    server gave none (the caller then guesses, leaving out more at each refusal)."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError, RecursionError):
        error = None
    if isinstance(error, dict):
        prompt, context = error.get("n_prompt_tokens"), error.get("n_ctx")
        if isinstance(prompt, int) and isinstance(context, int) and prompt > 0 and context > 0:
            return Overflow(prompt, context)
    if match := _MAXIMUM.search(detail):
        context, total, messages, completion = (int(g) if g else 0 for g in match.groups())
        return Overflow(messages or total, context, completion)
    for pattern in (_REQUEST, _PROMPT_HAS):
        if match := pattern.search(detail):
            return Overflow(int(match.group(1)), int(match.group(2)))
    return None


def _too_long(body: str, detail: str) -> bool:
    """A 400 for a prompt beyond the context: OpenAI's and vLLM's ``context_length_exceeded`` code,
    llama-server's ``exceed_context_size_error`` type, or words to that effect."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError, RecursionError):
        error = None
    if isinstance(error, dict) and {error.get("code"), error.get("type")} & {"context_length_exceeded",
                                                                          "exceed_context_size_error"}:
        return True
    return bool(re.search(r"context (length|size|window)|maximum context|exceeds? the (available )?context", detail,
                          re.IGNORECASE))


@dataclass
class Server:
    """One server the user added: ``name`` (shown), ``url`` (base URL), ``api_key`` ("" for none)."""

    name: str
    url: str
    api_key: str = ""
    vision_toggles: dict = field(default_factory=dict)  # model id -> the user's "can see images"

    def client(self, stall: float = STALL_TIMEOUT) -> httpx.Client:
        """An httpx client with our timeouts; ``stall`` bounds the wait for each streamed chunk."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(headers=headers, timeout=httpx.Timeout(stall, connect=CONNECT_TIMEOUT),
                            follow_redirects=True, verify=tls_context(), event_hooks={"response": [_same_server]})


class RedirectedElsewhere(httpx.RequestError):
    """A server's redirect to another server, not followed (see :func:`_same_server`)."""


def _same_server(response: httpx.Response) -> None:
    """Follow a redirect only on the same server (or from http to https on the same host): a POST
    redirected elsewhere sent the whole conversation to a second server without a word, and a captive
    portal's redirect read "Unknown host (DNS)" of a host the user never typed (trial 64).

    Raises:
        RedirectedElsewhere: naming the other server."""
    if not response.has_redirect_location:
        return
    source = response.request.url
    target = source.join(response.headers["location"])
    same = target.host == source.host and (target.port == source.port or (source.scheme, target.scheme) == ("http", "https"))
    if not same:
        where = f"{target.scheme}://{target.host}{f':{target.port}' if target.port else ''}"
        raise RedirectedElsewhere(f"the server sent this request on to {where}, which Smolchat does not follow: "
                                  "give its address instead (Settings ▸ Engines in the app, --server on the command "
                                  "line) if it is the one to use",
                                  request=response.request)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS settings (certifi's CAs, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), made once: a
    client built without it reads the CA bundle again, ~40 ms of CPU per request (more on a busy
    laptop), and the window makes one client per answer and per model list."""
    return httpx.create_ssl_context()


#: The most bytes a model list or a capability source may send: OpenRouter's list of every model is a few MB.
MAX_BODY = 32 * 1024 * 1024
#: Seconds in all the model list may take to arrive. httpx's timeout bounds each read, not the whole: a
#: server trickling an endless answer (20 events a second) was never timed out, and Test connection, a
#: model's loading and ``engine generate --server`` waited for good (trial 71).
LIST_DEADLINE = 60.0


class BodyTooSlow(Exception):
    """A body still coming when its deadline passed."""


class BodyTooLarge(Exception):
    """A body longer than its limit."""


def read_body(response: httpx.Response, deadline: float, limit: int | None = None) -> bytes:
    """A streamed ``response``'s whole body, read until ``deadline`` (a :func:`time.monotonic` time) and
    ``limit`` bytes at most (:data:`MAX_BODY` if None).

    Raises:
        BodyTooSlow: still coming at ``deadline``.
        BodyTooLarge: longer than ``limit``.
        httpx.HTTPError: the transport failed."""
    limit = MAX_BODY if limit is None else limit
    body = bytearray()
    for piece in response.iter_bytes():
        body += piece
        if len(body) > limit:
            raise BodyTooLarge(f"over {limit // 2**20} MB" if limit >= 2**20 else f"over {limit:,} bytes")
        if time.monotonic() > deadline:
            raise BodyTooSlow(f"{len(body):,} bytes so far")
    return bytes(body)


def fetch(client: httpx.Client, method: str, url: str, seconds: float, limit: int | None = None,
          **kwargs) -> tuple[httpx.Response, bytes]:
    """``(response, its whole body)`` for a request, the body read within ``seconds`` in all and ``limit``
    bytes (:data:`MAX_BODY` if None; :func:`read_body`, whose errors it raises); ``kwargs`` go to
    ``client.stream``."""
    deadline = time.monotonic() + seconds
    with client.stream(method, url, **kwargs) as response:
        return response, read_body(response, deadline, limit)


def _text(response: httpx.Response, body: bytes) -> str:
    return body.decode(response.encoding or "utf-8", "replace")


def get_json(client: httpx.Client, url: str, seconds: float = LIST_DEADLINE) -> dict:
    """GET ``url`` and return its JSON object, read within ``seconds`` in all and :data:`MAX_BODY` bytes;
    RemoteError for transport, HTTP or format problems ("timeout" for a body still coming at the deadline,
    "not_openai" for one past the limit)."""
    try:
        response, body = fetch(client, "GET", url, seconds)
    except httpx.HTTPError as exc:
        raise from_exception(exc) from exc
    except BodyTooSlow as exc:
        raise RemoteError("timeout", f"{masked_url(url)} was still sending its answer after {seconds:g} s "
                                     f"({exc}): the server answers too slowly, or without end") from None
    except BodyTooLarge as exc:
        raise RemoteError("not_openai", f"{masked_url(url)} sent an answer {exc}, more than any model list "
                                        "takes") from None
    if response.status_code >= 400:
        raise from_response(response.status_code, response.headers, _text(response, body), url)
    try:
        data = json.loads(body)  # (as httpx's response.json(): UTF-8, -16 or -32 told apart)
    except (ValueError, RecursionError):  # (RecursionError: nested too deep)
        kind = response.headers.get("content-type", "")
        said = f" (though its Content-Type says {kind})" if "json" in kind.lower() else f" ({kind})" if kind else ""
        raise RemoteError("not_openai", f"{masked_url(url)} sent a body that is not valid JSON{said}") from None
    if not isinstance(data, dict):
        raise RemoteError("not_openai", f"{masked_url(url)} answered a JSON {type(data).__name__}, not an object")
    return data


def list_models(server: Server, timeout: float = 15.0) -> list[dict]:
    """The server's ``/v1/models`` entries (each has at least ``id``), ids :func:`mended`: a lone
    surrogate half in one (JSON ``"\\ud800"``) would raise wherever it is written (the chat store,
    settings, a terminal), so the app and the CLI only ever see it as U+FFFD. ``timeout`` bounds each
    read; the whole list comes within :data:`LIST_DEADLINE`."""
    with server.client(timeout) as client:
        data = get_json(client, api_base(server.url) + "/models", LIST_DEADLINE)
    entries = data.get("data", data.get("models"))
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "id" in e for e in entries):
        if "error" in data:
            raise RemoteError("error", error_message(json.dumps(data)))
        raise RemoteError("not_openai", "/v1/models has no 'data' list of models")
    return [{**entry, "id": mended(entry["id"])} for entry in entries]


#: Seconds the key check of :func:`check_connection` is waited for.
KEY_CHECK_TIMEOUT = 5.0


def check_key(server: Server, timeout: float = KEY_CHECK_TIMEOUT) -> RemoteError | None:
    """The server's refusal of our key (401, 403), None where it took the key or needs none.

    llama-server leaves ``/v1/models`` open and asks for the key only for answers: a wrong key passed
    Test connection and failed at the first message (trial 71). An empty ``POST /chat/completions``
    generates nothing (no model, no messages: a 400 or 422), and servers check the key before the body;
    any answer but 401 and 403 (a 404 included), and any failure to answer, leaves the verdict as it was."""
    url = api_base(server.url) + "/chat/completions"
    deadline = time.monotonic() + timeout
    try:
        with server.client(timeout) as client, client.stream("POST", url, json={}) as response:
            if response.status_code not in (401, 403):
                return None  # (a server that streams an answer anyway is hung up on unread)
            try:
                body = _text(response, read_body(response, deadline, 64 * 1024))
            except (httpx.HTTPError, BodyTooSlow, BodyTooLarge):
                body = ""
            return from_response(response.status_code, response.headers, body, url)
    except httpx.HTTPError:
        return None


#: Unicode categories not shown in a model id: controls (Cc), format characters (Cf: bidi embeddings,
#: overrides, isolates and marks, zero-width ones) and line and paragraph separators (Zl, Zp): they turn
#: the text around where it shows ("\u202eevil.exe" read "exe.live": trial 77 Q5), hide or break its line.
_UNSHOWN = ("Cc", "Cf", "Zl", "Zp")
#: The longest model label (characters); a longer one keeps its start and end (a 5,000-character id
#: filled the banner with six lines: trial 77 Q5).
LABEL_LENGTH = 100


def model_label(model: str) -> str:
    """How a server's model id is shown: a file path's last part (llama-server names its model by the
    path it was started with, "/home/me/models/SmolLM2.gguf", which filled the picker and every answer's
    header), else the id as the server gives it (a Hub id "org/name" stays whole); without bidi and
    control characters, and at most :data:`LABEL_LENGTH` characters (the middle cut out)."""
    if model.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[\\/]", model):
        model = re.split(r"[\\/]", model.rstrip("/\\"))[-1] or model
    return model_id_text(model, LABEL_LENGTH)


def model_id_text(model: str, length: int = 3 * LABEL_LENGTH) -> str:
    """A server's whole model id as a tooltip shows it (a path too): without the characters
    :func:`model_label` leaves out, at most ``length`` characters (the middle cut out)."""
    # (An ASCII id without controls, nearly every one, is kept as it is: a list of 50,000 models is
    # labelled when the picker's menu is built.)
    text = model if model.isascii() and model.isprintable() else \
        "".join(c for c in model if unicodedata.category(c) not in _UNSHOWN)
    text = text or "?"
    if len(text) > length:
        text = text[:length * 2 // 3] + "…" + text[-(length - length * 2 // 3 - 1):]
    return text


def check_connection(server: Server, timeout: float = 10.0) -> tuple[str, str, list[str]]:
    """``(kind, verdict, model ids)`` for the settings' Test button; kind "ok" when usable: the model
    list read and the key taken (:func:`check_key`)."""
    try:
        models = list_models(server, timeout)
        refused = check_key(server, min(timeout, KEY_CHECK_TIMEOUT))
        if refused is not None:
            raise refused
    except RemoteError as exc:
        return exc.kind, masked_url(str(exc)), []  # a transport error may quote the URL, password and all
    ids = [m["id"] for m in models]
    if not ids:
        return "ok", "Connected, but the server lists no models", []
    return "ok", f"Connected: {len(ids)} model{'s' if len(ids) != 1 else ''} ({', '.join(map(model_label, ids[:3]))}"\
                 f"{', …' if len(ids) > 3 else ''})", ids


def _obj(value) -> dict:
    """``value`` if it is a JSON object, else ``{}``: a source of the wrong shape says nothing."""
    return value if isinstance(value, dict) else {}


def _count(value) -> int:
    """``value`` if it is a positive whole number, else 0 (unknown)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _context_of(entry: dict) -> int:
    for key in ("context_length", "max_model_len", "context_window", "max_context_length"):
        if _count(entry.get(key)):
            return entry[key]
    meta = _obj(entry.get("meta"))
    for key in ("n_ctx", "n_ctx_train"):
        if _count(meta.get(key)):
            return meta[key]
    return 0


def count_text_tokens(server: Server, model: str, text: str, timeout: float = 30.0) -> int:
    """Tokens ``model`` on ``server`` makes of ``text`` (-1: the server cannot say), from its
    ``/tokenize``: vLLM's and Smolchat's shape first (``{"model", "prompt", "add_special_tokens":
    false}``, answering ``count``), else llama-server's (``{"content"}``, answering ``tokens``; it
    answers the first shape with no tokens, which is no count for a text).
    Ollama and OpenAI have none: two refused requests, -1."""
    def count(data) -> int:
        if isinstance(data.get("count"), int) and not isinstance(data["count"], bool) and data["count"] >= 0:
            return data["count"]
        return len(data["tokens"]) if isinstance(data.get("tokens"), list) else -1

    url = _root(server.url) + "/tokenize"
    with server.client(timeout) as client:
        for body in ({"model": model, "prompt": text, "add_special_tokens": False}, {"content": text}):
            try:
                # Within ``timeout`` in all: an endless answer is no count (trial 71's probes, as there).
                response, answer = fetch(client, "POST", url, timeout, json=body)
                data = json.loads(answer) if response.status_code < 400 else None
            except (httpx.HTTPError, BodyTooSlow, BodyTooLarge, ValueError, RecursionError):
                return -1
            tokens = count(data) if isinstance(data, dict) else -1
            # llama-server answers the first shape's unknown "prompt" with no tokens: for a text, that is
            # no count (trial 56: read as 0, a 6,000-token paste was never said to be too long).
            if tokens > 0 or (tokens == 0 and not text):
                return tokens
    return -1


#: Seconds an optional source of :func:`probe_capabilities` is waited for (a server answers a route it
#: lacks with a 404 at once; the model list, which every server has, keeps the full timeout).
OPTIONAL_TIMEOUT = 2.0


def probe_capabilities(server: Server, model: str, timeout: float = 10.0) -> tuple[Capabilities, dict]:
    """What ``model`` on ``server`` can do, and where each answer came from (``{"vision", "context"}``).

    Best source first: our ``/v1/model/info`` (LiteLLM-shaped), llama-server's ``/props``
    (``modalities``, ``n_ctx``), ``/v1/models`` (``architecture.input_modalities``, context fields),
    Ollama's ``/api/show`` (``capabilities``), else the user's "can see images" toggle. A context length
    no source gives stays 0 ("unknown"), never a guessed 4096.
    """
    vision = video = None
    context, sources = 0, {}
    root = _root(server.url)
    with server.client(timeout) as client:
        def optional(method: str, url: str, **kw) -> dict | None:
            try:  # each source is optional: a server without it answers 404 or something else
                # Soon given up: a server that holds an unknown route open (Ollama's /api/show asked of
                # another server) delayed each model switch and command-line answer by its 10 s (trial 55),
                # and one that answers it with an endless stream was read for good (trial 71): the whole
                # answer within OPTIONAL_TIMEOUT, each read too.
                seconds = min(timeout, OPTIONAL_TIMEOUT)
                response, body = fetch(client, method, url, seconds, timeout=seconds, **kw)
                data = json.loads(body) if response.status_code < 400 else None
            except (httpx.HTTPError, BodyTooSlow, BodyTooLarge, ValueError, RecursionError):
                return None
            return data if isinstance(data, dict) else None

        # Each source is read field by field: one of an unexpected shape counts as not given.
        info = optional("GET", api_base(server.url) + "/model/info")
        data = _obj(info).get("data")
        for entry in map(_obj, data if isinstance(data, list) else []):
            mi = _obj(entry.get("model_info"))
            if mended(entry.get("model_name")) == model and "supports_vision" in mi:  # as list_models' ids
                vision, video = bool(mi["supports_vision"]), bool(mi.get("supports_video", False))
                context = _count(mi.get("max_input_tokens"))
                sources = {"vision": "/v1/model/info", "context": "/v1/model/info" if context else ""}
                break
        if vision is None:
            props = optional("GET", root + "/props")
            if props and isinstance(props.get("modalities"), dict):
                vision = bool(props["modalities"].get("vision"))
                sources["vision"] = "/props"
                n_ctx = _count(_obj(props.get("default_generation_settings")).get("n_ctx"))
                if n_ctx and not context:
                    context, sources["context"] = n_ctx, "/props"
        try:
            entries = list_models(server, timeout)
        except RemoteError:
            entries = []
        entry = next((e for e in entries if e.get("id") == model), {})
        modalities = _obj(entry.get("architecture")).get("input_modalities")
        if vision is None and isinstance(modalities, list):
            vision, video = "image" in modalities, "video" in modalities
            sources["vision"] = "/v1/models"
        if not context and _context_of(entry):
            context, sources["context"] = _context_of(entry), "/v1/models"
        # Smolchat's own server says the tokens a tile (a video frame) takes: the composer's count of a
        # video's tokens against it (others say nothing of it: 0, no count).
        per_tile = _count(_obj(_obj(entry.get("meta")).get("capabilities")).get("image_tokens_per_tile"))
        if vision is None:
            show = optional("POST", root + "/api/show", json={"model": model})
            if show and isinstance(show.get("capabilities"), list):
                vision, sources["vision"] = "vision" in show["capabilities"], "/api/show"
                lengths = [_count(v) for k, v in _obj(show.get("model_info")).items() if k.endswith(".context_length")]
                if lengths and lengths[0] and not context:
                    context, sources["context"] = lengths[0], "/api/show"
    if vision is None:
        vision, sources["vision"] = bool(server.vision_toggles.get(model, False)), "your setting"
    sources.setdefault("context", "")
    return Capabilities(vision=vision, video=bool(video), max_context=context, image_tokens_per_tile=per_tile), sources
