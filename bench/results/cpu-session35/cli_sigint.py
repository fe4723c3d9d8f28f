"""Ctrl-C at spread moments of `python -m engine generate` (CPU): exit statuses, old tree vs new, interleaved.

    git worktree add /tmp/before35 <old commit>; python cli_sigint.py PAIRS > roundN.jsonl

Each pair sends SIGINT at the same random moment (0.3-3.5 s after the start, seed 0) to a process of
each tree, in alternating order; SIGINT is reset to its default in the children (this script may run
as a background job, which starts them with it ignored)."""
import json
import random
import signal
import subprocess
import sys
import time

trees = {"old": "/tmp/before35", "new": "/work/main"}
random.seed(0)
rows = []
for i in range(int(sys.argv[1])):
    d = random.uniform(0.3, 3.5)
    for tag in (("old", "new") if i % 2 == 0 else ("new", "old")):
        p = subprocess.Popen([sys.executable, "-m", "engine", "generate", "--model", sys.argv[2] if len(sys.argv) > 2 else "/tmp/ck256", "--device", "cpu",
                              "--prompt", "Hello", "--max-new-tokens", "16"], cwd=trees[tag],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(d)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate()
        r = {"tag": tag, "delay": round(d, 3), "rc": p.returncode, "traceback": "Traceback" in err,
             "terminate": "terminate called" in err, "err": err[-400:] if p.returncode not in (0, 130) or "Traceback" in err else ""}
        print(json.dumps(r), flush=True)
