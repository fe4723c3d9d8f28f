"""One Smolchat per data folder (app/single_instance.py): a second start on the same folder says
Smolchat is already open and ends before making a window; another folder, or a lock left by a
process that is gone, does not stop a start. Runs the real entry point in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]

STAY = r"""
import json
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox
from app import main as entry
from app.main_window import MainWindow

QMessageBox.information = staticmethod(lambda *a, **k: print("DIALOG " + a[2], flush=True))
opened = MainWindow.open_files
MainWindow.open_files = lambda self, files: (print("OPENED " + json.dumps(files), flush=True), opened(self, files))

def ready():
    if any(isinstance(w, MainWindow) for w in QApplication.topLevelWidgets()):
        print("WINDOW", flush=True)
        if sys.argv[1] == "quit":
            window = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))
            print("ATTACHED", len(window.attachments.paths()), flush=True)
            QApplication.quit()
    else:
        QTimer.singleShot(50, ready)

entry.create_app(sys.argv[:1])
QTimer.singleShot(50, ready)
code = entry.main(["--model", "/models/slow-fake", *sys.argv[2:]])  # no model manager dialog (a modal loop)
print("EXIT", code, flush=True)
sys.exit(code)
"""


def _env(data_dir: Path) -> dict:
    return dict(os.environ, SMOLCHAT_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen",
                SMOLCHAT_BACKEND="app.backends.fake:slow_backend")


def _run(data_dir: Path, then: str, *files: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STAY, then, *files], cwd=REPO, env=_env(data_dir), capture_output=True,
                          text=True, timeout=120)


HOLD_LOCK = r"""
import os, sys, time
from PySide6.QtCore import QLockFile
os.makedirs(sys.argv[1], exist_ok=True)
lock = QLockFile(sys.argv[1] + "/smolchat.lock")
lock.setStaleLockTime(0)
assert lock.tryLock(1000)
print("LOCKED", flush=True)
time.sleep(120)
"""


def _wait_for(process: subprocess.Popen, word: str) -> None:
    deadline = time.monotonic() + 90
    while (line := process.stdout.readline()) and line.strip() != word:
        assert time.monotonic() < deadline
    assert line.strip() == word


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process handling in the test")
def test_a_second_start_on_the_same_data_folder_hands_its_files_to_the_open_window(data_dir, tmp_path):
    """Found by a trial: two windows on one data folder each kept their unsent message under one key
    (the last to quit won, the other's was lost) and both wrote the database. Trial 53: the desktop
    entry's "Open with Smolchat" (``smolchat photo.png``) ended at once on an unknown argument."""
    photo = tmp_path / "photo.png"
    Image.new("RGB", (32, 24), (200, 120, 40)).save(photo)
    first = subprocess.Popen([sys.executable, "-c", STAY, "stay"], cwd=REPO, env=_env(data_dir),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(first, "WINDOW")
        second = _run(data_dir, "quit")  # no files: the open window comes to the front
        assert second.returncode == 0 and "WINDOW" not in second.stdout, second.stdout + second.stderr
        assert "DIALOG" not in second.stdout and "its window was brought to the front" in second.stderr
        _wait_for(first, "OPENED []")
        third = subprocess.run([sys.executable, "-c", STAY, "quit", "photo.png"], cwd=tmp_path,  # relative to its folder
                               env=_env(data_dir), capture_output=True, text=True, timeout=120)
        assert third.returncode == 0 and "WINDOW" not in third.stdout and "its window was given the files" in third.stderr
        _wait_for(first, f"OPENED {json.dumps([str(photo)])}")
        other = _run(tmp_path / "other-data", "quit")  # another data folder: its own window
        assert "WINDOW" in other.stdout and "EXIT 0" in other.stdout, other.stdout + other.stderr
    finally:
        first.kill()
        first.wait(10)
    second_photo = tmp_path / "second.png"
    Image.new("RGB", (32, 24), (40, 120, 200)).save(second_photo)
    after = _run(data_dir, "quit", str(second_photo))  # the lock (and socket) of a process that is gone are taken over
    assert "WINDOW" in after.stdout and "EXIT 0" in after.stdout, after.stdout + after.stderr
    # Attached (beside the unsent message's photo, where the killed window's draft had been saved by then).
    assert f"OPENED {json.dumps([str(second_photo)])}" in after.stdout
    assert any(line in ("ATTACHED 1", "ATTACHED 2") for line in after.stdout.splitlines()), after.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process handling in the test")
def test_a_second_start_that_no_window_answers_says_smolchat_is_open(data_dir):
    """A lock held by a Smolchat that does not take files (an older one, one still starting)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(data_dir)], cwd=REPO, env=_env(data_dir),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(holder, "LOCKED")
        second = _run(data_dir, "quit")
        said = (f"Smolchat is already open with the conversations in {data_dir}: switch to its window. (A second "
                "window on the same conversations would overwrite the first one's unsent message.)")
        assert second.returncode == 0 and "WINDOW" not in second.stdout, second.stdout + second.stderr
        assert f"DIALOG {said}" in second.stdout and said in second.stderr
    finally:
        holder.kill()
        holder.wait(10)


def test_file_arguments_are_absolute_paths(tmp_path, monkeypatch):
    from app.main import parse_args

    monkeypatch.chdir(tmp_path)
    args = parse_args(["a photo.png", "file:///tmp/some%20clip.mp4", "--model", "/m", "../up.png"])
    assert args.files == [str(tmp_path / "a photo.png"), "/tmp/some clip.mp4", str(tmp_path.parent / "up.png")]
    assert args.model == "/m"
    assert parse_args([]).files == []


def test_a_file_macos_opens_with_smolchat_is_attached(qtbot, make_window, tmp_path):
    """Finder's Open With (and the Dock) hands files over as Qt's FileOpen event, not the command line."""
    from PySide6.QtGui import QFileOpenEvent
    from PySide6.QtWidgets import QApplication

    from app.backends.fake import FakeBackend
    from app.main import FileOpenEvents

    photo = tmp_path / "from finder.png"
    Image.new("RGB", (32, 24), (90, 30, 160)).save(photo)
    win = make_window(FakeBackend())
    events = FileOpenEvents(win.open_files, win)
    QApplication.instance().installEventFilter(events)
    try:
        QApplication.sendEvent(QApplication.instance(), QFileOpenEvent(str(photo)))
    finally:
        QApplication.instance().removeEventFilter(events)
    assert [Path(p).name for p in win.attachments.paths()] == ["from finder.png"]


def test_a_hand_over_too_long_for_one_message_gives_the_files_that_fit(qtbot, tmp_path):
    """Trial 54: 3,000 long paths (over 1 MB) were dropped by the window, and the second start said
    Smolchat was open, as if no window had answered."""
    from app.single_instance import MAX_MESSAGE, InstanceListener

    got: list[list[str]] = []
    listener = InstanceListener(tmp_path, got.append)
    assert listener.listening
    files = [f"/photos/{'long folder name ' * 20}/p{i}.png" for i in range(3000)]  # ~1.1 MB as JSON
    assert len(json.dumps({"files": files})) > MAX_MESSAGE
    (tmp_path / "files.json").write_text(json.dumps(files))
    second = subprocess.Popen(
        [sys.executable, "-c", "import json, sys; from app.single_instance import hand_over; "
                               "print(hand_over(sys.argv[1], json.load(open(sys.argv[2]))))",
         str(tmp_path), str(tmp_path / "files.json")],
        cwd=REPO, env=_env(tmp_path), stdout=subprocess.PIPE, text=True)
    qtbot.waitUntil(lambda: second.poll() is not None, timeout=60_000)
    taken = int(second.stdout.read())
    assert 2000 < taken < 3000 and got == [files[:taken]]
    listener.server.close()


def test_a_second_start_with_a_model_has_the_open_window_load_it(qtbot, make_window, tmp_path):
    """Trial 60: ``smolchat --model DIR`` while Smolchat was open brought its window to the front and
    kept the model in use, without a word."""
    from app.backends.fake import FakeBackend
    from app.single_instance import InstanceListener

    fake = FakeBackend(tokens=["A", "."], delay=0.05)
    win = make_window(fake)
    listener = InstanceListener(tmp_path, win.open_files, win, on_model=win.open_model)
    assert listener.listening

    def second_start(*model: str) -> int:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from app.single_instance import hand_over; "
                                   "print(hand_over(sys.argv[1], [], model=(sys.argv[2:] or [None])[0]))",
             str(tmp_path), *model], cwd=REPO, env=_env(tmp_path), stdout=subprocess.PIPE, text=True)
        qtbot.waitUntil(lambda: process.poll() is not None, timeout=60_000)
        return int(process.stdout.read())

    assert second_start("/models/fake") == 0  # the model in use: nothing loads again
    qtbot.wait(100)
    assert [path for path, *_ in fake.loads] == ["/models/fake"]
    assert second_start("/models/other") == 0
    qtbot.waitUntil(lambda: win.controller.ready and win.model_info["path"] == "/models/other", timeout=5000)
    fake.tokens = [" word"] * 400  # 20 s of answer: the third start comes while it is written
    win.composer.setPlainText("a question")
    win.send_message()
    qtbot.waitUntil(lambda: win._busy, timeout=5000)
    assert second_start("/models/third") == 0  # not under a running answer: said
    qtbot.waitUntil(lambda: "third was not loaded" in win.banner.message(), timeout=5000)
    assert [path for path, *_ in fake.loads] == ["/models/fake", "/models/other"]
    win.stop()
    listener.server.close()
