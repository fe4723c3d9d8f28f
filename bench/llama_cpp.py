"""llama.cpp as a peer on the same weights: GGUF variants, ``llama-perplexity`` and ``llama-bench``.

The real SmolLM2 checkpoint every machine here has is a Q4_1 GGUF. Requantizing Q4_1 straight to
Q8_0 or Q4_K_M (``llama-quantize --allow-requantize``) would work, but the cleaner baseline is what
llama.cpp's own users do with a float checkpoint: :func:`f32_gguf` writes the dequantized weights
(Hugging Face names, Q/K rows un-permuted: :class:`engine.gguf.GGUFSource`) as a safetensors folder
with the derived config and tokenizer, converts it with llama.cpp's ``convert_hf_to_gguf.py`` to an
F32 GGUF, and :func:`quantize` makes Q8_0 / Q4_K_M from that F32 file. The F32 GGUF holds exactly the
float32 weights our engine runs (checked by :func:`f32_gguf`), so every variant starts from one set
of numbers.

Binaries come from :mod:`tools.build_llama_cpp` (``python -m tools.build_llama_cpp``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tools.build_llama_cpp import cache_root, fetch_source


def binary(name: str) -> Path:
    """Path of a built llama.cpp tool (``llama-perplexity`` ...).

    Raises:
        FileNotFoundError: not built yet (run ``python -m tools.build_llama_cpp``).
    """
    path = cache_root() / "llama.cpp" / "build" / "bin" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run python -m tools.build_llama_cpp")
    return path


def _run(cmd: list, what: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{what} failed ({proc.returncode}): {' | '.join(tail)}")
    return proc


def f32_gguf(gguf: Path, out_dir: Path) -> Path:
    """An F32 GGUF of ``gguf``'s dequantized weights, made by llama.cpp's converter (cached in ``out_dir``)."""
    import torch
    from safetensors.torch import save_file

    from engine.gguf import GGUFSource

    out = out_dir / f"{gguf.stem.split('.')[0]}-F32.gguf"
    stamp = out.with_suffix(".json")
    key = json.dumps([str(gguf.resolve()), gguf.stat().st_size, gguf.stat().st_mtime_ns])
    if out.is_file() and stamp.is_file() and stamp.read_text() == key:
        return out
    source = GGUFSource(gguf)
    hf = out_dir / "hf-f32"
    shutil.rmtree(hf, ignore_errors=True)
    hf.mkdir(parents=True)
    tensors = {name: t.contiguous() for name, t in source.tensors()}
    save_file(tensors, hf / "model.safetensors", metadata={"format": "pt"})
    for f in source.folder.iterdir():
        shutil.copy(f, hf / f.name)
    tree = fetch_source()
    _run([sys.executable, tree / "convert_hf_to_gguf.py", hf, "--outtype", "f32", "--outfile", out],
         "convert_hf_to_gguf.py")
    back = dict(GGUFSource(out).tensors())  # the round trip must give our float32 weights back exactly
    bad = [n for n, t in tensors.items() if not torch.equal(back[n], t)]
    if set(back) != set(tensors) or bad:
        raise RuntimeError(f"{out}: F32 round trip differs ({bad[:3]})")
    shutil.rmtree(hf)
    stamp.write_text(key)
    return out


def quantize(f32: Path, kind: str) -> Path:
    """``llama-quantize f32 kind`` (Q8_0, Q4_K_M ...) beside ``f32``; cached."""
    out = f32.with_name(f32.name.replace("-F32", f"-{kind}"))
    if not out.is_file() or out.stat().st_mtime < f32.stat().st_mtime:
        _run([binary("llama-quantize"), f32, out, kind], f"llama-quantize {kind}")
    return out


def perplexity(gguf: Path, text: Path, context: int = 1024, threads: int = 2) -> dict:
    """``llama-perplexity`` with its own protocol: chunks of ``context`` tokens, each scored on its
    second half only (``first = n_ctx / 2`` in perplexity.cpp), so its figures compare between GGUFs,
    not with the sliding-window figures of :mod:`engine.perplexity`."""
    proc = _run([binary("llama-perplexity"), "-m", gguf, "-f", text, "-c", context, "-b", context,
                 "-t", threads], f"llama-perplexity {gguf.name}")
    out = proc.stdout + proc.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    if m is None:
        raise RuntimeError(f"llama-perplexity printed no final estimate for {gguf.name}")
    chunks = re.search(r"calculating perplexity over (\d+) chunks", out)
    return {"perplexity": float(m[1]), "stderr": float(m[2]), "chunks": int(chunks[1]) if chunks else None}


def bench(gguf: Path, threads: int = 2, prompt: int = 512, gen: int = 128, reps: int = 3) -> dict:
    """``llama-bench -t threads -p prompt -n gen`` on the CPU: prefill and decode tokens per second."""
    proc = _run([binary("llama-bench"), "-m", gguf, "-t", threads, "-p", prompt, "-n", gen, "-r", reps,
                 "-o", "json"], f"llama-bench {gguf.name}")
    rows = json.loads(proc.stdout)
    out = {}
    for row in rows:
        key = "prefill_tokens_per_s" if row["n_prompt"] else "decode_tokens_per_s"
        out[key] = round(row["avg_ts"], 2)
        out[key.replace("_per_s", "_stdev")] = round(row["stddev_ts"], 2)
    return out
