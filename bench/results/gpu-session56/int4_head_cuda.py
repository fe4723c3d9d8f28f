"""Session 56: does int4 on CUDA (ATen's int4pack, its lm_head 4-bit too) lose what int4 on the CPU lost
to its 4-bit head? SmolLM2-135M-Instruct's real Q4_1 GGUF, perplexity with windows of 1024, stride 1024,
in bf16: bf16, int8, int4, and int4 with its head swapped for an Int8Linear of the bf16 head.

    python int4_head_cuda.py MODEL.gguf apache-2.0.txt gpl-3.0.txt > out.json
"""

import json
import sys
import time
from pathlib import Path

import torch

from engine.layers.linear import Int8Linear
from engine.perplexity import perplexity
from engine.registry import load_model
from engine.sources import resolve_source
from engine.tokenizer import Tokenizer

gguf, texts = sys.argv[1], sys.argv[2:]
tok = Tokenizer.from_pretrained(resolve_source(gguf).folder)
ids = {Path(t).stem: tok.encode(Path(t).read_text(encoding="utf-8")) for t in texts}
out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": {}}


def measure(name, model):
    t = time.perf_counter()
    out["rows"][name] = {text: round(perplexity(model, ids[text], 1024, 1024).perplexity, 4) for text in ids}
    out["rows"][name]["seconds"] = round(time.perf_counter() - t, 1)
    print(name, out["rows"][name], file=sys.stderr, flush=True)


bf16 = load_model(gguf, "cuda", "bfloat16")
measure("bf16", bf16)
head = bf16.lm_head
measure("float32", load_model(gguf, "cuda", "float32"))
measure("int8", load_model(gguf, "cuda", "bfloat16", weights="int8"))
int4 = load_model(gguf, "cuda", "bfloat16", weights="int4")
out["int4_head_class"] = type(int4.lm_head).__name__
measure("int4", int4)
int4.lm_head = Int8Linear(head)
int4._static = None
measure("int4, lm_head int8", int4)
print(json.dumps(out, indent=1))
