"""``smolchat --self-test``: prove an installation works, without a display.

Loads the model, answers one question about an image drawn here with Pillow (a text-only model, such
as SmolLM2, gets a text question instead: it takes no images), prints one JSON line
(device, dtype, timings, tokens) on stdout and exits 0. Any failure prints ``{"ok": false, ...}``
on stdout, a one-line message on stderr, and exits 1. Works from source and from the frozen build.

Without ``--model`` it tests the model the app last used (``models/last`` in settings.ini), else one
found in the app's models folder or the Hugging Face cache. Qt's widgets are not imported unless
``--gui`` also asks to build the main window (offscreen) and load the model through the app's engine
thread (QtCore reads settings.ini). That window keeps its conversations and settings in a temporary
folder, removed after: the check writes nothing into the user's data folder (trial 53: the tested
model joined the user's list and became the one the app opened next, beside a window open on it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from engine.api import looks_like_repo_id

QUESTION = "What shape is in the middle of this picture, and what colour is it?"
# For text-only models: a question with one short, checkable answer (SmolLM2-135M: "... Paris.").
TEXT_QUESTION = "What is the capital of France?"
# Hub ids looked up in the local Hugging Face cache (never downloaded) when no --model is given.
KNOWN_REPOS = (
    "HuggingFaceTB/SmolVLM-256M-Instruct",
    "HuggingFaceTB/SmolVLM-500M-Instruct",
    "HuggingFaceTB/SmolVLM-Instruct",
)


class SelfTestError(Exception):
    """A failure with a message meant for the user."""


def answer_length(text: str) -> int:
    """argparse type of ``--max-new-tokens``: at least 1 (0 loaded the model only to fail)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="smolchat --self-test",
                                     description="Answer one built-in question (about an image if the model "
                                                 "reads images) and print a JSON line.")
    parser.add_argument("--model", metavar="DIR_OR_REPO",
                        help="model folder or Hub id (default: the model the app last used, else one "
                             "found in the app's models folder or the local Hugging Face cache; nothing is "
                             "downloaded)")
    parser.add_argument("--device", choices=["cuda", "mps", "cpu"], help="default: the best available")
    parser.add_argument("--dtype", help="e.g. float32 or bfloat16 (default: chosen for the device)")
    parser.add_argument("--max-new-tokens", type=answer_length, default=8)
    parser.add_argument("--gui", action="store_true",
                        help="also build the main window offscreen and load the model through it")
    parser.add_argument("--gui-timeout", type=float, default=120.0, help="seconds (default 120)")
    return parser.parse_args(argv)


def make_image():
    """A 320x240 picture drawn at run time: a red circle on a blue sky over green grass."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (320, 240), (70, 130, 220))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 180, 320, 240), fill=(40, 160, 60))
    draw.ellipse((110, 70, 210, 170), fill=(220, 30, 30), outline=(120, 0, 0), width=3)
    return image


def last_used_model() -> str:
    """The model the app last loaded (settings.ini ``models/last``), or "" when unknown or gone."""
    try:
        from app.settings import last_model

        model = last_model()
    except Exception:  # an unreadable settings file must not stop the self-test: look further
        return ""
    if not model:
        return ""
    if not looks_like_repo_id(model):
        return model if Path(model).exists() else ""
    try:  # a Hub id: only if it is in the local cache (the self-test never downloads)
        from huggingface_hub import snapshot_download

        return snapshot_download(model, local_files_only=True)
    except Exception:
        return ""


def candidate_models() -> list[Path]:
    """Model folders this user already has: the app's models folder, then the Hugging Face cache."""
    from app.paths import models_dir

    found = sorted(p for p in models_dir().glob("*") if (p / "config.json").is_file())
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a dependency of the app
        return found
    for repo in KNOWN_REPOS:
        try:
            found.append(Path(snapshot_download(repo, local_files_only=True)))
        except Exception:  # not cached (or the cache is unreadable): look further
            continue
    return found


def resolve_model(model: str | None) -> str:
    if model:
        if not looks_like_repo_id(model):
            path = Path(model)
            gguf = path.suffix.lower() == ".gguf" and path.is_file() or path.is_dir() and any(path.glob("*.gguf"))
            if not gguf and not (path / "config.json").is_file():
                raise SelfTestError(f"no model at {model}: give a .gguf file, or a folder with config.json, "
                                    "tokenizer files and *.safetensors weights")
        return model
    last = last_used_model()
    if last:
        return last
    found = candidate_models()
    if not found:
        from app.paths import models_dir

        raise SelfTestError(
            "no model found: pass --model DIR (a SmolVLM folder), or start Smolchat and download one in "
            f"the model manager (looked in {models_dir()} and the Hugging Face cache for "
            f"{', '.join(KNOWN_REPOS)})")
    return str(found[0])


def run_engine(model: str, args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    from engine.api.events import DoneEvent, GenerationParams, TokenEvent
    from engine.chat import ChatSession

    t_import = time.perf_counter()
    session = ChatSession.load(model, device=args.device, dtype=args.dtype)
    t_load = time.perf_counter()
    answer, tokens, done = [], 0, None
    params = GenerationParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    takes_images = session.model.capabilities().vision
    question, images = (QUESTION, [make_image()]) if takes_images else (TEXT_QUESTION, [])
    for event in session.send(question, images=images, params=params):
        if isinstance(event, TokenEvent):
            answer.append(event.text)
            tokens += 1
        elif isinstance(event, DoneEvent):
            done = event
    if done is None:
        raise SelfTestError("the engine ended without a final event")
    if done.finish_reason == "error" or done.error:
        raise SelfTestError(f"generation failed: {done.error or done.finish_reason}")
    stats = done.stats
    if stats.generated_tokens < 1 or tokens < 1:
        raise SelfTestError("the model generated no tokens")
    return {
        "device": session.device,
        "dtype": session.dtype,
        "weights": session.weights,
        "question": question,
        "image": takes_images,
        "finish_reason": done.finish_reason,
        "prompt_tokens": stats.prompt_tokens,
        "image_tokens": stats.image_tokens,
        "generated_tokens": stats.generated_tokens,
        "import_s": round(t_import - t0, 3),
        "load_s": round(t_load - t_import, 3),
        "ttft_s": round(stats.ttft_s, 3),
        "generate_s": round(time.perf_counter() - t_load, 3),
        "prefill_tokens_per_s": round(stats.prefill_tokens_per_s, 1),
        "decode_tokens_per_s": round(stats.decode_tokens_per_s, 1),
        "answer": "".join(answer).strip(),
    }


def run_gui(model: str, args: argparse.Namespace) -> dict:
    """Build the real main window offscreen, on a temporary data folder, and wait until its engine
    thread has loaded the model."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    scratch = tempfile.mkdtemp(prefix="smolchat-self-test-")
    previous = os.environ.get("SMOLCHAT_DATA_DIR")
    os.environ["SMOLCHAT_DATA_DIR"] = scratch
    try:
        return _run_gui(model, args)
    finally:
        if previous is None:
            os.environ.pop("SMOLCHAT_DATA_DIR", None)
        else:
            os.environ["SMOLCHAT_DATA_DIR"] = previous
        shutil.rmtree(scratch, ignore_errors=True)


def _run_gui(model: str, args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    from app.application import create_app
    from app.main_window import MainWindow

    qt_app = create_app(sys.argv[:1])
    window = MainWindow(model_path=model, device=args.device, dtype=args.dtype)
    window.show()
    outcome: dict = {}
    window.controller.model_loaded.connect(lambda info: outcome.setdefault("loaded", info))
    window.controller.model_load_failed.connect(lambda message: outcome.setdefault("failed", message))
    deadline = time.monotonic() + args.gui_timeout
    try:
        while not outcome and time.monotonic() < deadline:
            qt_app.processEvents()
            time.sleep(0.01)
    finally:
        window.shutdown()
    if "failed" in outcome:
        raise SelfTestError(f"the main window could not load the model: {outcome['failed']}")
    if not outcome:
        raise SelfTestError(f"the main window did not load the model within {args.gui_timeout:.0f} s")
    return {"platform": qt_app.platformName(), "window_load_s": round(time.perf_counter() - t0, 3)}


def self_test(args: argparse.Namespace) -> dict:
    from app.paths import is_frozen

    started = time.perf_counter()
    model = resolve_model(args.model)
    result = {"ok": True, "frozen": is_frozen(), "model": model, **run_engine(model, args)}
    if args.gui:
        result["gui"] = run_gui(model, args)
    result["total_s"] = round(time.perf_counter() - started, 3)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = self_test(args)
    except Exception as exc:  # every failure becomes one clear line, never a bare traceback
        message = str(exc) if isinstance(exc, SelfTestError) else f"{type(exc).__name__}: {exc}"
        print(json.dumps({"ok": False, "error": message}), flush=True)
        print(f"smolchat self-test failed: {message}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
