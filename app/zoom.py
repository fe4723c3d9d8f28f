"""View ▸ Zoom: the chat's text larger or smaller (the messages, their code and tables, the message
box), as browsers and chat apps do with Ctrl+plus / Ctrl+minus / Ctrl+0 and Ctrl+wheel; kept in the
settings file (``view/zoom``, percent) for the next start.

The sizes are the style sheet's (``resources/style.qss``) times the zoom, set as a style sheet on
the transcript and on the message box: their rules win over the application's for those widgets
alone, and Qt lays the messages out again at the new size (each one's height follows its text)."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt

KEY = "view/zoom"
STEPS = (67, 80, 90, 100, 110, 125, 150, 175, 200)  # percent, as browsers step
DEFAULT = 100

# (selector, size in px at 100 %), as in resources/style.qss.
_SIZES = (("#userText, #assistantText, #codeText", 14),
          ("#assistantName, #messageFooter, #tableNote, #userTextMore, #waitText, #versionLabel, #continueMessage", 12),
          ("#emptyState", 15), ("#codeLanguage, #copyCode, #messageTime", 11))


# A message's action icons (copy, edit, delete, regenerate, continue) and its ‹ › version arrows, px at
# 100 % as in resources/style.qss: the smallest targets of the chat, which stayed at 100 % while the
# text around them grew (trial 50). The icons' size is the buttons' ``iconSize`` property, which a
# style sheet sets with ``qproperty-iconSize``; the application's sheet sets the 100 % size the same way,
# so it comes back when this sheet goes (a property set once stays set).
ACTION_ICON = 15
_ARROWS = (15, 18)  # the arrows' font-size and min-width


def transcript_css(percent: int) -> str:
    """The transcript's style sheet at ``percent`` ("" at 100 %: the application's sizes)."""
    if percent == DEFAULT:
        return ""
    scale = lambda px: round(px * percent / 100)  # noqa: E731
    rules = [f"{selector} {{ font-size: {scale(px)}px; }}" for selector, px in _SIZES]
    rules.append(f"#messageActions QToolButton {{ qproperty-iconSize: {scale(ACTION_ICON)}px {scale(ACTION_ICON)}px; }}")
    rules.append(f"#versionSwitcher QToolButton {{ font-size: {scale(_ARROWS[0])}px; min-width: {scale(_ARROWS[1])}px; }}")
    return " ".join(rules)


def composer_css(percent: int) -> str:
    """The message box's style sheet at ``percent``."""
    return "" if percent == DEFAULT else f"#composer {{ font-size: {round(14 * percent / 100)}px; }}"


def ctrl_wheel(event, zoom_requested) -> bool:
    """For a ``wheelEvent``: a Ctrl+wheel ``event`` emits ``zoom_requested(+1 / -1)`` and is taken
    (True); without Ctrl, False (the widget scrolls as usual)."""
    if not event.modifiers() & Qt.KeyboardModifier.ControlModifier:
        return False
    if event.angleDelta().y():
        zoom_requested.emit(1 if event.angleDelta().y() > 0 else -1)
    event.accept()
    return True


def saved_zoom(qsettings: QSettings) -> int:
    """The kept zoom, or 100 % for one missing or not among :data:`STEPS` (a hand-edited file)."""
    try:
        value = int(qsettings.value(KEY, DEFAULT))
    except (TypeError, ValueError):
        return DEFAULT
    return value if value in STEPS else DEFAULT


def step_zoom(percent: int, step: int) -> int:
    """The zoom ``step`` steps (+1 in, -1 out) from ``percent``, kept within :data:`STEPS`; 0: 100 %."""
    if step == 0:
        return DEFAULT
    index = STEPS.index(percent) if percent in STEPS else STEPS.index(DEFAULT)
    return STEPS[max(0, min(len(STEPS) - 1, index + step))]


class ZoomMixin:
    """Methods of :class:`~app.main_window.MainWindow` for its text zoom (``self.zoom``, percent)."""

    zoom: int = DEFAULT

    def zoom_text(self, step: int) -> None:
        """Zoom in (+1), out (-1) or back to 100 % (0), and keep it for the next start."""
        self.set_zoom(step_zoom(self.zoom, step))
        self.qsettings.setValue(KEY, self.zoom)

    def set_zoom(self, percent: int) -> None:
        self.zoom = percent
        self.transcript.setStyleSheet(transcript_css(percent))
        self.composer.setStyleSheet(composer_css(percent))
        self.actions["zoom_in"].setEnabled(percent < STEPS[-1])
        self.actions["zoom_out"].setEnabled(percent > STEPS[0])
        self.actions["zoom_reset"].setText(f"&Actual size ({percent} %)" if percent != DEFAULT else "&Actual size")
