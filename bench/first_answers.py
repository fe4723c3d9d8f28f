"""First answers after start, the way a user gets them: a fresh process, no warm-up round.

    python bench/first_answers.py --checkpoint /tmp/ck --image photo.png --device cuda --out first.json

Each run is a new Python process that loads the model with ``ChatSession.load`` (what the app does)
and asks, in one conversation:

1. a question about a photo (reference detail: a 512 x 512 photo is 17 tiles), ``--new-tokens``
   tokens (256);
2. a follow-up question in text (about 14 new prompt tokens), 64 tokens;
3. a question about a second photo, ``--new-tokens`` tokens;
4. answer 1's question again in a fresh conversation, prefix cache emptied: the steady state the
   other benches report;
5. the same once more in a new conversation, its photo's blocks found in the prefix cache.

For each answer: time to first token (wall, from the call) and decode tok/s. Then the command line:
a fresh ``python -m engine generate`` process for a 44-token text prompt (512 tokens) and for the
photo question (64 tokens), with their ``--json`` done lines. ``--runs`` repeats the whole thing in
new processes. Load time to ready is reported by the process itself.
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
TEXT_PROMPT = ("You are helping me plan a long trip across Europe by train next summer. Write a detailed "
               "day by day plan.")


def one_process(args) -> dict:
    """Runs in the child: load, answer 1-4, return the figures."""
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    sys.path.insert(0, str(REPO))
    t0 = time.perf_counter()
    from engine.api.events import DoneEvent, GenerationParams, TokenEvent
    from engine.chat import ChatSession

    imported = time.perf_counter()
    session = ChatSession.load(args.checkpoint, device=args.device, dtype=args.dtype)
    warmup = getattr(session, "warmup_s", None)
    # load_s counts from the process's first line (imports included); load_to_ready_s from after the
    # engine's imports, which the app does before its window shows.
    out: dict = {"load_s": time.perf_counter() - t0, "load_to_ready_s": time.perf_counter() - imported,
                 "warmup_s": warmup, "answers": []}

    def memory() -> dict:
        """CUDA memory now and the peak so far (MiB): where in the run the process peak is reached."""
        if args.device != "cuda":
            return {}
        import torch

        return {"allocated_mib": torch.cuda.memory_allocated() / 2**20,
                "peak_so_far_mib": torch.cuda.max_memory_allocated() / 2**20}

    out["after_load"] = memory()
    sync = (lambda: __import__("torch").cuda.synchronize()) if args.device == "cuda" else (lambda: None)
    phases: dict[str, float] = {}
    if args.phases:  # where the time of each answer goes (synchronizes around each phase: slower overall)
        def timed(obj, name, label):
            original = getattr(obj, name)

            def wrapper(*a, **k):
                sync()
                t = time.perf_counter()
                try:
                    return original(*a, **k)
                finally:
                    sync()
                    phases[label] = phases.get(label, 0.0) + time.perf_counter() - t
                    phases[label + "_calls"] = phases.get(label + "_calls", 0) + 1
            setattr(obj, name, wrapper)

        timed(session, "preprocess", "preprocess")
        timed(session, "_fit_context", "prompt")
        timed(session.model, "embed_multimodal", "embed_and_vision")
        timed(session.model, "prefill", "prefill")
        timed(session.model, "decode", "decode")

    def ask(s, text, images, n):
        params = GenerationParams(max_new_tokens=n, ignore_eos=True)
        sync()
        start = time.perf_counter()
        stamps, done = [], None
        for ev in s.send(text, images=images, params=params):
            if isinstance(ev, TokenEvent) and ev.token_id >= 0:
                stamps.append(time.perf_counter())
            elif isinstance(ev, DoneEvent):
                done = ev
        if done is None or done.error:
            raise RuntimeError(f"generation failed: {done and done.error}")
        rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else None
        res = {"ttft_s": stamps[0] - start, "decode_tok_s": rate, "prompt_tokens": done.stats.prompt_tokens,
               "cached_tokens": done.stats.cached_tokens, "generated_tokens": len(stamps)}
        if phases:
            res["phases"] = dict(phases)
            phases.clear()
        res.update(memory())
        return res

    out["answers"].append(ask(session, "Describe this image in detail.", [args.image], args.new_tokens))
    out["answers"].append(ask(session, "And what colour is the largest thing in it?", [], 64))
    out["answers"].append(ask(session, "Now describe this one.", [args.image2 or args.image], args.new_tokens))
    session.reset()
    prefix = getattr(session.cache, "prefix", None)
    if prefix is not None:
        prefix.clear()  # answer 4 is a full prefill's steady state, not a prefix-cache hit
    out["answers"].append(ask(session, "Describe this image in detail.", [args.image], args.new_tokens))
    session.reset()  # 5: the same photo in a new conversation: its blocks come from the prefix cache
    out["answers"].append(ask(session, "Describe this image in detail.", [args.image], args.new_tokens))
    if args.device == "cuda":
        import torch

        out["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def cli_run(args, prompt_args: list[str], n: int) -> dict:
    cmd = [sys.executable, "-m", "engine", "generate", "--model", args.checkpoint, "--device", args.device,
           "--max-new-tokens", str(n), "--ignore-eos", "--json", *prompt_args]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    wall = time.perf_counter() - t
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = next((d for d in lines if d.get("type") == "done"), {"error": proc.stderr[-400:]})
    return {"process_wall_s": wall, **done}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--image2", default=None, help="the photo of answer 3 (default: --image, re-read)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--phases", action="store_true", help="also time preprocess / prompt / vision / prefill / "
                    "decode per answer (synchronizing: slower)")
    ap.add_argument("--no-cli", action="store_true", help="skip the command-line runs")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="the GIL's switch interval (s) in the measured processes, set before the engine's imports")
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(one_process(args)))
        return 0
    res: dict = {"args": vars(args), "runs": [], "cli": []}
    for _ in range(args.runs):
        cmd = [sys.executable, __file__, *[a for a in (argv or sys.argv[1:])], "--child"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
        if proc.returncode:
            res["runs"].append({"error": proc.stderr[-2000:]})
            continue
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        res["runs"].append(run)
        print(json.dumps(run), flush=True)
        if args.no_cli:
            continue
        res["cli"].append({"text_512": cli_run(args, ["--prompt", TEXT_PROMPT], 512),
                           "photo_64": cli_run(args, ["--image", args.image, "--prompt", "Describe this image."],
                                               64)})
        print(json.dumps(res["cli"][-1]), flush=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
