"""Session 32: the vision tower's graph replay per chunk size (1-4 tiles), and whole photos' tiles
through the steps with every size captured against sizes (1, 4) only (2 and 3 padded to 4).

    python vision_replay.py CHECKPOINT
"""
import json
import sys

import torch

sys.path.insert(0, ".")
from engine.models.smolvlm import SmolVlmModel  # noqa: E402
from engine.models.smolvlm.vision_graphs import VisionGraphs  # noqa: E402
from engine.sources import LocalDirSource  # noqa: E402


def timed(fn, n=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n * 1e3  # us


@torch.inference_mode()
def measure(steps, size, meta, model):
    steps.capture_all()
    r = {"replay_us": {k: round(timed(lambda k=k: steps._step(k)), 1) for k in range(1, 5)}}
    for n in (2, 3, 5, 7, 10, 13, 17):
        tiles = torch.randn(n, 3, size, size, device="cuda").to(model.vision_dtype)
        out = torch.empty(n, meta.image_seq_len, meta.text.hidden_size, device="cuda", dtype=model.dtype)
        r[f"run_{n}_tiles_us"] = round(timed(lambda tiles=tiles, out=out: steps.run(tiles, out), 20), 1)
    return r


def main():
    model = SmolVlmModel.load(LocalDirSource(sys.argv[1]), torch.device("cuda"), torch.bfloat16)
    size = model.metadata.vision.image_size
    meta = model.metadata
    tower = lambda x: model.model.connector(model.model.vision_model(x))  # noqa: E731
    res = {}
    for sizes in ((1, 2, 3, 4), (1, 4)):
        steps = VisionGraphs(tower, (3, size, size), model.device, model.vision_dtype, 4, sizes=sizes)
        res[",".join(map(str, sizes))] = measure(steps, size, meta, model)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
