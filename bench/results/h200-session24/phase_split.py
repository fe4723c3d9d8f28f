"""A new photo's vision + prefill phase (ChatSession._prefill) as a user's first turn gets it: wall time
(synchronized), the vision tower's share (encode_images, synchronized), and for two photos the CUDA
kernels launched in the phase and their summed time (torch.profiler). New 13-tile photos every run.
Session 24: run from a tree's root, with that tree on PYTHONPATH (the current one, or the baseline's)."""
import statistics, sys, time
sys.path.insert(0, ".")
import torch
from PIL import Image
from engine.api import GenerationParams
from engine.chat import ChatSession
from engine.service import default_loader
from server.media import DETAILS

ck, image, label = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
session = default_loader(ck, {})
load_s = time.perf_counter() - t0
params = GenerationParams(max_new_tokens=1, ignore_eos=True, image_detail=DETAILS["high"])
span = {}
def timed(owner, name, key):
    orig = getattr(owner, name)
    def wrapper(*a, **k):
        torch.cuda.synchronize(); t = time.perf_counter()
        out = orig(*a, **k)
        torch.cuda.synchronize(); span[key] = time.perf_counter() - t
        return out
    setattr(owner, name, wrapper)
timed(ChatSession, "_prefill", "phase")
timed(type(session.model), "encode_images", "vision")
base = Image.open(image).convert("RGB")
def photo(i):
    im = base.copy()
    for x in range(16):
        for y in range(16):
            im.putpixel((x, y), (255 * ((i >> (x % 8)) & 1), 0, 0))
    path = f"/tmp/photo-{label}-{i}.png"; im.save(path); return path
def ask(i):
    session.reset(); session.system_prompt = f"run {i}"
    list(session.send("Describe this photo.", images=[photo(i)], params=params))
from torch.profiler import ProfilerActivity, profile
for i in range(2):
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        ask(100 + i)
    kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(f"{label} profiled photo {i}: {len(kern)} kernels, {sum(e.device_time for e in kern)/1e3:.1f} ms of kernel time "
          f"in the whole send; phase {span['phase']*1e3:.1f} ms (profiled)", flush=True)
phase, vision = [], []
for i in range(12):
    ask(i); phase.append(span["phase"] * 1e3); vision.append(span["vision"] * 1e3)
print(f"{label} load {load_s:.2f} s; unprofiled phase ms {[round(x, 1) for x in phase]} median {statistics.median(phase):.1f}; "
      f"vision tower ms median {statistics.median(vision):.1f} (min {min(vision):.1f}); "
      f"rest (prompt, embed, prefill) median {statistics.median(p - v for p, v in zip(phase, vision)):.1f}", flush=True)
if torch.cuda.is_available():
    print(f"{label} peak allocated {torch.cuda.max_memory_allocated()/2**20:.0f} MiB, reserved {torch.cuda.memory_reserved()/2**20:.0f} MiB")
