"""Summarize py-spy's raw (collapsed) stacks of one load_trace.py process: the main thread's samples by
phase, by the innermost engine frame, and by the leaf frame (idle samples included: waits show)."""
import collections
import sys

PHASES = ("load_components (", "capture_all (", "LlamaLM.warmup (", "_warm_photo_question (")
by_phase, by_engine, by_leaf, by_engine_leaf = (collections.Counter() for _ in range(4))
total = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    if not n.isdigit() or "load_trace.py" not in stack:
        continue
    n = int(n)
    frames = stack.split(";")
    total += n
    phase = next((p.rstrip(" (") for p in PHASES if p in stack), "other")
    by_phase[phase] += n
    eng = [f for f in frames if "(engine/" in f or "/engine/" in f]
    e = eng[-1].split(" (")[0] + " " + eng[-1].rsplit("/", 1)[-1] if eng else "(no engine frame)"
    by_engine[(phase[:22], e)] += n
    leaf = frames[-1][:110]
    by_leaf[leaf] += n
    by_engine_leaf[(e[:60], leaf[:70])] += n
print("main-thread samples", total)
for k, v in by_phase.most_common():
    print(f"{v:7d} {k}")
print("\n-- innermost engine frame")
for k, v in by_engine.most_common(45):
    print(f"{v:7d} {k}")
print("\n-- leaf frame")
for k, v in by_leaf.most_common(35):
    print(f"{v:7d} {k}")
print("\n-- engine frame x leaf")
for k, v in by_engine_leaf.most_common(40):
    print(f"{v:7d} {k}")

# What the first fused kernel's launch does (Triton's per-process and per-kernel setup).
under = collections.Counter()
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    if n.isdigit() and "load_trace.py" in stack and "embed_token (" in stack:
        tail = stack.split("embed_token (", 1)[1].split(";")[1:]
        under[";".join(f.split(" (")[0] for f in tail[:9])] += int(n)
print("\n-- under TritonStep.embed_token (first 9 frames)")
for k, v in under.most_common(30):
    print(f"{v:7d} {k[:300]}")
