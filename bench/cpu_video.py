"""CPU time to first token for a question about a video, at 12, 6 and 4 sampled frames.

    python -m tools.make_checkpoint --config ../shared/models/SmolVLM2-256M-Video-Instruct --out /tmp/ck --dtype float32
    python bench/cpu_video.py --checkpoint /tmp/ck --out bench/results/cpu-video.json

``ChatSession`` as the app uses it, float32, ``slideshow.mp4`` (12 s, so 12 frames at 1 fps); every run
starts with an empty prefix cache and no cached tiles, so each reads the video again. Two runs each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.shared import SHARED  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--video", default=str(SHARED / "videos" / "slideshow.mp4"))
    ap.add_argument("--frames", default="12,6,4")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch

    from bench.common import machine
    from engine.api.events import DoneEvent, GenerationParams
    from engine.chat import ChatSession

    session = ChatSession.load(args.checkpoint, device="cpu")
    out = {"machine": machine("cpu"), "dtype": session.dtype, "threads": torch.get_num_threads(), "runs": {}}
    for frames in map(int, args.frames.split(",")):
        for _ in range(args.runs):
            session.reset()
            session.cache.prefix.clear()
            session._processed.clear()
            params = GenerationParams(max_new_tokens=4, ignore_eos=True, video_max_frames=frames)
            done = [e for e in session.send("What happens in this video?", videos=[args.video], params=params)
                    if isinstance(e, DoneEvent)][-1]
            run = {"frames": done.stats.video_frames, "prompt_tokens": done.stats.prompt_tokens,
                   "ttft_s": round(done.stats.ttft_s, 2), "load_avg": round(os.getloadavg()[0], 2)}
            print(run, flush=True)
            out["runs"].setdefault(str(frames), []).append(run)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
