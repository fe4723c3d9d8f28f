"""Our engine vs Hugging Face transformers on the same checkpoint, side by side, in one process.

Every figure is a ratio from one run in which both systems get the same prompt ids, image and token
count (greedy, ``ignore_eos`` / ``min_new_tokens``). Repeats alternate ours/theirs and report
medians, because the CPU this runs on is shared. transformers is only the reference here.

    python bench/compare.py --checkpoint /tmp/ck --device cpu  --out bench/results/cpu.json
    python bench/compare.py --checkpoint /tmp/ck --device cuda --out bench/results/gpu.json

Sections (``--sections``): ``decode`` (text prompt ~60 tokens, ``--new-tokens`` greedy tokens),
``ttft`` (one 512x512 photo at reference detail: 17 tiles, ~1140 prompt tokens), ``load`` (fresh
subprocesses: from the load call to a model ready for its first token), ``memory`` (CUDA: peak
allocated bytes, model + one 17-tile image answered, fresh subprocesses), ``int8`` (CPU:
weight-only int8 decode and its greedy agreement with float32 on a fixed prompt set).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.common import load_ours, machine, median, new_session, ours_generate, sync  # noqa: E402
from bench.shared import SHARED  # noqa: E402

TEXT_PROMPT = ("You are helping me plan a long trip across Europe by train next summer. I want to see "
               "old cities, mountains and the sea, eat well and not spend too much money. Please write "
               "a detailed day by day plan with the trains to take.")
IMAGE_PROMPT = "Describe this image in detail."
FIXED_PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
                 "List three uses of a paperclip.", "Explain what a CPU cache is.",
                 "Translate 'good morning' into Spanish.", "Give me a recipe for pancakes.",
                 "Why is the sky blue?", "Count from one to ten."]
# llama.cpp on this 2-core CPU, same random 256M weights, measured earlier (not re-run here).
LLAMA_CPP = {"decode_tok_s_f32": 30.0, "decode_tok_s_q8_0": 70.0, "prefill_57_tokens_ms": 190.0}


# -- transformers -------------------------------------------------------------------------------
def load_ref(ck: str, device: str, dtype: torch.dtype, attn: str | None = None):
    import transformers

    kw = {"dtype": dtype}
    if attn:
        kw["attn_implementation"] = attn
    model = transformers.Idefics3ForConditionalGeneration.from_pretrained(ck, **kw).to(device).eval()
    processor = transformers.AutoProcessor.from_pretrained(ck)
    return model, processor


class StampStreamer:
    """transformers streamer that records when each new token comes out (the first put is the prompt)."""

    def __init__(self, device: str):
        self.device, self.stamps, self.calls = device, [], 0

    def put(self, value):
        self.calls += 1
        if self.calls > 1:
            self.stamps.append(time.perf_counter())

    def end(self):
        pass


def ref_generate(model, inputs: dict, n: int, device: str, **gen_kw):
    streamer = StampStreamer(device)
    sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False, streamer=streamer,
                             **gen_kw)
    sync(device)
    tokens = out[0, inputs["input_ids"].shape[1]:].tolist()
    s = streamer.stamps
    ttft = s[0] - t0
    rate = (len(tokens) - 1) / (s[-1] - s[0]) if len(tokens) > 1 else None
    return tokens, ttft, rate


def ref_text_inputs(session, text: str, device: str) -> dict:
    ids = session_prompt(session, text).ids
    t = torch.tensor([ids], device=device)
    return {"input_ids": t, "attention_mask": torch.ones_like(t)}


def session_prompt(session, text: str):
    """Our prompt ids for a one-turn text conversation (what ChatSession.send will prefill)."""
    from engine.chat import Turn

    session.turns.append(Turn("user", text, []))
    try:
        return session._prompt()
    finally:
        session.turns.pop()


# -- sections -------------------------------------------------------------------------------------
def bench_decode(args, ours, ref, device: str) -> dict:
    model, _ = ref
    n = args.new_tokens
    inputs = ref_text_inputs(ours, TEXT_PROMPT, device)
    res = {"prompt_tokens": int(inputs["input_ids"].shape[1]), "new_tokens": n, "ours": [], "transformers": []}
    cache_kind = args.cache
    tokens_ours = tokens_ref = None
    for r in range(args.repeats + 1):  # the first round warms both up and is not counted
        s = new_session(ours, cache_kind, args.max_tokens)
        tokens_ours, _, rate, _ = ours_generate(s, TEXT_PROMPT, [], n, device)
        tokens_ref, _, rate_ref = ref_generate(model, inputs, n, device)
        if r:
            res["ours"].append(rate)
            res["transformers"].append(rate_ref)
        print(f"  decode round {r}: ours {rate:.1f} tok/s, transformers {rate_ref:.1f} tok/s", flush=True)
    res["ours_tok_s"] = median(res["ours"])
    res["transformers_tok_s"] = median(res["transformers"])
    res["ratio"] = res["ours_tok_s"] / res["transformers_tok_s"]
    res["same_tokens"] = sum(a == b for a, b in zip(tokens_ours, tokens_ref))
    return res


def bench_decode_gpu_variants(args, ours, ref, device: str) -> dict:
    """CUDA: our decode step by step kind (eager; PyTorch step in a CUDA graph; fused Triton step in a
    CUDA graph), with and without the pipelined token loop, for both caches; the Triton step's
    profile; transformers eager (+ optional static cache and compile)."""
    from engine.models.llama.static_decode import StaticDecoder

    model, _ = ref
    n = args.new_tokens
    inputs = ref_text_inputs(ours, TEXT_PROMPT, device)
    out = {"variants": {}}
    m = ours.model

    def ours_rate(kind: str, step: str, pipelined: bool, rounds: int = 3):
        if step == "eager":
            m.static_decode, m._static = False, None
        else:
            m.static_decode = True
            m._static = StaticDecoder(m, use_triton=(step == "triton"))
        rates = []
        for _ in range(rounds + 1):
            s = new_session(ours, kind, args.max_tokens)
            s.pipelined = pipelined
            toks, _, rate, _ = ours_generate(s, TEXT_PROMPT, [], n, device)
            rates.append(rate)
        name = f"{kind}/{step}/{'pipelined' if pipelined else 'sequential'}"
        out["variants"][name] = {"tok_s": median(rates[1:]), "tokens_hash": hash(tuple(toks))}
        print(f"  ours {name}: {median(rates[1:]):.1f} tok/s", flush=True)

    ours_rate("paged", "eager", False)
    for kind in ("paged", "contiguous"):
        for step in ("graph", "triton"):
            for pipelined in (False, True):
                try:
                    ours_rate(kind, step, pipelined)
                except Exception as exc:  # noqa: BLE001  (e.g. no Triton on this machine)
                    out["variants"][f"{kind}/{step}"] = {"error": repr(exc)[:300]}
                    break
    for step in ("triton", "graph"):  # the profile of one captured step of each kind
        try:
            m.static_decode = True
            m._static = StaticDecoder(m, use_triton=(step == "triton"))
            s = new_session(ours, "paged", args.max_tokens)
            ours_generate(s, TEXT_PROMPT, [], 8, device)
            from bench.triton_decode import step_profile

            prof = out[f"{step}_profile"] = step_profile(m)
            print(f"  {step} step: graph replay {prof['graph_replay_us']:.0f} us, {prof['kernels_per_step']} kernels",
                  flush=True)
        except Exception as exc:  # noqa: BLE001
            out[f"{step}_profile_error"] = repr(exc)[:400]
    m.static_decode, m._static = None, None  # the defaults again
    rates = []
    for _ in range(3):
        _, _, r = ref_generate(model, inputs, n, device)
        rates.append(r)
    out["transformers_eager_tok_s"] = median(rates[1:])
    print(f"  transformers eager {out['transformers_eager_tok_s']:.1f} tok/s", flush=True)
    if args.compile_ref:
        try:
            t = time.perf_counter()
            for mode in ("reduce-overhead", "default"):
                # transformers 5.17's generate reads logits after the next CUDA-graph replay
                # ("accessing tensor output of CUDAGraphs that has been overwritten"): fall back to
                # inductor kernels without CUDA graphs, and say which mode ran.
                torch._dynamo.reset()
                model.forward = torch.compile(type(model).forward.__get__(model), mode=mode, fullgraph=True)
                try:
                    ref_generate(model, inputs, n, device, cache_implementation="static")
                    out["transformers_compile_mode"] = mode
                    break
                except RuntimeError as exc:
                    out[f"transformers_compile_{mode}_error"] = repr(exc)[:200]
            out["transformers_compile_first_call_s"] = time.perf_counter() - t
            rates = []
            for _ in range(3):
                _, _, r = ref_generate(model, inputs, n, device, cache_implementation="static")
                rates.append(r)
            out["transformers_static_compile_tok_s"] = median(rates[1:])
            print(f"  transformers static+compile {out['transformers_static_compile_tok_s']:.1f} tok/s", flush=True)
        except Exception as exc:  # noqa: BLE001
            out["transformers_compile_error"] = repr(exc)[:400]
        finally:
            model.forward = type(model).forward.__get__(model)
    return out


def image_path(args) -> Path:
    return Path(args.image)


def bench_ttft(args, ours, ref, device: str) -> dict:
    from PIL import Image

    model, processor = ref
    img = Image.open(image_path(args)).convert("RGB")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": IMAGE_PROMPT}]}]
    res = {"image": image_path(args).name, "ours": [], "transformers": []}
    first = {}
    for r in range(args.ttft_repeats + 1):
        s = new_session(ours, args.cache, args.max_tokens)
        tok, ttft, _, prompt_tokens = ours_generate(s, IMAGE_PROMPT, [image_path(args)], 1, device)
        sync(device)
        t0 = time.perf_counter()
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
        inputs = processor(text=prompt, images=[img], return_tensors="pt").to(device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=1, do_sample=False)
        sync(device)
        ttft_ref = time.perf_counter() - t0
        first = {"first_token_ours": tok[0], "first_token_transformers": int(out[0, -1]),
                 "prompt_tokens_ours": prompt_tokens,
                 "prompt_tokens_transformers": int(inputs["input_ids"].shape[1]),
                 "tiles": int(inputs["pixel_values"].shape[1])}
        if r or args.ttft_repeats == 0:
            res["ours"].append(ttft)
            res["transformers"].append(ttft_ref)
        print(f"  ttft round {r}: ours {ttft * 1e3:.0f} ms, transformers {ttft_ref * 1e3:.0f} ms", flush=True)
    res.update(first)
    res["ours_s"], res["transformers_s"] = median(res["ours"]), median(res["transformers"])
    res["ratio"] = res["ours_s"] / res["transformers_s"]
    res["ours_breakdown_s"] = ttft_breakdown(args, ours, device)
    print(f"  our TTFT by phase: {res['ours_breakdown_s']}", flush=True)
    return res


def ttft_breakdown(args, ours, device: str, repeats: int = 3) -> dict:
    """Where our time to first token goes, phase by phase (synchronized; medians of ``repeats``):
    load_image + preprocess (host), prompt ids (tokenizer), vision (tiles to the device, SigLIP +
    connector, features into the prompt embeddings), prefill of the whole prompt."""
    from engine.cache import CacheConfig
    from engine.chat import Turn

    phases = {"preprocess": [], "prompt": [], "vision": [], "prefill": []}
    m = ours.model
    for _ in range(repeats):
        s = new_session(ours, args.cache, args.max_tokens)
        sync(device)
        t0 = time.perf_counter()
        processed = s.preprocess([image_path(args)], "full")
        t1 = time.perf_counter()
        s.turns.append(Turn("user", IMAGE_PROMPT, processed))
        prompt = s._prompt()
        ids, images = prompt.ids, prompt.images
        t2 = time.perf_counter()
        with torch.inference_mode():
            tiles = [img.tiles_tensor(m.device, m.vision_dtype) for img in images]  # as ChatSession does
            embeds = m.embed_multimodal(torch.tensor([ids]), tiles)
            sync(device)
            t3 = time.perf_counter()
            cache = m.create_kv_cache(CacheConfig(kind=args.cache, max_tokens=len(ids) + 8))
            for start in range(0, len(ids), s.prefill_chunk):
                chunk = embeds[:, start:start + s.prefill_chunk]
                logits = m.prefill(chunk, cache, range(start, start + chunk.shape[1]))
            int(logits.argmax(-1))
            t4 = time.perf_counter()
        if hasattr(cache, "release"):
            cache.release()
        for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            phases[k].append(v)
    return {k: round(median(v), 4) for k, v in phases.items()}


LOAD_CHILD = r"""
import sys, time, json, os
sys.path.insert(0, {repo!r})
t0 = time.perf_counter()
import torch
{imports}
t1 = time.perf_counter()
{load}
{sync}
t2 = time.perf_counter()
{first}
{sync}
t3 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "first_token_s": t3 - t1}}))
"""

# From the load call to a model ready (``load``), then one greedy token of a short text prompt
# (``first``): "cold load to first token possible" is load_s + that first answer token.
CHILD = {
    "ours": ("from engine.chat import ChatSession\nfrom engine.api.events import GenerationParams",
             "s = ChatSession.load({ck!r}, device={dev!r}, dtype={dt!r})",
             "for _ in s.send('Hello!', params=GenerationParams(max_new_tokens=1, temperature=0.0)): pass"),
    "transformers": ("import transformers",
                     "m = transformers.Idefics3ForConditionalGeneration.from_pretrained({ck!r}, dtype=getattr(torch, {dt!r}))"
                     ".to({dev!r}).eval()\np = transformers.AutoProcessor.from_pretrained({ck!r})",
                     "msgs = [{{'role': 'user', 'content': [{{'type': 'text', 'text': 'Hello!'}}]}}]\n"
                     "inp = p(text=p.apply_chat_template(msgs, add_generation_prompt=True), return_tensors='pt').to({dev!r})\n"
                     "with torch.inference_mode(): m.generate(**inp, max_new_tokens=1, do_sample=False)"),
}


def run_child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_load(args, device: str, dtype: torch.dtype) -> dict:
    dt = str(dtype).removeprefix("torch.")
    keys = ("ours", "transformers", "ours_import", "transformers_import", "ours_first_token",
            "transformers_first_token")
    res = {k: [] for k in keys}
    sync_code = "torch.cuda.synchronize()" if device == "cuda" else ""
    for r in range(args.load_repeats + 1):
        for who in ("ours", "transformers"):
            imp, load, first = CHILD[who]
            code = LOAD_CHILD.format(repo=str(REPO), imports=imp, sync=sync_code,
                                     load=load.format(ck=args.checkpoint, dev=device, dt=dt),
                                     first=first.format(dev=device))
            got = run_child(code)
            if r:  # round 0 brings the file into the page cache for both
                res[who].append(got["load_s"])
                res[who + "_import"].append(got["import_s"])
                res[who + "_first_token"].append(got["first_token_s"])
            print(f"  load round {r}: {who} load {got['load_s']:.2f} s, to first token {got['first_token_s']:.2f} s",
                  flush=True)
    for k in keys:
        res[k + "_s"] = median(res[k])
    res["ratio"] = res["ours_s"] / res["transformers_s"]
    res["first_token_ratio"] = res["ours_first_token_s"] / res["transformers_first_token_s"]
    return res


MEM_CHILD = r"""
import sys, json, time
sys.path.insert(0, {repo!r})
import torch
torch.cuda.init()
torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
{body}
torch.cuda.synchronize()
print(json.dumps({{"peak_bytes": torch.cuda.max_memory_allocated() - base,
                  "reserved_bytes": torch.cuda.max_memory_reserved()}}))
"""

MEM_BODY = {
    "ours": """
from engine.chat import ChatSession
from engine.cache import CacheConfig
from engine.api.events import GenerationParams
s = ChatSession.load({ck!r}, device="cuda", dtype="bfloat16", cache_config=CacheConfig(kind="contiguous", max_tokens={mt}))
for ev in s.send({prompt!r}, images=[{image!r}], params=GenerationParams(max_new_tokens=16, ignore_eos=True)):
    pass
""",
    "transformers": """
import transformers
from PIL import Image
m = transformers.Idefics3ForConditionalGeneration.from_pretrained({ck!r}, dtype=torch.bfloat16).to("cuda").eval()
p = transformers.AutoProcessor.from_pretrained({ck!r})
msgs = [{{"role": "user", "content": [{{"type": "image"}}, {{"type": "text", "text": {prompt!r}}}]}}]
inp = p(text=p.apply_chat_template(msgs, add_generation_prompt=True), images=[Image.open({image!r}).convert("RGB")],
        return_tensors="pt").to("cuda")
inp["pixel_values"] = inp["pixel_values"].to(torch.bfloat16)
with torch.inference_mode():
    m.generate(**inp, max_new_tokens=16, min_new_tokens=16, do_sample=False)
""",
}


def bench_memory(args) -> dict:
    res = {}
    for who in ("ours", "transformers"):
        body = MEM_BODY[who].format(ck=args.checkpoint, prompt=IMAGE_PROMPT, image=str(image_path(args)),
                                    mt=args.max_tokens or 2048)
        got = run_child(MEM_CHILD.format(repo=str(REPO), body=body))
        res[who + "_peak_mib"] = got["peak_bytes"] / 2**20
        res[who + "_reserved_mib"] = got["reserved_bytes"] / 2**20
    res["ratio"] = res["ours_peak_mib"] / res["transformers_peak_mib"]
    return res


def bench_int8(args, ours, device: str) -> dict:
    """Weight-only int8 decode speed (same prompt as ``decode``) and greedy agreement with float32."""
    from engine.layers.linear import quantize_int8

    fp32 = ours.model
    n = args.new_tokens
    ref_tokens = {}
    for p in FIXED_PROMPTS:
        s = new_session(ours, args.cache, args.max_tokens)
        ref_tokens[p] = ours_generate(s, p, [], 32, device)[0]
    q = quantize_int8(fp32)
    res = {"fp32": [], "int8": []}
    for r in range(args.repeats + 1):
        for name, model in (("fp32", fp32), ("int8", q)):
            ours.model = model
            s = new_session(ours, args.cache, args.max_tokens)
            rate = ours_generate(s, TEXT_PROMPT, [], n, device)[2]
            if r:
                res[name].append(rate)
    ours.model = q
    agree, total, exact = 0, 0, 0
    for p in FIXED_PROMPTS:
        s = new_session(ours, args.cache, args.max_tokens)
        toks = ours_generate(s, p, [], 32, device)[0]
        ref = ref_tokens[p]
        k = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), len(ref))
        agree += k
        total += len(ref)
        exact += toks == ref
    ours.model = fp32
    # Teacher-forced: both models read the same float32 greedy text; how often does int8's next-token
    # argmax equal float32's at each generated position? (Prefix agreement ends at the first flip;
    # with random weights the top logits are close, so one flip is likely.)
    forced_same, forced_total, max_abs = 0, 0, 0.0
    from engine.cache import CacheConfig

    for p in FIXED_PROMPTS:
        ids = session_prompt(ours, p).ids
        full = torch.tensor([list(ids) + ref_tokens[p]])
        logits = {}
        for name, model in (("fp32", fp32), ("int8", q)):
            cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=full.shape[1]))
            with torch.inference_mode():
                logits[name] = model.prefill_all_logits(model.embed(full), cache, range(0, full.shape[1]))[
                    0, len(ids) - 1:-1].float()
        forced_same += int((logits["fp32"].argmax(-1) == logits["int8"].argmax(-1)).sum())
        forced_total += logits["fp32"].shape[0]
        max_abs = max(max_abs, float((logits["fp32"] - logits["int8"]).abs().max()))
    res.update({"fp32_tok_s": median(res["fp32"]), "int8_tok_s": median(res["int8"]),
                "greedy_prefix_agreement": agree / total, "prompts_identical": f"{exact}/{len(FIXED_PROMPTS)}",
                "teacher_forced_top1_agreement": forced_same / forced_total,
                "teacher_forced_max_abs_logit_diff": max_abs, "tokens_per_prompt": 32})
    res["speedup"] = res["int8_tok_s"] / res["fp32_tok_s"]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default=None, help="default: float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--sections", default=None, help="comma list; default cpu: decode,ttft,load,int8; "
                    "cuda: decode,ttft,load,memory")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ttft-repeats", type=int, default=2)
    ap.add_argument("--load-repeats", type=int, default=3)
    ap.add_argument("--cache", default="paged", choices=["contiguous", "paged"], help="our KV cache (default: the engine default)")
    ap.add_argument("--max-tokens", type=int, default=2048, help="KV cache capacity of our sessions")
    ap.add_argument("--image", default=str(SHARED / "images" / "astronaut.png"))
    ap.add_argument("--compile-ref", action="store_true", help="cuda: also time transformers static cache + compile")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    device = args.device
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device == "cuda" else torch.float32)
    sections = (args.sections or ("decode,ttft,load,memory" if device == "cuda" else "decode,ttft,load,int8")).split(",")
    results = {"machine": machine(device), "device": device, "dtype": str(dtype), "checkpoint": args.checkpoint,
               "argv": sys.argv[1:], "llama_cpp_measured_earlier": LLAMA_CPP, "sections": {}}

    def save():
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=2))

    ours = ref = None
    if any(s in sections for s in ("decode", "ttft", "int8")):
        ours = load_ours(args.checkpoint, device, dtype)
    if any(s in sections for s in ("decode", "ttft")):
        ref = load_ref(args.checkpoint, device, dtype)
    for sec in sections:
        print(f"[{sec}]", flush=True)
        t = time.perf_counter()
        try:
            if sec == "decode":
                r = bench_decode(args, ours, ref, device)
                if device == "cuda":
                    r.update(bench_decode_gpu_variants(args, ours, ref, device))
            elif sec == "ttft":
                r = bench_ttft(args, ours, ref, device)
            elif sec == "load":
                r = bench_load(args, device, dtype)
            elif sec == "memory":
                r = bench_memory(args)
            elif sec == "int8":
                r = bench_int8(args, ours, device)
            else:
                raise ValueError(f"unknown section {sec}")
        except Exception as exc:  # noqa: BLE001  (keep the other sections' figures)
            import traceback

            traceback.print_exc()
            r = {"error": repr(exc)[:1000]}
        r["section_s"] = time.perf_counter() - t
        results["sections"][sec] = r
        save()
    results["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None
    save()
    print(json.dumps(results["sections"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
