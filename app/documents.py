"""Attaching PDFs, folders and several files at once: the window's side of :mod:`app.pdf_pages`.

- A folder becomes its images and PDFs, sorted by name (:func:`app.pdf_pages.expand_folders`).
- Several images at once are taken in order while their image tokens fit the context budget
  (:meth:`DocumentIntake.budget`); the rest are left out with a one-line message saying why.
- A PDF is opened and its first page rendered on a worker thread; every page costs what that page
  costs (one image at the current detail setting). When all pages fit the budget they are rendered
  and attached; otherwise a :class:`PagePicker` offers the first pages that fit, and shows the token
  cost of the choice before anything is attached. Unreadable, encrypted or empty PDFs give a one-line
  error and attach nothing.

Rendering never runs on the UI thread: one worker thread (PDFium is not thread-safe) reports back
through queued signals.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from app import pdf_pages
from app.images import InvalidImageError, validate_image
from app.paths import data_dir
from engine.api import answer_room

# Beside the answer's room (engine.api.answer_room, as the engine keeps it), this much more is left for
# the question's text and the template.
TEXT_MARGIN = 256
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smolchat-pdf")


def pages_dir() -> Path:
    """Where rendered PDF pages go before they are sent (the store keeps its own copy)."""
    return data_dir() / "pages"


def pages_that_fit(cost: int, budget: int | None, pages: int) -> int:
    """How many pages of ``cost`` tokens each fit ``budget`` (None or an unknown cost: all; at least 1)."""
    if budget is None or cost <= 0:
        return pages
    return max(1, min(pages, budget // cost))


class PagePicker(QDialog):
    """Which pages of a long PDF to attach: "from page … to page …", with their token cost."""

    chosen = Signal(int, int)  # first, last page (1-based, inclusive)

    def __init__(self, name: str, pages: int, cost: int, budget: int | None, detail: str,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pagePicker")
        self.setWindowTitle(f"Pages of {name}")
        self.cost, self.budget = cost, budget
        fit = pages_that_fit(cost, budget, pages)
        intro = QLabel(f"{name} has {pages} pages. Each page is read as one image: "
                       f"{cost:,} tokens at {detail} detail. The first {fit} fit the model's context.")
        intro.setObjectName("pagePickerIntro")
        intro.setWordWrap(True)
        self.first = QSpinBox()
        self.first.setObjectName("firstPage")
        self.last = QSpinBox()
        self.last.setObjectName("lastPage")
        for box, value in ((self.first, 1), (self.last, fit)):
            box.setRange(1, pages)
            box.setValue(value)
            box.valueChanged.connect(self._update)
        self.cost_label = QLabel()
        self.cost_label.setObjectName("pageCost")
        self.cost_label.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.attach_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.attach_button.setText("Attach pages")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow("From page", self.first)
        form.addRow("To page", self.last)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.cost_label)
        layout.addWidget(self.buttons)
        self.setMinimumWidth(420)
        self._update()

    def pages(self) -> int:
        return self.last.value() - self.first.value() + 1

    def _update(self) -> None:
        n = self.pages()
        if n < 1:
            self.cost_label.setText("The last page comes before the first.")
            self.attach_button.setEnabled(False)
            return
        text = f"{n} {'page' if n == 1 else 'pages'} · {n * self.cost:,} image tokens"
        over = self.budget is not None and self.cost > 0 and n * self.cost > self.budget
        if self.budget is not None:
            text += f" of {self.budget:,} available"
        if over:
            text += " — too many for the context: choose fewer pages, or a lower image detail in Settings."
        self.cost_label.setText(text)
        self.cost_label.setProperty("over", over)
        self.attach_button.setEnabled(not over)

    def accept(self) -> None:
        if self.attach_button.isEnabled():
            self.chosen.emit(self.first.value(), self.last.value())
            super().accept()


class DocumentIntake(QObject):
    """Turns dropped, pasted or picked paths into image attachments for ``window`` (a MainWindow)."""

    _probed = Signal(object, str, object)  # PdfInfo | None, error, rank (worker thread → UI thread, queued)
    _rendered = Signal(str, object, str, object)  # pdf path, [png paths] | None, error, (rank, pages' tokens)
    _progress = Signal(str, int, int)  # pdf path, pages done, pages

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.picker: PagePicker | None = None
        # PDFs opened while a picker was showing: offered one after the other (trial 54: two pickers
        # stacked, each promising the same room).
        self._waiting: list[tuple[object, tuple[int, ...]]] = []
        self._rendering_cost = 0  # image tokens of the pages being rendered: not attached yet, but taken
        self.working = 0  # PDFs being opened or rendered
        # Set when the app quits: a long rendering stops at the next page instead of holding up the exit.
        self._stop = threading.Event()
        QCoreApplication.instance().aboutToQuit.connect(self._stop.set)
        window.destroyed.connect(lambda *_: self._stop.set())
        self._probed.connect(self._on_probed, Qt.ConnectionType.QueuedConnection)
        self._rendered.connect(self._on_rendered, Qt.ConnectionType.QueuedConnection)
        self._progress.connect(self._on_progress, Qt.ConnectionType.QueuedConnection)

    # -- the budget ------------------------------------------------------------------------------------
    def budget(self) -> int | None:
        """Image tokens the next message may still take: the context, less the answer's room, a margin
        for the text and what is already attached. None when the model does not say its context."""
        context = (self.window.model_info.get("capabilities") or {}).get("max_context") or 0
        if context <= 0:
            return None
        answer = answer_room(int(self.window.current_params().get("max_new_tokens") or 0), context)
        attached = sum(self._costs(self.window.attachments.paths()))
        return max(0, context - answer - TEXT_MARGIN - attached - self._rendering_cost)

    def _costs(self, paths: list[str]) -> list[int]:
        detail, settings = self.window.message_detail(), self.window.settings
        return [max(0, self.window.controller.count_tokens(p, detail, settings.video_fps, settings.video_max_frames))
                if self.window.controller.ready else 0 for p in paths]

    # -- taking paths ----------------------------------------------------------------------------------
    def take(self, paths: list[str], ranks: list[tuple[int, ...]]
             ) -> tuple[list[str], dict[str, tuple[int, ...]], list[str], list[str]]:
        """The files to attach now: folders expanded, PDFs sent to the worker (their pages come back
        through ``window.add_files`` with the PDF's rank, so they take its place), and of several
        images only those that fit the budget. ``ranks``: each path's place among the attachments
        (:meth:`app.attachments.AttachmentStrip.add`); a folder's files get one more position each.
        Returns (images, each resolved and decoded once here; each image's rank, by the path given;
        notes to show: a folder with none, images left out; problems: each file that is no readable
        image, one line each), the notes for the caller to show with the other files' lines (trial 54:
        its error lines hid them). A file that is no image takes no room among those that fit (it
        counted as attached in "Attached 6 of 11 images", beside its own error)."""
        files, rank_of, notes, problems = [], {}, [], []
        for path, rank in zip(paths, ranks, strict=True):
            found, more = pdf_pages.expand_folders([path])
            notes += more
            for position, file in enumerate(found):
                files.append(file)
                rank_of.setdefault(file, rank if file == path else (*rank, position))
        images = []
        for path in (p for p in files if not pdf_pages.is_pdf(p)):
            try:
                resolved = str(validate_image(path))
            except InvalidImageError as exc:
                problems.append(str(exc))
                continue
            rank_of.setdefault(resolved, rank_of[path])
            images.append(resolved)
        for pdf in dict.fromkeys(p for p in files if pdf_pages.is_pdf(p)):
            self._open(pdf, rank_of[pdf])
        if len(images) > 1:
            images, note = self._fit(images)
            notes += [note] if note else []
        return images, rank_of, notes, problems

    def _fit(self, images: list[str]) -> tuple[list[str], str]:
        budget = self.budget()
        if budget is None:
            return images, ""
        taken, total = [], 0
        costs = self._costs(images)
        for path, cost in zip(images, costs, strict=True):
            if total + cost > budget:
                break
            taken.append(path)
            total += cost
        if len(taken) == len(images):
            return images, ""
        detail = self.window.detail_in_use(self.window.message_detail())
        return taken, (f"Attached {len(taken)} of {len(images)} images: the rest would not fit the model's "
                       f"context ({max(costs):,} tokens an image at {detail} detail, {budget:,} available). "
                       "Lower the image detail in Settings to fit more.")

    # -- PDFs ------------------------------------------------------------------------------------------
    def _open(self, path: str, rank: tuple[int, ...]) -> None:
        self.working += 1
        self._show_status(f"Opening {Path(path).name}…")
        folder = pages_dir()

        def job() -> None:
            try:
                self._probed.emit(pdf_pages.probe(path, folder), "", rank)
            except pdf_pages.DocumentError as exc:
                self._probed.emit(None, str(exc), rank)
            except Exception as exc:  # noqa: BLE001 - never lose a job: the window waits for it
                self._probed.emit(None, f"{Path(path).name} cannot be read: {exc}", rank)
        _WORKER.submit(job)

    @Slot(object, str, object)
    def _on_probed(self, info, error: str, rank: tuple[int, ...]) -> None:
        self._done()
        if info is None:
            self.window.banner.add_error(error)
            return
        self._offer(info, rank)

    def _offer(self, info, rank: tuple[int, ...]) -> None:
        """Attach a probed PDF's pages, all of them where they fit, else those the page picker gives
        (one picker at a time: a PDF coming meanwhile waits for it to close, then counts its pages)."""
        if self.picker is not None and self.picker.isVisible():
            self._waiting.append((info, rank))
            return
        detail = self.window.detail_in_use(self.window.message_detail())
        cost = self._costs([info.first_page])[0]
        budget = self.budget()
        if budget is not None and 0 < cost and budget < cost:  # the folder's images (or others) took the room first
            self.window.note_attachments(f"{Path(info.path).name} was not attached: the attachments already fill "
                                          f"the model's context ({cost:,} tokens a page at {detail} detail, "
                                          f"{budget:,} available).")
            return
        if info.pages <= pages_that_fit(cost, budget, info.pages):
            self._render(info.path, range(info.pages), rank, cost)
            return
        self.picker = PagePicker(Path(info.path).name, info.pages, cost, budget, detail, self.window)
        self.picker.chosen.connect(lambda first, last, p=info.path, c=cost: self._render(p, range(first - 1, last), rank, c))
        self.picker.finished.connect(self._next_picker)
        self.picker.open()

    def _next_picker(self) -> None:
        if self._waiting:
            info, rank = self._waiting.pop(0)
            self._offer(info, rank)

    def _render(self, path: str, pages: range, rank: tuple[int, ...], cost: int = 0) -> None:
        self.working += 1
        self._rendering_cost += len(pages) * max(0, cost)
        folder = pages_dir()

        def progress(done: int, total: int) -> None:
            if self._stop.is_set():
                raise pdf_pages.DocumentError("stopped: Smolchat is closing")
            self._progress.emit(path, done, total)

        def job() -> None:
            try:
                pngs = pdf_pages.render_pages(path, list(pages), folder, progress)
                self._rendered.emit(path, pngs, "", (rank, len(pages) * max(0, cost)))
            except pdf_pages.DocumentError as exc:
                self._rendered.emit(path, None, str(exc), (rank, len(pages) * max(0, cost)))
            except Exception as exc:  # noqa: BLE001
                self._rendered.emit(path, None, f"{Path(path).name} cannot be rendered: {exc}",
                                    (rank, len(pages) * max(0, cost)))
        _WORKER.submit(job)

    @Slot(str, int, int)
    def _on_progress(self, path: str, done: int, total: int) -> None:
        self._show_status(f"Reading {Path(path).name}: page {done} of {total}…")

    @Slot(str, object, str, object)
    def _on_rendered(self, path: str, pngs, error: str, rank_and_cost) -> None:
        rank, cost = rank_and_cost
        self._rendering_cost -= cost  # attached now (or not at all): counted as attachments
        self._done()
        if pngs is None:
            self.window.banner.add_error(error)
            return
        self.window.add_files(pngs, [(*rank, page) for page in range(len(pngs))])

    def _show_status(self, text: str) -> None:
        self.window.show_pending_text(text)

    def _done(self) -> None:
        self.working -= 1
        if not self.working:
            self.window._count_pending_tokens()  # the pending label shows the attachments again
