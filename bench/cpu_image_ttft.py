"""Time to the first token of a photo question on the CPU: ours against llama.cpp's ``llama-mtmd-cli``.

The same random float32 weights at SmolVLM-256M's shape on both sides: the checkpoint of
``bench/cpu_llamacpp.py`` (made once), converted by llama.cpp's ``convert_hf_to_gguf.py`` into an F32
text GGUF and an F32 ``--mmproj`` GGUF (``--mmproj-type q8_0``: llama.cpp's int8 projector). One
question, "Describe this image.", one new token.

- ours: ``ChatSession`` as the app uses it, a fresh conversation with empty caches each round
  (tiles, prefix blocks), ``--detail`` (default ``full``, the reference preprocessing); the figure
  is the wall time from the call to the first token (image decoding and tiling, the vision tower,
  the prefill). The vision tower runs as the engine picks for this CPU (``vision_precision`` in the
  JSON: int8 GEMMs on AVX2-only CPUs; ``SMOLCHAT_VISION_DTYPE=float32`` measures float32).
- llama.cpp: ``llama-mtmd-cli -n 1``; the figure is its process time from the first image chunk's
  encoding (its log's timestamp) to the exit: every chunk's encode and its decode into the language
  model, the text, one new token and the exit; its model load is left out.

Rounds alternate the engines (the machine is shared); medians are reported with our image token
count and llama.cpp's image chunk count (tiles, 64 tokens each for this model).

    python bench/cpu_image_ttft.py --image ../shared/images/astronaut.png --out bench/results/cpu-image-ttft.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.common import machine, median  # noqa: E402
from bench.cpu_llamacpp import convert, float32_checkpoint, llama_paths  # noqa: E402
from bench.shared import SHARED  # noqa: E402

PROMPT = "Describe this image."


def ggufs(args, ck: Path) -> tuple[Path, Path]:
    """(text F32 GGUF, mmproj GGUF of ``--mmproj-type``), converted once into ``--gguf-dir``."""
    _, tree = llama_paths(args)
    out = Path(args.gguf_dir)
    return (convert(tree, ck, out / "text-f32.gguf"),
            convert(tree, ck, out / f"mmproj-{args.mmproj_type}.gguf", "--mmproj", outtype=args.mmproj_type))


def llama_mtmd(args, text: Path, mmproj: Path) -> dict:
    """One ``llama-mtmd-cli`` run: its logged image and prompt times (s) and image token count."""
    cli = llama_paths(args)[0] / "llama-mtmd-cli"
    cmd = [str(cli), "-m", str(text), "--mmproj", str(mmproj), "--image", args.image, "-p", PROMPT,
           "-n", "1", "-t", str(args.threads), "--temp", "0", "-c", "4096"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - t
    log = proc.stdout + proc.stderr
    if proc.returncode:
        raise RuntimeError(f"llama-mtmd-cli failed ({proc.returncode}): {log[-1500:]}")
    # Its log lines start with the time since process start (minutes.seconds.ms.us): the image starts at the
    # first "encoding mtmd batch"; what follows is every image chunk's encode and its decode into
    # the language model, the text chunks, and one new token.
    stamp = r"(\d+)\.(\d+)\.(\d+)\.(\d+)"
    first = re.search(stamp + r" I encoding mtmd batch", log)
    chunks = [float(m) / 1000 for m in re.findall(r"mtmd batch encoding done in (\d+) ms", log)]
    if first is None or not chunks:
        raise RuntimeError(f"llama-mtmd-cli's log has no image encoding lines: {log[-1500:]}")
    start = int(first.group(1)) * 60 + int(first.group(2)) + int(first.group(3)) / 1e3 + int(first.group(4)) / 1e6
    return {"ttft_s": wall - start, "image_encode_s": sum(chunks), "image_chunks": len(chunks),
            "load_s": start, "process_wall_s": wall}


def ours(session, args) -> dict:
    from engine.api.events import DoneEvent, GenerationParams, TokenEvent

    session.reset()
    session._processed.clear()
    session.cache.prefix.clear()
    params = GenerationParams(max_new_tokens=1, ignore_eos=True, image_detail=args.detail)
    t, first, done = time.perf_counter(), None, None
    for event in session.send(PROMPT, images=[args.image], params=params):
        if isinstance(event, TokenEvent) and event.token_id >= 0 and first is None:
            first = time.perf_counter() - t
        elif isinstance(event, DoneEvent):
            done = event
    if done is None or done.error:
        raise RuntimeError(f"our answer failed: {done and done.error}")
    return {"ttft_s": first, "image_tokens": done.stats.image_tokens, "prompt_tokens": done.stats.prompt_tokens}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default=str(SHARED / "images" / "astronaut.png"))
    ap.add_argument("--detail", default="full", choices=["full", "balanced", "fast"])
    ap.add_argument("--gguf-dir", default=str(Path.home() / ".cache" / "smolchat-bench" / "gguf-256m-random"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mmproj-type", default="f32", choices=["f32", "f16", "q8_0"],
                    help="llama.cpp's vision projector precision (q8_0: its int8 option)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "cpu-image-ttft.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ck = float32_checkpoint(Path(args.gguf_dir) / "checkpoint-f32")
    text, mmproj = ggufs(args, ck)
    from engine.chat import ChatSession
    from engine.device import describe_vision
    from engine.native import build as native_build

    session = ChatSession.load(str(ck), device="cpu", dtype="float32")
    native_build.library(wait=True)  # the first-ever build is not what a round measures
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    res = {"machine": machine("cpu"), "cpu_flags": [f for f in flags if f.startswith(("avx", "fma", "amx"))],
           "vision_dtype": str(session.model.vision_dtype).removeprefix("torch."),
           "vision_precision": describe_vision(torch.device("cpu"), torch.float32), "image": args.image,
           "detail": args.detail, "threads": args.threads, "llama_cpp_mmproj": args.mmproj_type, "rounds": []}
    for r in range(args.rounds):
        rnd = {"round": r, "load_start": open("/proc/loadavg").read().split()[:3],
               "ours": ours(session, args), "llama.cpp": llama_mtmd(args, text, mmproj)}
        res["rounds"].append(rnd)
        print(json.dumps(rnd), flush=True)
    o = median([r["ours"]["ttft_s"] for r in res["rounds"]])
    t = median([r["llama.cpp"]["ttft_s"] for r in res["rounds"]])
    res["summary"] = {"ours_ttft_s": o, "llama_cpp_ttft_s": t, "ratio": o / t if t else None}
    print(json.dumps(res["summary"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
