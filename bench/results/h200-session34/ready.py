"""Session 34: load to ready of one fresh process, as bench/first_answers.py measures it (after the
engine's imports, ChatSession.load with its warm-up), without the answers. Prints one JSON line.

    python ready.py CHECKPOINT TAG        (run from the tree whose engine is measured)
"""
import json
import sys
import time

sys.path.insert(0, ".")
from engine.chat import ChatSession  # noqa: E402

t = time.perf_counter()
session = ChatSession.load(sys.argv[1], device="cuda")
ready = time.perf_counter() - t
print(json.dumps({"tag": sys.argv[2], "load_to_ready_s": round(ready, 4), "warmup_s": round(session.warmup_s, 4),
                  "components_s": round(ready - session.warmup_s, 4)}))
