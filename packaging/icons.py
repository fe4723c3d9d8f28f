"""Render resources/smolchat.svg into the bitmap icons installers want (QtSvg, offscreen).

    python packaging/icons.py --hicolor DIR      DIR/<n>x<n>/apps/smolchat.png  (Linux .deb)
    python packaging/icons.py --ico FILE         a multi-size Windows .ico      (Inno Setup, exe)
    python packaging/icons.py --iconset DIR      a macOS .iconset for `iconutil -c icns`
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

SVG = Path(__file__).resolve().parents[1] / "resources" / "smolchat.svg"
HICOLOR_SIZES = (48, 64, 128, 256)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICONSET = {f"icon_{s}x{s}{'@2x' if k == 2 else ''}.png": s * k
           for s in (16, 32, 128, 256, 512) for k in (1, 2)}


def render(sizes) -> dict[int, bytes]:
    """PNG bytes of the SVG at each size (a QGuiApplication on the offscreen platform)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QIODevice
    from PySide6.QtGui import QColor, QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(["icons"])  # noqa: F841 (keeps Qt alive)
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {SVG}")
    out = {}
    for size in sorted(set(sizes)):
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(QColor(0, 0, 0, 0))
        painter = QPainter(image)
        renderer.render(painter)
        painter.end()
        buffer = QBuffer()
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buffer, "PNG")
        out[size] = bytes(buffer.data())
    return out


def write_hicolor(root: Path) -> None:
    for size, data in render(HICOLOR_SIZES).items():
        d = root / f"{size}x{size}" / "apps"
        d.mkdir(parents=True, exist_ok=True)
        (d / "smolchat.png").write_bytes(data)


def write_ico(path: Path) -> None:
    from PIL import Image

    images = render([max(ICO_SIZES)])
    big = Image.open(io.BytesIO(images[max(ICO_SIZES)]))
    path.parent.mkdir(parents=True, exist_ok=True)
    big.save(path, format="ICO", sizes=[(s, s) for s in ICO_SIZES])


def write_iconset(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    pngs = render(ICONSET.values())
    for name, size in ICONSET.items():
        (root / name).write_bytes(pngs[size])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hicolor", type=Path)
    parser.add_argument("--ico", type=Path)
    parser.add_argument("--iconset", type=Path)
    args = parser.parse_args(argv)
    if args.hicolor:
        write_hicolor(args.hicolor)
    if args.ico:
        write_ico(args.ico)
    if args.iconset:
        write_iconset(args.iconset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
