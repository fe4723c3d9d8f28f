"""The main window's attachments: files, pasted or dropped images and videos, and what they cost in tokens."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QStandardPaths, Slot
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage
from PySide6.QtWidgets import QFileDialog

from app.backends.remote import vision_refusal
from app.conversations import STORAGE_ERRORS, attached_name, storage_problem
from app.documents import DocumentIntake
from app.formatting import pending_summary
from app.images import InvalidImageError, check_image_header, save_png_bytes
from app.mime import carries_images, image_from_mime, local_files
from app.paths import pasted_images_dir
from app.pdf_pages import is_pdf
from app.video_attachments import (
    VIDEO_FILTER,
    InvalidVideoError,
    VideoPlan,
    is_animated_image,
    is_video_file,
    pending_media_summary,
    plan_video,
)
from app.wait_estimate import estimate_seconds, estimate_text
from engine.api import answer_room, resolve_detail
from engine.api.errors import SYSTEM_PROMPT_TOO_LONG

IMAGE_FILTER = ("Images, videos and PDFs (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff *.mp4 *.webm *.mov *.mkv "
                "*.m4v *.pdf);;Images (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff);;" + VIDEO_FILTER +
                ";;PDF documents (*.pdf);;All files (*)")
#: Files refused in one drop named one a line, up to this many lines (the last one counting the rest).
MAX_PROBLEM_LINES = 5


def system_share(overhead: int, context: int) -> str:
    """"The system prompt and the chat's markup take N of the M tokens the model's context holds"."""
    return (f"The system prompt and the chat's markup take {overhead:,} of the {context:,} tokens the model's "
            "context holds")


def _with_overhead(tokens: int, overhead: int) -> str:
    """``" (8,210 with the system prompt and the chat's markup)"``: what a message's ``tokens`` make
    in the prompt with the ``overhead`` every prompt has (:meth:`prompt_overhead`); "" for none."""
    return f" ({tokens + overhead:,} with the system prompt and the chat's markup)" if overhead > 0 else ""


class SendRefusal(NamedTuple):
    """Why Send did not send (the banner's line), and how to tell that it still holds."""

    text: str
    holds: Callable[[], bool]
    counted: bool  # ``holds`` needs the text's token count: asked again only once typing pauses


class AttachmentsMixin:
    """Methods of :class:`~app.main_window.MainWindow` for its pending attachments (``self.attachments``)."""

    @property
    def documents(self) -> DocumentIntake:
        """Folders, PDFs and several files at once (:mod:`app.documents`), made at first use."""
        if getattr(self, "_documents", None) is None:
            self._documents = DocumentIntake(self)
        return self._documents

    @Slot(list)
    def open_files(self, paths: list[str]) -> None:
        """Files given at start or by a second start (``smolchat photo.png``, a file manager's "Open with
        Smolchat"): the window comes to the front and they are attached as a drop's would be (a missing
        file is named in the banner). ``[]``: only come to the front."""
        if self.isMinimized():
            self.showNormal()
        self.raise_()
        self.activateWindow()
        if paths and self.controller.loading:
            # What fits, and a long PDF's page picker, count against the model's context: known once it
            # is loaded (trial 54: a PDF given at start had 6 of 40 pages cut to fit, no picker shown).
            self._files_after_load = [*getattr(self, "_files_after_load", []), *paths]
            count = len(self._files_after_load)
            self.banner.show_info(f"{'The file' if count == 1 else f'The {count} files'} will be attached once the "
                                  "model has loaded.")
            return
        if paths:
            self.add_files(paths)
            self.composer.setFocus()

    def attach_files_after_load(self) -> None:
        """Attach the files :meth:`open_files` kept while the model loaded (it loaded, or failed to)."""
        files, self._files_after_load = getattr(self, "_files_after_load", []), []
        if files:
            if self.banner.message().endswith("will be attached once the model has loaded."):
                self.banner.dismiss()
            self.add_files(files)
            self.composer.setFocus()

    @Slot(list)
    def add_files(self, paths: list[str], ranks: list[tuple[int, ...]] | None = None) -> None:
        """Attach image and video files, PDFs (their pages, rendered in the background) and folders'
        images; a file that is not a readable image or video shows an error instead, and so does any
        image or PDF while the loaded model is text-only. A video is attached even when the model
        takes none: its chip is marked and Send says why.

        Each image is copied into the image store now, so what is sent is the file as it was when it
        was attached, even if it changes or is deleted before Send (:meth:`kept_paths`); errors about
        that copy name the user's file (``controller.display_names``). Videos (possibly gigabytes)
        are read when the answer starts.

        The chips keep the order of ``paths`` (a PDF's pages, rendered later, take its place);
        ``ranks``: each path's place among the attachments (default: after them, in this order)."""
        if ranks is None:
            pick = self.attachments.new_pick()
            ranks = [(pick, position) for position in range(len(paths))]
        rank_of = dict(zip(paths, ranks, strict=True))
        problems, notes = [], []
        # A pipe, socket or device is refused before anything opens it: opening a pipe waits for a
        # writer, and the window froze on one named photo.png (trial 54; stat does not open it).
        special = [p for p in paths if os.path.exists(p) and not os.path.isfile(p) and not os.path.isdir(p)]
        problems += [f"{p} is not a regular file (a pipe or a device): it cannot be attached" for p in special]
        paths = [p for p in paths if p not in special]
        videos = [p for p in paths if is_video_file(p) or (self.takes_video() and is_animated_image(p))]
        others = [p for p in paths if p not in videos]
        refusal = self.images_refusal() if others else ""
        if refusal:  # said with the videos' problems (one banner), naming what was not attached
            refused = []
            for path in others:  # a file that is no image at all is said as such, not as one the model cannot read
                if os.path.isdir(path) or is_pdf(path):
                    refused.append(path)
                    continue
                try:  # its header: a text file named .jpg is no image (trial 60), a large photo not decoded
                    check_image_header(path)
                    refused.append(path)
                except InvalidImageError as exc:
                    problems.append(str(exc))
            if refused:
                names = ", ".join(Path(p).name for p in refused[:3]) + \
                    (f" and {len(refused) - 3} more" if len(refused) > 3 else "")
                problems.append(f"Not attached: {names}. {refusal}")
            others = []
        images, image_ranks, taken_notes, not_images = self.documents.take(others, [rank_of[p] for p in others]) \
            if others else ([], {}, [], [])
        notes += taken_notes
        problems += not_images
        for path in videos:
            try:
                plan = plan_video(path, self.settings.video_fps, self.settings.video_max_frames)
            except InvalidVideoError as exc:
                problems.append(str(exc))
                continue
            resolved = str(Path(path).resolve())
            if self.attachments.add(resolved, video_plan=plan, rank=rank_of[path]):
                chip = self.attachments.chip(resolved)
                if chip.error:  # decoded (and cached) before: it cannot be sent, so no chip
                    problems.append(chip.error)
                    self.attachments.remove(resolved)
                else:
                    self._watch_video(chip)
        for path in images:  # each decoded by documents.take
            if self.attachments.add(path, rank=image_ranks[path]):
                self._keep_copy(path)
            if is_animated_image(path):
                notes.append(self._first_frame_note(Path(path).name))
        if videos and self.attachments.video_chips():  # the chips' own problems (e.g. a model that takes no video)
            problems += [line for line in self._video_problems() if line not in problems]
        if problems:  # one line each: run together, eight broken files read as one sentence
            shown = problems[:MAX_PROBLEM_LINES]
            if len(problems) > MAX_PROBLEM_LINES:
                shown[-1] = f"… and {len(problems) - MAX_PROBLEM_LINES + 1} more files could not be attached."
            self.banner.show_error("\n".join(shown + notes))
        elif notes:
            self.banner.show_info("\n".join(notes))
        self._attach_notes = [*getattr(self, "_attach_notes", []), *notes]

    def note_attachments(self, text: str) -> None:
        """Add a note about the files being attached to the banner (a PDF left out once its pages were
        counted), withdrawn with the others (:meth:`_withdraw_attach_notes`)."""
        self.banner.add_info(text)
        self._attach_notes = [*getattr(self, "_attach_notes", []), text]

    @Slot()
    def _withdraw_attach_notes(self) -> None:
        """Once no attachment is pending (sent, or each chip removed), the notes about the files attached
        ("Attached 6 of 40 images: …", "Only the first frame of …") leave the banner: they no longer
        describe anything on screen (trial 54: the note outlived the chips it counted). Errors about files
        that were refused stay until dismissed."""
        self._recheck_send_refusal()
        notes = getattr(self, "_attach_notes", [])
        if notes and not self.attachments.chips():
            self._attach_notes = []
            self.banner.withdraw(notes)

    def reattach(self, paths: list[str], names: list[str] | None = None) -> None:
        """Put a stored message's images and videos back as pending attachments (editing it).
        ``names``: the name each was attached as (the message's ``attached_names``; "": unknown),
        sent with it again (:meth:`attached_names`)."""
        names = list(names or [])
        for index, path in enumerate(paths):
            if path in self.attachments.paths():
                continue  # identical files share one copy: one chip, under the first one's name
            known = names[index] if index < len(names) else None
            if known is not None:
                self._names[path] = known
            # As the user's file was called: a stored copy's own name is its content hash.
            name = known or Path(self.controller.display_names.get(path, path)).name
            if not is_video_file(path):
                self.attachments.add(path, name=name)
                continue
            try:
                plan = plan_video(path, self.settings.video_fps, self.settings.video_max_frames)
            except InvalidVideoError:
                plan = None  # gone or damaged since: the chip says so when its filmstrip fails
            if self.attachments.add(path, video_plan=plan or VideoPlan(0.0, 0, 0, 0), name=name):
                self._watch_video(self.attachments.chip(path))
        self._count_pending_tokens()

    def _watch_video(self, chip) -> None:
        chip.strip.failed.connect(lambda error, path=chip.path: self._video_unreadable(path, error))

    def _video_unreadable(self, path: str, error: str) -> None:
        """A pending video's frames could not be decoded (its filmstrip, off the UI thread, found it):
        its chip goes, as it could not be sent, and the error is said now, under the lines of any
        other file the same drop refused (trial 53: it replaced them, and the chip stayed, counted
        as 12 frames, while Send only said the error again)."""
        self.attachments.remove(path)
        self._video_problems()
        self.banner.add_error(error)

    def takes_video(self) -> bool:
        """The loaded model takes videos (its capabilities say ``video``)."""
        return bool((self.model_info.get("capabilities") or {}).get("video"))

    def match_animations(self) -> None:
        """Show each pending animated GIF, WebP or PNG as what the model now loaded takes it as: a video
        (a filmstrip, counted at the video settings) for a model that takes videos, an image (its first
        frame) for one that takes only images. Attached under the model before, it kept that model's kind:
        an image chip with an image-detail menu that went as a video, or a video chip a SmolVLM model
        refused though it could read the first frame."""
        video = self.takes_video()
        vision = (self.model_info.get("capabilities") or {}).get("vision", True)
        for chip in self.attachments.chips():
            if is_video_file(chip.path) or (chip.kind == "video") == video:
                continue
            source = self._kept.get(chip.path, chip.path)
            if not is_animated_image(source):
                continue
            if video:
                if not Path(chip.path).is_file():
                    # A filmstrip reads the file itself, gone since: the chip stays (its copy goes as it is,
                    # a video to this model), not dropped as an unreadable video (trial 80 P3).
                    continue
                try:
                    plan = plan_video(source, self.settings.video_fps, self.settings.video_max_frames)
                except InvalidVideoError:
                    continue  # its first frame is still an image the model reads
                self.attachments.replace(chip.path, video_plan=plan)
                self._watch_video(self.attachments.chip(chip.path))
                stale = [n for n in getattr(self, "_attach_notes", []) if n.startswith(f"Only the first frame of {chip.name} ")]
                if stale:  # said under the model before: the whole animation goes now
                    self._attach_notes = [n for n in self._attach_notes if n not in stale]
                    self.banner.withdraw(stale)
            elif vision:
                self.attachments.replace(chip.path)
                if chip.path not in self._kept:  # sent as attached, as an image attached now would be
                    self._keep_copy(chip.path)
                self.note_attachments(self._first_frame_note(chip.name))

    def _first_frame_note(self, name: str) -> str:
        return (f"Only the first frame of {name} is used: {self.model_info.get('model_name')} takes no videos. "
                "Load a SmolVLM2 model to ask about the animation.")

    def _video_problems(self) -> list[str]:
        """Why the pending videos cannot be sent (each chip marked), or [] when they can."""
        chips = self.attachments.video_chips()
        if not chips or not self.model_info:
            return []
        name = self.model_info.get("model_name") or "This model"
        if not self.takes_video():
            reason = f"{name} cannot take videos: remove the video, or load a SmolVLM2 model to ask about it."
        else:
            reason = ""
        problems = []
        for chip in chips:
            gone = "" if chip.error or Path(self._kept.get(chip.path, chip.path)).is_file() else (
                f"{chip.name} was moved or deleted since it was attached (a video is read from its file when "
                "sent, not copied before): attach it again, or remove it.")
            chip.set_problem(chip.error or gone or reason)
            if chip.error or gone:
                problems.append(chip.error or gone)
        return problems or ([reason] if reason else [])

    def refuse_attachments(self) -> bool:
        """Show why and return True when the pending attachments cannot be sent to the loaded
        model (images to a text-only model, videos to a model without video, unreadable videos)."""
        if any(chip.kind == "image" for chip in self.attachments.chips()) and self.refuse_images():
            return True
        problems = self._video_problems()
        if problems:
            self._count_pending_tokens()  # a video gone since it was counted is counted no longer
            self._refuse_send(" ".join(problems), lambda: bool(self._video_problems()))
            return True
        return False

    def refuse_too_long(self, text: str) -> bool:
        """Show why and return True when ``text`` and the pending attachments make more tokens than
        the loaded model's context holds (the text counted now, not when typing last paused: the
        engine would refuse the prompt after the message had been stored)."""
        context = self.context_size()
        if not context:
            return False
        attached, overhead = getattr(self, "_pending_tokens", 0), self.prompt_overhead()
        # A system prompt of half the context or more is the setting's fault, not the message's (trial 76
        # P1: a 2-token message was told to be shortened beside a 9,000-word system prompt).
        system = f"{system_share(overhead, context)}: too many for this message beside them{SYSTEM_PROMPT_TOO_LONG}." \
            if overhead >= context // 2 else ""
        if attached and attached + overhead >= context:
            videos = bool(self.attachments.video_chips())
            self._refuse_send(system or (
                f"These attachments take {attached:,} tokens{_with_overhead(attached, overhead)}, more than the "
                f"{context:,} the model's context holds. "
                + ("Remove some, or lower Settings ▸ Video frames (max)." if videos
                   else "Remove some, or send them at a lower image detail.")), self._attachments_over)
            return True
        words = self.text_tokens(text, attached)
        if words is None:  # sent once it is counted (_on_text_counted), unless the text changes first
            self._send_when_counted = text
            self.show_pending_text("Counting the message's tokens…")
            return True
        tokens = attached + words
        if words <= 0 or tokens + overhead < context:
            return False
        if system:
            self._refuse_send(system, self._message_over, counted=True)
        elif not attached:
            self._refuse_send(
                f"This message is {tokens:,} token{'s' if tokens != 1 else ''} long{_with_overhead(tokens, overhead)}, "
                f"more than the {context:,} "
                "the model's context holds. Shorten it, or send it in parts.", self._message_over, counted=True)
        else:
            self._refuse_send(
                f"This message and its attachments take {tokens:,} tokens ({words:,} of them for the text)"
                f"{_with_overhead(tokens, overhead)}, more than the {context:,} the model's context holds. "
                "Shorten the text, or remove some attachments.", self._message_over, counted=True)
        return True

    def _attachments_over(self) -> bool:
        """The pending attachments take the context or more (True while they are being counted)."""
        _summary, tokens, counted = getattr(self, "_attached", ("", 0, False))
        context = self.context_size()
        return bool(self.attachments.chips()) and bool(context) and \
            (not counted or tokens + self.prompt_overhead() >= context)

    def _message_over(self) -> bool:
        """The composer's text and the attachments take the context or more (True while being counted)."""
        context = self.context_size()
        attached, overhead = getattr(self, "_pending_tokens", 0), self.prompt_overhead()
        words = self.text_tokens(self.composer.toPlainText().strip(), attached)
        return bool(context) and (words is None or (words > 0 and attached + words + overhead >= context)
                                  or (attached > 0 and attached + overhead >= context))

    def text_tokens(self, text: str, attached: int = 0) -> int | None:
        """Tokens the loaded model makes of the composer's ``text`` (-1: the backend cannot say;
        None: being counted, :meth:`_on_text_counted` follows), counted only where they are what
        takes the message past the context: a token is at least one UTF-8 byte, so a text of fewer
        bytes than the context has room for beside ``attached`` tokens fits, and counts as 0, as does
        any text beside attachments that are too many already. Counted on a worker thread
        (:class:`~app.text_count.TextCounter`: a multi-megabyte paste takes seconds)."""
        if not text or attached >= self.context_size() or self._fits_by_bytes(text, attached):
            return 0
        if not self.controller.ready:
            return -1
        tokens = self.text_counter.known(text)
        if tokens is None:
            self.text_counter.request(text)
        return tokens

    @Slot()
    def _on_text_counted(self) -> None:
        self._show_pending()
        waiting, self._send_when_counted = getattr(self, "_send_when_counted", None), None
        if waiting is not None and waiting == self.composer.toPlainText().strip():
            self.send_message()  # Send was pressed before the count came

    def _keep_copy(self, original: str) -> None:
        """Copy ``original`` into the store; if that fails (full disk, read-only store) it is read at Send,
        where the failure is reported."""
        try:
            stored = self.store.store_image(original)
        except STORAGE_ERRORS:
            return
        self._kept[original] = stored
        self.controller.display_names[stored] = original

    def kept_paths(self) -> list[str]:
        """The pending attachments as sent: the copies made when they were attached, where there are some."""
        return [self._kept.get(p, p) for p in self.attachments.paths()]

    def attached_names(self) -> list[str]:
        """The name each pending attachment was attached as, in order (:func:`attached_name`; "":
        unknown): kept with the message for exports. Taken from the attachments themselves: files of
        identical bytes share one copy in the image store, so a map from copies would give them one name."""
        return [self._names[p] if p in self._names else attached_name(p, self.store) for p in self.attachments.paths()]

    @Slot(QImage)
    def add_image_data(self, image: QImage) -> None:
        """Attach pasted or dragged image data, saved as a PNG in the app data folder."""
        refusal = self.images_refusal()
        if refusal:  # nothing was attached: no image to remove (trial 60)
            self.banner.show_error(f"The pasted image was not attached: {refusal}")
            return
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        if image.isNull() or not image.save(buffer, "PNG"):
            self.banner.show_error("The pasted image could not be read.")
            return
        folder = None
        try:
            folder = pasted_images_dir()
            saved = save_png_bytes(bytes(data.data()), folder)
        except OSError as exc:
            self.banner.show_error(f"Could not keep the pasted image: {storage_problem(exc, folder)}.")
            return
        self.add_files([str(saved)])

    def refuse_images(self) -> bool:
        """Show why and return True when the loaded model takes no images (its capabilities say so)."""
        refusal = self.images_refusal()
        if refusal:
            self._refuse_send(f"{refusal} Remove the image, or load one that does.",
                              lambda: bool(self.images_refusal()) and any(
                                  chip.kind == "image" for chip in self.attachments.chips()))
        return bool(refusal)

    def _refuse_send(self, text: str, holds: Callable[[], bool], counted: bool = False) -> None:
        """Say why Send did not send the message written; the line goes once ``holds()`` says the
        reason is gone (trial 60: "This message is 12,001 tokens long" stayed over the text that
        replaced it; trial 61: it went at the first key pressed, with the message still too long).
        ``counted``: ``holds`` needs the text's token count, asked again only once typing pauses."""
        self.banner.show_error(text)
        self._send_refusal = SendRefusal(text, holds, counted)

    def _recheck_send_refusal(self, typing: bool = False) -> None:
        """Withdraw Send's refusal once its reason is gone (``typing``: a key was just pressed, so a
        refusal that needs the text counted waits for :meth:`_show_pending`)."""
        refusal: SendRefusal | None = getattr(self, "_send_refusal", None)
        if refusal is None:
            return
        if typing and refusal.counted and not self._fits_by_bytes(self.composer.toPlainText().strip(),
                                                             getattr(self, "_pending_tokens", 0)):
            return
        if not refusal.holds():
            self._withdraw_send_refusal()

    def _withdraw_send_refusal(self) -> None:
        refusal, self._send_refusal = getattr(self, "_send_refusal", None), None
        if refusal is not None:
            self.banner.withdraw([refusal.text])

    def images_refusal(self) -> str:
        """Why the loaded model takes no images ("" when it does, or nothing says it does not)."""
        capabilities = self.model_info.get("capabilities")
        if not capabilities or capabilities.get("vision", True):
            return ""
        name = self.model_info.get("model_name") or "This model"
        if str(self.model_info.get("backend", "")).startswith("remote:"):  # the server said so, or nobody did
            said_by = (self.model_info.get("sources") or {}).get("vision", "")
            return f"{name} on {self.model_info.get('device')} {vision_refusal(said_by)}"
        return f"{name} is a text-only model: it cannot read images; a vision model (SmolVLM) can."

    @Slot()
    def _pick_files(self) -> None:
        # In the folder of the last files picked, else Pictures (not the folder Smolchat was started from).
        folder = str(self.qsettings.value("attach/folder", "") or "")
        if not folder or not Path(folder).is_dir():
            pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
            folder = pictures if pictures and Path(pictures).is_dir() else str(Path.home())
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach images, videos or PDFs", folder, IMAGE_FILTER)
        if paths:
            self.qsettings.setValue("attach/folder", str(Path(paths[0]).parent))
            self.add_files(paths)

    def message_detail(self) -> str:
        """The image detail the message being written is sent at (the status bar's choice)."""
        return self.detail_combo.currentData() or self.settings.image_detail

    def reset_message_detail(self) -> None:
        """Back to Settings' image detail (after a send, or when Settings change)."""
        index = self.detail_combo.findData(self.settings.image_detail)
        self.detail_combo.blockSignals(True)
        self.detail_combo.setCurrentIndex(max(index, 0))
        self.detail_combo.blockSignals(False)

    def detail_in_use(self, detail: str) -> str:
        """What ``detail`` means with the loaded model: ``auto`` is full on a GPU or a server, balanced on a CPU."""
        info = self.model_info
        remote = str(info.get("backend") or "").startswith("remote:")
        return resolve_detail(detail, "remote" if remote else str(info.get("device") or "cpu"))

    @Slot()
    def _count_pending_tokens(self) -> None:
        """Show what the pending attachments will cost (the backend reads image headers only), and at
        which image detail."""
        detail = self.message_detail()
        images = [chip.path for chip in self.attachments.chips() if chip.kind == "image"]
        self.detail_combo.setVisible(bool(images))
        fps, max_frames = self.settings.video_fps, self.settings.video_max_frames
        # An animated image attached before a video model was loaded is sent as a video: counted as one,
        # at the video settings (trial 78 R2: at the defaults, and kept after they changed).
        animated = {p for p in images if self.takes_video() and is_animated_image(p)}
        keys = {p: (p, "video", fps, max_frames) if p in animated else (p, detail) for p in images}
        if self.controller.ready:
            for path in images:
                if keys[path] not in self._token_counts:
                    self._token_counts[keys[path]] = self.controller.count_tokens(path, detail, fps, max_frames) \
                        if path in animated else self.controller.count_tokens(path, detail)
        # With no model in use and none loading, nothing will count them: not "counting…" for good
        # (trial 58); a model that loads counts them then (model_loaded).
        unknown = None if self.controller.ready or self.controller.loading else -1
        counts = [self._token_counts.get(keys[p], unknown) for p in images]
        chips = self.attachments.video_chips()
        video_tokens = 0
        if chips:
            for chip in chips:  # the settings' fps and max frames may have changed
                try:
                    chip.set_plan(plan_video(chip.path, fps, max_frames))
                except InvalidVideoError:
                    chip.set_plan(None)
            self._video_problems()  # mark the chips for the model now loaded
            per_frame = int((self.model_info.get("capabilities") or {}).get("image_tokens_per_tile") or 0)
            exact = []
            if self.controller.ready and self.takes_video():
                for chip in chips:  # the engine's count: frames and each one's time stamp text, from the headers
                    key = (chip.path, "video", fps, max_frames)
                    if chip.plan is None:  # (gone or changed since it was counted: no count holds)
                        exact.append(-1)
                        continue
                    if key not in self._token_counts:
                        self._token_counts[key] = self.controller.count_tokens(chip.path, detail, fps, max_frames)
                    exact.append(self._token_counts[key])
            summary = pending_media_summary(counts, [c.plan for c in chips], per_frame,
                                            takes_video=self.takes_video() or not self.model_info, video_counts=exact)
            video_tokens = sum(exact) if exact and min(exact) >= 0 else \
                sum(c.plan.frames * per_frame for c in chips if c.plan is not None)
        else:
            summary = pending_summary(counts)
        if images and summary:
            summary += f" ({self.detail_in_use(detail)})"
        known = [c for c in counts if c is not None and c >= 0]
        tokens = sum(known) + video_tokens
        counted = bool(tokens) and len(known) == len(counts)
        self._pending_tokens = tokens if counted else 0
        self._attached = (summary, tokens, counted)
        self._show_pending()

    @Slot()
    def _show_pending(self) -> None:
        """The status bar's line: the attachments as last counted (:meth:`_count_pending_tokens`), the
        text where it takes the message past the context, else the expected wait."""
        self._recheck_send_refusal()
        summary, tokens, counted = getattr(self, "_attached", ("", 0, False))
        context = self.context_size()
        words = self.text_tokens(self.composer.toPlainText().strip(), self._pending_tokens) or 0
        overhead = self.prompt_overhead() if context else 0
        self._text_over = words > 0 and context and tokens + words + overhead >= context
        if self._text_over:
            # The text (with what is attached) cannot be sent as it is: say so before Send.
            summary = " · ".join(p for p in (summary, f"text {words:,} tokens") if p)
            self.show_pending_text(f"{summary} · more than the {context:,}-token context", warning=True)
            return
        if counted and context and tokens + overhead >= context:
            # It cannot be sent as it is: the engine would refuse the prompt after storing the message.
            self.show_pending_text(f"{summary} · more than the {context:,}-token context", warning=True)
            return
        warning = bool(words > 0 and context and tokens + words + overhead + self.answer_room() > context)
        if warning:
            # It fits, with less room for the answer than its token limit: a long wait for the prompt, then
            # an answer cut short by the full context (trial 74 F11: 59 s, then 21 tokens), said before Send.
            # The system prompt and the template's markup count too (trial 75 N5: "12 left", then refused).
            left = context - tokens - words - overhead
            summary = " · ".join(p for p in (summary, f"text {words:,} tokens",
                                             f"only {left:,} token{'s' if left != 1 else ''} left for the answer") if p)
        wait = estimate_text(estimate_seconds(self.qsettings, self.model_info, tokens + max(words, 0))) \
            if counted or words > 0 else ""
        self.show_pending_text(" · ".join(p for p in (summary, wait) if p), warning)

    def show_pending_text(self, text: str, warning: bool = False) -> None:
        """The status bar's line about the message being written; ``warning``: it says the message is
        beyond the context or leaves the answer little room, on a tinted ground (trial 75: in the
        status bar's plain text the warning was easy to miss)."""
        label = self.pending_label
        label.setText(text)
        if bool(label.property("warning")) != warning:
            label.setProperty("warning", warning)
            label.style().unpolish(label)
            label.style().polish(label)

    @Slot()
    def _text_edited(self) -> None:
        """Count the text again once typing pauses, where it could reach the context (or did at the
        last count, or left the answer little room: a text cut short must not keep that line): a short
        message costs nothing per keystroke."""
        self._recheck_send_refusal(typing=True)
        if getattr(self, "_text_over", False) or self.pending_label.property("warning") or \
                not self._fits_by_bytes(self.composer.toPlainText(), getattr(self, "_pending_tokens", 0)):
            self.text_count_timer.start()

    def _fits_by_bytes(self, text: str, attached: int) -> bool:
        """``text`` fits beside ``attached`` tokens, with the answer's room left (:meth:`answer_room`),
        without being counted: a token is at least one UTF-8 byte, so fewer bytes than the context has
        room for fit (as does anything where the context is not known)."""
        context = self.context_size()
        return not context or len(text.encode("utf-8", "surrogatepass")) + attached + self.answer_room() \
            + self.prompt_overhead() < context

    def prompt_overhead(self) -> int:
        """Tokens every prompt of the chat has besides its message: the system prompt and the chat
        template's markup (``ChatBackend.count_prompt_overhead``), which no dropping of old turns
        frees. Counted once per loaded model and system prompt; 0 where not known (no model, a
        server's model)."""
        if not self.controller.ready:
            return 0
        key = ("prompt overhead", self.settings.system_prompt)
        if key not in self._token_counts:
            self._token_counts[key] = self.controller.count_prompt_overhead(self.settings.system_prompt)
        return max(self._token_counts[key], 0)

    def answer_room(self) -> int:
        """Tokens of the context kept for the answer (``engine.api.answer_room`` of the settings' token
        limit, as the engine keeps them when it drops old turns); 0 where the context is not known."""
        context = self.context_size()
        return answer_room(int(self.current_params().get("max_new_tokens") or 0), context) if context else 0

    def context_size(self) -> int:
        """Tokens the loaded model's conversation holds (0: not known, e.g. a server that does not say)."""
        return int((self.model_info.get("capabilities") or {}).get("max_context") or 0)

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
