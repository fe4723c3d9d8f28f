"""SVG icons from ``resources/icons`` (sharp at any device pixel ratio)."""

from __future__ import annotations

from functools import cache

from PySide6.QtGui import QIcon

from app.paths import resource


@cache
def icon(name: str) -> QIcon:
    return QIcon(str(resource(f"icons/{name}.svg")))
