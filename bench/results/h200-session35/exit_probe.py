"""Does a process end cleanly when it exits while (or right after) a model loads on CUDA?

Each case runs in a fresh process, a few times; a case passes when the process ends with its own exit
code and no abort ("terminate called", a signal, "Fatal Python error") on stderr.

    python exit_probe.py CHECKPOINT --repeats 3 > exit.jsonl

Each line: ``rc`` (negative: the signal that ended it), ``bad`` (abort messages seen on stderr),
``wall_s`` (the whole process), ``after_line_s`` (server cases: from its first stdout line, after
which the SIGINT is sent ``delay`` s later, to the process's end).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

CHILD = r'''
import sys, time
mode, ck, delay, dev = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
if mode == "load_model":
    from engine.registry import load_model
    load_model(ck, device=dev)
elif mode == "components":
    from engine.registry import load_components
    load_components(ck, device=dev)
elif mode == "session":
    from engine.chat import ChatSession
    ChatSession.load(ck, device=dev)
elif mode == "service":
    from engine.service import EngineService
    svc = EngineService()
    svc.load(ck, {"device": dev}, lambda info, err: print("loaded", err, flush=True))
    time.sleep(delay)
    print("stopped", svc.shutdown(1.0), flush=True)
print("exit", flush=True)
'''

BAD = ("terminate called", "Fatal Python error", "Segmentation fault", "core dumped", "Aborted")


def interrupted(cmd: list[str], delay: float, wait_for_line: bool) -> tuple[subprocess.Popen, str, str, float]:
    """Start ``cmd``, send SIGINT ``delay`` s after its start (or after its first stdout line), wait."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline() if wait_for_line else ""  # the server's "Smolchat server: ... loading ..."
    t_line = time.perf_counter()
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return p, line + out, err, time.perf_counter() - t_line


def run_child(args, mode: str, delay: float) -> dict:
    t0 = time.perf_counter()
    if mode == "server":
        p, out, err, since = interrupted([sys.executable, "-m", "engine", "serve", "--model", args.checkpoint,
                                          "--port", "0", "--device", args.device], delay, wait_for_line=True)
    elif mode == "cli":  # Ctrl-C ``delay`` s after the process started
        p, out, err, _ = interrupted([sys.executable, "-m", "engine", "generate", "--model", args.checkpoint,
                                      "--device", args.device, "--prompt", "Hello", "--max-new-tokens", "4"],
                                     delay, wait_for_line=False)
        since = None
    else:
        p = subprocess.run([sys.executable, "-c", CHILD, mode, args.checkpoint, str(delay), args.device], capture_output=True,
                           text=True, timeout=120)
        out, err, since = p.stdout, p.stderr, None
    bad = [b for b in BAD if b in err]
    return {"mode": mode, "delay": delay, "rc": p.returncode, "bad": bad, "wall_s": round(time.perf_counter() - t0, 3),
            "after_line_s": None if since is None else round(since, 3), "stdout": out[-300:],
            "stderr_tail": err[-600:] if (bad or p.returncode not in (0, 130) or mode == "cli") else ""}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default="load_model,components,session,service,server")
    ap.add_argument("--service-delays", default="0.05,0.2,0.4,0.7,1.0,1.5")
    ap.add_argument("--server-delays", default="0.05,0.3,0.7,1.2,2.5")
    ap.add_argument("--cli-delays", default="2,3,4,5,6,7")
    args = ap.parse_args()
    cases = []
    for mode in args.cases.split(","):
        delays = {"service": args.service_delays, "server": args.server_delays,
                  "cli": args.cli_delays}.get(mode, "0")
        cases += [(mode, float(d)) for d in delays.split(",")]
    for _ in range(args.repeats):
        for mode, delay in cases:
            print(json.dumps(run_child(args, mode, delay)), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
