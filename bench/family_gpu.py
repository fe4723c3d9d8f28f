"""The SmolVLM family's checks that need a GPU (issue 13), in one run on CUDA:

1. ``parity``: every family config folder at its REAL shape (random weights, stored bf16 like the
   published checkpoints, run in float32 with TF32 off) against transformers' ``AutoModelForImageTextToText``
   (eager attention): an image prompt built by both processors (ids must be equal), the prefill's last
   logits (max abs difference) and 16 greedy tokens (must be equal). The 2.2B is the one the CPU tests
   cannot run at its real shape.
2. ``video_processor``: transformers' full ``SmolVLMProcessor`` with its torchvision video processor
   (not installable beside the CPU torch of the dev machines) on the same clips: frame indices, prompt
   ids (must be equal) and pixel values (max / mean abs difference: transformers resizes video frames
   with torchvision, whose LANCZOS exists only from torchvision 0.27 on the CPU and is BICUBIC before;
   we resize with Pillow's LANCZOS like the image processor, so small differences are expected).
3. ``ttft``: time to first token of a question about a 64-frame video (an 80 s clip) for each SmolVLM2
   model at its real shape in bfloat16: frame decoding + resizing, vision tower over 64 tiles, prefill of
   the ~5.0k-token prompt (2.2B: 81 tokens per frame, ~6k tokens); median of 3 cold runs after a warm-up;
   peak GPU memory; and the same for transformers (processor + one generated token, SDPA).
4. ``decode`` (``--only decode``): decode tok/s of every family model as the app runs it, and the
   fraction of its text weights' bandwidth bound (one read of every decoder + lm_head weight a token).
5. ``int8`` (``--only int8``): int8 weights against bf16 for each model (:func:`part_int8`): load,
   memory, first and steady decode tok/s, and the int8 Triton step's logits against the int8 eager
   decode and against bf16.

Checked on the CPU with tiny models (the ``"cuda"`` strings swapped for ``"cpu"``): the parity and ttft
parts run end to end (2.2B tiny: ids equal, logits within 1.1e-5, 16 greedy tokens equal; a 64-frame
question is a 4,973-token prompt for the 256M). The video_processor part could not run there.

Run on the H200 (one call). The device machine has neither ``../shared`` nor PyAV/num2words, so copy
what is needed into the checkout first (both folders are git-ignored through .git/info/exclude):

    echo /.shared/ >> .git/info/exclude; echo /.whl/ >> .git/info/exclude
    for m in SmolVLM-256M-Instruct SmolVLM-500M-Instruct SmolVLM2-256M-Video-Instruct \
             SmolVLM2-500M-Video-Instruct SmolVLM2-2.2B-Instruct; do
        mkdir -p .shared/models/$m && cp ../shared/models/$m/*.json .shared/models/$m/; done
    cp -r ../shared/videos ../shared/images .shared/
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d .whl av==18.1.0 num2words==0.5.14

(about 21 MB of configs, tokenizers and media plus a 36 MB PyAV wheel: inside the 64 MiB a call
carries; num2words' own dependency docopt is only for its command line and has no wheel), then
``run`` with ``carry=[".shared", ".whl"]`` and the command

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && \\
    export PYTHONPATH=/tmp/site; PYTHONUNBUFFERED=1 python3 bench/family_gpu.py --shared .shared \\
        --out $OUT/family_gpu.json

Each part writes its results into the JSON (and prints them); a part that fails records its error and
the others still run. ``--only parity,ttft`` picks parts; ``--models`` picks family folders.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.shared import SHARED  # noqa: E402

FAMILY = ("SmolVLM-256M-Instruct", "SmolVLM-500M-Instruct", "SmolVLM2-256M-Video-Instruct",
          "SmolVLM2-500M-Video-Instruct", "SmolVLM2-2.2B-Instruct")
QUESTION = "What is in this image?"


def log(*args) -> None:
    print(*args, flush=True)


def checkpoint(shared: Path, name: str, root: Path) -> Path:
    from tools.make_checkpoint import write_checkpoint

    out = root / f"{name}-real-bf16"
    if not any(out.glob("*.safetensors")):
        t = time.perf_counter()
        write_checkpoint(shared / "models" / name, out, tiny=False, dtype="bfloat16", seed=0)
        log(f"  built {out.name} in {time.perf_counter() - t:.1f} s")
    return out


def part_parity(shared: Path, names, root: Path) -> dict:
    import transformers

    from engine.cache import CacheConfig
    from engine.models.smolvlm import SmolVlmModel
    from engine.models.smolvlm.processing import ImageProcessor, load_image
    from engine.sources import LocalDirSource
    from engine.tokenizer import Tokenizer
    from tests.engine.oracle import hf_processor

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    photo = load_image(shared / "images" / "chelsea.png")
    results = {}
    for name in names:
        log(f"parity {name}")
        try:
            folder = checkpoint(shared, name, root)
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
            image = ImageProcessor.from_pretrained(folder).preprocess(photo)
            ours_ids = Tokenizer.from_pretrained(folder).encode_chat(messages, [image]).input_ids
            proc = hf_processor(folder)
            template = json.loads((folder / "chat_template.json").read_text())["chat_template"]
            text = proc.tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                      add_generation_prompt=True)
            inputs = proc(text=[text], images=[[photo]], return_tensors="pt")
            ids = inputs["input_ids"]
            ref = transformers.AutoModelForImageTextToText.from_pretrained(
                folder, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
            n = 16
            with torch.no_grad():
                gen = ref.generate(input_ids=ids.to(dev), pixel_values=inputs["pixel_values"].to(dev),
                                   pixel_attention_mask=inputs["pixel_attention_mask"].to(dev),
                                   attention_mask=torch.ones_like(ids).to(dev), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, output_logits=True, return_dict_in_generate=True)
            ref_logits = gen.logits[0].float().cpu()
            ref_tokens = gen.sequences[0, ids.shape[1]:].tolist()
            del ref, gen
            torch.cuda.empty_cache()
            ours = SmolVlmModel.load(LocalDirSource(folder), dev, torch.float32)
            cache = ours.create_kv_cache(CacheConfig(kind="paged", max_tokens=ids.shape[1] + n + 16))
            tiles = image.tiles_tensor(dev, ours.vision_dtype)
            logits = ours.prefill(ours.embed_multimodal(ids.to(dev), [tiles]), cache, range(ids.shape[1]))
            first = logits.float().cpu()
            tokens = [int(logits.argmax(-1))]
            for _ in range(n - 1):
                logits = ours.decode(ours.embed(torch.tensor([[tokens[-1]]], device=dev)), cache)
                tokens.append(int(logits.argmax(-1)))
            del ours, cache
            torch.cuda.empty_cache()
            results[name] = {
                "prompt_tokens": int(ids.shape[1]), "tiles": image.num_tiles,
                "ids_equal": ours_ids == ids[0].tolist(),
                "prefill_logits_max_abs_diff": float((first - ref_logits).abs().max()),
                "greedy_equal": tokens == ref_tokens, "tokens": tokens, "ref_tokens": ref_tokens,
            }
        except Exception as exc:  # noqa: BLE001  (recorded; the next model still runs)
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        log(f"  {json.dumps({k: v for k, v in results[name].items() if k != 'trace'})}")
    return results


def long_clip(path: Path, seconds: int = 80, fps: int = 10) -> Path:
    """A moving square on white, 320 x 240: long enough for 64 frames at 1 fps (and the 1 s skips)."""
    from tests.engine.videos import write_video

    def frames():
        for i in range(seconds * fps):
            frame = np.full((240, 320, 3), 255, dtype=np.uint8)
            x = int(10 + 3 * i) % 250
            frame[90:150, x:x + 60] = (220, 20, 20)
            yield frame

    if not path.exists():
        write_video(path, frames(), rate=fps)
    return path


def pyav_fetch(proc) -> None:
    """Make ``proc``'s video processor decode with transformers' own PyAV reader (``load_video(...,
    backend="pyav")``): its default wants torchcodec, or torchvision's video API that torchvision 0.26
    removed, and neither is on the GPU machine. Frame sampling and resizing stay transformers'."""
    from transformers.video_utils import load_video

    vp = proc.video_processor

    def fetch(urls, sample_indices_fn=None):
        if isinstance(urls, list):
            return list(zip(*[fetch(u, sample_indices_fn) for u in urls], strict=True))
        return load_video(urls, backend="pyav", sample_indices_fn=sample_indices_fn)

    vp.fetch_videos = fetch


def part_video_processor(shared: Path, names, clip: Path) -> dict:
    try:
        import torchvision  # noqa: F401
    except ImportError as exc:
        return {"skipped": f"torchvision not importable: {exc}"}
    import transformers

    from engine.models.smolvlm.processing import ImageProcessor
    from engine.tokenizer import Tokenizer

    results = {"torchvision": torchvision.__version__, "transformers": transformers.__version__}
    clips = [shared / "videos" / "moving_square.mp4", shared / "videos" / "slideshow.mp4", clip]
    for name in [n for n in names if n.startswith("SmolVLM2")]:
        folder = shared / "models" / name
        for path in clips:
            key = f"{name}/{path.name}"
            log(f"video_processor {key}")
            try:
                proc = transformers.AutoProcessor.from_pretrained(folder)
                pyav_fetch(proc)
                messages = [{"role": "user", "content": [{"type": "video", "path": str(path)},
                                                         {"type": "text", "text": "Describe this video."}]}]
                ref = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True, return_tensors="pt", do_sample_frames=True)
                ours_video = ImageProcessor.from_pretrained(folder).preprocess_video(path)
                msgs = [{"role": "user", "content": [{"type": "video"},
                                                     {"type": "text", "text": "Describe this video."}]}]
                ours_ids = Tokenizer.from_pretrained(folder).encode_chat(msgs, videos=[ours_video]).input_ids
                ref_px = ref["pixel_values"][0].float().numpy()
                ours_px = ours_video.tiles
                entry = {"ids_equal": ours_ids == ref["input_ids"][0].tolist(),
                         "frames": [ours_video.num_frames, int(ref_px.shape[0])]}
                if ref_px.shape == ours_px.shape:
                    diff = np.abs(ref_px - ours_px)
                    entry.update(pixel_max_abs_diff=float(diff.max()), pixel_mean_abs_diff=float(diff.mean()))
                else:
                    entry["shapes"] = [list(ours_px.shape), list(ref_px.shape)]
                results[key] = entry
            except Exception as exc:  # noqa: BLE001
                results[key] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
            log(f"  {json.dumps({k: v for k, v in results[key].items() if k != 'trace'})}")
    return results


def transformers_ttft(folder: Path, clip: Path, repeats: int) -> dict:
    """transformers on the same clip and question, bf16, SDPA attention: processor (PyAV decoding,
    its torchvision video processor) + ``generate(max_new_tokens=1)``, timed like ours from the call
    to the first token; median of ``repeats`` after a warm-up; peak memory of the whole run."""
    try:
        import transformers
        from transformers import AutoModelForImageTextToText, AutoProcessor

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.bfloat16,
                                                            attn_implementation="sdpa").to("cuda").eval()
        proc = AutoProcessor.from_pretrained(folder)
        pyav_fetch(proc)
        messages = [{"role": "user", "content": [{"type": "video", "path": str(clip)},
                                                 {"type": "text", "text": "Describe this video."}]}]
        times, prompt = [], 0
        for i in range(repeats + 1):
            torch.cuda.synchronize()
            t = time.perf_counter()
            inputs = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                              return_tensors="pt", do_sample_frames=True)
            inputs = {k: (v.to("cuda", torch.bfloat16) if v.is_floating_point() else v.to("cuda"))
                      for k, v in inputs.items()}
            with torch.inference_mode():
                model.generate(**inputs, max_new_tokens=1, do_sample=False)
            torch.cuda.synchronize()
            if i:
                times.append(time.perf_counter() - t)
            prompt = int(inputs["input_ids"].shape[1])
        out = {"transformers": transformers.__version__, "prompt_tokens": prompt, "runs_s": times,
               "ttft_s_median": float(np.median(times)), "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20}
        del model
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return out
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}


H200_BANDWIDTH = 4.8e12  # bytes/s, HBM3e (NVIDIA's H200 datasheet)


def part_decode(shared: Path, names, root: Path, new_tokens: int = 256) -> dict:
    """Decode tok/s of each model at its real shape, bf16, after a 60-token text prompt, as the app
    runs it (ChatSession with the warm-up; median of 3 answers), and the fraction of the bound set by
    reading every text weight once per token (decoder + lm_head bytes / HBM bandwidth)."""
    from engine.api.events import DoneEvent, GenerationParams
    from engine.chat import ChatSession

    results = {}
    prompt = ("Write a long, careful description of a harbour at dawn: the boats, the water, the light on "
              "the cranes, the gulls, the people starting work, and the sounds of the town waking up.")
    for name in names:
        log(f"decode {name}")
        try:
            folder = checkpoint(shared, name, root)
            session = ChatSession.load(str(folder), device="cuda", dtype="bfloat16")
            model = session.model
            text = [p for n, p in model.named_parameters() if not n.startswith(("vision_model", "connector"))]
            text_bytes = sum(p.numel() * p.element_size() for p in text)
            rates = []
            for _ in range(4):  # the first is a warm-up
                session.reset()
                done = [e for e in session.send(prompt, params=GenerationParams(max_new_tokens=new_tokens,
                                                                                 ignore_eos=True))
                        if isinstance(e, DoneEvent)][-1]
                rates.append(done.stats.decode_tokens_per_s)
            rate = float(np.median(rates[1:]))
            bound = H200_BANDWIDTH / text_bytes
            results[name] = {"decode_tok_s": rate, "runs": rates[1:], "text_weight_bytes": text_bytes,
                             "bandwidth_bound_tok_s": bound, "fraction_of_bound": rate / bound,
                             "prompt_tokens": done.stats.prompt_tokens}
            del session, model
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        log(f"  {json.dumps({k: v for k, v in results[name].items() if k != 'trace'})}")
    return results


def weight_bytes_read(model) -> int:
    """Bytes of text weights one decode step reads: every decoder and lm_head tensor (int8 weights
    with their scales), counted once; the embedding table only where it is the lm_head's own weight
    (a step reads one row of it otherwise)."""
    head = getattr(model.lm_head, "weight", None)
    seen, total = set(), 0
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if name.startswith(("vision_model", "connector")) or "rotary" in name or t is None:
            continue
        if "embed_tokens" in name and t is not head:
            continue
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def part_int8(shared: Path, names, root: Path, new_tokens: int = 256, checked: int = 64) -> dict:
    """int8 weights on CUDA against bf16 (``weights="int8"``: the Triton decode step reads int8 rows and
    per-row scales). Per model at its real shape (random weights): load time, memory held after the
    load, the first answer's and the steady decode tok/s (a 60-token text prompt, ``new_tokens`` new,
    the median of 3 answers after the first) and the fraction of the bound set by reading the text
    weights once a token; then, teacher-forced over ``checked`` tokens of the bf16 model's greedy
    answer, the int8 Triton step against the int8 eager decode (the same weights: max |logit
    difference| and argmax agreement) and against bf16 (argmax agreement: what int8 changes)."""
    from engine.api.events import DoneEvent, GenerationParams
    from engine.chat import ChatSession

    prompt = ("Write a long, careful description of a harbour at dawn: the boats, the water, the light on "
              "the cranes, the gulls, the people starting work, and the sounds of the town waking up.")
    results = {}
    for name in names:
        log(f"int8 {name}")
        results[name] = entry = {}
        try:
            folder = checkpoint(shared, name, root)
            sessions = {}
            for weights in ("auto", "int8"):
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                t = time.perf_counter()
                session = ChatSession.load(str(folder), device="cuda", dtype="bfloat16", weights=weights)
                load_s = time.perf_counter() - t
                held = torch.cuda.memory_allocated() - base
                rates, ttfts = [], []
                for _ in range(4):
                    session.reset()
                    done = [e for e in session.send(prompt, params=GenerationParams(
                        max_new_tokens=new_tokens, ignore_eos=True)) if isinstance(e, DoneEvent)][-1]
                    rates.append(done.stats.decode_tokens_per_s)
                    ttfts.append(done.stats.ttft_s)
                read = weight_bytes_read(session.model)
                rate = float(np.median(rates[1:]))
                entry[weights] = {"load_s": load_s, "memory_after_load_bytes": held,
                                  "first_answer_decode_tok_s": rates[0], "first_answer_ttft_s": ttfts[0],
                                  "decode_tok_s": rate, "runs": rates[1:], "ttft_s": float(np.median(ttfts[1:])),
                                  "weight_bytes_read_per_token": read,
                                  "fraction_of_bound": rate / (H200_BANDWIDTH / read),
                                  "weights_label": session.weights}
                log(f"  {weights}: {json.dumps(entry[weights])}")
                sessions[weights] = session
            entry["agreement"] = int8_agreement(sessions["auto"], sessions["int8"], prompt, checked)
            log(f"  agreement: {json.dumps(entry['agreement'])}")
            del sessions, session
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["trace"] = traceback.format_exc()[-2000:]
            log(f"  {entry['error']}")
    return results


@torch.inference_mode()
def int8_agreement(bf16, int8, prompt: str, n: int) -> dict:
    """Teacher-forced over the bf16 model's ``n`` greedy tokens after ``prompt`` (text only): logits of
    the bf16 step, the int8 Triton step (static decoder) and the int8 eager decode (``static_decode``
    off: cuBLAS on the widened weights), each from its own cache."""
    from engine.cache import CacheConfig

    ids = torch.tensor([bf16.tokenizer.encode(prompt)], device="cuda")

    def run(session, static, tokens=None):
        model = session.model
        before = model.static_decode
        model.static_decode = static
        try:
            cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=ids.shape[1] + n + 8))
            logits = model.prefill(model.embed(ids), cache, range(0, ids.shape[1]))
            out, steps = [], []
            for i in range(n):
                nxt = int(logits.argmax(-1)) if tokens is None else tokens[i]
                out.append(nxt)
                logits = model.decode(model.embed(torch.tensor([[nxt]], device="cuda")), cache)
                steps.append(logits.float())
            return out, torch.cat(steps)
        finally:
            model.static_decode = before

    tokens, ref = run(bf16, None)
    triton_logits = run(int8, None, tokens)[1]
    eager_logits = run(int8, False, tokens)[1]
    same = (triton_logits.argmax(-1) == eager_logits.argmax(-1)).float().mean().item()
    return {"tokens": n, "int8_triton_vs_eager_max_abs_logit_diff": (triton_logits - eager_logits).abs().max().item(),
            "int8_triton_vs_eager_argmax_agree": same,
            "logit_std": ref.std().item(),
            "int8_vs_bf16_argmax_agree": (triton_logits.argmax(-1) == ref.argmax(-1)).float().mean().item(),
            "int8_vs_bf16_max_abs_logit_diff": (triton_logits - ref).abs().max().item(),
            "int8_static_decoder_uses_triton": int8.model._static is not None and int8.model._static.triton is not None}


def part_ttft(shared: Path, names, root: Path, clip: Path, repeats: int = 3,
              reference: bool = True) -> dict:
    from engine.api.events import DoneEvent, GenerationParams
    from engine.chat import ChatSession
    from engine.models.smolvlm.processing import ImageProcessor

    results = {}
    for name in [n for n in names if n.startswith("SmolVLM2")]:
        log(f"ttft {name}")
        try:
            folder = checkpoint(shared, name, root)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            session = ChatSession.load(str(folder), device="cuda", dtype="bfloat16")
            params = GenerationParams(max_new_tokens=8, ignore_eos=True, temperature=0.0)
            processor = ImageProcessor.from_pretrained(folder)
            t = time.perf_counter()
            frames = processor.preprocess_video(clip).num_frames
            decode_s = time.perf_counter() - t
            runs = []
            for i in range(repeats + 1):  # the first is a warm-up (kernels, allocator)
                session.reset()
                session.cache.prefix.clear()  # each run reads the video: no blocks from the last one
                done = None
                for event in session.send("Describe this video.", videos=[clip], params=params):
                    if isinstance(event, DoneEvent):
                        done = event
                if done is None or done.error:
                    raise RuntimeError(done and done.error)
                if i:
                    runs.append({"ttft_s": done.stats.ttft_s, "prompt_tokens": done.stats.prompt_tokens,
                                 "prefill_tokens_per_s": done.stats.prefill_tokens_per_s,
                                 "decode_tokens_per_s": done.stats.decode_tokens_per_s})
            results[name] = {"frames": frames, "frames_decode_resize_s": decode_s,
                             "ttft_s_median": float(np.median([r["ttft_s"] for r in runs])), "runs": runs,
                             "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20}
            del session
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            if reference:
                results[name]["transformers"] = transformers_ttft(folder, clip, repeats)
                ref = results[name]["transformers"]
                if "ttft_s_median" in ref:
                    results[name]["ttft_ratio_vs_transformers"] = results[name]["ttft_s_median"] / ref["ttft_s_median"]
                    results[name]["peak_ratio_vs_transformers"] = results[name]["peak_gpu_mb"] / ref["peak_gpu_mb"]
        except Exception as exc:  # noqa: BLE001
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        log(f"  {json.dumps({k: v for k, v in results[name].items() if k != 'trace'})}")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=str(SHARED))
    ap.add_argument("--out", default="bench/results/family_gpu.json")
    ap.add_argument("--only", default="parity,video_processor,ttft")
    ap.add_argument("--models", default=",".join(FAMILY))
    ap.add_argument("--work", default=None, help="folder for the random checkpoints (default: a temp dir)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("CUDA is not available: run this on the GPU machine", file=sys.stderr)
        return 2
    shared, names, parts = Path(args.shared), args.models.split(","), args.only.split(",")
    root = Path(args.work or tempfile.mkdtemp(prefix="family-gpu-"))
    root.mkdir(parents=True, exist_ok=True)
    clip = long_clip(root / "clip_80s.mp4") if {"video_processor", "ttft"} & set(parts) else None
    from bench.common import machine

    report = {"machine": machine("cuda")}
    if "parity" in parts:
        report["parity"] = part_parity(shared, names, root)
    if "video_processor" in parts:
        report["video_processor"] = part_video_processor(shared, names, clip)
    if "ttft" in parts:
        report["ttft"] = part_ttft(shared, names, root, clip)
    if "decode" in parts:
        report["decode"] = part_decode(shared, names, root)
    if "int8" in parts:
        report["int8"] = part_int8(shared, names, root)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
