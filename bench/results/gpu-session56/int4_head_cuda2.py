"""Session 56, after engine.layers.linear.head_class gave CUDA's int4 an int8 lm_head too: perplexity
through the public weights="int4" load, the France answer, and greedy decode speed of the app's
ChatSession with the int8 head against the 4-bit one (head_class made the identity), alternating.

    python int4_head_cuda2.py MODEL.gguf apache-2.0.txt > out.json
"""

import json
import statistics
import sys
from pathlib import Path

import torch

import engine.layers.linear as linear
from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.chat import ChatSession
from engine.perplexity import perplexity
from engine.registry import load_model
from engine.sources import resolve_source
from engine.tokenizer import Tokenizer

gguf, text = sys.argv[1], sys.argv[2]
real_head_class = linear.head_class
out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}


def head(kind):
    linear.head_class = real_head_class if kind == "int8 head" else (lambda cls: cls)


tok = Tokenizer.from_pretrained(resolve_source(gguf).folder)
ids = tok.encode(Path(text).read_text(encoding="utf-8"))
for kind in ("int8 head", "4-bit head"):
    head(kind)
    model = load_model(gguf, "cuda", "bfloat16", weights="int4")
    out[f"perplexity {kind}"] = round(perplexity(model, ids, 1024, 1024).perplexity, 4)
    out[f"head class {kind}"] = type(model.lm_head).__name__
    del model
    print(kind, out[f"perplexity {kind}"], out[f"head class {kind}"], file=sys.stderr, flush=True)


def answer(session, prompt, params):
    session.reset()
    events = list(session.send(prompt, params=params))
    return "".join(e.text for e in events if isinstance(e, TokenEvent)), next(e for e in events if isinstance(e, DoneEvent))


sessions = {}
for kind in ("int8 head", "4-bit head"):
    head(kind)
    sessions[kind] = ChatSession.load(gguf, device="cuda", dtype="bfloat16", weights="int4")
    text_, _ = answer(sessions[kind], "What is the capital of France?", GenerationParams(max_new_tokens=32))
    out[f"France {kind}"] = text_
    print(kind, repr(text_), file=sys.stderr, flush=True)
head("int8 head")
long = GenerationParams(max_new_tokens=256, ignore_eos=True, speculative=False)
runs = {kind: [] for kind in sessions}
for r in range(6):  # round 0 warms up
    for kind, session in sessions.items():
        _, done = answer(session, "Write a long story about a dragon.", long)
        if r:
            runs[kind].append((round(done.stats.decode_tokens_per_s, 1), round(done.stats.ttft_s * 1000, 2)))
for kind, rows in runs.items():
    out[f"decode tok/s {kind}"] = [x[0] for x in rows]
    out[f"ttft ms {kind}"] = [x[1] for x in rows]
    out[f"decode median {kind}"] = statistics.median(x[0] for x in rows)
    print(kind, rows, file=sys.stderr, flush=True)
print(json.dumps(out, indent=1))
