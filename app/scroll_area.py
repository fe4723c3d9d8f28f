"""Scroll areas (a row or a column of widgets: the attachment strip, the model manager's catalog; a
dialog's whole content) and windows sized to fit their screen."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QScrollArea, QStyle, QWidget

#: Room left around a window for what the window manager adds outside its geometry: a title bar
#: (about 30-40 px) and thin borders.
FRAME_ALLOWANCE = QSize(16, 48)


def one_way_scroll(name: str, content: QWidget, sideways: bool) -> QScrollArea:
    """A frameless :class:`QScrollArea` named ``name`` holding ``content``; it scrolls ``sideways``
    (a row: no vertical scroll bar) or else down (a column: no horizontal one), the bar shown only
    when the content is longer than the area."""
    area = QScrollArea()
    area.setObjectName(name)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    needed, off = Qt.ScrollBarPolicy.ScrollBarAsNeeded, Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    area.setHorizontalScrollBarPolicy(needed if sideways else off)
    area.setVerticalScrollBarPolicy(off if sideways else needed)
    area.setWidget(content)
    return area


class ContentScroll(QScrollArea):
    """A dialog's content, scrolling either way only when the dialog is smaller than the content's
    minimum (a small screen, a large scale factor): the dialog's own buttons, outside it, stay on the
    screen.

    Qt's resizable scroll area gives content whose height depends on its width (wrapped labels) its
    preferred height, so a dialog a little shorter than that scrolled: this one fills the area and
    scrolls only below the content's minimum. Its size hint is the whole content's (QScrollArea's stops
    at 36 x 24 lines), so the dialog opens at the size that shows everything where the screen has room."""

    def __init__(self, name: str, content: QWidget) -> None:
        super().__init__()
        self.setObjectName(name)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidget(content)
        # Tab goes to the controls in it (the area scrolls to each): the area, focused, showed nothing.
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        content.installEventFilter(self)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """The whole content, and room for a vertical scroll bar: where a screen is too short for the
        content, scrolling down does not make it scroll sideways as well."""
        frame = 2 * self.frameWidth()
        bar = self.verticalScrollBar().sizeHint().width()
        return self.widget().sizeHint().expandedTo(self.widget().minimumSizeHint()) + QSize(frame + bar, frame)

    def eventFilter(self, watched, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            QTimer.singleShot(0, self, self.fit_content)  # once the layout has its new minimum
        return super().eventFilter(watched, event)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self.fit_content()

    def fit_content(self) -> None:
        """The content as large as the area (less a scroll bar where the other way scrolls), and no
        smaller than its minimum for that width."""
        content = self.widget()
        layout = content.layout()
        minimum = content.minimumSizeHint().expandedTo(content.minimumSize())

        def least_height(width: int) -> int:
            if layout is not None and layout.hasHeightForWidth():
                return max(minimum.height(), layout.minimumHeightForWidth(width))
            return minimum.height()

        frame = 2 * self.frameWidth()
        width, height = self.width() - frame, self.height() - frame
        bar_width = self.verticalScrollBar().sizeHint().width()
        bar_height = self.horizontalScrollBar().sizeHint().height()
        sideways = minimum.width() > width
        if sideways:
            height -= bar_height
        if least_height(max(width, minimum.width())) > height:  # scrolls down: the bar takes width
            width -= bar_width
            if not sideways and minimum.width() > width:
                sideways, height = True, height - bar_height
        width = max(width, minimum.width())
        least = least_height(width)
        if least > height:
            # It scrolls down anyway: at its preferred height, not squeezed to its minimum (spin boxes
            # and text boxes at their minimum height were cut through their text).
            preferred = layout.heightForWidth(width) if layout is not None and layout.hasHeightForWidth() else -1
            least = max(least, preferred, content.sizeHint().height() if preferred < 0 else 0)
        size = QSize(width, max(height, least))
        if content.size() != size:
            content.resize(size)


def available_room(widget: QWidget) -> QSize:
    """The most a window of ``widget`` can take and still show whole on its screen: the screen's
    available geometry (less panels and docks) less :data:`FRAME_ALLOWANCE`."""
    screen = widget.screen() or QGuiApplication.primaryScreen()
    return (screen.availableGeometry().size() - FRAME_ALLOWANCE).expandedTo(QSize(1, 1))


def content_room(dialog: QWidget) -> int:
    """The width a :class:`ContentScroll` filling ``dialog`` can show without scrolling sideways on
    its screen: :func:`available_room` less the dialog's layout margins and a vertical scroll bar.
    A dialog whose content needs more arranges it narrower (Settings stacks its columns)."""
    style = dialog.style()
    around = (style.pixelMetric(QStyle.PixelMetric.PM_LayoutLeftMargin)
              + style.pixelMetric(QStyle.PixelMetric.PM_LayoutRightMargin)
              + style.pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent))
    return available_room(dialog).width() - around


def fit_to_screen(window: QWidget, size: QSize | None = None) -> QSize:
    """Resize ``window`` to ``size`` (by default its size hint), no larger than :func:`available_room`:
    at QT_SCALE_FACTOR=2 on a 1280 x 900 screen the main window (1080 x 720), Settings and the model
    manager opened larger than the screen, their Send or OK off it (trial 38). Returns the size set."""
    wanted = size if size is not None else window.sizeHint()
    fitted = wanted.boundedTo(available_room(window)).expandedTo(window.minimumSize())
    window.resize(fitted)
    return fitted
