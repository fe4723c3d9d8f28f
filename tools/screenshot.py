"""Render Smolchat answering one question about one image, and save a PNG of the window.

    python tools/screenshot.py --model DIR --image PATH --prompt TEXT --out PNG
    python tools/screenshot.py --fake --image PATH --prompt TEXT --out PNG
    python tools/screenshot.py --model SmolLM2.gguf --prompt TEXT --then TEXT --out PNG   # text model, two turns

Runs headless with QT_QPA_PLATFORM=offscreen (or under xvfb-run). ``--fake`` streams a canned
answer instead of loading a model; ``--dark`` renders with the dark palette; ``--history`` adds a
few earlier chats to the sidebar; ``--pending FILE`` leaves files attached in the composer, unsent;
``--manager PNG`` also saves the model manager. Data goes to a
temporary folder unless SMOLCHAT_DATA_DIR is set.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
if "SMOLCHAT_DATA_DIR" not in os.environ:
    import tempfile

    os.environ["SMOLCHAT_DATA_DIR"] = tempfile.mkdtemp(prefix="smolchat-shot-")

from PySide6.QtCore import QObject, QTimer, Slot  # noqa: E402

FAKE_ANSWER = (
    "This looks like a **cup of coffee** on a wooden table:\n\n"
    "- a white ceramic cup with a saucer\n- latte art in the foam\n- warm light from the left\n\n"
    "It was probably taken in a café in the morning."
)
HISTORY = ["Receipt totals from March", "What plant is this?", "Translate the menu", "Chart: sales by region"]


def add_history() -> None:
    from app.paths import data_dir
    from app.store import Store

    store = Store(data_dir())
    for title in HISTORY:
        conv = store.create_conversation(title)
        store.add_message(conv.id, "user", title)
        store.add_message(conv.id, "assistant", "…")
    store.close()


class Driver(QObject):
    """Asks the question once the model is loaded and saves the window when the answer is done."""

    def __init__(self, app, window, args) -> None:
        super().__init__()
        self.app, self.window, self.args = app, window, args
        self.code = 1
        self.prompts = [args.prompt, *args.then]

    @Slot(dict)
    def ask(self, _info: dict) -> None:
        self.window.new_chat()
        if self.args.image:
            self.window.add_files([self.args.image])
        self.send_next()

    def send_next(self) -> None:
        self.window.composer.setPlainText(self.prompts.pop(0))
        self.window.send_message()

    @Slot(str)
    def failed(self, message: str) -> None:
        print(f"model load failed: {message}", file=sys.stderr)
        self.shoot(2)

    @Slot(dict)
    def answered(self, _result: dict) -> None:
        if self.prompts:  # --then: a follow-up turn
            QTimer.singleShot(100, self.send_next)
        elif self.args.pending:  # left in the composer, unsent, their token count in the status bar
            self.window.add_files(self.args.pending)
            QTimer.singleShot(1000, lambda: self.shoot(0))
        else:
            QTimer.singleShot(300, lambda: self.shoot(0))

    def shoot(self, code: int) -> None:
        self.app.processEvents()
        self.window.grab().save(self.args.out)
        print(f"saved {self.args.out}: {self.window.stats_label.text()}")
        if self.args.manager:
            manager = self.window.open_model_manager()  # at the size it opens with
            for _ in range(5):
                self.app.processEvents()
            manager.grab().save(self.args.manager)
            print(f"saved {self.args.manager}")
        self.code = code
        self.app.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="model folder or repo id (real engine)")
    source.add_argument("--fake", action="store_true", help="stream a canned answer, no model")
    parser.add_argument("--image", help="attach this image to the first question (vision models)")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--then", action="append", default=[], help="a follow-up question (repeatable)")
    parser.add_argument("--pending", action="append", default=[],
                        help="a file left attached in the composer after the answers, unsent (repeatable)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--device")
    parser.add_argument("--dtype")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (random weights then repeat)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", default="900x720", help="window size WxH")
    parser.add_argument("--dark", action="store_true")
    parser.add_argument("--history", action="store_true", help="earlier chats in the sidebar")
    parser.add_argument("--manager", help="also save the model manager to this PNG")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for load + answer")
    args = parser.parse_args()

    from app.images import InvalidImageError, validate_image
    from app.main import create_app
    from app.main_window import MainWindow

    try:  # the window would only show a banner and answer without the image
        if args.image:
            validate_image(args.image)
    except InvalidImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    os.environ["SMOLCHAT_THEME"] = "dark" if args.dark else "light"
    if args.history:
        add_history()
    app = create_app(sys.argv[:1])
    backend = None
    if args.fake:
        from app.backends.fake import FakeBackend

        words = FAKE_ANSWER.split(" ")
        tokens = [w if i == 0 else " " + w for i, w in enumerate(words)]
        backend = FakeBackend(tokens=tokens, delay=0.01, model_name="SmolVLM-256M-Instruct")
    window = MainWindow(args.model or "fake", backend=backend, device=args.device, dtype=args.dtype)
    window.generation_params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                                "seed": args.seed}
    width, height = (int(v) for v in args.size.split("x"))
    window.resize(width, height)
    window.show()
    driver = Driver(app, window, args)
    window.controller.model_load_failed.connect(driver.failed)
    window.answer_finished.connect(driver.answered)

    def wait_for_model() -> None:  # the window may have loaded the model before we could connect
        if window.model_info:
            driver.ask(window.model_info)
        else:
            QTimer.singleShot(100, wait_for_model)

    QTimer.singleShot(100, wait_for_model)
    QTimer.singleShot(int(args.timeout * 1000), lambda: driver.shoot(3))
    app.exec()
    window.shutdown()
    return driver.code


if __name__ == "__main__":
    sys.exit(main())
