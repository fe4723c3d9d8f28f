"""Render Smolchat answering one question about one image, and save a PNG of the window.

    python tools/screenshot.py --model DIR --image PATH --prompt TEXT --out PNG
    python tools/screenshot.py --fake --image PATH --prompt TEXT --out PNG

Runs headless with QT_QPA_PLATFORM=offscreen (or under xvfb-run). ``--fake`` streams a canned
answer instead of loading a model; ``--dark`` renders with a dark palette.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QObject, QTimer, Slot  # noqa: E402

FAKE_ANSWER = (
    "This is a photo of an orange tabby cat curled up on a grey sofa. It is lying on a knitted "
    "blanket, with its eyes half closed, and the light comes from a window on the left, so it "
    "looks like late afternoon."
)


def dark_palette():
    from PySide6.QtGui import QColor, QPalette

    p = QPalette()
    roles = {
        QPalette.ColorRole.Window: "#1f2126",
        QPalette.ColorRole.WindowText: "#e6e6e9",
        QPalette.ColorRole.Base: "#17181c",
        QPalette.ColorRole.AlternateBase: "#24262c",
        QPalette.ColorRole.Text: "#e6e6e9",
        QPalette.ColorRole.Button: "#2a2c33",
        QPalette.ColorRole.ButtonText: "#e6e6e9",
        QPalette.ColorRole.Mid: "#6b6f7b",
        QPalette.ColorRole.Midlight: "#2e3038",
        QPalette.ColorRole.Highlight: "#5b6cff",
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.PlaceholderText: "#6b6f7b",
    }
    for role, color in roles.items():
        p.setColor(role, QColor(color))
    return p


class Driver(QObject):
    """Asks the question once the model is loaded and saves the window when the answer is done."""

    def __init__(self, app, window, args) -> None:
        super().__init__()
        self.app, self.window, self.args = app, window, args
        self.code = 1

    @Slot(dict)
    def ask(self, _info: dict) -> None:
        self.window.add_files([self.args.image])
        self.window.composer.setPlainText(self.args.prompt)
        self.window.send_message()

    @Slot(str)
    def failed(self, message: str) -> None:
        print(f"model load failed: {message}", file=sys.stderr)
        self.shoot(2)

    @Slot(dict)
    def answered(self, _result: dict) -> None:
        QTimer.singleShot(300, lambda: self.shoot(0))

    def shoot(self, code: int) -> None:
        self.app.processEvents()
        self.window.grab().save(self.args.out)
        print(f"saved {self.args.out}: {self.window.stats_label.text()}")
        self.code = code
        self.app.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="model folder or repo id (real engine)")
    source.add_argument("--fake", action="store_true", help="stream a canned answer, no model")
    parser.add_argument("--image", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device")
    parser.add_argument("--dtype")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--size", default="900x720", help="window size WxH")
    parser.add_argument("--dark", action="store_true")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for load + answer")
    args = parser.parse_args()

    from app.main import create_app
    from app.main_window import MainWindow

    app = create_app(sys.argv[:1])
    if args.dark:
        app.setPalette(dark_palette())
    factory = None
    if args.fake:
        from tests.app.fakes import FakeFactory, FakeSession

        words = FAKE_ANSWER.split(" ")
        tokens = [w if i == 0 else " " + w for i, w in enumerate(words)]
        factory = FakeFactory(FakeSession(tokens=tokens, delay=0.01, model_name="SmolVLM-256M-Instruct"))
    window = MainWindow(session_factory=factory)
    window.generation_params = {"max_new_tokens": args.max_new_tokens}
    width, height = (int(v) for v in args.size.split("x"))
    window.resize(width, height)
    window.show()
    driver = Driver(app, window, args)
    window.worker.model_loaded.connect(driver.ask)  # a QObject slot: queued into the UI thread
    window.worker.model_load_failed.connect(driver.failed)
    window.worker.finished.connect(driver.answered)
    QTimer.singleShot(int(args.timeout * 1000), lambda: driver.shoot(3))
    window.load_model(args.model or "fake", args.device, args.dtype)
    app.exec()
    window.shutdown()
    return driver.code


if __name__ == "__main__":
    sys.exit(main())
