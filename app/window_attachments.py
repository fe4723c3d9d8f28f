"""The main window's attachments: files, pasted or dropped images, and what they cost in tokens."""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Slot
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage
from PySide6.QtWidgets import QFileDialog

from app.conversations import storage_problem
from app.documents import DocumentIntake
from app.formatting import pending_summary
from app.images import InvalidImageError, save_png_bytes, validate_image
from app.mime import carries_images, image_from_mime, local_files
from app.paths import pasted_images_dir

IMAGE_FILTER = "Images and PDFs (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff *.pdf);;All files (*)"


class AttachmentsMixin:
    """Methods of :class:`~app.main_window.MainWindow` for its pending attachments (``self.attachments``)."""

    @property
    def documents(self) -> DocumentIntake:
        """Folders, PDFs and several files at once (:mod:`app.documents`), made at first use."""
        if getattr(self, "_documents", None) is None:
            self._documents = DocumentIntake(self)
        return self._documents

    @Slot(list)
    def add_files(self, paths: list[str]) -> None:
        """Attach image files, PDFs (their pages, rendered in the background) and folders' images; a file
        that is not a readable image shows an error instead, and so does any image while the loaded
        model is text-only."""
        if paths and self.refuse_images():
            return
        problems = []
        for path in self.documents.take(paths):
            try:
                self.attachments.add(str(validate_image(path)))
            except InvalidImageError as exc:
                problems.append(str(exc))
        if problems:
            self.banner.show_error(" ".join(problems))

    @Slot(QImage)
    def add_image_data(self, image: QImage) -> None:
        """Attach pasted or dragged image data, saved as a PNG in the app data folder."""
        if self.refuse_images():
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
            self.banner.show_error(f"Could not keep the pasted image: {storage_problem(exc)}.")
            return
        self.add_files([str(saved)])

    def refuse_images(self) -> bool:
        """Show why and return True when the loaded model takes no images (its capabilities say so)."""
        capabilities = self.model_info.get("capabilities")
        if not capabilities or capabilities.get("vision", True):
            return False
        name = self.model_info.get("model_name") or "This model"
        if str(self.model_info.get("backend", "")).startswith("remote:"):  # the server said so, or nobody did
            self.banner.show_error(f"{name} on {self.model_info.get('device')} cannot read images, as far as "
                                   "Smolchat knows. If it can, turn on “can see images” for it in Settings ▸ "
                                   "Engines; or remove the image.")
            return True
        self.banner.show_error(f"{name} is a text-only model: it cannot read images. Remove the image, "
                               "or load a vision model (SmolVLM) to ask about it.")
        return True

    @Slot()
    def _pick_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach images or PDFs", "", IMAGE_FILTER)
        if paths:
            self.add_files(paths)

    @Slot()
    def _count_pending_tokens(self) -> None:
        """Show what the pending attachments will cost (the backend reads image headers only)."""
        detail = self.settings.image_detail
        if self.controller.ready:
            for path in self.attachments.paths():
                if (path, detail) not in self._token_counts:
                    self._token_counts[(path, detail)] = self.controller.count_tokens(path, detail)
        counts = [self._token_counts.get((p, detail)) for p in self.attachments.paths()]
        self.pending_label.setText(pending_summary(counts))

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
