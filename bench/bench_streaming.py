"""Time the transcript while an answer streams: 2000 tokens appended to one answer.

    QT_QPA_PLATFORM=offscreen python bench/bench_streaming.py [--tokens 2000] [--messages 20]

Prints the mean and worst time per token (append + processing the resulting layout events) and
the one-off time of rendering the finished answer as Markdown. Tokens are appended to the end
of one document, so the cost per token should stay flat as the answer grows; compare the first
and last 200 tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=20, help="earlier messages in the transcript")
    args = parser.parse_args()

    from PySide6.QtWidgets import QApplication

    from app.chat_view import ChatView

    app = QApplication.instance() or QApplication([])
    view = ChatView()
    view.resize(900, 700)
    view.show()
    for i in range(args.messages // 2):
        view.add_user_message(f"question {i}", [])
        view.add_stored_answer("bench", f"An earlier answer with **Markdown** number {i}.\n\n- a\n- b", "stop", "")
    app.processEvents()
    view.begin_answer("bench")
    words = ["lorem", "ipsum", "dolor", "sit", "amet,", "consectetur", "adipiscing", "elit.\n\n", "`code`", "sed"]
    times = []
    for i in range(args.tokens):
        t = time.perf_counter()
        view.append_token(" " + words[i % len(words)])
        app.processEvents()
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    view.end_answer("stop")
    app.processEvents()
    render = time.perf_counter() - t
    ms = [x * 1000 for x in times]
    print(f"{args.tokens} tokens, {args.messages} earlier messages")
    print(f"per token: mean {statistics.mean(ms):.3f} ms, p99 {sorted(ms)[int(0.99 * len(ms))]:.3f} ms, "
          f"max {max(ms):.3f} ms")
    print(f"first 200: mean {statistics.mean(ms[:200]):.3f} ms; last 200: mean {statistics.mean(ms[-200:]):.3f} ms")
    print(f"total {sum(times):.2f} s; final Markdown render {render * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
