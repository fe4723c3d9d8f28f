"""Render Settings ▸ Engines with one server added and tested, and save a PNG of the dialog.

    python tools/screenshot_engines.py --out engines.png [--dark]

The server is the loopback fake from ``tests/app/remote_fakes.py`` (nothing leaves the machine); the
dialog shows the verdict of "Test connection" and the models with where each capability was read.
Runs headless (QT_QPA_PLATFORM=offscreen) or under xvfb-run; data goes to a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("SMOLCHAT_DATA_DIR", tempfile.mkdtemp(prefix="smolchat-shot-"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dark", action="store_true")
    args = parser.parse_args()
    os.environ["SMOLCHAT_THEME"] = "dark" if args.dark else "light"

    from PySide6.QtCore import QEventLoop, QTimer

    from app import remote_settings
    from app.backends.fake import FakeBackend
    from app.main import create_app
    from app.main_window import MainWindow
    from tests.app.remote_fakes import FakeOpenAI

    app = create_app(sys.argv[:1])
    models = [{"id": "SmolVLM2-2.2B-Instruct", "architecture": {"input_modalities": ["text", "image", "video"]},
               "max_model_len": 16384},
              {"id": "SmolLM2-1.7B-Instruct", "architecture": {"input_modalities": ["text"]}, "max_model_len": 8192},
              {"id": "my-finetune"}]
    with FakeOpenAI(models=models) as fake:
        remote_settings.save_servers([{"name": "GPU box (vLLM)", "url": fake.url},
                                      {"name": "Ollama on the NAS", "url": "http://nas.local:11434/v1"}])
        window = MainWindow("fake", backend=FakeBackend(model_name="SmolVLM-256M-Instruct"))
        window.show()
        dialog = window.open_settings_dialog()
        panel = dialog.engines
        panel.servers.setCurrentRow(0)
        panel.key.setText("sk-example")
        loop = QEventLoop()
        panel.tested.connect(lambda *_: loop.quit())
        QTimer.singleShot(20_000, loop.quit)
        panel.test_connection()
        loop.exec()
        dialog.resize(1100, dialog.sizeHint().height())
        for _ in range(5):
            app.processEvents()
        dialog.grab().save(args.out)
        print(f"saved {args.out}: {panel.verdict.text()}")
        dialog.close()
        window.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
