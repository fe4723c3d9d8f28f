"""Light and dark palettes; by default the app follows the system's colour scheme as it changes.

Two greys, two jobs. ``Mid`` draws lines (borders, scroll bar handles) and disabled text, which WCAG
asks no contrast of. ``PlaceholderText`` is the secondary *text* colour (the style sheet's
``palette(placeholder-text)``: a message's time, the model name and stats line of an answer, the
key hint, the chat list's headings, notes): it keeps WCAG AA's 4.5:1 against every background it
sits on (base, window, the answer bubble's alternate-base), and stays well short of the main text's
contrast, so it still reads as secondary. Trial 50 measured the old grey, shared by both jobs, at
2.89:1 (light) and 3.01:1 (dark) in the answer bubble.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QWidget

DARK = {
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
    QPalette.ColorRole.PlaceholderText: "#9296a3",  # 5.1:1 on alternate-base, 6.0:1 on base
    QPalette.ColorRole.ToolTipBase: "#2a2c33",
    QPalette.ColorRole.ToolTipText: "#e6e6e9",
    QPalette.ColorRole.Link: "#8c9bff",
}
LIGHT = {
    QPalette.ColorRole.Window: "#f4f5f7",
    QPalette.ColorRole.WindowText: "#1d1f24",
    QPalette.ColorRole.Base: "#ffffff",
    QPalette.ColorRole.AlternateBase: "#f1f2f5",
    QPalette.ColorRole.Text: "#1d1f24",
    QPalette.ColorRole.Button: "#f4f5f7",
    QPalette.ColorRole.ButtonText: "#1d1f24",
    QPalette.ColorRole.Mid: "#8a8f9c",
    QPalette.ColorRole.Midlight: "#e3e5ea",
    QPalette.ColorRole.Highlight: "#5b6cff",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.PlaceholderText: "#646975",  # 4.9:1 on alternate-base, 5.5:1 on base
    QPalette.ColorRole.Link: "#3b4cdf",
}
_state = {"theme": "system", "connected": False}


def palette(dark: bool) -> QPalette:
    p = QPalette()
    for role, color in (DARK if dark else LIGHT).items():
        p.setColor(role, QColor(color))
    return p


def system_is_dark() -> bool:
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def is_dark(theme: str) -> bool:
    return theme == "dark" or (theme == "system" and system_is_dark())


def apply_theme(theme: str = "system") -> bool:
    """Set the palette for ``theme`` ("system", "light", "dark"); returns True when dark.

    With "system" the palette follows later changes of the system's colour scheme too.
    """
    app = QApplication.instance()
    _state["theme"] = theme
    if not _state["connected"]:
        QGuiApplication.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_theme(_state["theme"]))
        _state["connected"] = True
    dark = is_dark(theme)
    app.setProperty("smolchatDark", dark)
    # Setting the palette alone left existing widgets in the old theme, new ones in the new, and
    # Settings' labels dark on dark (issue 19): see _repropagate.
    app.setPalette(palette(dark))
    _repropagate(app)
    return dark


def _repropagate(app: QApplication) -> None:
    """Polish every widget again against the new palette, parents before children.

    Two things kept old colours: QApplication.setPalette tells the widgets in no particular order, so a
    child could resolve against its parent's old palette before the parent changed (Settings: the dialog
    dark, its group boxes and labels still light); and the style sheet's colours (``palette(base)``...)
    are stored on each widget it styles when it polishes it. So each widget is unpolished (the sheet
    gives back the palette it replaced), takes its parent's palette again unless it has one of its own
    (WA_SetPalette), and is polished against it. (Setting the whole sheet again did the same but crashed
    Qt when widgets awaiting deletion were around.)
    """
    empty = QPalette()
    pending = list(app.topLevelWidgets())
    while pending:
        widget = pending.pop(0)
        style = widget.style()
        style.unpolish(widget)  # the style sheet's colours of this widget, from the new palette
        if not widget.testAttribute(Qt.WidgetAttribute.WA_SetPalette):
            widget.setPalette(empty)
        style.polish(widget)
        pending.extend(w for w in widget.children() if isinstance(w, QWidget))
