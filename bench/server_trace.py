"""Where a request's time to the first token goes through the local server: timestamps in the client
and in the server, phase by phase, for a two-turn photo conversation (the first turn with a new
photo, then the follow-up an OpenAI client sends: the whole conversation again, photo included).

    python bench/server_trace.py --model CHECKPOINT [--image PHOTO] [--runs 8] [--detail high]

The server runs as ``python -m engine serve`` in a subprocess, with hooks installed by this file
(``--traced-serve``) that record ``time.monotonic()`` at each phase: ``CLOCK_MONOTONIC`` is one clock
for every process of the machine, so client and server stamps subtract. The hooks only read the
clock (no synchronization), so the server's timing is the production one. The same engine phases
are stamped in process (``ChatSession.send`` in this process) for comparison.

Phases (each the time since the previous one):
  client's JSON          the client encodes its request body (``--client-encode``)
  client -> server        -> the ASGI app called (the client's send, the server's read and parse of the headers)
  body                    -> the last body chunk received
  route + validation      -> ``to_turns`` begins (FastAPI's parse and pydantic validation)
  to_turns                -> the conversation rebuilt (media found, or checked, stored and its decode begun)
  queue to engine         -> the engine thread takes the answer (history synced first)
  set_history             the engine thread's history sync
  fit_context             the prompt rendered, tokenized and fitted (``ChatSession._fit_context``)
  prefill                 the prefix lookup, the vision tower, the prefill (``ChatSession._prefill``)
  first token             -> the first TokenEvent reaches the request (sampling, detokenizing)
  to the wire             -> the first content chunk is written to the socket
  server -> client        -> the client has parsed that chunk

Then the first turn's image work, split: through HTTP the server's decode (begun inside to_turns, on
a decoder thread, and going on while the request is queued), how much of it is left when to_turns
returns, the engine's wait for those pixels and its resize and tile; in process the engine's read,
digest and decode, and its resize and tile.

"HTTP" sums the phases a call in process does not have: the client's JSON encoding, client ->
server, body, route + validation, queue to engine, to the wire, server -> client. It is printed per
turn against the in-process TTFT of the same run (paired), with and without the client's own JSON
encoding: that part is the client program's (1.4-2.1 ms for a 0.6 MB photo with ``json.dumps`` on the
H200 machine, 7.8 ms with httpx's ``json=`` on Python 3.12) and the same against any server. With
``--client-encode httpx`` the encoding happens inside the send and is counted there; with ``socket``
the body is encoded as with ``dumps`` and sent without a client library (``bench.server.SocketClient``).
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.server import (  # noqa: E402
    SocketClient,
    bench_tuning,
    check_photo_args,
    fresh_photo,
    photo_mime,
    post_args,
    sse_payloads,
    wrap_server_app,
)
from bench.shared import SHARED  # noqa: E402
from server.media import DETAILS  # noqa: E402 - OpenAI detail -> the engine's

now = time.monotonic
RECORD: dict = {}  # the request being traced (the bench sends one at a time)


def _stamp(name: str) -> None:
    RECORD.setdefault(name, now())


def _wrap_call(owner, attr: str, before: str, after: str) -> None:
    orig = getattr(owner, attr)

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        _stamp(before)
        try:
            return orig(*args, **kwargs)
        finally:
            _stamp(after)
    setattr(owner, attr, wrapper)


def install_engine_hooks() -> None:
    from engine.chat import ChatSession
    from engine.models.smolvlm.processing import ImageProcessor

    _wrap_call(ChatSession, "_fit_context", "fit_start", "fit_end")
    _wrap_call(ChatSession, "_prefill", "prefill_start", "prefill_end")
    _wrap_call(ImageProcessor, "preprocess", "tiles_start", "tiles_end")


def _hook_parse() -> None:
    """Stamp the JSON body's parse (``server.json_body.parse_json``) with its thread's CPU time and
    minor page faults (Linux): a 0.6 MB body's string is new memory, and on a VM each fault of its
    ~150 pages can cost microseconds."""
    import resource

    import server.json_body as json_body

    parse, who = json_body.parse_json, getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)

    def parse_json(body):
        RECORD["parse_start"], cpu, faults = now(), time.thread_time(), resource.getrusage(who).ru_minflt
        try:
            return parse(body)
        finally:
            RECORD["parse_end"] = now()
            RECORD["parse_cpu"], RECORD["parse_faults"] = time.thread_time() - cpu, resource.getrusage(who).ru_minflt - faults
    json_body.parse_json = parse_json


def install_server_hooks(trace_file: str) -> None:
    import server.routes_generate as routes
    from engine.service import EngineService
    from server.bridge import Answer
    from server.media import MediaStore

    install_engine_hooks()
    _hook_parse()
    _wrap_call(MediaStore, "_decode", "check_start", "check_end")
    _wrap_call(EngineService, "_set_history", "hist_start", "hist_end")
    _wrap_call(EngineService, "_run_answer", "engine_start", "engine_end")
    orig_turns = routes.to_turns

    async def to_turns(*args, **kwargs):
        _stamp("turns_start")
        try:
            return await orig_turns(*args, **kwargs)
        finally:
            _stamp("turns_end")
    routes.to_turns = to_turns
    orig_sink = Answer.sink

    def sink(self, event):
        if getattr(event, "token_id", -1) >= 0:
            _stamp("first_token")
        return orig_sink(self, event)
    Answer.sink = sink

    def with_trace(app):
        async def traced(scope, receive, send):
            if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
                return await app(scope, receive, send)
            RECORD.clear()
            RECORD["asgi_in"] = now()

            async def recv():
                message = await receive()
                if message["type"] == "http.request" and not message.get("more_body"):
                    _stamp("body_done")
                return message

            async def snd(message):
                await send(message)
                if message["type"] == "http.response.body":
                    if message.get("body"):
                        _stamp("first_written")
                    if not message.get("more_body"):
                        with open(trace_file, "a") as f:
                            f.write(json.dumps(RECORD) + "\n")
            await app(scope, recv, snd)
        return traced
    wrap_server_app(with_trace)


SERVER_PHASES = [("client's JSON", "client_sent", "client_encoded"), ("client -> server", "client_encoded", "asgi_in"), ("body", "asgi_in", "body_done"),
                 ("route + validation", "body_done", "turns_start"), ("to_turns", "turns_start", "turns_end"),
                 ("queue to engine", "turns_end", "hist_start"), ("set_history", "hist_start", "hist_end"),
                 ("to fit_context", "hist_end", "fit_start"), ("fit_context", "fit_start", "fit_end"),
                 ("to prefill", "fit_end", "prefill_start"), ("prefill", "prefill_start", "prefill_end"),
                 ("first token", "prefill_end", "first_token"), ("to the wire", "first_token", "first_written"),
                 ("server -> client", "first_written", "client_first"), ("TTFT (client)", "client_sent", "client_first"),
                 ("TTFT (server: arrival -> first chunk written)", "asgi_in", "first_written")]
#: "route + validation" split around the JSON parse (``_hook_parse``).
ROUTE_SPLIT = [("  to the parse", "body_done", "parse_start"), ("  JSON parse", "parse_start", "parse_end"),
               ("  validation, routing", "parse_end", "turns_start")]
#: Where a new photo's decoding and tiling sit inside the phases above (``image_split``).
IMAGE_SERVER = [("  to_turns -> the decode begins", "turns_start", "check_start"),
                ("  decode (a decoder thread)", "check_start", "check_end"),
                ("  the decode's part after to_turns", "turns_end", "check_end"),
                ("  engine: sync -> the pixels (waits for them)", "hist_end", "tiles_start"),
                ("  engine: resize and tile", "tiles_start", "tiles_end")]
IMAGE_LOCAL = [("  engine: read, digest, decode", "sent", "tiles_start"),
               ("  engine: resize and tile", "tiles_start", "tiles_end")]
LOCAL_PHASES = [("to fit_context", "sent", "fit_start"), ("fit_context", "fit_start", "fit_end"),
                ("to prefill", "fit_end", "prefill_start"), ("prefill", "prefill_start", "prefill_end"),
                ("first token", "prefill_end", "first"), ("TTFT (in process)", "sent", "first")]


def stream(client, url: str, body: dict, encode: str = "httpx") -> tuple[dict, str]:
    stamps, text = {}, []
    stamps["client_sent"] = now()
    request = post_args(body, encode)
    # httpx's json= encodes inside the call: there the encoding is counted in the send.
    stamps["client_encoded"] = now() if "content" in request else stamps["client_sent"]
    for data in sse_payloads(client, url, request):
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        if chunk.get("usage"):
            stamps["prompt_tokens"] = chunk["usage"]["prompt_tokens"]
            stamps["cached_tokens"] = chunk["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        for choice in chunk["choices"]:
            if choice["delta"].get("content"):
                stamps.setdefault("client_first", now())
                text.append(choice["delta"]["content"])
    return stamps, "".join(text)


def local_turn(session, text: str, images: list, params) -> dict:
    from engine.api import DoneEvent, TokenEvent

    RECORD.clear()
    RECORD["sent"] = now()
    for event in session.send(text, images=images, params=params):
        if isinstance(event, TokenEvent) and event.token_id >= 0:
            _stamp("first")
        elif isinstance(event, DoneEvent):
            RECORD["prompt_tokens"] = event.stats.prompt_tokens
            RECORD["cached_tokens"] = event.stats.cached_tokens
    return dict(RECORD)


#: The phases a call in process does not have (see the module's docstring).
HTTP_PHASES = [("client_sent", "asgi_in"), ("asgi_in", "body_done"), ("body_done", "turns_start"),
               ("turns_end", "hist_start"), ("first_token", "first_written"), ("first_written", "client_first")]


def http_share(http: list[dict], local: list[dict]) -> str:
    """The HTTP phases' median (ms) and the median of their share of the same run's in-process TTFT
    (``http[i]`` against ``local[i]``: the runs alternate, so drift in the machine's load cancels), in
    all and without the client's JSON encoding."""
    total = [sum(r[b] - r[a] for a, b in HTTP_PHASES) for r in http]
    encode = [r["client_encoded"] - r["client_sent"] if "client_encoded" in r else 0.0 for r in http]
    ttft = [r["first"] - r["sent"] for r in local]
    server = [t - e for t, e in zip(total, encode)]
    return (f"HTTP {statistics.median(total) * 1000:.2f} ms, {statistics.median(t / f for t, f in zip(total, ttft)):.1%}"
            f" of the same run's in-process TTFT (medians of the runs' shares; that TTFT's median "
            f"{statistics.median(ttft) * 1000:.1f} ms); without the client's JSON encoding "
            f"({statistics.median(encode) * 1000:.2f} ms) {statistics.median(server) * 1000:.2f} ms, "
            f"{statistics.median(s / f for s, f in zip(server, ttft)):.1%}")


def image_split(http: list[dict], local: list[dict]) -> list[str]:
    """Lines splitting a new photo's image work, through the server (``to_turns`` checks the photo's
    header and starts its decode, which goes on while the request is queued; the engine waits for
    those pixels) and in process (the engine decodes the file itself): medians of the runs, ms."""
    def median(rows, a, b):
        vals = [(r[b] - r[a]) * 1000 for r in rows if a in r and b in r]
        return statistics.median(vals) if vals else float("nan")
    lines = ["image work of the first turn (median, ms): through HTTP"]
    lines += [f"{name:44s} {median(http, a, b):8.2f}" for name, a, b in IMAGE_SERVER]
    lines.append("in process")
    lines += [f"{name:44s} {median(local, a, b):8.2f}" for name, a, b in IMAGE_LOCAL]
    return lines


def table(title: str, phases, rows: list[dict]) -> None:
    tokens = ", ".join(f"{r.get('cached_tokens')}/{r.get('prompt_tokens')}" for r in rows)
    print(f"\n{title} (median of {len(rows)} runs, ms; cached/prompt tokens: {tokens})")
    for name, a, b in phases:
        vals = [(r[b] - r[a]) * 1000 for r in rows if a in r and b in r]
        if vals:
            print(f"  {name:24s} {statistics.median(vals):8.2f}   (min {min(vals):.2f}, max {max(vals):.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--image", default=str(SHARED / "images" / "coffee.png"))
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--detail", choices=list(DETAILS), default="high")
    ap.add_argument("--port", type=int, default=18766)
    ap.add_argument("--json", help="write every run's stamps here")
    ap.add_argument("--photo-format", choices=["png", "jpeg"], default="png",
                    help="how each run's fresh photo is encoded (bench.server.fresh_photo)")
    ap.add_argument("--client-encode", choices=["httpx", "dumps", "socket"], default="httpx",
                    help="how the client encodes its JSON body (bench.server.post_args); \"socket\": as "
                    "\"dumps\", then sent by bench.server.SocketClient instead of httpx")
    if sys.argv[1:2] == ["--traced-serve"]:  # the server subprocess: TRACE_FILE, then `serve`'s arguments
        install_server_hooks(sys.argv[2])
        bench_tuning()
        from server.cli import main as serve_main

        return serve_main(sys.argv[3:])
    args = ap.parse_args()
    check_photo_args(ap, args)

    import httpx

    from bench.server_overhead import wait_ready
    from engine.api import GenerationParams
    from engine.service import default_loader

    work = Path(tempfile.mkdtemp(prefix="smolchat-trace-"))
    trace = work / "server.jsonl"
    proc = subprocess.Popen([sys.executable, __file__, "--traced-serve", str(trace), "--model", args.model, "--port", str(args.port), "--log-level", "warning"], cwd=REPO)
    url = f"http://127.0.0.1:{args.port}/v1"
    firsts, follows, local_firsts, local_follows = [], [], [], []
    sender = None
    try:
        wait_ready(f"http://127.0.0.1:{args.port}", timeout=300, proc=proc)
        model = httpx.get(f"{url}/models").json()["data"][0]["id"]
        install_engine_hooks()
        session = default_loader(args.model, {})
        params = GenerationParams(max_new_tokens=args.max_tokens, ignore_eos=True, image_detail=DETAILS[args.detail])
        args.same_photo = False
        mime = photo_mime(args)
        sender = SocketClient("127.0.0.1", args.port) if args.client_encode == "socket" else None
        with httpx.Client(timeout=600) as client:
            client = sender or client
            for run in range(args.runs + 1):  # run 0 warms up
                mine = work / f"run{run}.{mime.split('/')[1]}"
                mine.write_bytes(fresh_photo(args, run, 0))
                session.reset()
                session.system_prompt = f"Trace run {run}."
                lf = local_turn(session, "Describe this photo.", [str(mine)], params)
                lu = local_turn(session, "What colours does it have?", [], params)
                photo = base64.b64encode(fresh_photo(args, run, 1)).decode()
                messages = [{"role": "system", "content": f"Trace run {run}."},
                            {"role": "user", "content": [
                                {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{photo}",
                                                                    "detail": args.detail}},
                                {"type": "text", "text": "Describe this photo."}]}]
                body = {"model": model, "messages": messages, "max_tokens": args.max_tokens, "temperature": 0,
                        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
                n_before = len(trace.read_text().splitlines()) if trace.exists() else 0
                first, answer = stream(client, url, body, args.client_encode)
                messages += [{"role": "assistant", "content": answer},
                             {"role": "user", "content": "What colours does it have?"}]
                follow, _ = stream(client, url, {**body, "messages": messages}, args.client_encode)
                time.sleep(0.05)  # the server appends its stamps after the response's last write
                server_rows = [json.loads(x) for x in trace.read_text().splitlines()[n_before:]]
                if run and len(server_rows) == 2:
                    firsts.append({**server_rows[0], **first})
                    follows.append({**server_rows[1], **follow})
                    local_firsts.append(lf)
                    local_follows.append(lu)
    finally:
        if sender is not None:
            sender.close()
        proc.terminate()
        proc.wait(10)
    print(f"model {args.model}, image {Path(args.image).name} (detail {args.detail}, sent as {args.photo_format}), "
          f"{args.max_tokens} tokens, "
          f"client body encoded by {args.client_encode}")
    table("first turn, new photo, through HTTP", SERVER_PHASES, firsts)
    table("first turn, new photo, in process", LOCAL_PHASES, local_firsts)
    table("follow-up through HTTP", SERVER_PHASES, follows)
    table("follow-up in process", LOCAL_PHASES, local_follows)
    for title, rows in (("first turn", firsts), ("follow-up", follows)):
        table(f"{title}: route + validation, split", ROUTE_SPLIT, rows)
        cpu = [r["parse_cpu"] * 1000 for r in rows if "parse_cpu" in r]
        if cpu:
            print(f"  JSON parse's CPU time {statistics.median(cpu):.2f} ms, minor page faults "
                  f"{statistics.median(r['parse_faults'] for r in rows if 'parse_faults' in r):.0f} (medians)")
    if firsts:
        print("\n" + "\n".join(image_split(firsts, local_firsts)))
        print(f"\nfirst turn: {http_share(firsts, local_firsts)}\nfollow-up:  {http_share(follows, local_follows)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"http_first": firsts, "http_follow": follows,
                                               "local_first": local_firsts, "local_follow": local_follows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
