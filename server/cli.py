"""``smolchat serve`` / ``python -m engine serve``: run the OpenAI-compatible server with uvicorn."""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import signal
import socket

from server.config import MB, ServerConfig

#: Connections the listening socket holds until they are accepted (uvicorn's default).
BACKLOG = 2048

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16")  # engine.device.DTYPES

KEY_ENV = "SMOLCHAT_API_KEY"  # lets a key stay out of the process list (ps shows arguments)

# The GIL's switch interval in the server's process (CPython's default: 5 ms). The engine thread holds
# the GIL between its short releases; the event loop, woken for a token or a request, waits up to the
# interval for it. At 5 ms the engine thread lost 1-4% of its decode rate through HTTP to those waits
# (4-7% on session 27's slower host); at 0.5 ms 0.7-1.4% (H200, docs/BENCHMARKS.md, session 28).
SWITCH_INTERVAL_S = 0.0005
# glibc's malloc: blocks up to MMAP_THRESHOLD come from its heaps, and up to TRIM_THRESHOLD of freed
# memory stays there. glibc's own dynamic threshold rises to the largest block freed so far (at most
# 32 MB), so each request body a little larger than every one before (a conversation's, turn by
# turn) got fresh pages from mmap: a 0.6 MB follow-up's JSON string took 146 page faults, 0.4-0.8 ms
# of its parse. These are the values the dynamic rule reaches (32 MB, and twice it), set from the
# start. (Not on other C libraries: mallopt is glibc's.)
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 64 * 2**20


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0-65535 (0 asks for any free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, got {value}")
    return value


def _number(text: str, kind: type = int):
    """``text`` as an ``int`` (or ``kind``) for an argparse type, or its error."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a {'whole ' if kind is int else ''}number: {text!r}") from None


def whole_number(least: int):
    """argparse type: a whole number from ``least``, refused at start with the rule: --max-body-mb -1
    or --max-images -1 had started a server that refused every request."""
    def parse(text: str) -> int:
        value = _number(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be {least} or more, got {value}")
        return value
    return parse


def megabytes(text: str) -> float:
    """argparse type: a size in MB, more than 0 and finite."""
    value = _number(text, float)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a size in MB above 0, got {text!r}")
    return value


def context_size(text: str) -> int:
    """argparse type: KV cache tokens, 0 for the model's own (the app's rule, app.settings)."""
    from engine.api.events import MAX_CONTEXT, MIN_CONTEXT

    value = _number(text)
    if value and not MIN_CONTEXT <= value <= MAX_CONTEXT:
        raise argparse.ArgumentTypeError(f"must be from {MIN_CONTEXT} to {MAX_CONTEXT} tokens, or 0 for the "
                                         f"model's own, got {value}")
    return value


def choice(name: str, allowed: tuple[str, ...]):
    """argparse type: one of ``allowed`` (any case), named in the error."""
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise argparse.ArgumentTypeError(f"unknown {name} {text!r} (use {', '.join(allowed)})")
        return text.lower()
    return parse


def add_arguments(ap: argparse.ArgumentParser) -> None:
    # Imported when a parser is built, not with this module, which stays as light as the server's
    # config: tests/server/test_serve_command.py measures tune_process in a fresh process whose
    # heap the engine package's modules would change.
    from engine.api.events import MAX_CONTEXT, MIN_CONTEXT, WEIGHT_FORMATS
    from engine.api.hub import MODEL_HELP

    ap.add_argument("--model", required=True, help=MODEL_HELP)
    ap.add_argument("--model-name", default="", help="the id clients use (default: the folder's name)")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    ap.add_argument("--port", type=port_number, default=8080, help="TCP port (default 8080; 0: any free one)")
    ap.add_argument("--api-key", default=None, help=f"require 'Authorization: Bearer KEY' (or set ${KEY_ENV})")
    ap.add_argument("--insecure-no-key", action="store_true", help="allow a non-loopback --host without a key")
    ap.add_argument("--cors-origin", action="append", default=[], help="allow this browser origin (repeat)")
    ap.add_argument("--allow-remote-media", action="store_true", help="fetch http(s) image URLs (off by default)")
    ap.add_argument("--allow-private-media-hosts", action="store_true",
                    help="with --allow-remote-media, also fetch from this machine and private networks (off: only "
                    "public internet addresses)")
    ap.add_argument("--max-queue", type=whole_number(1), default=16,
                    help="answers queued or running before 429 (default 16)")
    ap.add_argument("--max-body-mb", type=megabytes, default=32.0,
                    help="largest request body in MB (default 32; 413 beyond)")
    ap.add_argument("--max-images", type=whole_number(0), default=16,
                    help="images or videos in a request's last message (default 16; 0: none), and 4 times as many "
                    "in its earlier messages (413 beyond)")
    ap.add_argument("--device", default=None, help="auto (default), cuda, cuda:N, mps or cpu")
    ap.add_argument("--dtype", type=choice("dtype", DTYPE_NAMES), default=None,
                    help="auto (default), float32, bfloat16 or float16")
    ap.add_argument("--weights", type=choice("weights", WEIGHT_FORMATS), default=None,
                    help="auto, int8 or int4 (see python -m engine generate --help)")
    ap.add_argument("--context-size", type=context_size, default=None,
                    help=f"KV cache tokens, {MIN_CONTEXT}-{MAX_CONTEXT} (default or 0: the model's own)")
    ap.add_argument("--log-level", default="info")


def config_from(args: argparse.Namespace) -> ServerConfig:
    options = {k: v for k, v in (("device", args.device), ("dtype", args.dtype), ("weights", args.weights),
                                 ("context_size", args.context_size)) if v}
    return ServerConfig(model=args.model, model_id=args.model_name, host=args.host, port=args.port,
                        api_key=args.api_key or os.environ.get(KEY_ENV) or None, insecure_no_key=args.insecure_no_key,
                        cors_origins=list(args.cors_origin), allow_remote_media=args.allow_remote_media,
                        allow_private_media_hosts=args.allow_private_media_hosts,
                        max_queue=args.max_queue, max_body_bytes=int(args.max_body_mb * MB),
                        max_images=args.max_images, load_options=options)


class PortInUse(ValueError):
    """Another program listens on the port (:func:`usable_port`); the message is worded for the CLI."""


def usable_port(host: str, port: int) -> int:
    """``port`` if no other program listens on ``host:port``, or for 0 a port the OS picks free now;
    ValueError if it is taken (:func:`bound_socket`, closed again). Another program could take it
    before it is bound for good; the error says so then."""
    with bound_socket(host, port) as sock:
        return int(sock.getsockname()[1])


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a port the OS picks), for the caller to listen on and
    close. Bound as uvicorn binds (``SO_REUSEADDR``), so a port in TIME_WAIT after a restart counts as
    free. Said before the address is printed (uvicorn's own failure came after it, exit 3, with no
    ``error:`` line).

    Raises:
        PortInUse: another program listens there.
        ValueError: ``host`` is no name or address of this machine."""
    import errno

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except socket.gaierror as exc:  # a name that does not resolve ("[Errno -2] Name or service not known")
            raise ValueError(f"--host {host} is not a name or address this machine can listen on "
                             f"({exc.strerror})") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} on {host} is in use by another program: choose another with "
                                 "--port (0 picks a free one)") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise ValueError(f"--host {host} is not an address of this machine") from None
            raise
    except BaseException:
        sock.close()
        raise
    return sock


def tune_process() -> None:
    """Set :data:`SWITCH_INTERVAL_S` and, with glibc, :data:`MMAP_THRESHOLD` and :data:`TRIM_THRESHOLD`
    for this process (the server's own: ``smolchat serve``; the app's local server shares the
    window's process and leaves it as it is)."""
    import ctypes
    import sys

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if not sys.platform.startswith("linux"):
        return
    try:
        # The C library this process runs on (dlopen(NULL)), as engine.host_memory.release_free_host_memory
        # finds malloc_trim: a libc found by name may be another file than the one in use.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    mallopt(m_mmap_threshold, MMAP_THRESHOLD)
    mallopt(m_trim_threshold, TRIM_THRESHOLD)


def serve(args: argparse.Namespace) -> int:
    """Run until interrupted. Raises ValueError for unsafe settings and for a model that fails to load
    (the server stops then; the CLI prints it, exit 2)."""
    config = config_from(args)
    # Listening before the engine's imports and checks (~2 s): a client started with the server
    # waits in the backlog for the 503 "loading" and its Retry-After, where a refused connection
    # used up an OpenAI client's retries in 1.4 s (trial 67). Bound before the key check (nothing
    # listens until after it): a --host that is not this machine's asked for an API key first, and
    # said what was wrong only once one was given (trial 73 F3).
    listener = bound_socket(config.host, config.port)
    try:
        config.check()
        listener.listen(BACKLOG)
        config.port = int(listener.getsockname()[1])  # port 0: picked now, so the address printed is served
        return _serve(args, config, listener)
    finally:
        listener.close()


def _serve(args: argparse.Namespace, config: ServerConfig, listener: socket.socket) -> int:
    import uvicorn

    from engine.api.errors import ModelLoadError
    from engine.sources import source_kind
    from server.app import create_app

    if args.device and args.device.lower() != "auto":  # said before an address is printed, not after the load
        from engine.api.errors import EngineError
        from engine.device import choose_device

        try:
            choose_device(args.device)
        except EngineError as exc:
            raise ValueError(f"--device: {exc}") from None
    if not args.weights:  # $SMOLCHAT_WEIGHTS, said before an address is printed as --weights is (trial 57)
        from engine.api.errors import EngineError
        from engine.registry import resolve_weights

        try:
            resolve_weights(None)
        except EngineError as exc:
            raise ValueError(str(exc)) from None
    if not str(config.model).strip():
        raise ValueError("--model is empty: give a model folder, a .gguf file or a Hub id")
    try:  # a missing folder is said before an address is printed that would serve nothing
        source_kind(config.model)
    except ModelLoadError as exc:
        raise ValueError(str(exc)) from None
    tune_process()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from server.runner import Server

    app = create_app(config)
    print(f"Smolchat server: {base_url(config.host, config.port)} (docs at /docs)"
          + (" - API key required" if config.api_key else "") + f"; loading {config.model}", flush=True)
    server = Server(uvicorn.Config(app, host=config.host, port=config.port, log_level=args.log_level,
                                   timeout_graceful_shutdown=3), app.state.smolchat.bridge, exit_if_load_fails=True,
                    on_ready=lambda seconds: print(f"Model ready ({seconds:.1f} s): requests are served now"
                                                   + _context_note(args.context_size, state.context_length()),
                                                   flush=True))
    state = app.state.smolchat
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:  # uvicorn's re-raise of SIGINT once it has stopped
        _end_if_loading(state, 130)
        raise
    except SystemExit as exc:  # uvicorn could not start (the port taken meanwhile)
        _end_if_loading(state, exc.code if isinstance(exc.code, int) else 1)
        raise
    finally:
        # A signal in the moment before uvicorn handles signals stops it before the app's lifespan,
        # which would have removed the folder.
        shutil.rmtree(state.media_dir, ignore_errors=True)
    if server.load_error is not None:
        raise ValueError(f"the model failed to load: {server.load_error}")
    # uvicorn raises SIGINT and SIGTERM again once it has stopped: SIGINT ends in KeyboardInterrupt
    # (130, above), SIGTERM in the signal's default action. Here only when the signal was ignored when
    # the process started (a shell's background job): 130 for Ctrl-C all the same, else 0.
    code = 130 if server.stopped_by == signal.SIGINT else 0
    _end_if_loading(state, code)
    return code


def base_url(host: str, port: int) -> str:
    """The API's address as a client writes it: an IPv6 host in brackets (RFC 3986), ``http://[::1]:8080/v1``."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


def _context_note(asked: int | None, context: int) -> str:
    """What the ready line adds when --context-size asked for more than the model holds (the cache
    is never larger than the model's own context)."""
    if asked and context and asked > context:
        return f" (a context of {context:,} tokens, the model's own: --context-size {asked:,} is more than it holds)"
    return ""


def _end_if_loading(state, code: int) -> None:
    """Exit now with ``code`` when the app's lifespan shutdown found the engine thread still busy
    (stopped during the model's load): interpreter teardown beside a thread inside torch can abort
    the process (SIGABRT instead of 130). That shutdown has ended the answers and removed the media
    folder by then; the server registers no ``atexit`` work that the exit would skip."""
    if state.engine_stopped is False:
        from engine.service import exit_process

        exit_process(code)


def main(argv: list[str] | None = None) -> int:
    """``smolchat serve``: exit 130 on Ctrl-C (SIGINT), 2 with one ``error:`` line for unsafe or
    unusable settings (as ``python -m engine serve``)."""
    import sys

    from engine.api import smolchat_version

    ap = argparse.ArgumentParser(prog="smolchat serve", description="Smolchat's OpenAI-compatible local server")
    ap.add_argument("--version", action="version", version=f"smolchat serve {smolchat_version()}")
    add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        return serve(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
