"""A new photo's first turn (time to the first token of ChatSession.send, one token) in one process, with
the CPUs the process may run on and where its threads ran. Session 25: is the per-process spread of the
host-bound vision + prefill phase a matter of CPU placement? Run as: python affinity_split.py CK IMAGE LABEL"""
import os, statistics, sys, time
sys.path.insert(0, ".")
import torch
from PIL import Image
from engine.api import GenerationParams, TokenEvent
from engine.service import default_loader
from server.media import DETAILS

ck, image, label = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
session = default_loader(ck, {})
load_s = time.perf_counter() - t0
params = GenerationParams(max_new_tokens=1, ignore_eos=True, image_detail=DETAILS["high"])
base = Image.open(image).convert("RGB")
def photo(i):
    im = base.copy()
    for x in range(16):
        for y in range(16):
            im.putpixel((x, y), (255 * ((i >> (x % 8)) & 1), 0, 0))
    path = f"/tmp/photo-{label}-{os.getpid()}-{i}.png"; im.save(path); return path
def ttft(i):
    path = photo(i)
    session.reset(); session.system_prompt = f"run {i}"
    t = time.perf_counter()
    for event in session.send("Describe this photo.", images=[path], params=params):
        if isinstance(event, TokenEvent) and event.token_id >= 0:
            return time.perf_counter() - t
for i in range(2):
    ttft(1000 + i)
c0 = time.process_time()
times = [ttft(i) * 1e3 for i in range(12)]
cpu = time.process_time() - c0
ran = sorted({int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[36]) for t in os.listdir("/proc/self/task")})
allowed = sorted(os.sched_getaffinity(0))
print(f"{label} pid {os.getpid()} load {load_s:.2f} s; TTFT ms median {statistics.median(times):.1f} "
      f"(min {min(times):.1f}, max {max(times):.1f}); CPU s {cpu:.2f}; allowed {len(allowed)} cpus "
      f"{allowed[0]}-{allowed[-1]}; threads last ran on {ran}; torch threads {torch.get_num_threads()}", flush=True)
