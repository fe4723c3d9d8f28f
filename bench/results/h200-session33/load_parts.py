"""Session 33: where a warm process's load to ready goes, call by call, and what the garbage collector
takes of it (issue 17's < 2 s).

Runs ``ChatSession.load`` as the app does, with timing wrappers around the load's calls (the GPU ones
synchronized before and after) and ``gc.callbacks`` recording every collection (generation, when, how
long, on which thread). Prints one JSON line.

    python load_parts.py CHECKPOINT [--gc base|freeze|off] [--tag T]

``--gc freeze`` calls ``gc.freeze()`` just before the load (the imports' objects leave the collected
generations), ``--gc off`` disables the collector for the load and enables it after.
"""
import argparse
import gc
import json
import os
import sys
import threading
import time

t_start = time.perf_counter()
sys.path.insert(0, ".")
if "--driver-early" in sys.argv:  # engine.cuda_driver: on branch exp/session33-cuda-driver only (run 3)
    from engine import cuda_driver

    cuda_driver.start("cuda")
import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, ".")
import engine.models.smolvlm as smolvlm_pkg  # noqa: E402
import engine.registry as registry  # noqa: E402
import engine.validate as validate  # noqa: E402
from engine.chat import ChatSession  # noqa: E402
from engine.models.llama.decoder import LlamaDecoder  # noqa: E402
from engine.models.llama.lm import LlamaLM  # noqa: E402
from engine.models.smolvlm.model import SmolVlmModel  # noqa: E402
from engine.models.smolvlm.processing import ImageProcessor  # noqa: E402
from engine.models.smolvlm.vision import VisionTransformer  # noqa: E402
from engine.models.smolvlm.vision_graphs import VisionGraphs  # noqa: E402

T0 = [0.0]
events = []


def wrap(owner, name, label=None, sync=False, kind="method"):
    """Record each outermost call of ``owner.name`` (label, thread, start s after T0, seconds)."""
    fn = owner.__dict__[name] if kind == "static" else getattr(owner, name)
    local = threading.local()
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    def run(*args, **kwargs):
        if getattr(local, "on", False):
            return fn(*args, **kwargs)
        local.on = True
        if sync and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if sync and torch.cuda.is_initialized():
                torch.cuda.synchronize()
            extra = ""
            if name == "prefill" and len(args) > 1:
                extra = f"[{args[1].shape[1]}]"
            if name == "to":
                extra = f"[{type(args[0]).__name__}]"
            events.append((label + extra, threading.current_thread().name, round(t - T0[0], 4),
                           round(time.perf_counter() - t, 4)))
            local.on = False

    if kind == "classmethod":
        setattr(owner, name, classmethod(lambda cls, *a, **k: run(cls, *a, **k)))
        fn = fn.__func__
    else:
        setattr(owner, name, run)


def old_byte_table(tok):
    """Session 32's ``Tokenizer._byte_table`` (the whole vocabulary's bytes, built on the tokenizer
    thread at every load until session 33), for the A/B."""
    from engine.tokenizer import _CHAR_TO_BYTE

    tokens = [""] * tok.vocab_size
    for token, i in tok._tok.get_vocab(with_added_tokens=True).items():
        if 0 <= i < tok.vocab_size:
            tokens[i] = token
    chars = set("".join(tokens))
    to_latin1 = {ord(c): chr(_CHAR_TO_BYTE[c]) if c in _CHAR_TO_BYTE else c.encode("utf-8").decode("latin-1")
                 for c in chars}
    special = tok.special_ids
    return [t.encode("utf-8") if i in special else t.translate(to_latin1).encode("latin-1")
            for i, t in enumerate(tokens)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--gc", default="base", choices=("base", "freeze", "off"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--driver-early", action="store_true", help="engine.cuda_driver.start before import torch")
    ap.add_argument("--old-init", action="store_true", help="start_device_init as before session 33 (torch.empty(0))")
    ap.add_argument("--old-table", action="store_true", help="build session 32's whole-vocabulary byte table on the tokenizer thread")
    ap.add_argument("--late-triton", action="store_true", help="start Triton's set-up after choose_device, as before session 33")
    a = ap.parse_args()
    if a.late_triton:
        import engine.device as dm
        import engine.models.llama.static_decode as sd

        dm.cuda_possible = lambda preference: False
        start_device_init = dm.start_device_init

        def start_both(device):
            start_device_init(device)
            sd.start_triton_key()(device)

        dm.start_device_init = start_both
    if a.old_init:
        import engine.device as dm

        def old_start_device_init(device):
            if device.type != "cuda":
                return

            def run():
                try:
                    torch.empty(0, device=device)
                except Exception:  # noqa: BLE001
                    pass

            threading.Thread(target=run, name="smolchat-cuda-init", daemon=True).start()

        dm.start_device_init = old_start_device_init

    import engine.models.llama.triton_key as triton_key

    wrap(triton_key, "prepare", "triton_key.prepare")
    wrap(triton_key, "warm_backend", "triton_key.warm_backend")
    import engine.device as device_mod

    wrap(device_mod, "choose_device")
    if hasattr(device_mod, "start_cuda_driver"):  # session 34: cuInit through ctypes before choose_device
        wrap(device_mod, "start_cuda_driver")
    wrap(registry, "load_model")
    from engine.tokenizer import Tokenizer

    if a.old_table:
        fp = Tokenizer.from_pretrained.__func__

        def from_pretrained_with_table(cls, folder):
            tok = fp(cls, folder)
            tok._old_table = old_byte_table(tok)
            return tok

        Tokenizer.from_pretrained = classmethod(from_pretrained_with_table)
    wrap(Tokenizer, "from_pretrained", "tokenizer_thread", kind="classmethod")
    wrap(SmolVlmModel, "load", kind="classmethod")
    wrap(SmolVlmModel, "__init__", "meta_build")
    wrap(validate, "check_state")
    wrap(nn.Module, "load_state_dict")
    wrap(nn.Module, "to")
    wrap(LlamaDecoder, "fuse")
    wrap(VisionTransformer, "fuse")
    wrap(smolvlm_pkg, "load_processor")
    wrap(ChatSession, "__init__", "ChatSession.__init__")
    wrap(VisionGraphs, "capture_all", sync=True)
    wrap(LlamaLM, "warmup", sync=True)
    wrap(ChatSession, "_warm_photo_question", sync=True)
    wrap(LlamaLM, "prefill", sync=True)
    wrap(LlamaLM, "decode_token", sync=True)
    wrap(SmolVlmModel, "embed_multimodal", sync=True)
    wrap(ImageProcessor, "__call__", "ImageProcessor.__call__")
    wrap(torch.cuda, "empty_cache", "empty_cache")

    collections_ = []
    started = {}

    def on_gc(phase, info):
        g = info["generation"]
        if phase == "start":
            started[g] = time.perf_counter()
        else:
            collections_.append((g, threading.current_thread().name, round(started[g] - T0[0], 4),
                                 round(time.perf_counter() - started[g], 4), info.get("collected", 0)))

    marks = {}

    def watch():
        """When the CUDA context, the Triton-key thread and the tokenizer thread are done."""
        seen = set()
        while time.perf_counter() - T0[0] < 60 and "done" not in marks:
            names = {t.name.split("_")[0] for t in threading.enumerate()}
            if "cuda" not in marks and torch.cuda.is_initialized():
                marks["cuda"] = round(time.perf_counter() - T0[0], 4)
            for prefix in ("smolchat-triton-key", "smolchat-tokenizer", "smolchat-cuda-init", "smolchat-cuda-driver"):
                alive = any(n.startswith(prefix) for n in names)
                if alive:
                    seen.add(prefix)
                elif prefix in seen and prefix not in marks:
                    marks[prefix] = round(time.perf_counter() - T0[0], 4)
            time.sleep(0.001)

    objects_before = len(gc.get_objects())
    gc.callbacks.append(on_gc)
    if a.gc == "freeze":
        gc.freeze()
    elif a.gc == "off":
        gc.disable()
    t_imp = time.perf_counter()
    T0[0] = time.perf_counter()
    threading.Thread(target=watch, daemon=True).start()
    session = ChatSession.load(a.checkpoint, device=a.device)
    if a.device == "cuda":
        torch.cuda.synchronize()
    ready = time.perf_counter() - T0[0]
    marks["done"] = round(ready, 4)
    if a.gc == "off":
        gc.enable()
    objects_after = len(gc.get_objects())
    # One real question after the load: the first answer's time to its first token.
    t = time.perf_counter()
    ttft = None
    for _ in session.send("Write a haiku about tea.", params=None):
        if ttft is None:
            ttft = time.perf_counter() - t
        break
    print(json.dumps({"tag": a.tag, "gc": a.gc, "old_init": a.old_init, "old_table": a.old_table, "late_triton": a.late_triton, "driver_early": a.driver_early, "imports_s": round(t_imp - t_start, 3), "load_to_ready_s": round(ready, 4),
                      "warmup_s": session.warmup_s and round(session.warmup_s, 4), "text_ttft_s": round(ttft, 4) if ttft else None,
                      "objects_before": objects_before, "objects_after": objects_after,
                      "gc_frozen": gc.get_freeze_count(), "marks": marks,
                      "gc_collections": collections_, "events": events,
                      "python": sys.version.split()[0], "driver_env": os.environ.get("SMOLCHAT_CUDA_DRIVER_INIT", "1"),
                      "driver_results": (sys.modules["engine.cuda_driver"].results if "engine.cuda_driver" in sys.modules else None), "gc_threshold": gc.get_threshold()}))


if __name__ == "__main__":
    main()
