"""Smolchat's main window: transcript, composer with image attachments, and the engine worker."""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QSize, Qt, Signal, Slot
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QIcon, QImage
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.attachments import AttachmentStrip
from app.banner import Banner
from app.chat_view import EMPTY_TEXT, ChatView
from app.composer import Composer
from app.formatting import finish_footer, model_summary, stats_summary
from app.images import InvalidImageError, save_png_bytes, validate_image
from app.mime import carries_images, image_from_mime, local_files
from app.model_picker import ModelPicker
from app.paths import pasted_images_dir, resource
from app.worker import SessionFactory, start_worker, stop_worker
from app.qt_compat import emit

IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff);;All files (*)"


def icon(name: str) -> QIcon:
    return QIcon(str(resource(f"icons/{name}.svg")))


class MainWindow(QMainWindow):
    """The chat window. Builds its own :class:`~app.worker.EngineWorker` thread.

    ``model_path`` starts loading at once (in the worker); ``session_factory`` replaces the real
    engine, e.g. with a fake in tests.
    """

    load_requested = Signal(str, object, object)
    reset_requested = Signal()
    answer_finished = Signal(dict)  # the worker's result, re-emitted once the window has shown it

    def __init__(
        self,
        model_path: str | None = None,
        session_factory: SessionFactory | None = None,
        device: str | None = None,
        dtype: str | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("Smolchat")
        self.setWindowIcon(QIcon(str(resource("smolchat.svg"))))
        self.setAcceptDrops(True)
        self.resize(900, 720)
        self.generation_params: dict = {}
        self.model_info: dict = {}
        self._model_ready = False
        self._loading = False
        self._busy = False
        self._last_prompt = ""
        self._closed = False
        self._build_ui()
        self._thread, self.worker = start_worker(session_factory)
        self._connect_worker()
        self._update_actions()
        if model_path:
            self.load_model(model_path, device, dtype)
        else:
            self.stats_label.setText("No model loaded — choose a model folder to start.")

    # -- construction --------------------------------------------------------------------------
    def _build_ui(self) -> None:
        self.model_picker = ModelPicker()
        self.new_chat_button = QPushButton("New chat")
        self.new_chat_button.setObjectName("newChatButton")
        header = QFrame()
        header.setObjectName("header")
        logo = QLabel()
        logo.setPixmap(QIcon(str(resource("smolchat.svg"))).pixmap(QSize(26, 26), self.devicePixelRatioF()))
        title = QLabel("Smolchat")
        title.setObjectName("appTitle")
        header_layout = QHBoxLayout(header)
        header_layout.setContentsMargins(16, 10, 16, 10)
        header_layout.setSpacing(10)
        header_layout.addWidget(logo)
        header_layout.addWidget(title)
        header_layout.addStretch(1)
        header_layout.addWidget(self.model_picker)
        header_layout.addWidget(self.new_chat_button)

        self.banner = Banner()
        self.transcript = ChatView()
        self.attachments = AttachmentStrip()
        self.composer = Composer()
        self.attach_button = self._tool_button("attachButton", "attach", "Attach images (or drop / paste them)")
        self.stop_button = self._tool_button("stopButton", "stop", "Stop the answer")
        self.send_button = self._tool_button("sendButton", "send", "Send (Enter)")

        composer_frame = QFrame()
        composer_frame.setObjectName("composerFrame")
        row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(self.attach_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.composer, 1)
        row.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        frame_layout = QVBoxLayout(composer_frame)
        frame_layout.setContentsMargins(10, 6, 10, 8)
        frame_layout.setSpacing(4)
        frame_layout.addWidget(self.attachments)
        frame_layout.addLayout(row)
        hint = QLabel("Enter to send · Shift+Enter for a new line · drop or paste images")
        hint.setObjectName("composerHint")

        bottom = QVBoxLayout()
        bottom.setContentsMargins(20, 0, 20, 10)
        bottom.setSpacing(4)
        bottom.addWidget(composer_frame)
        bottom.addWidget(hint, 0, Qt.AlignmentFlag.AlignHCenter)

        central = QWidget()
        central.setObjectName("central")
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(header)
        layout.addWidget(self.banner)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(bottom)
        self.setCentralWidget(central)

        self.stats_label = QLabel()
        self.stats_label.setObjectName("statusStats")
        self.statusBar().addWidget(self.stats_label, 1)
        self.statusBar().setSizeGripEnabled(False)

        self.composer.submitted.connect(self.send_message)
        self.composer.textChanged.connect(self._update_actions)
        self.composer.files_added.connect(self.add_files)
        self.composer.image_pasted.connect(self.add_image_data)
        self.attachments.changed.connect(self._update_actions)
        self.attach_button.clicked.connect(self._pick_files)
        self.send_button.clicked.connect(self.send_message)
        self.stop_button.clicked.connect(self.stop)
        self.new_chat_button.clicked.connect(self.new_chat)
        self.model_picker.model_chosen.connect(self.load_model)
        self.composer.setFocus()

    def _tool_button(self, name: str, icon_name: str, tip: str) -> QToolButton:
        button = QToolButton()
        button.setObjectName(name)
        button.setIcon(icon(icon_name))
        button.setIconSize(QSize(20, 20))
        button.setToolTip(tip)
        button.setAccessibleName(tip)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        return button

    def _connect_worker(self) -> None:
        w = self.worker
        self.load_requested.connect(w.load_model)
        self.reset_requested.connect(w.reset)
        w.model_loading.connect(self._on_model_loading)
        w.model_loaded.connect(self._on_model_loaded)
        w.model_load_failed.connect(self._on_model_load_failed)
        w.token.connect(self.transcript.append_token)
        w.error.connect(self._on_error)
        w.finished.connect(self._on_finished)

    # -- actions -------------------------------------------------------------------------------
    @Slot(str)
    def load_model(self, path: str, device: str | None = None, dtype: str | None = None) -> None:
        """Load ``path`` (a model folder or Hub repo id) in the worker thread."""
        if self._busy:
            return
        self._loading = True
        self._model_ready = False
        self._update_actions()
        emit(self.load_requested, path, device, dtype)

    @Slot()
    def send_message(self) -> None:
        """Send the composer's text and pending images, if the model is ready and idle."""
        text = self.composer.toPlainText().strip()
        images = self.attachments.paths()
        if not self.send_button.isEnabled() or not (text or images):
            return
        self.banner.dismiss()
        self._last_prompt = text
        self.transcript.add_user_message(text, images)
        self.composer.clear()
        self.attachments.clear()
        self.transcript.begin_answer(self.model_info.get("model_name", "Smolchat"))
        self._busy = True
        self._update_actions()
        self.stats_label.setText(f"{model_summary(self.model_info)} · generating…")
        self.worker.request_generate(text, images, self.generation_params)

    @Slot()
    def stop(self) -> None:
        """Ask the engine to stop the current answer (it ends after the current token)."""
        self.worker.cancel()

    @Slot()
    def new_chat(self) -> None:
        if self._busy:
            return
        self.transcript.clear()
        emit(self.reset_requested)

    @Slot(list)
    def add_files(self, paths: list[str]) -> None:
        """Attach image files; a file that is not a readable image shows an error instead."""
        problems = []
        for path in paths:
            try:
                self.attachments.add(str(validate_image(path)))
            except InvalidImageError as exc:
                problems.append(str(exc))
        if problems:
            self.banner.show_error(" ".join(problems))

    @Slot(QImage)
    def add_image_data(self, image: QImage) -> None:
        """Attach pasted image data, saved as a PNG in the app data folder."""
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        if image.isNull() or not image.save(buffer, "PNG"):
            self.banner.show_error("The pasted image could not be read.")
            return
        self.add_files([str(save_png_bytes(bytes(data.data()), pasted_images_dir()))])

    @Slot()
    def _pick_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach images", "", IMAGE_FILTER)
        if paths:
            self.add_files(paths)

    def _update_actions(self) -> None:
        has_input = bool(self.composer.toPlainText().strip() or self.attachments.paths())
        self.send_button.setEnabled(self._model_ready and not self._busy and has_input)
        self.stop_button.setEnabled(self._busy)
        self.stop_button.setVisible(self._busy)  # Stop takes Send's place while answering
        self.send_button.setVisible(not self._busy)
        self.new_chat_button.setEnabled(self._model_ready and not self._busy)
        self.model_picker.setEnabled(not self._busy and not self._loading)

    # -- worker signals ------------------------------------------------------------------------
    @Slot(str)
    def _on_model_loading(self, path: str) -> None:
        self.model_picker.set_loading(path)
        self.transcript.set_placeholder(f"Loading model…\n{path}")
        self.stats_label.setText(f"Loading model from {path}…")

    @Slot(dict)
    def _on_model_loaded(self, info: dict) -> None:
        self.model_info = dict(info)
        self._loading = False
        self._model_ready = True
        self.model_picker.set_model(info.get("model_name", ""), info.get("path", ""))
        self.transcript.set_placeholder(EMPTY_TEXT)
        self.stats_label.setText(f"{model_summary(info)} · ready")
        self._update_actions()

    @Slot(str)
    def _on_model_load_failed(self, message: str) -> None:
        self._loading = False
        self._model_ready = False
        self.model_info = {}
        self.model_picker.set_none()
        self.transcript.set_placeholder("No model loaded.\nChoose a model folder with the button at the top right.")
        self.banner.show_error(f"Could not load the model: {message}")
        self.stats_label.setText("No model loaded")
        self._update_actions()

    @Slot(str)
    def _on_error(self, message: str) -> None:
        self.banner.show_error(message)

    @Slot(dict)
    def _on_finished(self, result: dict) -> None:
        answer = self.transcript.last_assistant()
        self.transcript.end_answer(result.get("finish_reason", "error"), finish_footer(result))
        if result.get("finish_reason") == "error" and answer is not None and not answer.text:
            if not self.composer.toPlainText():
                self.composer.setPlainText(self._last_prompt)  # let the user fix and resend
        summary = " · ".join(p for p in (model_summary(self.model_info), stats_summary(result)) if p)
        reason = result.get("finish_reason")
        self.stats_label.setText(summary if reason == "stop" else f"{summary} · {reason}")
        self._busy = False
        self._update_actions()
        self.composer.setFocus()
        emit(self.answer_finished, result)

    # -- drag and drop onto the whole window ---------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if carries_images(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        mime = event.mimeData()
        files = local_files(mime)
        if files:
            self.add_files(files)
        elif mime.hasImage():
            self.add_image_data(image_from_mime(mime))
        else:
            return
        event.acceptProposedAction()

    # -- shutdown ------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Cancel any generation and stop the engine thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        stop_worker(self._thread, self.worker)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)
