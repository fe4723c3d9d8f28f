"""How fast Stop ends an answer while the engine is still reading a photo (vision tower or prefill).

Sends a large photo through :class:`engine.service.EngineService`, cancels ``--after`` seconds later
and prints one JSON line per run: where the cancel landed (the last ProgressEvent) and how long the
DoneEvent took to arrive after cancel() (DESIGN.md §7: within 200 ms).

    python bench/stop_latency.py --model DIR [--image PATH] [--after 1.0] [--at image|prefill] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from bench.shared import SHARED
from engine.api import Attachment, DoneEvent, GenerationParams, ProgressEvent
from engine.service import EngineService


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--image", default=str(SHARED / "images" / "hubble_deep_field.jpg"))
    parser.add_argument("--after", type=float, default=1.0, help="seconds between send and cancel")
    parser.add_argument("--at", choices=["image", "prefill"],
                        help="cancel at the first progress of this stage past --after instead")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    service = EngineService()
    loaded = threading.Event()
    service.load(args.model, {"device": args.device}, lambda info, message: loaded.set())
    loaded.wait()
    for _ in range(args.runs):
        events, done = [], threading.Event()

        def sink(event, events=events, done=done):
            events.append((time.perf_counter(), event))
            if isinstance(event, DoneEvent):
                done.set()

        service.reset()
        service.send("Describe this photo.", [Attachment(args.image)], GenerationParams(max_new_tokens=16), sink)
        time.sleep(args.after)
        while args.at and not done.is_set() and not any(
                isinstance(e, ProgressEvent) and e.stage == args.at and e.done > 0 for _, e in list(events)):
            time.sleep(0.001)
        t_cancel = time.perf_counter()
        service.cancel()
        done.wait()
        last = next((e for _, e in reversed(events[:-1]) if isinstance(e, ProgressEvent)), None)
        print(json.dumps({"finish_reason": events[-1][1].finish_reason,
                          "stop_latency_ms": round((events[-1][0] - t_cancel) * 1000, 1),
                          "landed_in": f"{last.stage} {last.done}/{last.total}" if last else "before any progress"}), flush=True)
    service.shutdown()


if __name__ == "__main__":
    main()
