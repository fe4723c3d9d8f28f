"""Where a new photo's "resize and tile" goes (ImageProcessor.preprocess on the GPU, 25-28 ms of the
first turn in the session-24 traces): wall time of the whole call and of its parts, synchronized, and
for one photo the kernels and host<->device copies it launches (torch.profiler). New 13-tile PNG
photos of one size (the coefficients' cache warm) every run. Session 24."""
import statistics, sys, time
sys.path.insert(0, ".")
import torch
from PIL import Image
from engine.service import default_loader
from engine.models.smolvlm import processing, resample
from engine.api.images import load_image

ck, image = sys.argv[1], sys.argv[2]
session = default_loader(ck, {})
proc = session.processor
print("resize device:", proc.resize_device)
base = Image.open(image).convert("RGB")
times = {}
def wrap(owner, name, key):
    orig = getattr(owner, name)
    def w(*a, **k):
        torch.cuda.synchronize(); t = time.perf_counter()
        r = orig(*a, **k)
        torch.cuda.synchronize(); times.setdefault(key, []).append((time.perf_counter() - t) * 1e3)
        return r
    setattr(owner, name, w)
wrap(resample, "resize", "resize (all calls)")
wrap(processing.ProcessedImage, "hash_tiles", "hash_tiles")
wrap(processing.ImageProcessor, "_tiles_on_device", "_tiles_on_device")
wrap(processing.ImageProcessor, "preprocess", "preprocess")
def photo(i):
    im = base.copy()
    for x in range(16):
        im.putpixel((x, 0), (255 * ((i >> (x % 8)) & 1), 7, 7))
    return load_image(im)
for i in range(3):
    proc.preprocess(photo(1000 + i), "full")
times.clear()
for i in range(12):
    proc.preprocess(photo(i), "full")
for k, v in times.items():
    n = len(v) // 12
    per = [sum(v[j * n:(j + 1) * n]) for j in range(12)]
    print(f"{k:24s} median {statistics.median(per):6.2f} ms per photo ({n} calls each)")
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    proc.preprocess(photo(99), "full")
kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
copies = [e for e in prof.events() if e.name in ("cudaMemcpyAsync", "cudaStreamSynchronize", "cudaMemcpy")]
print(f"one photo: {len(kern)} kernels, {sum(e.device_time for e in kern)/1e3:.2f} ms of kernel time; "
      f"{len(copies)} memcpy/sync calls, {sum(e.cpu_time for e in copies)/1e3:.2f} ms of host time in them")
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=18))
