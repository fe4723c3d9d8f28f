"""How much of a new photo's vision + prefill phase (ChatSession._prefill) is GPU time: wall time of the
phase against the summed CUDA kernel time in it (torch.profiler), for new 13-tile photos. Session 23."""
import io, statistics, sys, time
sys.path.insert(0, ".")
import torch
from PIL import Image
from engine.api import GenerationParams
from engine.chat import ChatSession
from engine.service import default_loader

ck, image = sys.argv[1], sys.argv[2]
session = default_loader(ck, {})
from server.media import DETAILS
params = GenerationParams(max_new_tokens=1, ignore_eos=True, image_detail=DETAILS["high"])
orig = ChatSession._prefill
span = {}
def timed(self, *a, **k):
    torch.cuda.synchronize(); t = time.perf_counter()
    out = orig(self, *a, **k)
    torch.cuda.synchronize(); span["wall"] = time.perf_counter() - t
    return out
ChatSession._prefill = timed
base = Image.open(image).convert("RGB")
def photo(i):
    im = base.copy(); im.putpixel((0, 0), (i % 256, 3, 7)); path = f"/tmp/photo{i}.png"; im.save(path); return path
rows = []
for i in range(8):
    session.reset(); session.system_prompt = f"run {i}"
    p = photo(i)
    if i < 2:
        list(session.send("Describe this photo.", images=[p], params=params)); continue
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        list(session.send("Describe this photo.", images=[p], params=params))
    kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.device_time for e in kern)
    rows.append((span["wall"] * 1e3, gpu_us / 1e3, len(kern)))
    print(f"photo {i}: _prefill wall {span['wall']*1e3:.1f} ms (profiled), CUDA kernel time in the whole send {gpu_us/1e3:.1f} ms, {len(kern)} kernels", flush=True)
# unprofiled walls
walls = []
for i in range(8, 14):
    session.reset(); session.system_prompt = f"run {i}"
    list(session.send("Describe this photo.", images=[photo(i)], params=params)); walls.append(span["wall"] * 1e3)
print("unprofiled _prefill wall (synchronized), ms:", [round(w, 1) for w in walls], "median", round(statistics.median(walls), 1))
