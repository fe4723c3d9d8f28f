"""SVG icons from ``resources/icons`` (sharp at any device pixel ratio)."""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtGui import QIcon

from app.paths import resource


@lru_cache(maxsize=None)
def icon(name: str) -> QIcon:
    return QIcon(str(resource(f"icons/{name}.svg")))
