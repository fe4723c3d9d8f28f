"""Session 33: how long a background thread's start-up work holds the GIL (stops the loading thread).

The main thread runs a loop of small Python steps and records every gap > 1 ms between them while a
thread does one piece of the load's side work; prints one JSON line: the work's parts in seconds, the
main thread's stalled seconds (sum of gaps > 1 ms) and its longest gap.

    python gil_probe.py VARIANT [CHECKPOINT]

VARIANT: ``torch`` (is_available, then torch's lazy init, then the first allocation), ``ctypes``
(the driver's cuInit and the device's primary context through ctypes first, then the same),
``early`` (the ctypes part started before ``import torch``, the rest as ``ctypes``), ``tokenizer``
(the engine's tokenizer with its streaming table), ``triton`` (triton_key.prepare + warm_backend;
needs CUDA initialised first, done before the probe).
"""
import ctypes
import json
import sys
import threading
import time

T0 = time.perf_counter()
variant = sys.argv[1]
parts = {}


def driver_init():
    t = time.perf_counter()
    lib = ctypes.CDLL("libcuda.so.1")
    rc = lib.cuInit(0)
    parts["cuInit"] = round(time.perf_counter() - t, 4)
    dev = ctypes.c_int()
    rc2 = lib.cuDeviceGet(ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    t2 = time.perf_counter()
    rc3 = lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    parts["primary_ctx"] = round(time.perf_counter() - t2, 4)
    parts["driver_rc"] = [rc, rc2, rc3]
    parts["driver_done_at"] = round(time.perf_counter() - T0, 4)


early = None
if variant == "early":
    early = threading.Thread(target=driver_init)
    early.start()
import torch  # noqa: E402

sys.path.insert(0, ".")
parts["import_torch"] = round(time.perf_counter() - T0, 4)


def timed(name, fn):
    t = time.perf_counter()
    out = fn()
    parts[name] = round(time.perf_counter() - t, 4)
    return out


def torch_init():
    timed("is_available", torch.cuda.is_available)
    timed("lazy_init", torch.cuda.init)
    timed("empty", lambda: torch.empty(0, device="cuda"))
    timed("first_alloc_kernel", lambda: (torch.zeros(1, device="cuda") + 1).sum().item())


def work():
    if variant == "torch":
        torch_init()
    elif variant == "ctypes":
        driver_init()
        torch_init()
    elif variant == "early":
        timed("early_join", early.join)
        torch_init()
    elif variant == "tokenizer":
        from pathlib import Path
        tok = timed("from_pretrained", lambda: __import__("engine.tokenizer", fromlist=["Tokenizer"]).Tokenizer.from_pretrained(Path(sys.argv[2])))
        if hasattr(tok, "prepare_streaming"):  # session 32's table (gone in session 33)
            timed("prepare_streaming", tok.prepare_streaming)
        if "--old-table" in sys.argv:
            sys.path.insert(0, "bench/results/h200-session33")
            from load_parts import old_byte_table
            timed("old_table", lambda: old_byte_table(tok))
    elif variant == "triton":
        from engine.models.llama import triton_key
        timed("prepare", triton_key.prepare)
        timed("warm_backend", lambda: triton_key.warm_backend(0))


if variant == "triton":
    torch.zeros(1, device="cuda")
if variant == "tokenizer":
    import engine.tokenizer  # noqa: F401  (its import is the loading thread's, as in the app)
gaps = []
done = threading.Event()


def run():
    try:
        work()
    finally:
        done.set()


t_start = time.perf_counter()
th = threading.Thread(target=run)
th.start()
last = time.perf_counter()
x = 0
while not done.is_set():
    for _ in range(50):
        x += 1
    now = time.perf_counter()
    if now - last > 0.001:
        gaps.append(now - last)
    last = now
work_s = time.perf_counter() - t_start
th.join()
print(json.dumps({"variant": variant, "work_s": round(work_s, 4), "main_stalled_s": round(sum(gaps), 4),
                  "longest_gap_s": round(max(gaps, default=0), 4), "gaps_over_20ms": [round(g, 3) for g in gaps if g > 0.02],
                  "parts": parts, "switch_interval": sys.getswitchinterval()}))
