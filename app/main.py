"""Entry point: ``smolchat [--model DIR_OR_REPO] [--device ...] [--dtype ...]``."""

from __future__ import annotations

import argparse
from pathlib import Path
import os
import sys

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from app.paths import resource


def model_argument(value: str) -> str:
    """A local model folder as an absolute path (it is remembered for the next start, which may run
    from another folder); anything else (a Hub id) as given."""
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="smolchat", description="Private, local multimodal chat.")
    parser.add_argument("--model", metavar="DIR_OR_REPO", type=model_argument,
                        help="model folder or Hugging Face repo id")
    parser.add_argument("--device", choices=["cuda", "mps", "cpu"], help="default: the best available")
    parser.add_argument("--dtype", help="e.g. float32 or bfloat16 (default: chosen for the device)")
    parser.add_argument("--self-test", action="store_true",
                        help="headless check: answer one built-in image question, print JSON, exit "
                             "(see smolchat --self-test --help)")
    return parser.parse_args(argv)


def create_app(argv: list[str]) -> QApplication:
    """The QApplication with Smolchat's name, icon and style sheet."""
    app = QApplication.instance() or QApplication(argv)
    app.setApplicationName("Smolchat")
    app.setApplicationDisplayName("Smolchat")
    app.setDesktopFileName("smolchat")
    app.setWindowIcon(QIcon(str(resource("smolchat.svg"))))
    app.setStyle("Fusion")  # consistent across platforms; the style sheet follows the palette
    app.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    from app.settings import load_settings
    from app.theme import apply_theme

    apply_theme(os.environ.get("SMOLCHAT_THEME") or load_settings().theme)  # follows the system by default
    return app


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--self-test" in argv:  # headless: no QApplication, no display needed
        from app.self_test import main as self_test_main

        return self_test_main([a for a in argv if a != "--self-test"])
    args = parse_args(argv)
    app = create_app(sys.argv[:1])
    window = MainWindow(model_path=args.model, device=args.device, dtype=args.dtype)
    window.show()  # before the model is loaded: loading runs in the worker thread
    code = app.exec()
    window.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
