"""HTTP overhead of the local server: one answer's TTFT and tok/s through HTTP vs. the same in process,
and the follow-up's TTFT with prefix caching.

    python bench/server.py --model CHECKPOINT [--image PHOTO] [--max-tokens 64] [--runs 3] [--detail high]
                           [--reference server|bench] [--client-encode httpx|dumps|prepared|socket] [--json F]
    python bench/server.py --pool F [F ...]     # the --json files of several calls (server processes), pooled

The server is ``python -m engine serve`` in a subprocess on 127.0.0.1. Through HTTP: a streamed
request, timed by the client (TTFT = request started -> first content delta parsed; tok/s over the
deltas after the first). In process (``--reference server``, the default): the same answer through the
server's own ``EngineService`` in the server's process, as the desktop app's ``LocalBackend`` sends it
(``set_history``, then ``send``; TTFT = ``send`` called -> the first token's event on the engine
thread), asked by the bench over a side route that only this bench's server has
(``/bench/in-process``, untimed). Both sides then run on one engine in one process, so the host-bound
vision + prefill phase, whose speed differs by up to ~1.4x from one process to another on the H200
machine (docs/BENCHMARKS.md, sessions 23-25), is the same on both. ``--reference bench``: the in-process
side is ``ChatSession.send`` in this bench's own process instead (the comparison before session 25).

A fresh system prompt and a fresh photo per run, so nothing is cached: each first turn is a new
photo's, tiling included (``--same-photo`` sends the file itself every run, whose tiles are then
cached on both sides after run 0). Both use greedy decoding with ``ignore_eos``; runs alternate (in
process, then HTTP). The follow-up re-sends the conversation plus a new question, as an OpenAI client
does; its prompt's image and first answer come from the KV cache. Prints medians.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.shared import SHARED  # noqa: E402
from server.media import DETAILS  # noqa: E402 - OpenAI detail -> the engine's


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) of this process or of ``pid`` (Linux /proc).

    On a machine shared with other work, wall times swing several-fold between runs; the CPU time a
    request costs its own process does not, so the overhead is also reported in CPU time."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fresh_photo(args, run: int, side: int) -> bytes:
    """The photo with one pixel changed, as PNG bytes: new content for every turn that starts a
    conversation, so neither side finds its tiles or blocks cached (as with a user's new photo),
    unless ``--same-photo`` (every run sends the file as it is). ``--photo-format jpeg``: JPEG,
    quality 90, as a camera or phone saves a photo, with ``2 * run + side`` written in black and
    white 16x16 blocks along the top edge instead of the pixel, which JPEG's quantization erases."""
    if args.same_photo:
        return Path(args.image).read_bytes()
    import io

    from PIL import Image

    image = Image.open(args.image).convert("RGB")
    out = io.BytesIO()
    if args.photo_format == "jpeg":
        for bit in range(10):  # (runs up to 511: the benches run tens)
            shade = 255 * ((2 * run + side) >> bit & 1)
            image.paste((shade, shade, shade), (16 * bit, 0, 16 * bit + 16, 16))
        image.save(out, format="JPEG", quality=90)
    else:
        image.putpixel((0, 0), (run % 256, side, 7))
        image.save(out, format="PNG")
    return out.getvalue()


def check_photo_args(ap, args) -> None:
    """Refuse (``ap.error``, exit 2) what would fail only after the model has loaded: no runs, a
    missing ``--image``."""
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if not Path(args.image).is_file():
        ap.error(f"--image: no such file: {args.image}")


def photo_mime(args) -> str:
    """The data URI's media type of :func:`fresh_photo`'s bytes."""
    if args.same_photo:
        return "image/jpeg" if args.image.lower().endswith((".jpg", ".jpeg")) else "image/png"
    return "image/jpeg" if args.photo_format == "jpeg" else "image/png"


def in_process(session, args, run: int, photo: str) -> dict:
    from engine.api import GenerationParams, TokenEvent

    params = GenerationParams(max_new_tokens=args.max_tokens, ignore_eos=True, image_detail=DETAILS[args.detail])
    session.reset()
    session.system_prompt = f"Benchmark run {run}, side 0."
    c0, t0, first, n = cpu_s(), time.perf_counter(), None, 0
    for event in session.send("Describe this photo.", images=[photo], params=params):
        if isinstance(event, TokenEvent) and event.token_id >= 0:
            n += 1
            first = first or time.perf_counter()
    end = time.perf_counter()
    out = {"ttft": first - t0, "tok_s": (n - 1) / (end - first), "cpu": cpu_s() - c0}
    t0, first = time.perf_counter(), None  # the follow-up, as the HTTP side asks it
    for event in session.send("What colours does it have?", params=params):
        if isinstance(event, TokenEvent) and event.token_id >= 0:
            first = first or time.perf_counter()
    out["follow_ttft"] = first - t0
    return out


def service_turns(service, spec: dict) -> dict:
    """The in-process side of one run inside the server's process (``--reference server``): a new chat
    with ``spec["image"]`` (a file path) and ``spec["text"]``, then ``spec["follow"]``, through
    ``service`` (the server's ``EngineService``) as the desktop app's ``LocalBackend`` sends them.

    Returns ``{"ttft", "follow_ttft"}`` in seconds (``send`` called -> the first token's event, on the
    engine thread), ``"tok_s"`` (the first answer's tokens after its first, over their time) and
    ``"cpu"`` (the process's CPU seconds over the first answer, all threads).
    Raises RuntimeError with the engine's message if an answer ends in an error."""
    from engine.api import Attachment, DoneEvent, GenerationParams, TokenEvent

    params = GenerationParams(max_new_tokens=spec["max_tokens"], ignore_eos=True,
                              image_detail=DETAILS[spec["detail"]])

    def answer(text: str, attachments: list) -> tuple[float, list[float]]:
        done, times, ended = threading.Event(), [], []

        def sink(event) -> None:
            if isinstance(event, TokenEvent) and event.token_id >= 0:
                times.append(time.perf_counter())
            elif isinstance(event, DoneEvent):
                ended.append(event)
                done.set()
        t0 = time.perf_counter()
        service.send(text, attachments, params, sink, spec["system"])
        if not done.wait(600) or ended[0].error or not times:
            raise RuntimeError(f"the in-process answer failed: {ended[0].error if ended else 'no answer in 600 s'}")
        return t0, times

    service.set_history([], spec["system"])  # a new chat, as the app starts one
    c0 = time.process_time()
    t0, times = answer(spec["text"], [Attachment(spec["image"])])
    cpu = time.process_time() - c0
    f0, follow = answer(spec["follow"], [])
    return {"ttft": times[0] - t0, "tok_s": (len(times) - 1) / (times[-1] - times[0]), "cpu": cpu,
            "follow_ttft": follow[0] - f0}


def bench_tuning() -> None:
    """In a bench's server process, for an A/B of ``server.cli.tune_process``: ``BENCH_TUNE=0`` leaves
    the process as Python starts it (GIL switch interval 5 ms, glibc's malloc thresholds dynamic);
    ``BENCH_SWITCH_INTERVAL_MS`` sets the interval instead of the server's."""
    import server.cli

    if os.environ.get("BENCH_TUNE") == "0":
        server.cli.tune_process = lambda: None
    if os.environ.get("BENCH_SWITCH_INTERVAL_MS"):
        server.cli.SWITCH_INTERVAL_S = float(os.environ["BENCH_SWITCH_INTERVAL_MS"]) / 1000
        sys.setswitchinterval(server.cli.SWITCH_INTERVAL_S)


def wrap_server_app(wrap) -> None:
    """Make ``server.app.create_app`` return ``wrap(app)`` (an ASGI callable around the server's app)
    from now on, with the app's ``state``, which the CLI reads (``app.state.smolchat``). For a
    bench's server subprocess, before it imports ``server.cli``."""
    import server.app

    create = server.app.create_app

    def create_app(*args, **kwargs):
        app = create(*args, **kwargs)
        wrapped = wrap(app)
        wrapped.state = app.state
        return wrapped
    server.app.create_app = create_app


# Per answer in the bench's server (``--reference server``): when EngineService.send was called, when the engine
# thread reported the first ProgressEvent (the prompt fitted and its images were read and tiled: the
# vision tower starts), the last (the prompt read: the host about to wait for the first token) and the
# first token; /bench/phases hands them over, oldest first, and forgets them.
PHASES: list[dict] = []


def stamp_phases() -> None:
    """Wrap ``EngineService.send``'s sink to stamp :data:`PHASES` (in-process and HTTP answers alike)."""
    from engine.api import ProgressEvent, TokenEvent
    from engine.service import EngineService

    send = EngineService.send

    def stamped(self, text, attachments, params, sink, *args, **kwargs):
        row = {"send": time.perf_counter()}
        PHASES.append(row)

        def stamping(event) -> None:
            if isinstance(event, ProgressEvent):
                row.setdefault("progress", time.perf_counter())
                if event.stage == "prefill" and event.done >= event.total:  # the prompt read
                    row.setdefault("read", time.perf_counter())
            elif isinstance(event, TokenEvent) and event.token_id >= 0:
                row.setdefault("token", time.perf_counter())
            sink(event)
        return send(self, text, attachments, params, stamping, *args, **kwargs)
    EngineService.send = stamped


def bench_serve(argv: list[str]) -> int:
    """``python bench/server.py --bench-serve SERVE_ARGS``: ``engine serve`` with one more route,
    ``POST /bench/in-process`` (JSON ``spec`` of :func:`service_turns` -> its result), answered by the
    server's own engine service on a worker thread, and ``GET /bench/phases`` (:data:`PHASES`); every
    other request goes to the server unchanged."""
    import asyncio

    bench_tuning()
    stamp_phases()

    def with_bench(app):
        async def call(scope, receive, send):
            if scope["type"] == "http" and scope["path"] == "/bench/phases":
                rows = PHASES[:]
                del PHASES[:len(rows)]
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": json.dumps(rows).encode()})
                return
            if scope["type"] != "http" or scope["path"] != "/bench/in-process":
                return await app(scope, receive, send)
            body, more = b"", True
            while more:
                message = await receive()
                body, more = body + message.get("body", b""), message.get("more_body", False)
            try:
                status, result = 200, await asyncio.to_thread(
                    service_turns, app.state.smolchat.bridge.service, json.loads(body))
            except Exception as exc:  # the bench prints it and stops
                status, result = 500, {"error": f"{type(exc).__name__}: {exc}"}
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": json.dumps(result).encode()})
        return call
    wrap_server_app(with_bench)
    from server.cli import main as serve_main

    return serve_main(argv)


def measure(args) -> tuple[list[dict], list[dict], list[dict]]:
    """Runs alternate (in process, then HTTP), so load changes on a shared machine hit both alike."""
    import httpx


    port = args.port
    serve = [sys.executable, __file__, "--bench-serve"] if args.reference == "server" \
        else [sys.executable, "-m", "engine", "serve"]
    proc = subprocess.Popen([*serve, "--model", args.model, "--port", str(port), "--log-level", "warning"], cwd=REPO)
    url = f"http://127.0.0.1:{port}/v1"
    sender = None
    try:
        from bench.server_overhead import wait_ready

        wait_ready(f"http://127.0.0.1:{port}", timeout=300, proc=proc)
        model = httpx.get(f"{url}/models").json()["data"][0]["id"]
        session = None
        if args.reference == "bench":
            # As the server (and the app) load it: EngineService's loader, whose CPU prefill chunk is
            # smaller so that a cancel lands quickly; ChatSession.load's default chunk would favour this side.
            from engine.service import default_loader

            session = default_loader(args.model, {})
        mime = photo_mime(args)
        local, firsts, follows = [], [], []
        work = Path(tempfile.mkdtemp(prefix="smolchat-bench-"))
        sender = SocketClient("127.0.0.1", port) if args.client_encode == "socket" else None
        with httpx.Client(timeout=600) as client:
            for run in range(args.runs + 1):  # run 0 warms up
                mine = work / f"run{run}.{mime.split('/')[1]}"
                mine.write_bytes(fresh_photo(args, run, 0))
                photo = f"data:{mime};base64,{base64.b64encode(fresh_photo(args, run, 1)).decode()}"
                if session is not None:
                    here = in_process(session, args, run, str(mine))
                else:
                    reply = client.post(f"http://127.0.0.1:{port}/bench/in-process", json={
                        "image": str(mine), "text": "Describe this photo.", "follow": "What colours does it have?",
                        "system": f"Benchmark run {run}, side 0.", "max_tokens": args.max_tokens,
                        "detail": args.detail})
                    if reply.status_code != 200:
                        raise SystemExit(f"error: the in-process side failed: {reply.json()['error']}")
                    here = reply.json()
                messages = [{"role": "system", "content": f"Benchmark run {run}, side 1."},
                            {"role": "user", "content": [
                                {"type": "image_url", "image_url": {"url": photo, "detail": args.detail}},
                                {"type": "text", "text": "Describe this photo."}]}]
                c0 = cpu_s(proc.pid)
                first, answer = stream(sender or client, url, model, messages, args.max_tokens, args.client_encode)
                first["cpu"] = cpu_s(proc.pid) - c0
                messages += [{"role": "assistant", "content": answer},
                             {"role": "user", "content": "What colours does it have?"}]
                follow, _ = stream(sender or client, url, model, messages, args.max_tokens, args.client_encode)
                if args.reference == "server":  # in process: first, follow-up; then through HTTP the same
                    phases = client.get(f"http://127.0.0.1:{port}/bench/phases").json()
                    if len(phases) == 4:
                        here["phases"], first["phases"] = phases[0], phases[2]
                if run:
                    local.append(here)
                    firsts.append(first)
                    follows.append(follow)
        return local, firsts, follows
    finally:
        if sender is not None:
            sender.close()
        proc.terminate()
        proc.wait(10)


def median_ci(values: list[float], level: float = 0.95, resamples: int = 4000) -> tuple[float, float, float]:
    """The median of ``values`` and a percentile-bootstrap confidence interval for it (Efron and
    Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 13): the medians of ``resamples``
    samples drawn with replacement, cut at (1 - level) / 2 from each end. Seeded: the same runs
    print the same interval. Returns (median, low, high)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    cut = int(resamples * (1 - level) / 2)
    return statistics.median(values), medians[cut], medians[-cut - 1]


def post_args(body: dict, encode: str) -> dict:
    """The request body as httpx sends it for ``json=`` ("httpx": ``json.dumps(ensure_ascii=False)``,
    as the openai client does too) or as ``json.dumps``' default ASCII encoding, sent as bytes
    ("dumps", and "prepared" and "socket", whose bytes :func:`stream` makes before its clock starts,
    as curl sends a prepared file; "socket" sends them with :class:`SocketClient`, not httpx). On Python 3.12 the first took 7.8 ms for a 0.6 MB photo conversation against 1.4 ms
    (H200 machine, session 18): a client's cost the server never sees, so the bench reports each."""
    if encode == "httpx":
        return {"json": body}
    return {"content": json.dumps(body).encode(), "headers": {"content-type": "application/json"}}


class SocketClient:
    """A client whose HTTP is a socket: one keep-alive HTTP/1.1 connection, the request written with
    one ``sendall``, the chunked SSE response split with ``bytes.find`` (``--client-encode socket``).
    It costs what curl or a browser's own network stack costs a request, next to nothing, where
    httpx's request and response machinery adds ~0.4 ms to a 0.6 MB streamed request on loopback
    (the dev VM: 0.76 against 0.35 ms for the round trip to a bare uvicorn app), so the bench can
    tell the server's overhead from the client library's."""

    def __init__(self, host: str, port: int):
        import socket

        self.host = host
        self.sock = socket.create_connection((host, port), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buf += data

    def _line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            self._fill()
        line, self.buf = self.buf[:end], self.buf[end + 2:]
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def post_events(self, path: str, body: bytes) -> Iterator[str]:
        """POST ``body`` (JSON) to ``path`` and yield each SSE event's ``data:`` payload as it arrives,
        to the end of the response. Raises RuntimeError for a status other than 200 (with the body)."""
        self.sock.sendall(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % (path.encode(), self.host.encode(), len(body)) + body)
        status = self._line().split(b" ", 2)[1]
        headers = {}
        while line := self._line():
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if headers.get(b"transfer-encoding") != b"chunked":
            text = self._exactly(int(headers.get(b"content-length", b"0")))
            raise RuntimeError(f"HTTP {status.decode()}: {text.decode(errors='replace')}")
        pending = b""
        while size := int(self._line().split(b";")[0], 16):
            pending += self._exactly(size)
            self._line()
            while (end := pending.find(b"\n\n")) >= 0:
                event, pending = pending[:end], pending[end + 2:]
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        yield line[6:].decode()
        self._line()  # the empty line after the last chunk
        if status != b"200":
            raise RuntimeError(f"HTTP {status.decode()}")


def sse_payloads(client, url: str, request: dict) -> Iterator[str]:
    """The ``data:`` payloads of a streamed POST to ``{url}/chat/completions``, through ``client``: an
    ``httpx.Client`` (``request`` as :func:`post_args` gives it) or a :class:`SocketClient` (its
    ``content`` bytes)."""
    if isinstance(client, SocketClient):
        yield from client.post_events(urlsplit(url).path + "/chat/completions", request["content"])
        return
    with client.stream("POST", f"{url}/chat/completions", **request) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: "):
                yield line[6:]


def stream(client, url: str, model: str, messages: list, max_tokens: int, encode: str = "httpx") -> tuple[dict, str]:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    request = post_args(body, encode) if encode in ("prepared", "socket") else None
    t0, times, text, usage = time.perf_counter(), [], [], {}
    for data in sse_payloads(client, url, request or post_args(body, encode)):
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            if choice["delta"].get("content"):
                times.append(time.perf_counter())
                text.append(choice["delta"]["content"])
    n = usage.get("completion_tokens", len(times))
    return {"ttft": times[0] - t0, "tok_s": (n - 1) / (times[-1] - times[0]),
            "cached": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            "prompt": usage.get("prompt_tokens", 0)}, "".join(text)


def handling_ms(args, repeat: int = 20) -> tuple[float, float]:
    """The server's own work on the request before it reaches the engine queue, timed without HTTP or
    the engine: parse the JSON body as the server does (server.json_body, then the model's
    validation), decode and check the image, store it. Returns the medians of
    ``repeat`` for a photo the server has not seen (a fresh store each time) and for one re-sent in
    a later turn of the conversation (found by its data URI, not decoded again), in ms."""
    import asyncio

    from server.config import ServerConfig
    from server.json_body import parse_json
    from server.media import MediaStore
    from server.schemas import ChatRequest

    photo = base64.b64encode(Path(args.image).read_bytes()).decode()
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{photo}"}},
        {"type": "text", "text": "Describe this photo."}]}]}).encode()
    new, again = [], []
    with tempfile.TemporaryDirectory() as folder:
        resent = MediaStore(ServerConfig(), Path(folder) / "resent")
        for i in range(repeat):
            for store, times in ((MediaStore(ServerConfig(), Path(folder) / str(i)), new), (resent, again)):
                t = time.perf_counter()
                request = ChatRequest.model_validate(parse_json(body))
                asyncio.run(store.image(request.messages[0].content[0].image_url.url, "x"))
                times.append(time.perf_counter() - t)
    return statistics.median(new) * 1000, statistics.median(again[1:]) * 1000


def pool(paths: list[str]) -> int:
    """Print the paired first-turn overhead, the follow-up / first-turn ratio and the engine phases'
    paired differences over every run of the ``--json`` files ``paths`` (e.g. one tree's calls, each
    a server process of its own: their spread is wider than one call's interval)."""
    over, follow, phases = [], [], {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        local, firsts, follows = data["in_process"], data["first_turns"], data["follow_ups"]
        over += [h["ttft"] / i["ttft"] for i, h in zip(local, firsts)]
        follow += [f["ttft"] / h["ttft"] for h, f in zip(firsts, follows)]
        for i, h in zip(local, firsts):
            stamps = [k for k in ("send", "progress", "read", "token") if k in i.get("phases", {}) and
                      k in h.get("phases", {})]
            for a, b in zip(stamps, stamps[1:]):
                phases.setdefault(f"{a} -> {b}", []).append(
                    ((h["phases"][b] - h["phases"][a]) - (i["phases"][b] - i["phases"][a])) * 1000)
    ratio, lo, hi = median_ci(over)
    print(f"{len(paths)} calls, {len(over)} paired runs: first turn through HTTP {(ratio - 1) * 100:+.2f}% over in "
          f"process (95% interval {(lo - 1) * 100:+.2f}% to {(hi - 1) * 100:+.2f}%)")
    ratio, lo, hi = median_ci(follow)
    print(f"follow-up / its first turn through HTTP: {ratio:.4f}x (95% interval {lo:.4f}x to {hi:.4f}x)")
    for name, diffs in phases.items():
        diff, lo, hi = median_ci(diffs)
        print(f"engine phase {name}: HTTP - in process {diff:+.3f} ms (95% interval {lo:+.3f} to {hi:+.3f})")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--pool"]:
        return pool(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--image", default=str(SHARED / "images" / "coffee.png"))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--detail", choices=list(DETAILS), default="auto")
    ap.add_argument("--port", type=int, default=18765)
    ap.add_argument("--photo-format", choices=["png", "jpeg"], default="png",
                    help="how each run's fresh photo is encoded (the request body's size follows)")
    ap.add_argument("--same-photo", action="store_true", help="send the file itself every run (its tiles are "
                    "then cached after the first run on both sides: the first turns are cheaper than a new photo's)")
    ap.add_argument("--verbose", action="store_true", help="print every run")
    ap.add_argument("--json", help="write every run's measurements (in process, first turn, follow-up) to this file")
    ap.add_argument("--client-encode", choices=["httpx", "dumps", "prepared", "socket"], default="httpx",
                    help="how the client encodes its JSON body (see post_args), and with \"socket\" sends it "
                    "(SocketClient: no client library in the clock, as curl)")
    ap.add_argument("--reference", choices=["server", "bench"], default="server",
                    help="where the in-process answers run: in the server's process, through its engine service "
                    "(as the desktop app), or in this bench's process (ChatSession.send)")
    if sys.argv[1:2] == ["--bench-serve"]:  # the server subprocess of --reference server
        return bench_serve(sys.argv[2:])
    args = ap.parse_args()
    check_photo_args(ap, args)
    local, firsts, follows = measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "in_process": local, "first_turns": firsts,
                                               "follow_ups": follows}, indent=1))
    if args.verbose:
        for row in zip(local, firsts, follows):
            print(" | ".join(f"ttft {r['ttft'] * 1000:.0f} ms, {r['tok_s']:.0f} tok/s" for r in row))
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    lt, ht, ft = med(local, "ttft"), med(firsts, "ttft"), med(follows, "ttft")
    ls, hs = med(local, "tok_s"), med(firsts, "tok_s")
    # Paired: each HTTP run against the in-process run just before it (drift in load cancels out),
    # with a 95% interval for the median: the first turn's own time spreads ~2x within one process.
    ttft_ratio, ttft_lo, ttft_hi = median_ci([h["ttft"] / i["ttft"] for i, h in zip(local, firsts)])
    speed_ratio = statistics.median(i["tok_s"] / h["tok_s"] for i, h in zip(local, firsts))
    follow_ratio, follow_lo, follow_hi = median_ci([f["ttft"] / h["ttft"] for h, f in zip(firsts, follows)])
    sent = "the file" if args.same_photo else args.photo_format
    print(f"model {args.model}, image {Path(args.image).name} (detail {args.detail}, sent as {sent}), "
          f"{args.max_tokens} tokens, "
          f"median of {args.runs} runs, client body encoded by {args.client_encode}, in process: "
          f"{'the server process, its engine service' if args.reference == 'server' else 'the bench process'}")
    print(f"TTFT    in process {lt * 1000:8.1f} ms   HTTP {ht * 1000:8.1f} ms   "
          f"overhead {(ht / lt - 1) * 100:+.1f}% (median of paired runs {(ttft_ratio - 1) * 100:+.1f}%, "
          f"95% interval {(ttft_lo - 1) * 100:+.1f}% to {(ttft_hi - 1) * 100:+.1f}%)")
    print(f"decode  in process {ls:8.1f} tok/s  HTTP {hs:8.1f} tok/s  "
          f"overhead {(ls / hs - 1) * 100:+.1f}% (paired {(speed_ratio - 1) * 100:+.1f}%)")
    cpu_ratio = statistics.median(h["cpu"] / i["cpu"] for i, h in zip(local, firsts))
    print(f"CPU time per answer (the process's): in process {med(local, 'cpu'):.2f} s, through HTTP {med(firsts, 'cpu'):.2f} s, "
          f"overhead {(cpu_ratio - 1) * 100:+.1f}% (paired median)")
    pairs = [(i["phases"], h["phases"]) for i, h in zip(local, firsts) if "phases" in i and "phases" in h]
    if pairs and all("progress" in p and "read" in p and "token" in p for pair in pairs for p in pair):
        # The same engine work on both sides after the first progress event (vision tower, prefill):
        # a difference there is the process's other threads (the event loop's request) slowing it.
        def span(p, a, b):
            return (p[b] - p[a]) * 1000
        for a, b, name in (("send", "progress", "send -> images read (engine)"),
                           ("progress", "read", "images read -> prompt read (vision tower, prefill)"),
                           ("read", "token", "prompt read -> first token (engine)")):
            here_ms = statistics.median(span(i, a, b) for i, _ in pairs)
            http_ms = statistics.median(span(h, a, b) for _, h in pairs)
            diff, lo, hi = median_ci([span(h, a, b) - span(i, a, b) for i, h in pairs])
            print(f"first turn, {name}: in process {here_ms:.2f} ms, HTTP {http_ms:.2f} ms, paired difference "
                  f"{diff:+.2f} ms (95% interval {lo:+.2f} to {hi:+.2f})")
    new, again = handling_ms(args)
    print(f"request handling before the engine (JSON + base64 + image check + store): {new:.1f} ms for a new "
          f"photo, {again:.1f} ms for one re-sent")
    print(f"follow-up TTFT (prefix cached: {follows[-1]['cached']} of {follows[-1]['prompt']} prompt tokens) "
          f"{ft * 1000:.1f} ms = {ft / ht:.2f}x the first turn's; in process {med(local, 'follow_ttft') * 1000:.1f} ms "
          f"= {med(local, 'follow_ttft') / lt:.2f}x")
    print(f"follow-up TTFT / the same conversation's first turn's through HTTP: median {follow_ratio:.3f}x "
          f"(95% interval {follow_lo:.3f}x to {follow_hi:.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
