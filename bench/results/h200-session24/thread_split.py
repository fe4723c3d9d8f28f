"""Is the vision + prefill phase (ChatSession._prefill) slower on a worker thread, or beside an asyncio
loop, than on the main thread? One process, one model, new 13-tile PNG photos, medians of 12 per
variant, two rounds alternating. Session 24 (the server runs the engine on its own thread beside
uvicorn's loop, and its phase was 37-38 ms against 27-33 in the bench's main thread)."""
import asyncio, statistics, sys, threading, time
sys.path.insert(0, ".")
import torch
from PIL import Image
from engine.api import GenerationParams
from engine.chat import ChatSession
from engine.service import default_loader
from server.media import DETAILS

ck, image = sys.argv[1], sys.argv[2]
session = default_loader(ck, {})
params = GenerationParams(max_new_tokens=1, ignore_eos=True, image_detail=DETAILS["high"])
span = {}
orig = ChatSession._prefill
def timed(self, *a, **k):
    torch.cuda.synchronize(); t = time.perf_counter()
    out = orig(self, *a, **k)
    torch.cuda.synchronize(); span["phase"] = time.perf_counter() - t
    return out
ChatSession._prefill = timed
base = Image.open(image).convert("RGB")
counter = iter(range(10**6))
def photo():
    i = next(counter); im = base.copy()
    for x in range(16):
        im.putpixel((x, 0), (255 * ((i >> (x % 8)) & 1), 7, 7))
    path = f"/tmp/tphoto{i}.png"; im.save(path); return path
def asks(n, progress=None):
    out = []
    for _ in range(n):
        session.reset(); session.system_prompt = f"run {next(counter)}"
        session.progress = progress
        list(session.send("Describe this photo.", images=[photo()], params=params)); out.append(span["phase"] * 1e3)
    session.progress = None
    return out
def on_thread(fn):
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", fn())); th.start(); th.join(); return box["r"]
def beside_loop(wake):
    try:
        import uvloop; loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    async def main():
        box = {}
        def progress(_event):
            if wake:
                loop.call_soon_threadsafe(lambda: None)
        th = threading.Thread(target=lambda: box.setdefault("r", asks(12, progress))); th.start()
        while th.is_alive():
            await asyncio.sleep(0.25)  # as a waiting request polls for a disconnect
        return box["r"]
    return loop.run_until_complete(main())
asks(3)
variants = {"main thread": lambda: asks(12), "worker thread": lambda: on_thread(lambda: asks(12)),
            "worker thread beside an idle loop": lambda: beside_loop(False),
            "worker thread, loop woken per progress event": lambda: beside_loop(True)}
for rnd in (1, 2):
    for name, fn in variants.items():
        xs = fn()
        print(f"round {rnd} {name:48s} median {statistics.median(xs):6.1f} ms (min {min(xs):.1f}, max {max(xs):.1f})", flush=True)
