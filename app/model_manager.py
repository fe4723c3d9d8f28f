"""The model manager: download SmolVLM-family checkpoints (or any Hub repo id), add or check a local
folder or GGUF file, pick one. The catalog (sizes, what each can do) is :mod:`app.catalog`.

A model becomes usable (listed under "Your models" and in the model picker) only after its files
are complete and pass :func:`app.model_check.validate_model`, so a cancelled or failed download
never leaves something half-installed that the app would try to load.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from app.catalog import CATALOG, CatalogEntry, cached_snapshot, classify
from app.flow_layout import flow_row
from app.icons import icon
from app.model_tasks import start_tasks
from app.scroll_area import ContentScroll, content_room, fit_to_screen, one_way_scroll
from app.settings import add_known_model, known_models, remove_known_model


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


ROW_SPACING = 8  # px allowed between a catalog row's text and its buttons (the style's is 6 or so)


class CatalogRow(QFrame):
    """One downloadable checkpoint: name, size, state, progress, and its buttons."""

    def __init__(self, entry: CatalogEntry, room: int = 0, parent: QWidget | None = None) -> None:
        """``room``: the width the row gets at most (0: any), below which its title wraps."""
        super().__init__(parent)
        self.entry = entry
        self.setObjectName("catalogRow")
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)  # never shorter than its lines
        self.setAccessibleName(entry.label)
        facts = [entry.repo_id] if entry.label != entry.repo_id else []
        facts += [f"≈{entry.size_gb:g} GB"] if entry.size_gb > 0 else ["size unknown"]
        facts += [entry.abilities] if entry.abilities else []
        title = QLabel(f"<b>{entry.label}</b> <span style='color:gray'>· {' · '.join(facts)}</span>")
        title.setObjectName("catalogTitle")
        self.title = title
        self.status = QLabel(entry.note)
        self.status.setObjectName("catalogStatus")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setObjectName("downloadProgress")
        self.progress.setAccessibleName(f"Download progress of {entry.label}")
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.download_button = QPushButton(icon("download"), "Download")
        self.download_button.setObjectName("downloadButton")
        self.download_button.setAccessibleName(f"Download {entry.label}")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelDownloadButton")
        self.cancel_button.setAccessibleName(f"Cancel the download of {entry.label}")
        self.cancel_button.hide()
        self.use_button = QPushButton("Use")
        self.use_button.setObjectName("useModelButton")
        self.use_button.setAccessibleName(f"Use {entry.label}")
        self.use_button.hide()
        # On a narrow screen (QT_SCALE_FACTOR=2 on 1280 x 900) the title wraps rather than make the
        # whole dialog scroll sideways; elsewhere it keeps to one line (wrapped, its height for its
        # width made the list scroll with room to spare).
        buttons = max(b.sizeHint().width() for b in (self.download_button, self.cancel_button, self.use_button))
        if room and title.sizeHint().width() + buttons + 16 + 2 * ROW_SPACING > room:
            title.setWordWrap(True)
        text = QVBoxLayout()
        text.setSpacing(2)
        text.addWidget(title)
        text.addWidget(self.status)
        text.addWidget(self.progress)
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 6, 8, 6)
        row.addLayout(text, 1)
        for button in (self.download_button, self.cancel_button, self.use_button):
            row.addWidget(button, 0, Qt.AlignmentFlag.AlignVCenter)
        no_default_buttons(self)
        self.path = ""
        self.cached = ""  # its folder in the Hugging Face cache, found there but not checked yet
        self.last_progress = (0.0, 0.0)

    def set_state(self, state: str, message: str = "") -> None:
        """``idle`` | ``downloaded`` (in the cache, not checked) | ``downloading`` | ``checking`` |
        ``installed`` | ``failed``."""
        self.state = state
        self.progress.setVisible(state in ("downloading", "checking"))
        self.download_button.setVisible(state in ("idle", "failed", "downloaded"))
        self.download_button.setText("Resume download" if state == "failed" and "cancel" in message.lower()
                                     else "Check and add" if state == "downloaded" else "Download")
        self.cancel_button.setVisible(state == "downloading")
        self.use_button.setVisible(state == "installed")
        self.status.setText(message or self.entry.note)
        if state == "checking":
            self.progress.setRange(0, 0)  # busy indicator
        else:
            self.progress.setRange(0, 1000)

    def set_progress(self, done: float, total: float) -> None:
        self.last_progress = (done, total)
        if total > 0:
            self.progress.setValue(int(1000 * done / total))
            self.progress.setFormat(f"{_gb(done)} of {_gb(total)}")


class ModelManager(QDialog):
    """Non-modal; ``use_requested(path)`` asks the window to load a model."""

    use_requested = Signal(str)
    download_requested = Signal(str)
    validate_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelManager")
        self.setWindowTitle("Models")
        # Started last: if building the dialog fails (e.g. unreadable settings), no running thread is left
        # to be destroyed with it (that aborts the whole process).
        self._thread, self.tasks = start_tasks(start=False)
        self.download_requested.connect(self.tasks.download)
        self.validate_requested.connect(self.tasks.validate)
        self.tasks.progress.connect(self._on_progress)
        self.tasks.downloaded.connect(self._on_downloaded)
        self.tasks.download_failed.connect(self._on_download_failed)
        self.tasks.validated.connect(self._on_validated)
        self._pending_checks: dict[str, str] = {}  # folder -> repo_id ("" for a folder the user added)
        self.last_report: dict = {}
        self._typed_repo = ""  # the last repo id typed and added: its download's outcome goes to the report
        self._reveal_row: CatalogRow | None = None  # a typed repo's row, to scroll to once the list grows

        intro = QLabel("Download a SmolVLM checkpoint (SmolVLM2 also answers questions about videos) into the "
                       "Hugging Face cache, type any Hub repo id, or add a model folder or a GGUF file you already "
                       "have. Each is checked before use. Everything stays on this computer.")
        intro.setWordWrap(True)
        intro.setObjectName("managerIntro")
        self.rows: dict[str, CatalogRow] = {}
        self.catalog = catalog = QVBoxLayout()
        catalog.setSpacing(4)
        for entry in CATALOG:
            self._add_row(entry)
        self.add_input = QLineEdit()
        self.add_input.setObjectName("addModelInput")
        self.add_input.setAccessibleName("Hub repo id, model folder or GGUF file")
        self.add_input.setPlaceholderText("Any Hub repo id (owner/name), model folder or .gguf file")
        self.add_input.returnPressed.connect(self.add_typed)
        add_typed = QPushButton("Add")
        add_typed.setObjectName("addTypedButton")
        add_typed.setAccessibleName("Add the typed model")
        add_typed.clicked.connect(self.add_typed)
        typed = QHBoxLayout()
        typed.addWidget(self.add_input, 1)
        typed.addWidget(add_typed)

        self.local_list = QListWidget()
        self.local_list.setObjectName("localModels")
        self.local_list.setAccessibleName("Your models")
        # A double click, or Enter on the current row (trial 52: only the mouse could use a listed model).
        self.local_list.itemActivated.connect(lambda item: self._use(item.data(Qt.ItemDataRole.UserRole)))
        def button(text: str, name: str, accessible: str, slot, icon_name: str | None = None) -> QPushButton:
            b = QPushButton(icon(icon_name), text) if icon_name else QPushButton(text)
            b.setObjectName(name)
            b.setAccessibleName(accessible)
            b.clicked.connect(slot)
            return b

        add = button("Add a model folder…", "addFolderButton", "Add a model folder", self.choose_folder, "folder")
        add_gguf = button("Add a GGUF file…", "addGgufButton", "Add a GGUF model file", self.choose_gguf, "folder")
        use = button("Use selected", "useSelectedButton", "Use the selected model", self._use_selected)
        check = button("Check selected", "checkSelectedButton", "Check the selected model", self._check_selected)
        remove = button("Remove from list", "removeModelButton", "Remove the selected model from the list",
                        self._remove_selected)
        # One row where there is room; wrapped onto more (not cut off, nor scrolling sideways) on a
        # narrow or scaled screen: at QT_SCALE_FACTOR=2 on a 1280 x 900 screen they took 760 px of 624.
        buttons = flow_row([add, add_gguf, use, check, remove])
        self._selection_buttons = (use, check, remove)  # enabled while a model of the list is selected
        self.local_list.itemSelectionChanged.connect(self._update_selection_buttons)
        self.report = QPlainTextEdit()
        self.report.setObjectName("validationReport")
        self.report.setAccessibleName("Model check report")
        self.report.setReadOnly(True)
        self.report.setPlaceholderText("Reports of model checks appear here.")
        self.report.setFixedHeight(96)
        self.report.setTabChangesFocus(True)

        # The rows at their own height in a scroll area: squeezed into a dialog shorter than they
        # are, their two lines clipped each other's descenders (the trial: 760 x 640).
        catalog.addStretch(1)
        catalog.setContentsMargins(0, 0, 12, 0)  # room for the scroll bar beside the buttons
        rows = QWidget()
        rows.setObjectName("catalogRows")
        rows.setLayout(catalog)
        self.catalog_scroll = one_way_scroll("catalogScroll", rows, sideways=False)
        # Tab goes to the rows' buttons (the area scrolls to each): the area itself, focused, showed nothing.
        self.catalog_scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self._fit_catalog_width()
        self.catalog_scroll.verticalScrollBar().rangeChanged.connect(self._reveal)
        content = QWidget()
        content.setObjectName("managerContent")
        layout = QVBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(intro)
        layout.addWidget(_heading("Available checkpoints"))
        layout.addWidget(self.catalog_scroll, 3)
        layout.addLayout(typed)
        layout.addWidget(_heading("Your models"))
        layout.addWidget(self.local_list, 1)
        layout.addWidget(buttons)
        layout.addWidget(self.report)
        # All of it scrolls (only) where the screen is smaller than the dialog's 840 x 760: at 1366 x 768
        # its bottom was cut off, at QT_SCALE_FACTOR=2 on a 1280 x 900 screen half of it.
        self.scroll = ContentScroll("managerScroll", content)
        QVBoxLayout(self).addWidget(self.scroll)
        fit_to_screen(self, QSize(840, 760))
        no_default_buttons(self)
        self.add_input.setFocus()  # not the first Download button, where Space would start a download
        self.refresh()
        self._thread.start()

    def _add_row(self, entry: CatalogEntry) -> CatalogRow:
        # Room for a row: the dialog's content less the catalog's scroll bar and its margin beside it.
        room = content_room(self) - self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent) - 12
        row = CatalogRow(entry, room)
        row.download_button.clicked.connect(lambda _=False, r=entry.repo_id: self.start_download(r))
        row.cancel_button.clicked.connect(lambda _=False, r=entry.repo_id: self.cancel_download(r))
        row.use_button.clicked.connect(lambda _=False, r=row: self._use(r.path))
        self.rows[entry.repo_id] = row
        self.catalog.insertWidget(len(self.rows) - 1, row)  # above the stretch
        if hasattr(self, "catalog_scroll"):
            self._fit_catalog_width()
        return row

    def _fit_catalog_width(self) -> None:
        """The dialog no narrower than its widest row (the scroll area scrolls only up and down)."""
        self.catalog_scroll.setMinimumWidth(self.catalog_scroll.widget().minimumSizeHint().width()
                                            + self.catalog_scroll.verticalScrollBar().sizeHint().width())

    def add_typed(self) -> None:
        """Add what was typed: a folder or GGUF file is checked and listed; a Hub repo id gets a row
        and downloads (then is checked); anything else gets a one-line reason in the report."""
        kind, value = classify(self.add_input.text())
        if kind == "invalid":
            self.report.setPlainText(f"✘ {value}")
            return
        self.add_input.clear()
        if kind in ("folder", "gguf"):
            self.check_folder(value, register=True)
            return
        # The Hub resolves repo ids whatever their case: one typed in another case is the same repo, and
        # reuses its row (the catalog's spelling), not a second row that downloads it again.
        value = next((repo for repo in self.rows if repo.lower() == value.lower()), value)
        row = self.rows.get(value) or self._add_row(CatalogEntry(value, value, 0.0, "From the Hugging Face Hub"))
        row.set_state("idle")
        self.start_download(value)
        # The row may be below the visible part of the list: say what happens where the user looks,
        # and bring the row into view once the layout has placed it.
        self._typed_repo = value
        self.report.setPlainText(f"Downloading {value} from the Hugging Face Hub: its row in the list above shows "
                                 "the progress; the model is checked when it is complete.")
        self._reveal_row = row
        QTimer.singleShot(0, lambda: self.catalog_scroll.ensureWidgetVisible(row))

    def _reveal(self, *_range) -> None:
        """The list grew (a typed repo's row, then its status line): bring that row into view, once."""
        if self._reveal_row is not None:
            self.catalog_scroll.ensureWidgetVisible(self._reveal_row)
            self._reveal_row = None

    # -- state -------------------------------------------------------------------------------------
    def refresh(self) -> None:
        models = known_models()
        in_use = (getattr(self.parent(), "model_info", None) or {}).get("path", "")
        self.local_list.clear()
        for model in models:
            current = model["path"] == in_use
            item = QListWidgetItem(f"{model['name']}{'  (in use)' if current else ''}  —  {model['path']}")
            item.setData(Qt.ItemDataRole.UserRole, model["path"])
            if current:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            self.local_list.addItem(item)
        self._update_selection_buttons()
        by_repo = {m.get("repo_id"): m for m in models if m.get("repo_id")}
        for repo_id, row in self.rows.items():
            if row.cancel_button.isVisible() or repo_id in self._pending_checks.values():
                continue
            if repo_id in by_repo:
                row.path = by_repo[repo_id]["path"]
                row.set_state("installed", f"Installed · {row.path}")
            elif getattr(row, "state", "") == "failed":
                continue  # keep saying why (and "Resume download")
            elif row.cached or cached_snapshot(repo_id):
                row.cached = row.cached or cached_snapshot(repo_id)
                row.set_state("downloaded", f"Downloaded (in the Hugging Face cache), not checked yet · {row.cached}")
            else:
                row.set_state("idle")

    # -- downloads ---------------------------------------------------------------------------------
    def start_download(self, repo_id: str) -> None:
        row = self.rows[repo_id]
        if getattr(row, "state", "") == "downloaded" and row.cached:  # on disk already: check it
            self._on_downloaded(repo_id, row.cached)
            return
        row.set_state("downloading", "Downloading…")
        row.progress.setValue(0)
        row.progress.setFormat("starting…")
        self.tasks.prepare_download(repo_id)
        self.download_requested.emit(repo_id)

    def cancel_download(self, repo_id: str) -> None:
        self.tasks.cancel_download(repo_id)
        self.rows[repo_id].status.setText("Cancelling…")

    @Slot(str, float, float)
    def _on_progress(self, repo_id: str, done: float, total: float) -> None:
        if repo_id in self.rows:
            self.rows[repo_id].set_progress(done, total)

    @Slot(str, str)
    def _on_downloaded(self, repo_id: str, folder: str) -> None:
        self.rows[repo_id].set_state("checking", "Checking the downloaded files…")
        self._pending_checks[folder] = repo_id
        self.validate_requested.emit(folder)

    @Slot(str, str, bool)
    def _on_download_failed(self, repo_id: str, message: str, cancelled: bool) -> None:
        text = ("Cancelled. What was downloaded is kept in the cache; download again to resume."
                if cancelled else f"Download failed: {message}")
        self.rows[repo_id].set_state("failed", text)
        if repo_id == self._typed_repo:  # the report said it was downloading
            self.report.setPlainText(f"✘ {repo_id}: {text}")

    # -- local folders and checks ------------------------------------------------------------------
    def choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder")
        if folder:
            self.check_folder(folder, register=True)

    def choose_gguf(self) -> None:
        """A llama.cpp-format checkpoint (SmolLM2, or a SmolVLM text model with its mmproj beside it):
        checked like a folder (engine.validate.check_checkpoint, on the tasks thread), then listed."""
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model file", "", "GGUF models (*.gguf)")
        if path:
            self.check_folder(path, register=True)

    def check_folder(self, folder: str, register: bool = False) -> None:
        if register:
            self._pending_checks[folder] = ""
        self.report.setPlainText(f"Checking {folder}…")
        self.validate_requested.emit(folder)

    @Slot(dict)
    def _on_validated(self, report: dict) -> None:
        self.last_report = report
        path = report["path"]
        where = "File" if path.lower().endswith(".gguf") else "Folder"
        lines = [("✔ " if report["ok"] else "✘ ") + (report["summary"] or path), f"{where}: {path}"]
        caps = (report.get("info") or {}).get("capabilities") or {}
        if report["ok"] and caps:
            lines.append("Can do: " + ("images, video" if caps.get("video") else "images" if caps.get("vision")
                                       else "text only (no images)"))
        if report["problems"]:
            lines.append("Why it cannot be used:" if not report["ok"] else "Notes:")
        lines += [f"• {p}" for p in report["problems"]]
        self.report.setPlainText("\n".join(lines))
        if path not in self._pending_checks:
            return
        repo_id = self._pending_checks.pop(path)
        if report["ok"]:
            # A GGUF file by its file name, as the engine names it once loaded (the picker, the answers'
            # headers, the server's model id); trial 53 saw "X.Q4_1" here and "X.Q4_1.gguf" there.
            gguf = path.lower().endswith(".gguf")
            add_known_model(path, Path(path).name if gguf else report["name"] or path.rstrip("/").split("/")[-1], repo_id)
        elif repo_id:
            self.rows[repo_id].cached = ""
            first = report["problems"][0] if report["problems"] else report["summary"]
            self.rows[repo_id].set_state("failed", f"Cannot be used: {first}")
        self.refresh()
        if report["ok"] and not self._window_has_model():
            self._use(path)  # the first model, added (or downloaded) to be used: trial 53 had to find "Use selected"
            return
        if report["ok"]:  # the model just added is the selected one: Use selected (or Enter) takes it
            for row in range(self.local_list.count()):
                if self.local_list.item(row).data(Qt.ItemDataRole.UserRole) == path:
                    self.local_list.setCurrentRow(row)

    def _window_has_model(self) -> bool:
        """The window has a model loaded or loading (else a model just added is loaded at once)."""
        window = self.parent()
        controller = getattr(window, "controller", None)
        return bool(getattr(window, "model_info", None)) or bool(getattr(controller, "loading", False))

    def _update_selection_buttons(self) -> None:
        for button in self._selection_buttons:
            button.setEnabled(bool(self.local_list.selectedItems()))

    def _selected_path(self) -> str:
        item = self.local_list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else ""

    def _use_selected(self) -> None:
        self._use(self._selected_path())

    def _check_selected(self) -> None:
        if self._selected_path():
            self.check_folder(self._selected_path())

    def _remove_selected(self) -> None:
        if self._selected_path():
            remove_known_model(self._selected_path())
            self.refresh()

    def _use(self, path: str) -> None:
        if path:
            self.use_requested.emit(path)
            self.hide()

    def shutdown(self) -> None:
        for repo_id in self.rows:
            self.tasks.cancel_download(repo_id)
        self._thread.quit()
        self._thread.wait(10_000)

    def closeEvent(self, event) -> None:
        self.hide()  # keeps running downloads; the window's shutdown stops the thread
        event.ignore()


def no_default_buttons(widget: QWidget) -> None:
    """No button of ``widget`` is pressed by Enter: a dialog's push buttons are "auto-default", so Enter
    pressed anywhere in the manager (it opens with nothing else focused) clicked the first row's
    Download and started a 0.5 GB download (trial 38). Enter in the repo-id field still adds what was
    typed (its returnPressed); Space presses the focused button."""
    for button in widget.findChildren(QPushButton):
        button.setAutoDefault(False)
        button.setDefault(False)


def _heading(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("sectionHeading")
    return label
