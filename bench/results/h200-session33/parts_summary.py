"""Summarize load_parts.py's JSON lines: per tag, load to ready, the collector's time, and each call's
start and duration (the n-th call of a label is ``label#n``) as min / median / max over processes."""
import collections
import json
import statistics
import sys

by_tag = collections.defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    by_tag[d["tag"]].append(d)


def mmm(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}"


for tag, ds in by_tag.items():
    print(f"== {tag} ({len(ds)} processes, python {ds[0]['python']})")
    print("load to ready      ", mmm([d["load_to_ready_s"] for d in ds]), [d["load_to_ready_s"] for d in ds])
    print("warm-up            ", mmm([d["warmup_s"] for d in ds]))
    print("text TTFT after    ", mmm([d["text_ttft_s"] for d in ds]))
    print("objects before/after", [(d["objects_before"], d["objects_after"], d["gc_frozen"]) for d in ds])
    for g in (0, 1, 2):
        n = [sum(1 for c in d["gc_collections"] if c[0] == g and c[2] <= d["load_to_ready_s"]) for d in ds]
        s = [sum(c[3] for c in d["gc_collections"] if c[0] == g and c[2] <= d["load_to_ready_s"]) for d in ds]
        print(f"gen {g} collections in the load: n {n}, seconds {[round(x, 4) for x in s]}")
    for d in ds:
        big = [c for c in d["gc_collections"] if c[0] == 2 or c[3] > 0.005]
        if big:
            print("   ", d["tag"], "gen2/slow collections (gen, thread, at, s, collected):", big)
    for k in sorted({k for d in ds for k in d["marks"]}):
        print(f"mark {k:28s}", mmm([d["marks"].get(k) for d in ds]))
    rows = collections.defaultdict(lambda: ([], [], []))
    order = []
    for d in ds:
        seen = collections.Counter()
        for label, thread, at, dur in d["events"]:
            seen[label] += 1
            key = f"{label}#{seen[label]}"
            if key not in rows:
                order.append(key)
            rows[key][0].append(at)
            rows[key][1].append(dur)
            rows[key][2].append(thread)
    order.sort(key=lambda k: statistics.median(rows[k][0]))
    for k in order:
        at, dur, th = rows[k]
        print(f"  {k:44s} at {statistics.median(at):7.3f}  s {mmm(dur):24s} {th[0][:22]}")
    print()
