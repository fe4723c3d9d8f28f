"""The QApplication with Smolchat's name, icon, style sheet and theme (shared by the app and its self-test)."""

from __future__ import annotations

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app.paths import resource


def create_app(argv: list[str]) -> QApplication:
    """The QApplication with Smolchat's name, icon and style sheet."""
    app = QApplication.instance() or QApplication(argv)
    app.setApplicationName("Smolchat")
    app.setApplicationDisplayName("Smolchat")
    app.setDesktopFileName("smolchat")
    app.setWindowIcon(QIcon(str(resource("smolchat.svg"))))
    app.setStyle("Fusion")  # consistent across platforms; the style sheet follows the palette
    app.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    from app.settings import load_settings, set_aside_unreadable_settings, theme_from_environment
    from app.theme import apply_theme

    set_aside_unreadable_settings()  # before anything reads it: the window says what was done

    apply_theme(theme_from_environment()[0] or load_settings().theme)  # follows the system by default
    from app.main_thread_gc import install

    install(app)  # cycles holding Qt objects are never freed on the engine thread (a deadlock)
    return app
