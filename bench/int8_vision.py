"""The vision tower's dynamic int8 GEMM on the CPU (``engine/layers/int8_gemm.py``): its speed, and its
quality on the only real weights we have.

Sections (``--sections``, comma separated):

``tower``
    SigLIP at SmolVLM-256M's shape (the random float32 checkpoint of ``bench/cpu_llamacpp.py``):
    seconds per 512x512 tile through the vision tower and connector, float32 against int8, alternating,
    and the int8 features' relative error and cosine against float32 on a real photo's tile and a
    noise tile.
``quality``
    No real SmolVLM weights are available to this project's machines, so the scheme is checked on
    SmolLM2-135M-Instruct's real weights (``--model``, the GGUF of ``bench/real_weights.py``): every
    linear of its 30 decoder layers as an :class:`~engine.layers.int8_gemm.Int8GemmLinear` (8-bit
    activations per token, 7-bit weights per channel), perplexity on real English against float32,
    with PyTorch's own dynamic int8 (fbgemm: 7-bit activations, one scale per tensor) beside it. A
    language model's activations carry stronger outliers than a ViT's (Dettmers et al. 2022), so the
    figure is a pessimistic stand-in for the tower.

    python bench/int8_vision.py --model SmolLM2-135M-Instruct.Q4_1.gguf --out bench/results/cpu-int8-vision.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from bench.common import machine, median  # noqa: E402
from bench.shared import SHARED  # noqa: E402


def _decoder_linears(model) -> list[tuple[nn.Module, str, nn.Linear]]:
    return [(parent, name, child) for layer in model.decoder.layers for parent in (layer.self_attn, layer.mlp)
            for name, child in parent.named_children() if isinstance(child, nn.Linear)]


def section_quality(args) -> dict:
    from bench.real_weights import load, token_ids
    from engine.layers.int8_gemm import Int8GemmLinear
    from engine.perplexity import perplexity

    texts = {t.stem: token_ids(args.model, t) for t in args.texts}
    out: dict = {"model": str(args.model), "context": args.context, "tokens": {k: len(v) for k, v in texts.items()}}

    def fbgemm(lin: nn.Linear) -> nn.Module:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.ao.quantization.quantize_dynamic(nn.Sequential(lin), {nn.Linear}, dtype=torch.qint8)

    schemes = {"float32": None, "int8 GEMM (A8 per token, W7 per channel)": Int8GemmLinear,
               "fbgemm dynamic (A7 per tensor, W8 per channel)": fbgemm}
    for label, make in schemes.items():
        model = load(args.model, "float32")
        if make is not None:
            for parent, name, child in _decoder_linears(model):
                setattr(parent, name, make(child))
        for name, ids in texts.items():
            t = time.perf_counter()
            r = perplexity(model, ids, args.context, args.context).to_dict()
            out.setdefault("perplexity", {}).setdefault(label, {})[name] = r | {"seconds": round(time.perf_counter() - t, 1)}
            print(f"perplexity {label} {name}: {r['perplexity']:.4f}", file=sys.stderr, flush=True)
        del model
    base = out["perplexity"]["float32"]
    for per_text in out["perplexity"].values():
        for name, r in per_text.items():
            r["vs_float32"] = round(r["perplexity"] / base[name]["perplexity"] - 1, 5)
    return out


def _tiles() -> torch.Tensor:
    """A real photo's 512x512 tile (normalized as the processor does) and a noise tile."""
    import numpy as np
    from PIL import Image

    img = Image.open(SHARED / "images" / "astronaut.png").convert("RGB").resize((512, 512), Image.Resampling.LANCZOS)
    photo = torch.from_numpy(np.asarray(img, dtype=np.float32) / 127.5 - 1.0).permute(2, 0, 1)
    noise = torch.rand(3, 512, 512, generator=torch.Generator().manual_seed(0)) * 2 - 1
    return torch.stack([photo, noise])


@torch.inference_mode()
def section_tower(args) -> dict:
    from bench.cpu_llamacpp import float32_checkpoint
    from engine.models.smolvlm import SmolVlmModel
    from engine.native import build as native_build
    from engine.sources import LocalDirSource

    native_build.library(wait=True)
    ck = float32_checkpoint(Path(args.gguf_dir) / "checkpoint-f32")
    models, load_s = {}, {}
    for label, pref in (("float32", "float32"), ("int8", "int8")):
        os.environ["SMOLCHAT_VISION_DTYPE"] = pref
        t = time.perf_counter()
        models[label] = SmolVlmModel.load(LocalDirSource(ck), torch.device("cpu"), torch.float32)
        load_s[label] = round(time.perf_counter() - t, 3)
    tiles = _tiles()
    feats, times = {}, {k: [] for k in models}
    for label, m in models.items():
        feats[label] = m.encode_images(tiles)  # also the first-use warm-up
    for _ in range(args.rounds):
        for label, m in models.items():
            t = time.perf_counter()
            m.encode_images(tiles)
            times[label].append((time.perf_counter() - t) / len(tiles))
    ref, got = feats["float32"], feats["int8"]
    per_tile = {label: median(v) for label, v in times.items()}
    return {
        "checkpoint": str(ck), "load_s": load_s,
        "seconds_per_tile": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "median_seconds_per_tile": {k: round(v, 3) for k, v in per_tile.items()},
        "speedup": round(per_tile["float32"] / per_tile["int8"], 3),
        "features_rel_error": [round(float((g - r).norm() / r.norm()), 5) for g, r in zip(got, ref)],
        "features_cosine": [round(float(torch.nn.functional.cosine_similarity(g.flatten(), r.flatten(), dim=0)), 6)
                            for g, r in zip(got, ref)],
        "tiles": ["astronaut.png 512x512", "uniform noise"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default="tower,quality")
    ap.add_argument("--model", type=Path, help="SmolLM2-135M-Instruct GGUF (quality)")
    ap.add_argument("--texts", type=Path, nargs="+",
                    default=[SHARED / "texts" / "apache-2.0.txt", SHARED / "texts" / "gpl-3.0.txt"])
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gguf-dir", default=str(Path.home() / ".cache" / "smolchat-bench" / "gguf-256m-random"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    result: dict = {"machine": machine("cpu"), "cpu_capability": str(torch.backends.cpu.get_cpu_capability())}
    sections = args.sections.split(",")
    if "tower" in sections:
        result["tower"] = section_tower(args)
        print(json.dumps(result["tower"]), file=sys.stderr, flush=True)
    if "quality" in sections:
        if args.model is None:
            ap.error("--model is required for the quality section")
        result["quality"] = section_quality(args)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
