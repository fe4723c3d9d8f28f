"""Build the Linux installer, unpack the .deb into a temporary root, run the installed app.

Marked ``packaging`` (excluded from plain ``pytest`` runs; ``.ci/run`` runs it with ``-m packaging``).
PyInstaller's work folder is ``build/pyinstaller`` (git-ignored) so that rebuilds are incremental;
a cold build of torch + PySide6 takes several minutes on two cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("smolchat_exclusions", REPO / "packaging" / "exclusions.py")
exclusions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(exclusions)

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def installed_root(tmp_path_factory) -> Path:
    """The .deb built from this checkout, unpacked with ``dpkg -x`` (no root, no dependencies)."""
    if importlib.util.find_spec("PyInstaller") is None:  # selected explicitly: fail, never skip
        pytest.fail("PyInstaller is not installed: pip install -e '.[package]'")
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, str(REPO / "packaging" / "build.py"), "--formats", "deb",
                           "--deb-compression", "none", "--dist", str(dist)],
                          cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    print(proc.stdout)  # the build's timings and sizes (shown with pytest -s)
    debs = list(dist.glob("smolchat_*.deb"))
    assert len(debs) == 1, debs
    root = tmp_path_factory.mktemp("root")
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
    info = subprocess.run(["dpkg-deb", "-f", str(debs[0]), "Package", "Installed-Size", "Depends"],
                          check=True, capture_output=True, text=True).stdout
    assert "Package: smolchat" in info and "libxcb-cursor0" in info
    return root


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_the_deb_installs_launcher_desktop_entry_and_icons(installed_root):
    launcher = installed_root / "usr" / "bin" / "smolchat"
    assert launcher.is_symlink() and os.readlink(launcher) == "../../opt/smolchat/smolchat"
    assert os.access(launcher.resolve(), os.X_OK)
    desktop = (installed_root / "usr/share/applications/smolchat.desktop").read_text()
    assert "Exec=smolchat %F" in desktop and "Icon=smolchat" in desktop
    icons = installed_root / "usr/share/icons/hicolor"
    assert (icons / "scalable/apps/smolchat.svg").is_file()
    for size in (48, 256):
        png = icons / f"{size}x{size}/apps/smolchat.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (installed_root / "opt/smolchat/_internal/resources/style.qss").is_file()


def test_the_app_carries_the_native_cpu_decode_step(installed_root):
    """Built at package time (packaging/build.py), so users need no compiler."""
    native = installed_root / "opt/smolchat/_internal/engine/native"
    assert (native / "libsmolcpu.so").is_file() and (native / "libsmolcpu.so.src").is_file()


def test_the_app_leaves_out_what_it_does_not_use(installed_root):
    internal = installed_root / "opt/smolchat/_internal"
    present = {p.name for p in internal.iterdir()}
    for unused in ("transformers", "pytest", "hypothesis", "tkinter", "nvidia", "triton", "torchvision"):
        assert unused not in present, unused
    assert not (internal / "torch" / "include").exists()
    assert not (internal / "torch" / "test").exists()
    assert not list(internal.rglob("*.a"))
    assert not list(internal.rglob("libQt6Quick*")) and not list(internal.rglob("libQt6Qml*"))
    assert not list(internal.rglob("*cudnn*.so*")) and not list(internal.rglob("*cublas*.so*"))
    for path in internal.rglob("*"):  # the same list the spec filtered with
        assert exclusions.keep_entry(str(path.relative_to(internal))), path


def test_the_installed_app_answers_an_image_question(installed_root, tiny_checkpoint, tmp_path):
    before = _files(installed_root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QT_"))}
    env.update(SMOLCHAT_DATA_DIR=str(tmp_path / "data"), HOME=str(tmp_path / "home"),
               HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", QT_QPA_PLATFORM="offscreen",
               PATH=f"{installed_root / 'usr/bin'}:/usr/bin:/bin")
    env.pop("DISPLAY", None)
    proc = subprocess.run(["smolchat", "--self-test", "--gui", "--model", str(tiny_checkpoint),
                           "--max-new-tokens", "4"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["ok"] is True and result["frozen"] is True, result
    assert result["device"] == "cpu" and result["dtype"] == "float32"
    assert result["generated_tokens"] == 4 and result["image_tokens"] > 0
    assert result["gui"]["platform"] == "offscreen"
    print("installed self-test:", lines[-1])

    # Without --model: the model the app last loaded (the GUI self-test above leaves the settings alone).
    assert not (tmp_path / "data" / "settings.ini").exists()
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "settings.ini").write_text(f"[models]\nlast={tiny_checkpoint}\n")
    proc = subprocess.run(["smolchat", "--self-test", "--max-new-tokens", "2"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is True

    # With no model at all (a new user's data folder): a clear message and a non-zero exit, not a traceback.
    env["SMOLCHAT_DATA_DIR"] = str(tmp_path / "fresh")
    proc = subprocess.run(["smolchat", "--self-test"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("smolchat self-test failed: no model found"), proc.stderr
    assert str(tmp_path / "fresh" / "models") in proc.stderr

    # Nothing was written inside the install folder (caches, bytecode, data all go elsewhere).
    assert _files(installed_root) == before
