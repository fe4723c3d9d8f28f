"""Session 34: one line per first_answers.py process (load to ready, warm-up, TTFTs, decode rates)."""
import json
import sys

for path in sys.argv[1:]:
    d = json.load(open(path))
    for run in d["runs"]:
        if "error" in run:
            print(path, "error", run["error"][-300:])
            continue
        a = run["answers"]
        print("%s switch %s: ready %.3f s (warm-up %.3f, from process start %.2f); TTFT ms %s; decode tok/s %s" % (
            path.rsplit("/", 1)[-1], d["args"].get("switch_interval"), run["load_to_ready_s"], run["warmup_s"],
            run["load_s"], [round(x["ttft_s"] * 1e3, 1) for x in a], [round(x["decode_tok_s"]) for x in a]))
