"""Session 32: where a warm process's load to ready goes (issue 17's < 2 s), without cProfile.

Times the real load's phases (``load_components``, the vision graphs, ``LlamaLM.warmup``, the photo
question, each followed by a synchronize) and when the background Triton-key thread ends; optionally
under ``torch.profiler`` (top ops and CUDA API calls by self time, a gzipped Chrome trace).

    python load_trace.py CHECKPOINT [--profile OUT.json.gz] [--key-file F] [--write-key F]

``--key-file`` stands in for a disk cache of Triton's key: the key read from F replaces
``triton.runtime.cache.triton_key`` before the load (``--write-key`` computes it into F and exits).
"""
import argparse
import json
import os
import sys
import threading
import time

t_start = time.perf_counter()
import torch  # noqa: E402

sys.path.insert(0, ".")
from engine.chat import ChatSession  # noqa: E402
from engine.registry import load_components  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--profile")
    ap.add_argument("--key-file")
    ap.add_argument("--write-key")
    ap.add_argument("--tag", default="")
    ap.add_argument("--vision-sizes", help="override VISION_GRAPH_SIZES_GPU, e.g. 1,2,3,4")
    ap.add_argument("--no-prewarm", action="store_true", help="skip triton_key.warm_backend on the key thread")
    a = ap.parse_args()
    if a.write_key:
        t = time.perf_counter()
        from triton.runtime.cache import triton_key
        key = triton_key()
        open(a.write_key, "w").write(key)
        print(json.dumps({"triton_key_s": round(time.perf_counter() - t, 3), "len": len(key)}))
        return
    if a.vision_sizes:
        import engine.models.smolvlm.model as smodel
        smodel.VISION_GRAPH_SIZES_GPU = tuple(int(x) for x in a.vision_sizes.split(","))
    if a.no_prewarm:
        import engine.models.llama.triton_key as tk
        tk.warm_backend = lambda *args: None
    if a.key_file:
        import triton.runtime.cache as tc
        key = open(a.key_file).read()
        tc.triton_key = lambda: key
    t_imp = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    t0 = time.perf_counter()
    key_end = {}

    def watch():
        seen = False
        while time.perf_counter() - t0 < 30:
            alive = any(t.name.startswith("smolchat-triton-key") for t in threading.enumerate())
            if alive:
                seen = True
            elif seen:
                key_end["s"] = round(time.perf_counter() - t0, 3)
                return
            time.sleep(0.002)

    threading.Thread(target=watch, daemon=True).start()
    first = {}

    def first_call(cls, name):
        """Time ``cls.name``'s first call in this process (synchronized before and after)."""
        fn = getattr(cls, name)

        def wrapper(*args, **kwargs):
            if name in first:
                return fn(*args, **kwargs)
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            torch.cuda.synchronize()
            first[name] = round(time.perf_counter() - t, 4)
            first[name + "_at_s"] = round(t - t0, 3)
            return out

        setattr(cls, name, wrapper)

    from engine.models.llama.lm import LlamaLM
    from engine.models.llama.triton_decode import TritonStep
    first_call(TritonStep, "embed_token")
    first_call(LlamaLM, "decode_token")
    prof = None
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    marks = {}
    parts = load_components(a.checkpoint, "cuda", None, None)
    torch.cuda.synchronize()
    marks["load_components"] = time.perf_counter()
    session = ChatSession(*parts, None, name="ck")
    m = session.model
    steps = m._vision_steps()
    if steps is not None:
        steps.capture_all()
    torch.cuda.synchronize()
    marks["vision_graphs"] = time.perf_counter()
    LlamaLM.warmup(m, session.cache)
    torch.cuda.synchronize()
    marks["llama_warmup"] = time.perf_counter()
    session._warm_photo_question()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    marks["photo_question"] = time.perf_counter()
    if prof is not None:
        prof.__exit__(None, None, None)
    prev, phases = t0, {}
    for k, v in marks.items():
        phases[k] = round(v - prev, 3)
        prev = v
    print(json.dumps({"tag": a.tag, "imports_s": round(t_imp - t_start, 3), "cuda_context_s": round(t0 - t_imp, 3),
                      "phases_s": phases, "load_to_ready_s": round(prev - t0, 3),
                      "triton_key_thread_end_s": key_end.get("s"), "first_calls_s": first, "key_from_file": bool(a.key_file),
                      "key_cache": os.environ.get("SMOLCHAT_TRITON_KEY_CACHE", "1"), "prewarm": not a.no_prewarm,
                      "vision_sizes": a.vision_sizes or "default"}))
    if prof is not None:
        ka = prof.key_averages()
        print(ka.table(sort_by="self_cpu_time_total", row_limit=45, max_name_column_width=60))
        prof.export_chrome_trace(a.profile.removesuffix(".gz"))
        import gzip
        import shutil
        with open(a.profile.removesuffix(".gz"), "rb") as f, gzip.open(a.profile, "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(a.profile.removesuffix(".gz"))


if __name__ == "__main__":
    main()
