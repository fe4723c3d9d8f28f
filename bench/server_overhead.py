"""The local server's own time to the first token, without a model: HTTP, parsing, media, streaming.

    python bench/server_overhead.py [--runs 40] [--image PHOTO] [--ref OTHER_CHECKOUT]

The server runs in a subprocess over a scripted engine (``tests.server.fakes.FakeSession``: it
echoes the question at once), so what the client measures is the server's overhead plus the
client's own work (encoding the JSON body, reading the stream), which ``bench/server.py`` hides
behind seconds of CPU engine time. Two requests per run, as an OpenAI client sends them: the first
turn with a new photo (one pixel changed per run, so it is decoded and stored), then the follow-up
that re-sends the whole conversation, photo included. TTFT = request sent (before the client
encodes it) -> the first content delta read. ``--ref`` runs a second server from another checkout
of the repository, and alternates the two run by run, so that drift in the machine's load hits
both alike. Prints medians (ms).
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.shared import SHARED  # noqa: E402

SERVE = """
import sys, uvicorn
from server import ServerConfig, create_app
from tests.server.fakes import FakeSession, fake_loader
app = create_app(ServerConfig(model="fake"), loader=fake_loader(FakeSession()))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def start(checkout: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SERVE, str(port)], cwd=checkout,
                            env={**os.environ, "PYTHONPATH": str(checkout)})


def wait_ready(url: str, timeout: float = 60, proc: subprocess.Popen | None = None) -> None:
    """Poll ``url``/health until it answers 200.

    Raises:
        TimeoutError: not ready after ``timeout`` seconds.
        SystemExit: ``proc`` (the server's process) ended first; it has said why on its stderr, the
            bench adds one line and ends.
    """
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"error: the server exited (code {proc.returncode}) before it was ready")
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not come up")


def ttft_ms(client, url: str, messages: list) -> float:
    body = {"model": "fake", "messages": messages, "max_tokens": 8, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0, first = time.perf_counter(), None
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and '"content":' in line and '"content": ""' not in line \
                    and '"content":""' not in line:
                first = time.perf_counter()
    return (first - t0) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--image", default=str(SHARED / "images" / "coffee.png"))
    ap.add_argument("--port", type=int, default=18790)
    ap.add_argument("--ref", help="another checkout of the repository, run alternately as the reference")
    args = ap.parse_args()

    import httpx
    from PIL import Image

    base = Image.open(args.image).convert("RGB")

    def photo(i: int) -> str:
        image = base.copy()
        image.putpixel((0, 0), (i % 256, i // 256 % 256, 7))
        out = io.BytesIO()
        image.save(out, format="PNG")
        return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()

    sides = {"this": REPO} | ({"ref": Path(args.ref).resolve()} if args.ref else {})
    procs = {name: start(path, args.port + i) for i, (name, path) in enumerate(sides.items())}
    urls = {name: f"http://127.0.0.1:{args.port + i}" for i, name in enumerate(sides)}
    times: dict[str, dict[str, list[float]]] = {name: {"new": [], "follow": []} for name in sides}
    try:
        for name, url in urls.items():
            wait_ready(url, proc=procs[name])
        with httpx.Client(timeout=60) as client:
            for run in range(args.runs + 2):  # two to warm up
                for k, name in enumerate(sides):
                    messages = [{"role": "system", "content": f"run {run}"},
                                {"role": "user", "content": [
                                    {"type": "image_url", "image_url": {"url": photo(run * 2 + k), "detail": "high"}},
                                    {"type": "text", "text": "Describe this photo."}]}]
                    new = ttft_ms(client, urls[name], messages)
                    messages += [{"role": "assistant", "content": "Describe this photo. "},
                                 {"role": "user", "content": "What colours does it have?"}]
                    follow = ttft_ms(client, urls[name], messages)
                    if run >= 2:
                        times[name]["new"].append(new)
                        times[name]["follow"].append(follow)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(10)
    print(f"scripted engine, {Path(args.image).name}, TTFT through HTTP, median of {args.runs} runs (ms):")
    for name, path in sides.items():
        t = times[name]
        print(f"  {name:4s} ({path}): new photo {statistics.median(t['new']):6.2f}   "
              f"follow-up re-sending it {statistics.median(t['follow']):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
