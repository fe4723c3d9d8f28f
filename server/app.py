"""The FastAPI application: state, middleware (API key, body size, CORS) and OpenAI-shaped errors.

``create_app(config)`` loads ``config.model`` on its own EngineService when the app starts;
``create_app(config, service=...)`` serves a service someone else owns and has loaded (the desktop
app's "Local server" switch). Every error answer is ``{"error": {...}}`` with a real status.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Match

from engine.service import EngineService
from server.bridge import ClientDisconnected, EngineBridge
from server.config import ServerConfig, is_loopback
from server.conversation import AnswerIds
from server.errors import APIError, error_body
from server.media import MediaStore, media_folder
from server.metrics import STATUS_KEY, Metrics
from server.routes_generate import router as generate_router
from server.routes_info import router as info_router
from server.routes_tokenize import router as tokenize_router

log = logging.getLogger(__name__)
#: The HTTP content codings (RFC 9110 and IANA's registry) that compress a body: such a body is a 415.
COMPRESSIONS = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd", "compress", "x-compress", "dcb", "dcz"})
OPEN_PATHS = ("/health", "/docs", "/openapi.json")  # /docs/*: Swagger UI's script, style and icon


#: A union member's name in a pydantic error location ("str", "list[str]", "ImageURL",
#: "tagged-union[TextPart,...]", "constrained-str" for a str with a max_length): which alternative
#: failed, not a field of the request.
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|none|constrained-[a-z]+|[a-z-]+\[.*\]|[A-Z]\w*)$")
#: Lists whose items are told apart by a field (schemas.Message by "role", schemas.Part by "type"):
#: pydantic puts the item's tag after its index (``messages.0.user.content``).
_TAGGED_LISTS = {"messages": ("system", "developer", "user", "assistant", "tool", "function"),
                 "content": ("text", "image_url", "video_url")}


def _field_path(loc: tuple) -> tuple:
    """An error location as the client's field path: no "body", no union member names, and no tag
    after the index of a tagged list's item (``messages.0.user.content.0.image_url.image_url`` ->
    ``messages.0.content.0.image_url``)."""
    path: list = []
    tag_seen = False
    for part in loc:
        if part == "body" or (isinstance(part, str) and _UNION_MEMBER.match(part)):
            continue
        if not tag_seen and len(path) >= 2 and isinstance(path[-1], int) and part in _TAGGED_LISTS.get(path[-2], ()):
            tag_seen = True  # the item's tag, which pydantic puts where a field name would be
            continue
        tag_seen = False
        path.append(part)
    return tuple(path)


def field_name(path: tuple) -> str:
    """``("messages", 0, "content")`` -> ``messages[0].content``, as the server's other errors name
    a field (``messages[0].content[1]``)."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _said(error: dict) -> str:
    """One pydantic error in the client's terms."""
    kind, msg = error.get("type", ""), str(error.get("msg", ""))
    if kind == "union_tag_not_found":
        return f"a {error.get('ctx', {}).get('discriminator', 'type')} field is required"
    return msg.removeprefix("Value error, ")


def validation_message(errors: list[dict]) -> tuple[str, str]:
    """``(message, param)`` for pydantic's errors, said once per field.

    A value that fits none of a union's members gets one error per member: those of the members that
    got furthest into the value are kept (a list of content parts with a bad part is about that part,
    not about not being a string; a list that is too long is about its length, not about not being a
    string), and the rest of one field's errors are joined with "or":
    ``messages[0].content: Input should be a valid string or a valid list``."""
    found: dict[tuple, list[dict]] = {}
    for e in errors:
        found.setdefault(_field_path(tuple(e.get("loc", ()))), []).append(e)
    # The paths no other path goes deeper into: linear in the errors (each path against every other
    # took hours for 600,000 errors: trial 67).
    above = {q[:n] for q in found for n in range(len(q))}
    paths = [p for p in found if p not in above]
    parts = []
    for path in paths[:5]:
        errs = found[path]
        # A member of the right type that failed on the value says more than "should be a valid X".
        specific = [e for e in errs if not str(e.get("type", "")).endswith("_type")]
        msgs = list(dict.fromkeys(_said(e) for e in (specific or errs)))
        text = msgs[0] + "".join(" or " + m.removeprefix("Input should be ") for m in msgs[1:])
        parts.append(f"{field_name(path)}: {text}" if path else text)
    return "; ".join(parts), field_name(paths[0]) if paths else ""


class ServerState:
    """What the routes share (``request.app.state.smolchat``)."""

    def __init__(self, config: ServerConfig, bridge: EngineBridge, media_dir: Path, shared: bool = False):
        self.config, self.bridge, self.shared = config, bridge, shared
        self.media = MediaStore(config, media_dir)
        self.answers = AnswerIds()
        self.media_dir = media_dir
        #: Set by the lifespan's shutdown (an owned service): whether the engine thread ended in time;
        #: False when it is still inside a torch call (stopped during the model's load).
        self.engine_stopped: bool | None = None
        self.metrics = Metrics(bridge)
        bridge.on_done = self.metrics.record
        self.created = int(time.time())
        self._model_id = config.model_id or Path(str(config.model).rstrip("/")).name or "smolchat"
        self._fingerprint = ("", "")  # (model id, its fingerprint)

    @property
    def model_id(self) -> str:
        """The name clients use: on a shared service (the app's), whatever model it has loaded now."""
        info = self.bridge.service.info
        return info.name if self.shared and info is not None else self._model_id

    @property
    def fingerprint(self) -> str:
        """``system_fingerprint``: ``smolchat-`` + 8 hex digits of the model id's SHA-256 (kept per id)."""
        model_id = self.model_id
        if self._fingerprint[0] != model_id:
            self._fingerprint = (model_id, "smolchat-" + hashlib.sha256(model_id.encode()).hexdigest()[:8])
        return self._fingerprint[1]

    def check_model(self, model: str) -> None:
        """404 unless ``model`` names the served model (its id or the path it was loaded from)."""
        info = self.bridge.service.info
        if model not in (self.model_id, self.config.model, self.bridge.model_path, info.path if info else None):
            raise APIError(404, f"the model {model!r} does not exist; this server serves {self.model_id!r}",
                           "model_not_found", "model")

    def context_length(self) -> int:
        return self.bridge.capacity or self.bridge.capabilities.max_context


def _json_error(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, code, param), status_code=status)


class GuardMiddleware:
    """Pure ASGI: the Host check on loopback without a key (403), the API key (constant-time
    compare, never logged), the body size limit (413), and the count of every response in /metrics.

    Runs before routing so that an oversized or unauthenticated body is never parsed."""

    def __init__(self, app: Any, config: ServerConfig):
        self.app, self.config = app, config
        self.key = config.api_key.encode() if config.api_key else None
        # Bound to this machine without a key, only loopback names may be asked for: a web page's
        # script whose own hostname an attacker re-points at 127.0.0.1 (DNS rebinding) sends its
        # hostname in Host, and is refused instead of reaching the API from the user's browser.
        self.check_host = self.key is None and is_loopback(config.host)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        meant = _meant_path(scope)
        if meant is not None:
            scope = {**scope, "path": meant, "raw_path": meant.encode()}
        # HEAD is answered as GET without the body (HTTP's rule; uptime checkers send it): FastAPI's
        # GET routes take no HEAD, which was a 405.
        head = scope["method"] == "HEAD"
        if head:
            scope = {**scope, "method": "GET"}
        headers = dict(scope["headers"])
        if self.check_host and not _loopback_host(headers.get(b"host", b"")):
            _count_scope(scope, 403)
            return await _json_error(403, "this server answers requests for localhost or 127.0.0.1 only; to reach it "
                                     "by another name, start it with --host and --api-key",
                                     "host_not_allowed")(scope, receive, send)
        # CORS preflights (OPTIONS) carry no key.
        if self.key is not None and scope["method"] != "OPTIONS" and not scope["path"].startswith(OPEN_PATHS):
            given = headers.get(b"authorization", b"")
            token = given[7:].strip() if given[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"")
            if not hmac.compare_digest(token, self.key):
                _count_scope(scope, 401)
                return await _json_error(401, "a valid API key is required (Authorization: Bearer KEY)",
                                         "invalid_api_key")(scope, receive, send)
        encoding = headers.get(b"content-encoding", b"").decode("latin-1").strip().lower()
        # Real compressions only: a client that labels a plain body (e.g. "utf-8") is read as before.
        compressed = any(part.strip() in COMPRESSIONS for part in encoding.split(","))
        if compressed and scope["method"] not in ("GET", "OPTIONS"):
            # Bodies are read as they come: a compressed one was refused as "not UTF-8 text (byte 0x8b...)".
            _count_scope(scope, 415)
            return await _json_error(415, f"the request body is compressed (Content-Encoding: {encoding[:40]}); "
                                          "this server takes uncompressed bodies only: send it without "
                                          "Content-Encoding", "unsupported_content_encoding")(scope, receive, send)
        limit = self.config.max_body_bytes
        try:
            length = int(headers.get(b"content-length", b"0"))
        except ValueError:
            length = 0
        if length > limit:
            _count_scope(scope, 413)
            return await _json_error(413, f"the request body has {length} bytes; the limit is {limit} "
                                          "(the server's --max-body-mb)",
                                     "request_too_large")(scope, receive, send)
        seen = 0
        status = None

        async def counted():  # chunked bodies carry no length: count as they arrive
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                # FastAPI re-raises HTTPExceptions from body reading (other errors become a vague 400).
                raise HTTPException(413, f"the request body exceeds the limit of {limit} bytes")
            return message

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif head and message.get("body"):  # (its Content-Length stays the GET's, as HEAD's should)
                message = {**message, "body": b""}
            await send(message)
        try:
            await self.app(scope, counted, sending)
        finally:
            # Every response is counted here, once, by its route; a stream that ended in an error
            # event after its 200 header says which (STATUS_KEY).
            if status is not None:
                _count_scope(scope, scope.get(STATUS_KEY) or status)


_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9.-]+))(?::\d{1,5})?")


def _loopback_host(value: bytes) -> bool:
    """Whether a Host header (``name``, ``name:port``, ``[v6]:port``; none at all for HTTP/1.0) names
    this machine's loopback interface; anything else in it (``user@``, a path) is refused."""
    host = value.decode("latin-1").strip().lower()
    if not host:
        return True
    found = _HOST.fullmatch(host)
    if found is None:
        return False
    return is_loopback(found["v6"] or found["name"].rstrip("."))  # "localhost." is the same name


def _endpoint(scope: dict) -> str:
    """The route that answered (its path template, e.g. ``/v1/models/{model}``), else the path when
    it is one of the app's own, else ``"other"``: /metrics keeps one series per route, however many
    unknown paths clients try."""
    route = getattr(scope.get("route"), "path_format", None) or getattr(scope.get("route"), "path", None)
    if route:
        return route
    app, path = scope.get("app"), scope["path"]
    known = getattr(app.state, "route_paths", None)
    if known is None:  # the schema lists the included routers' routes; app.routes adds /docs' own
        known = app.state.route_paths = frozenset(app.openapi()["paths"]) | {
            p for p in (getattr(r, "path", None) for r in app.routes) if p}
    return path if path in known else "other"


def _meant_path(scope: dict) -> str | None:
    """The route a request for a path no route has meant, as llama-server reads it: the path without
    a trailing slash (FastAPI's answer was a 307 with an empty body), or under ``/v1`` (a base URL
    given without it: "Not Found" said nothing of it; trial 66). None when the path is a route's,
    or near none."""
    path, app = scope["path"], scope.get("app")
    if app is None:
        return None
    exact = getattr(app.state, "exact_paths", None)
    if exact is None:  # the routes without parameters: the usual request passes at one lookup
        exact = app.state.exact_paths = frozenset(p for p in _route_paths(app.router.routes) if "{" not in p)
    if path in exact:
        return None

    def routed(candidate: str) -> bool:
        probe = {**scope, "path": candidate}
        return any(route.matches(probe)[0] != Match.NONE for route in app.router.routes)
    bare = path.rstrip("/") or "/"
    if bare != path and routed(bare):  # (before the path itself: /v1/models/ is the list, not model "")
        return bare
    if routed(path):
        return None
    return "/v1" + bare if routed("/v1" + bare) else None


def _route_paths(routes) -> Iterator[str]:
    """The path templates of ``routes``, those of included routers too (FastAPI's ``_IncludedRouter``
    holds its router's; this app includes them without a prefix). Not ``app.openapi()``: building the
    schema took 106 ms, on a first request."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _route_paths(inner.routes)
        elif getattr(route, "path", None):
            yield route.path


def _count_scope(scope: dict, status: int) -> None:
    """Count one answered request in /metrics' ``smolchat_requests_total``."""
    state = getattr(getattr(scope.get("app"), "state", None), "smolchat", None)
    if state is not None:
        state.metrics.requests.labels(_endpoint(scope), str(status)).inc()


def _json_syntax_message(error: dict, body) -> str:
    """The 400 message of a body ``json.loads`` refused: its reason, where it stopped (FastAPI puts
    the offset in ``loc`` and the text in the error's ``body``), and for a raw control character,
    the usual cause (a newline or tab typed into a string)."""
    reason = str(error.get("ctx", {}).get("error", "")).removesuffix(" at").strip()
    loc = error.get("loc", ())
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
    if isinstance(body, str) and body and pos is not None and 0 <= pos <= len(body):
        line, column = body.count("\n", 0, pos) + 1, pos - body.rfind("\n", 0, pos)
        reason += f" at line {line}, column {column}"
        if reason.startswith("Invalid control character"):
            reason += " (a string holds a raw newline, tab or other control character: write it as \\n, \\t or \\u00XX)"
    return f"the body is not valid JSON: {reason}".strip()


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(ClientDisconnected)
    async def gone(request: Request, exc: ClientDisconnected):
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return _json_error(400, _json_syntax_message(first, exc.body), "invalid_json")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if tuple(first.get("loc", ())) == ("body",) and media != "application/json":
            # FastAPI reads a body only as JSON when it is labelled so (curl -d sends a form): say that,
            # rather than pydantic's "Input should be a valid dictionary" about an empty location.
            return _json_error(400, "send the request body as JSON with 'Content-Type: application/json' "
                                    f"(got {media or 'no Content-Type'})", "invalid_json")
        if tuple(first.get("loc", ())) == ("body",) and first.get("type") == "missing":
            return _json_error(400, "the request body is empty: send a JSON object", "invalid_json")
        if tuple(first.get("loc", ())) == ("body",) and str(first.get("type", "")).endswith("_type"):
            # a list, string or number where the object belongs (not a check of the object's fields)
            return _json_error(400, "the request body must be a JSON object ({...})", "invalid_value")
        message, where = validation_message(errors)
        return _json_error(400, message or "invalid request", "invalid_value", where or None)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            # FastAPI's words when Python's JSON reader raises something else than a syntax error.
            return _json_error(400, "the body cannot be read as JSON: invalid UTF-8, nested too deeply, or a "
                                    "number too long to read", "invalid_json")
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(exc.status_code)
        headers = dict(exc.headers or {})
        if "Allow" in headers:  # Starlette's 405 names the route's methods; HEAD goes with GET (GuardMiddleware)
            methods = [m.strip() for m in headers["Allow"].split(",")]
            headers["Allow"] = ", ".join(sorted({*methods, *(["HEAD"] if "GET" in methods else [])}))
        response = _json_error(exc.status_code, str(exc.detail), code)
        response.headers.update(headers)
        return response

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception):
        log.error("request to %s failed", request.url.path, exc_info=exc)
        return _json_error(500, f"internal error: {type(exc).__name__}", "internal_error")


DOCS_FILES = {"swagger-ui-bundle.js": "application/javascript", "swagger-ui.css": "text/css",
              "favicon-32x32.png": "image/png"}


def _serve_docs(app: FastAPI) -> None:
    """/docs: Swagger UI from the fastapi-swagger package's files, linked by root-relative URLs (a
    page built from the request's Host header would point a proxy's users, or a forged Host, at
    another server)."""
    import fastapi_swagger.resources as swagger_files  # imported by name, so an installer bundles it
    from fastapi.openapi.docs import get_swagger_ui_html

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request):
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(openapi_url=root + app.openapi_url, title=f"{app.title} - API",
                                   swagger_js_url=f"{root}/docs/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}/docs/swagger-ui.css",
                                   swagger_favicon_url=f"{root}/docs/favicon-32x32.png")

    @app.get("/docs/{name}", include_in_schema=False)
    async def docs_file(name: str):
        kind = DOCS_FILES.get(name)
        if kind is None:
            raise HTTPException(404, "Not Found")
        return Response(resources.files(swagger_files).joinpath(name).read_bytes(), media_type=kind)


#: OpenAI's error object (server.errors.error_body), as every error status answers it.
ERROR_SCHEMA = {"type": "object", "title": "Error", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}


def _shape_schema(app: FastAPI, keyed: bool) -> None:
    """The OpenAPI schema as this server answers: the 400 with OpenAI's error object where FastAPI
    would declare its 422, which this server never sends (trial 66: a client generated from the
    schema would expect the wrong status and shape); with ``keyed``, the bearer key named, so /docs
    offers "Authorize" and its "Try it out" calls carry the key (the guard checks it; FastAPI's
    routes do not declare it themselves)."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = build()
            if keyed:
                schema.setdefault("components", {}).setdefault("securitySchemes", {})["apiKey"] = {
                    "type": "http", "scheme": "bearer", "description": "the server's --api-key"}
            schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
            schemas = schema["components"]["schemas"]
            for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's own 422, never sent
                schemas.pop(name, None)
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values():
                    if keyed and not path.startswith(OPEN_PATHS):  # /health answers without the key
                        operation["security"] = [{"apiKey": []}]
                    responses = operation.setdefault("responses", {})
                    if responses.pop("422", None) is not None:  # a request that does not validate: a 400
                        responses["400"] = {"description": "Bad request: OpenAI's error object", "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        return app.openapi_schema
    app.openapi = openapi


def create_app(config: ServerConfig, service: EngineService | None = None,
               loader: Any = None) -> FastAPI:
    """The ASGI app. Without ``service`` it owns one (``loader`` as EngineService's) and loads
    ``config.model`` at startup; with one, it serves that service's loaded model and leaves it running."""
    config.check()
    owned = service is None
    service = service or EngineService(loader, name="smolchat-server")
    bridge = EngineBridge(service, config.max_queue)
    media_dir = media_folder()
    state = ServerState(config, bridge, media_dir, shared=not owned)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if owned:
            bridge.load(config.model, config.load_options)
        else:
            bridge.adopt()
        try:
            yield
        finally:
            if owned:
                state.engine_stopped = service.shutdown(1.0)
            shutil.rmtree(media_dir, ignore_errors=True)

    # Swagger UI is served from the fastapi-swagger package, not FastAPI's default CDN: the server
    # runs on machines without internet, where a CDN-backed /docs is a blank page.
    app = FastAPI(title="Smolchat local server", version="0.1.0", lifespan=lifespan,
                  description="OpenAI-compatible API over Smolchat's engine: chat (with images), completions, "
                              "embeddings, model info, health and Prometheus metrics.",
                  docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None)
    _serve_docs(app)
    _shape_schema(app, keyed=bool(config.api_key))
    app.state.smolchat = state
    _install_errors(app)
    app.include_router(generate_router)
    app.include_router(info_router)
    app.include_router(tokenize_router)
    app.add_middleware(GuardMiddleware, config=config)
    if config.cors_origins:  # added last: outermost, so preflights and 401s carry the CORS headers
        from fastapi.middleware.cors import CORSMiddleware

        # Any request header, as llama-server and vLLM allow: the openai JS package sends its own
        # (x-stainless-os, ...), and a key may come as x-api-key. A listed origin may also reach the
        # server from a public page (Chrome's private-network preflight), which is what listing it means.
        app.add_middleware(CORSMiddleware, allow_origins=config.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["*"], allow_private_network=True)
    return app

