"""Smolchat's main window: conversations sidebar, transcript, composer, and the engine worker."""

from __future__ import annotations

import sqlite3

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QIcon, QImage
from PySide6.QtWidgets import QFileDialog, QMainWindow

from app.banner import Banner
from app.chat_view import EMPTY_TEXT
from app.conversations import STORAGE_ERRORS, ConversationKeeper, storage_problem
from app.formatting import finish_footer, model_summary, pending_summary, stats_summary
from app.images import InvalidImageError, save_png_bytes, validate_image
from app.menus import build_menus
from app.mime import carries_images, image_from_mime, local_files
from app.paths import data_dir, data_dir_problem, pasted_images_dir, resource, use_temporary_data_dir
from app.qt_compat import emit
from app.settings import generation_defaults, last_model, load_settings, open_settings, set_last_model
from app.store import Store
from app.window_layout import build_ui
from app.worker import SessionFactory, start_worker, stop_worker

IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff);;All files (*)"
CHAT_KEYS = ("system_prompt", "overrides", "seed", "image_detail")


class MainWindow(QMainWindow):
    """The chat window. Builds its own :class:`~app.worker.EngineWorker` thread.

    ``model_path`` starts loading at once (in the worker); without it the last used model loads,
    and with none the model manager opens. ``session_factory`` replaces the real engine in tests.
    """

    load_requested = Signal(str, object, object)
    configure_requested = Signal(dict)
    reset_requested = Signal()
    count_requested = Signal(list, str)
    answer_finished = Signal(dict)  # the worker's result, re-emitted once the window has shown it

    def __init__(self, model_path: str | None = None, session_factory: SessionFactory | None = None,
                 device: str | None = None, dtype: str | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Smolchat")
        self.setWindowIcon(QIcon(str(resource("smolchat.svg"))))
        self.setAcceptDrops(True)
        self.resize(1080, 720)
        self.qsettings = open_settings()
        self.settings = load_settings(self.qsettings)
        self.generation_params: dict = {}  # extra GenerationParams fields (tests, screenshots)
        self.model_info: dict = {}
        self.model_manager = None
        self._model_ready = self._loading = self._busy = self._closed = False
        self._reload_pending = False  # engine settings changed while an answer was running
        self._last_prompt = ""
        self._editing: int | None = None
        self._token_counts: dict[tuple[str, str], int] = {}
        build_ui(self)
        self.store = self._open_store()
        self.keeper = ConversationKeeper(self.store, self.transcript, self.qsettings)
        self.keeper.storage_error.connect(self.banner.show_error)
        self.actions = build_menus(self)
        self._thread, self.worker = start_worker(session_factory)
        self._connect_worker()
        self.open_conversation(self.keeper.last_opened())
        self._update_actions()
        path = model_path or last_model(self.qsettings)
        if path:
            self.load_model(path, device or self.settings.device_arg(), dtype or self.settings.dtype_arg())
        else:
            self.stats_label.setText("No model loaded — choose or download one to start.")
            QTimer.singleShot(0, self.open_model_manager)

    # -- construction --------------------------------------------------------------------------
    def _open_store(self) -> Store:
        """The store in the data folder, or in a temporary one (with a lasting banner) if that fails."""
        try:
            store = Store(data_dir())
        except (OSError, sqlite3.Error) as exc:
            folder = use_temporary_data_dir(getattr(exc, "strerror", None) or str(exc))
            store = Store(folder)
        problem = data_dir_problem()
        # Its own banner: the chat's banner is cleared on every send, this one must stay.
        self.storage_banner = Banner()
        self.storage_banner.setAccessibleName("Data folder problem")
        self.banner.parentWidget().layout().insertWidget(
            self.banner.parentWidget().layout().indexOf(self.banner), self.storage_banner)
        if problem:
            self.storage_banner.show_error(problem)
        return store

    def _connect_worker(self) -> None:
        w = self.worker
        self.load_requested.connect(w.load_model)
        self.configure_requested.connect(w.configure)
        self.reset_requested.connect(w.reset)
        self.count_requested.connect(w.count_image_tokens)
        w.model_loading.connect(self._on_model_loading)
        w.model_loaded.connect(self._on_model_loaded)
        w.model_load_failed.connect(self._on_model_load_failed)
        w.token.connect(self._on_token)
        w.error.connect(self._on_error)
        w.finished.connect(self._on_finished)
        w.image_tokens.connect(self._on_image_tokens)

    # -- conversations -------------------------------------------------------------------------
    def refresh_sidebar(self) -> None:
        self.sidebar.set_conversations(self.store.conversations(self.sidebar.search.text()), self.keeper.current_id)

    @Slot(int)
    def open_conversation(self, conversation_id: int | None) -> None:
        if self._busy:
            self.sidebar.select(self.keeper.current_id)
            return
        self._cancel_edit()
        saved = self.keeper.open(conversation_id)
        self.settings = load_settings(self.qsettings)  # global defaults, then what this chat used
        for key in CHAT_KEYS:
            if key in saved:
                setattr(self.settings, key, saved[key])
        if self._model_ready:  # the last answer's "error" / stats belong to the chat just left
            self.stats_label.setText(f"{model_summary(self.model_info)} · ready")
        self.refresh_sidebar()

    @Slot()
    def new_chat(self) -> None:
        if self._busy:
            return
        self.open_conversation(None)
        emit(self.reset_requested)
        self.composer.setFocus()

    def _storage_failed(self, what: str, exc: BaseException) -> None:
        self.banner.show_error(f"Could not {what}: {storage_problem(exc)}.")

    @Slot(int, str)
    def rename_conversation(self, conversation_id: int, title: str) -> None:
        if title.strip():
            try:
                self.store.rename_conversation(conversation_id, title)
            except STORAGE_ERRORS as exc:
                self._storage_failed("rename the chat", exc)
        self.refresh_sidebar()

    @Slot(int)
    def delete_conversation(self, conversation_id: int) -> None:
        if self._busy and conversation_id == self.keeper.current_id:
            return
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        try:
            self.store.delete_conversation(conversation_id)
        except STORAGE_ERRORS as exc:
            self._storage_failed("delete the chat", exc)
            return
        if conversation_id == self.keeper.current_id:
            self.open_conversation(None)
        self.refresh_sidebar()
        self.banner.show_info(f"Deleted “{conv.title or 'New chat'}”.", "Undo",
                              lambda: self._undo_delete(conversation_id))

    def _undo_delete(self, conversation_id: int) -> None:
        try:
            self.store.undelete_conversation(conversation_id)
        except STORAGE_ERRORS as exc:
            self._storage_failed("restore the chat", exc)
            return
        self.open_conversation(conversation_id)

    def chat_settings(self) -> dict:
        return {key: getattr(self.settings, key) for key in CHAT_KEYS}

    # -- sending -------------------------------------------------------------------------------
    def current_params(self) -> dict:
        params = self.settings.generation_params(self.model_info.get("defaults"))
        params.update(self.generation_params)
        return params

    @Slot()
    def send_message(self) -> None:
        """Send the composer's text and pending images, if the model is ready and idle."""
        text = self.composer.toPlainText().strip()
        images = self.attachments.paths()
        if not self.send_button.isEnabled() or not (text or images):
            return
        if images and self._refuse_images():  # attached before a text-only model loaded
            return
        if self._editing is not None:
            try:
                self.keeper.truncate_from(self._editing)
            except STORAGE_ERRORS as exc:
                self._storage_failed("replace the edited message", exc)
                return
            self._cancel_edit()
        self.banner.dismiss()
        self._last_prompt = text
        try:
            history, stored = self.keeper.begin(text, images, self._model_name(), self._model_path(),
                                                self.chat_settings())
        except STORAGE_ERRORS as exc:  # the composer keeps the text and images
            self._storage_failed("save the message", exc)
            return
        self.composer.clear()
        self.attachments.clear()
        self._start_generation(text, stored, history)

    def _start_generation(self, text: str, images: list[str], history: list[dict]) -> None:
        self._busy = True
        self._update_actions()
        self.refresh_sidebar()
        self.stats_label.setText(f"{model_summary(self.model_info)} · generating…")
        self.worker.request_generate(text, images, self.current_params(), history)

    @Slot()
    def stop(self) -> None:
        """Ask the engine to stop the current answer (it ends after the current token)."""
        self.worker.cancel()

    @Slot(str, int)
    def _on_message_action(self, action: str, index: int) -> None:
        if self._busy and action != "copy":
            return
        if action == "delete":
            try:
                self.keeper.delete_message(index)
            except STORAGE_ERRORS as exc:
                self._storage_failed("delete the message", exc)
        elif action == "regenerate" and self._model_ready:
            try:
                found = self.keeper.begin_regenerate(index, self._model_name(), self._model_path(),
                                                     self.chat_settings())
            except STORAGE_ERRORS as exc:
                self._storage_failed("regenerate the answer", exc)
                return
            if found:
                history, user = found
                self._start_generation(user["text"], user["images"], history)
        elif action == "edit":
            message = self.transcript.widgets()[index]
            self.composer.setPlainText(message.text)
            self.attachments.clear()
            for path in message.images:
                self.attachments.add(path)
            self._editing = index
            self.banner.show_info("Editing a message: sending replaces it and everything after it.",
                                  "Cancel edit", self._cancel_edit)
            self.composer.setFocus()

    def _cancel_edit(self) -> None:
        if self._editing is not None:
            self._editing = None
            self.banner.dismiss()

    @Slot(list)
    def add_files(self, paths: list[str]) -> None:
        """Attach image files; a file that is not a readable image shows an error instead, and so
        does any image while the loaded model is text-only."""
        if paths and self._refuse_images():
            return
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
        """Attach pasted or dragged image data, saved as a PNG in the app data folder."""
        if self._refuse_images():
            return
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        if image.isNull() or not image.save(buffer, "PNG"):
            self.banner.show_error("The pasted image could not be read.")
            return
        try:
            saved = save_png_bytes(bytes(data.data()), pasted_images_dir())
        except OSError as exc:
            self._storage_failed("keep the pasted image", exc)
            return
        self.add_files([str(saved)])

    def _refuse_images(self) -> bool:
        """Show why and return True when the loaded model takes no images (``model_info["vision"]``)."""
        if self.model_info.get("vision", True):
            return False
        name = self.model_info.get("model_name") or "This model"
        self.banner.show_error(f"{name} is a text-only model: it cannot read images. Remove the image, "
                               "or load a vision model (SmolVLM) to ask about it.")
        return True

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
        self.new_chat_button.setEnabled(not self._busy)
        self.model_picker.setEnabled(not self._busy and not self._loading)

    # -- image tokens of the pending attachments -------------------------------------------------
    @Slot()
    def _count_pending_tokens(self) -> None:
        detail = self.settings.image_detail
        missing = [p for p in self.attachments.paths() if (p, detail) not in self._token_counts]
        if missing and self._model_ready:
            emit(self.count_requested, missing, detail)
        self._show_pending()

    @Slot(str, str, int)
    def _on_image_tokens(self, path: str, detail: str, count: int) -> None:
        self._token_counts[(path, detail)] = count
        self._show_pending()

    def _show_pending(self) -> None:
        detail = self.settings.image_detail
        counts = [self._token_counts.get((p, detail)) for p in self.attachments.paths()]
        self.pending_label.setText(pending_summary(counts))

    # -- models ----------------------------------------------------------------------------------
    def _model_name(self) -> str:
        return self.model_info.get("model_name", "Smolchat")

    def _model_path(self) -> str:
        return self.model_info.get("path", "")

    @Slot(str)
    def load_model(self, path: str, device: str | None = None, dtype: str | None = None) -> None:
        """Load ``path`` (a model folder or Hub repo id) in the worker thread."""
        if self._busy:
            return
        self._loading = True
        self._model_ready = False
        self._update_actions()
        emit(self.configure_requested, self.settings.load_options())
        emit(self.load_requested, path, device or self.settings.device_arg(), dtype or self.settings.dtype_arg())

    def open_model_manager(self):
        from app.model_manager import ModelManager

        if self.model_manager is None:
            self.model_manager = ModelManager(self)
            self.model_manager.use_requested.connect(self.load_model)
        self.model_manager.show()
        self.model_manager.raise_()
        return self.model_manager

    def open_settings_dialog(self):
        from app.settings_dialog import SettingsDialog

        dialog = SettingsDialog(self.settings, self.model_info.get("defaults", {}), self)
        dialog.applied.connect(self._apply_settings)
        dialog.show()
        return dialog

    def _apply_settings(self, settings) -> None:
        from app.settings import save_settings
        from app.theme import apply_theme

        engine_changed = (settings.device, settings.dtype, settings.cache_kind, settings.context_size,
                          settings.weights) != (self.settings.device, self.settings.dtype, self.settings.cache_kind,
                                                self.settings.context_size, self.settings.weights)
        self.settings = settings
        save_settings(settings, self.qsettings)
        if self.keeper.current_id is not None:
            try:
                self.store.update_conversation(self.keeper.current_id, settings=self.chat_settings())
            except STORAGE_ERRORS as exc:
                self._storage_failed("save this chat's settings", exc)
        apply_theme(settings.theme)
        self._count_pending_tokens()
        if engine_changed and self.model_info:
            if self._busy:  # never swap the model under a running answer: reload when it ends
                self._reload_pending = True
                self.banner.show_info("The new engine settings apply when this answer finishes.")
            else:
                self.load_model(self.model_info["path"])

    # -- worker signals ------------------------------------------------------------------------
    @Slot(str)
    def _on_model_loading(self, path: str) -> None:
        self.model_picker.set_loading(path)
        self.transcript.set_placeholder(f"Loading model…\n{path}")
        self.stats_label.setText(f"Loading model from {path}…")

    @Slot(dict)
    def _on_model_loaded(self, info: dict) -> None:
        self.model_info = dict(info, defaults=generation_defaults(info.get("folder")))
        self._loading = False
        self._model_ready = True
        self._token_counts.clear()
        set_last_model(info.get("path", ""), self.qsettings)
        self.model_picker.set_model(info.get("model_name", ""), info.get("path", ""))
        self.transcript.set_placeholder(EMPTY_TEXT)
        self.stats_label.setText(f"{model_summary(info)} · ready")
        self._update_actions()
        self._count_pending_tokens()

    @Slot(str)
    def _on_model_load_failed(self, message: str) -> None:
        self._loading = False
        self._model_ready = False
        self.model_info = {}
        self.model_picker.set_none()
        self.transcript.set_placeholder("No model loaded.\nChoose or download a model with the button at the top right.")
        self.banner.show_error(f"Could not load the model: {message}")
        self.stats_label.setText("No model loaded")
        self._update_actions()

    @Slot(str)
    def _on_token(self, piece: str) -> None:
        if self._closed:
            return
        self.transcript.append_token(piece)
        self.keeper.token_arrived()

    @Slot(str)
    def _on_error(self, message: str) -> None:
        self.banner.show_error(message)

    @Slot(dict)
    def _on_finished(self, result: dict) -> None:
        if self._closed:
            return
        answer = self.transcript.last_assistant()
        self.transcript.end_answer(result.get("finish_reason", "error"),
                                   " · ".join(p for p in (finish_footer(result), stats_summary(result)) if p))
        self.keeper.finish(result, self._model_name())
        if result.get("finish_reason") == "error" and answer is not None and not answer.text:
            if not self.composer.toPlainText():
                self.composer.setPlainText(self._last_prompt)  # let the user fix and resend
        if result.get("notice") and result.get("finish_reason") != "error":
            self.banner.show_info(result["notice"])  # e.g. old turns dropped to fit the context
        summary = " · ".join(p for p in (model_summary(self.model_info), stats_summary(result)) if p)
        reason = result.get("finish_reason")
        self.stats_label.setText(summary if reason == "stop" else f"{summary} · {reason}")
        self._busy = False
        self._update_actions()
        self.composer.setFocus()
        if self._reload_pending and self.model_info:
            self._reload_pending = False
            self.load_model(self.model_info["path"])  # engine settings changed during the answer
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
        """Cancel any generation, stop the engine thread, save and close the store (idempotent)."""
        if self._closed:
            return
        self._closed = True
        stop_worker(self._thread, self.worker)
        if self.model_manager is not None:
            self.model_manager.shutdown()
        self.keeper.abandon()
        self.store.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)
