"""PDF documents as page images (pypdfium2, a PDFium binding), and folders as lists of attachable files.

No Qt here: :mod:`app.documents` runs these functions on a worker thread. PDFium is not thread-safe,
so every call is made from that one thread.

Each page is rendered so that its longer side is :data:`PAGE_LONG_SIDE` pixels: SmolVLM reads an image
in tiles of 384 px and at most 4 × 4 of them (1536 px), so more pixels would only be scaled away.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app import safe_files

PAGE_LONG_SIDE = 1536  # pixels
MAX_SCALE = 4.0  # a tiny page (a receipt, a label) is not blown up past 288 dpi
PDF_SUFFIXES = {".pdf"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
#: Most files taken from one folder (before the token budget, which usually stops sooner).
MAX_FOLDER_FILES = 64


class DocumentError(ValueError):
    """A PDF that cannot be read: the message is one line naming the file."""


@dataclass(frozen=True)
class PdfInfo:
    """An opened PDF: its page count and the rendered first page (its token cost stands for every page)."""

    path: str
    pages: int
    first_page: str  # PNG of page 1


def _open(path: str | Path):
    import pypdfium2 as pdfium  # imported on the worker thread, at the first PDF

    name = Path(path).name
    try:
        document = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError:
        raise DocumentError(_load_failure(path)) from None
    except OSError as exc:
        raise DocumentError(f"{name} cannot be read: {exc.strerror or exc}.") from None
    if len(document) == 0:
        document.close()
        raise DocumentError(f"{name} has no pages.")
    return document


def _load_failure(path: str | Path) -> str:
    """Why PDFium refused ``path``, from the file itself: PDFium's last-error code can be left over
    from an earlier document (and it refuses a document with no pages, reporting "success")."""
    name = Path(path).name
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f"{name} cannot be read: {exc.strerror or exc}."
    if not data.lstrip().startswith(b"%PDF"):
        return f"{name} is not a PDF file."
    if b"/Encrypt" in data:  # the trailer's encryption dictionary is never itself encrypted
        return f"{name} is password-protected: Smolchat cannot open encrypted PDFs. Save a copy without the password."
    if not re.search(rb"/Type\s*/Page(?![A-Za-z])", data):
        # A complete PDF names its pages; a file cut short or garbled after its header does not.
        return (f"{name} has no pages." if b"%%EOF" in data[-2048:] else
                f"{name} is damaged (not a complete PDF): no page can be read.")
    return f"{name} is damaged: PDFium cannot read it."


def probe(path: str | Path, folder: Path) -> PdfInfo:
    """Open ``path``, count its pages and render page 1 into ``folder``. Raises :class:`DocumentError`."""
    document = _open(path)
    try:
        first = _render(document, 0, Path(path).stem, _digest(path), folder)
        return PdfInfo(str(path), len(document), str(first))
    finally:
        document.close()


def render_pages(path: str | Path, pages: Sequence[int], folder: Path,
                 progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Render ``pages`` (0-based) of the PDF ``path`` as PNGs in ``folder``; returns their paths in order.

    A page already rendered (same file content, same page) is reused. ``progress(done, total)`` is
    called after each page. Raises :class:`DocumentError`.
    """
    document = _open(path)
    digest = _digest(path)
    try:
        out = []
        for done, index in enumerate(pages, 1):
            if not 0 <= index < len(document):
                raise DocumentError(f"{Path(path).name} has no page {index + 1} (it has {len(document)}).")
            out.append(str(_render(document, index, Path(path).stem, digest, folder)))
            if progress is not None:
                progress(done, len(pages))
        return out
    finally:
        document.close()


def _digest(path: str | Path) -> str:
    """A short content hash: pages of an edited PDF are rendered again, not taken from the old file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _render(document, index: int, stem: str, digest: str, folder: Path) -> Path:
    # Named as a person would name the page ("report page 3.png": chips, errors and exports show the
    # name), in a folder per content hash, so pages of an edited PDF are rendered again.
    target = folder / digest / f"{_short(stem, 120)} page {index + 1}.png"
    if target.exists():
        return target
    page = document[index]
    try:
        width, height = page.get_size()  # points (1/72 inch)
        scale = min(PAGE_LONG_SIDE / max(width, height, 1.0), MAX_SCALE)
        image = page.render(scale=scale, fill_color=(255, 255, 255, 255)).to_pil().convert("RGB")
    except Exception as exc:  # noqa: BLE001 - PDFium reports a damaged page as a generic error
        raise DocumentError(f"{stem}.pdf: page {index + 1} cannot be rendered ({exc}).") from None
    finally:
        page.close()
    target.parent.mkdir(parents=True, exist_ok=True)
    with safe_files.replacing(target) as tmp:  # a full disk leaves no half page (nor its .part) behind
        image.save(tmp, "PNG")
    return target


def _short(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes at a character boundary (a file name's part: most
    file systems take 255 bytes a name)."""
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def is_pdf(path: str | Path) -> bool:
    return Path(path).suffix.lower() in PDF_SUFFIXES


def expand_folders(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """Files to attach from ``paths``: a folder becomes its images and PDFs (not its subfolders), sorted
    by name; files pass through. Returns (files, one line per folder that held too many or none)."""
    files, notes = [], []
    for path in paths:
        folder = Path(path)
        if not folder.is_dir():
            files.append(path)
            continue
        found = sorted((p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES | PDF_SUFFIXES),
                       key=lambda p: p.name.lower())
        if not found:
            notes.append(f"The folder {folder.name} holds no images or PDFs.")
        elif len(found) > MAX_FOLDER_FILES:
            notes.append(f"The folder {folder.name} holds {len(found)} images and PDFs: only the first "
                         f"{MAX_FOLDER_FILES} (by name) were taken.")
            found = found[:MAX_FOLDER_FILES]
        files += [str(p) for p in found]
    return files, notes
