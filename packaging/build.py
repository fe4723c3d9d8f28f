"""Build Smolchat's installers: ``python packaging/build.py``.

On Linux this produces, under ``dist/``:

- ``smolchat/``                             the one-folder app (PyInstaller), runs in place
- ``smolchat-<version>-linux-<arch>.tar.gz`` that folder, for any distribution
- ``smolchat_<version>_<debarch>.deb``       installs /opt/smolchat, /usr/bin/smolchat, a .desktop
                                            entry and icons

PyInstaller's work folder (``build/pyinstaller``, git-ignored) is kept between builds, so rebuilds
only redo what changed. Windows and macOS use the same spec; see packaging/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "packaging" / "smolchat.spec"
RESOURCES = REPO / "resources"
DEB_DEPENDS = [  # what the bundled Qt and torch load from the system (the rest is inside the app)
    "libc6 (>= 2.28)", "libstdc++6", "libgl1", "libegl1", "libfontconfig1", "libfreetype6",
    "libxkbcommon0", "libxkbcommon-x11-0", "libdbus-1-3", "libglib2.0-0 | libglib2.0-0t64",
    "libx11-xcb1", "libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxcb-shape0",
    "libxcb-xkb1", "libxcb-render-util0", "libxcb-image0",
]


def version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def log(message: str) -> None:
    print(f"[build] {message}", flush=True)


def du(path: Path) -> int:
    """Bytes used by the files under ``path`` (apparent size, links counted once)."""
    if path.is_file():
        return path.stat().st_size
    seen, total = set(), 0
    for p in path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB"


def build_native(work: Path) -> Path | None:
    """Compile the native CPU decode step (engine/native) for the installer, so a user's machine
    needs no compiler. Portable: it picks its AVX-512 / AVX2 / baseline kernels at run time. Without
    a compiler here the app still works (it decodes eagerly); that is logged, not fatal."""
    sys.path.insert(0, str(REPO))
    from engine.native.build import LIBNAME, build_prebuilt

    out = work.parent / "native" / LIBNAME
    try:
        build_prebuilt(out)
    except RuntimeError as exc:
        log(f"WARNING: no native CPU decode step in this build ({exc}); the app will decode eagerly")
        return None
    log(f"native CPU decode step: {out} ({out.stat().st_size // 1024} KB)")
    return out


def run_pyinstaller(dist: Path, work: Path, clean: bool, native: Path | None = None) -> Path:
    env = dict(os.environ)
    if native is not None:
        env["SMOLCHAT_NATIVE_PREBUILT"] = str(native)  # the spec bundles it into engine/native/
    # PyInstaller's own cache lives with its work folder: one git-ignored place, easy to keep in CI.
    env.setdefault("PYINSTALLER_CONFIG_DIR", str(work / "config"))
    cmd = [sys.executable, "-m", "PyInstaller", str(SPEC), "--noconfirm", "--log-level", "WARN",
           "--distpath", str(dist), "--workpath", str(work)]
    if clean:
        cmd.append("--clean")
    log(" ".join(cmd))
    subprocess.run(cmd, check=True, cwd=REPO, env=env)
    return dist / "smolchat"


def strip_libraries(app_dir: Path) -> None:
    """Drop symbol tables from torch's and Python's shared libraries (~100 MB of the folder).

    Only these: PyInstaller's blanket ``strip`` also hits auditwheel-repaired libraries
    (numpy.libs, pillow.libs), which then fail to load ("ELF load command ... not page-aligned").
    """
    strip = shutil.which("strip")
    if not strip:
        log("strip not found (binutils): libraries left unstripped")
        return
    internal = app_dir / "_internal"
    libs = [p for p in [*internal.glob("torch/lib/*.so*"), *internal.glob("libpython3*.so*")]
            if p.is_file() and not p.is_symlink() and "libgomp" not in p.name]
    before = sum(p.stat().st_size for p in libs)
    subprocess.run([strip, "--strip-unneeded", *map(str, libs)], check=True)
    log(f"stripped {len(libs)} libraries: {mb(before - sum(p.stat().st_size for p in libs))} saved")


def render_icons(out_dir: Path) -> None:
    """PNG icons rendered from the SVG (packaging/icons.py), for desktops that want bitmaps."""
    subprocess.run([sys.executable, str(REPO / "packaging" / "icons.py"), "--hicolor", str(out_dir)],
                   check=True, env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))


def deb_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def build_deb(app_dir: Path, dist: Path, work: Path, compression: str) -> Path:
    ver, arch = version(), deb_arch()
    root = work / "deb" / f"smolchat_{ver}_{arch}"
    if root.exists():
        shutil.rmtree(root)
    # The app folder is hard-linked, not copied: the staging tree costs no disk space or time.
    shutil.copytree(app_dir, root / "opt" / "smolchat", symlinks=True, copy_function=os.link)
    bin_dir = root / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    # Relative, so the package also works unpacked elsewhere (dpkg -x into a test root).
    (bin_dir / "smolchat").symlink_to("../../opt/smolchat/smolchat")
    share = root / "usr" / "share"
    (share / "applications").mkdir(parents=True)
    shutil.copyfile(RESOURCES / "smolchat.desktop", share / "applications" / "smolchat.desktop")
    icons = share / "icons" / "hicolor"
    (icons / "scalable" / "apps").mkdir(parents=True)
    shutil.copyfile(RESOURCES / "smolchat.svg", icons / "scalable" / "apps" / "smolchat.svg")
    render_icons(icons)
    doc = share / "doc" / "smolchat"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        "Upstream-Name: smolchat\n\nFiles: *\nLicense: Apache-2.0\n"
        " Bundles Python, PyTorch (BSD-3-Clause), Qt for Python / PySide6 (LGPL-3.0) and their\n"
        " dependencies under their own licenses; see /opt/smolchat/_internal/*.dist-info.\n")
    installed_kb = sum(p.lstat().st_size for p in root.rglob("*") if not p.is_dir()) // 1024 + 1
    debian = root / "DEBIAN"
    debian.mkdir()
    (debian / "control").write_text(
        f"Package: smolchat\nVersion: {ver}\nArchitecture: {arch}\nSection: graphics\nPriority: optional\n"
        f"Maintainer: Smolchat developers <smolchat@example.org>\nInstalled-Size: {installed_kb}\n"
        f"Depends: {', '.join(DEB_DEPENDS)}\n"
        "Homepage: https://huggingface.co/HuggingFaceTB/SmolVLM-256M-Instruct\n"
        "Description: private, local multimodal chat\n"
        " Ask questions about photos, screenshots and scanned pages with SmolVLM, run by an\n"
        " embedded PyTorch engine on this computer. No cloud, no server. CPU build.\n")
    for name in ("postinst", "postrm"):
        script = debian / name
        script.write_text(
            "#!/bin/sh\nset -e\n"
            "command -v update-desktop-database >/dev/null && update-desktop-database -q /usr/share/applications || true\n"
            "command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t /usr/share/icons/hicolor || true\n")
        script.chmod(0o755)
    out = dist / f"smolchat_{ver}_{arch}.deb"
    cmd = ["dpkg-deb", "--root-owner-group", f"-Z{compression}", "--build", str(root), str(out)]
    if compression in ("xz", "gzip", "zstd"):
        cmd[3:3] = ["-z6" if compression != "zstd" else "-z19"]
    log(" ".join(cmd))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def build_tar(app_dir: Path, dist: Path) -> Path:
    arch = platform.machine().lower()
    out = dist / f"smolchat-{version()}-linux-{arch}.tar.gz"
    gzip = shutil.which("pigz") or "gzip"
    log(f"tar | {Path(gzip).name} -> {out.name}")
    with open(out, "wb") as fh:
        tar = subprocess.Popen(["tar", "-C", str(app_dir.parent), "--owner=0", "--group=0", "-cf", "-",
                                app_dir.name], stdout=subprocess.PIPE)
        subprocess.run([gzip, "-6"], stdin=tar.stdout, stdout=fh, check=True)
        if tar.wait() != 0:
            raise RuntimeError("tar failed")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=REPO / "dist", help="output folder (default dist/)")
    parser.add_argument("--work", type=Path, default=REPO / "build" / "pyinstaller",
                        help="PyInstaller's work folder, kept between builds (default build/pyinstaller)")
    parser.add_argument("--formats", default="folder,tar,deb",
                        help="comma-separated: folder, tar, deb (default: all three on Linux)")
    parser.add_argument("--deb-compression", default="gzip", choices=["gzip", "xz", "zstd", "none"],
                        help="gzip (default; 1 min), xz (smaller, ~10 min on 2 cores), none (tests)")
    parser.add_argument("--clean", action="store_true", help="empty PyInstaller's caches first (a cold build)")
    args = parser.parse_args(argv)
    formats = {f.strip() for f in args.formats.split(",") if f.strip()}
    dist, work = args.dist.resolve(), args.work.resolve()

    t0 = time.monotonic()
    app_dir = run_pyinstaller(dist, work, args.clean, build_native(work))
    if sys.platform.startswith("linux"):
        strip_libraries(app_dir)
    log(f"app folder {app_dir} ({mb(du(app_dir))}) in {time.monotonic() - t0:.0f} s")
    if sys.platform.startswith("linux"):
        if "tar" in formats:
            t = time.monotonic()
            tgz = build_tar(app_dir, dist)
            log(f"{tgz.name}: {mb(tgz.stat().st_size)} in {time.monotonic() - t:.0f} s")
        if "deb" in formats:
            t = time.monotonic()
            deb = build_deb(app_dir, dist, work, args.deb_compression)
            log(f"{deb.name}: {mb(deb.stat().st_size)} in {time.monotonic() - t:.0f} s")
    else:
        log("installers for this platform: see packaging/README.md (Inno Setup on Windows, .dmg on macOS)")
    log(f"done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
