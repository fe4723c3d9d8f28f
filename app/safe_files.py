"""Files Smolchat writes for the user (exports, copied images, pasted images): whole or not at all.

Each is written to a temporary file in the target's own folder and renamed over the target only
once complete (``os.replace``, one step on the same file system). A write that fails part-way, e.g.
on a full disk, removes the temporary file and leaves what was there before untouched: an old
export being replaced keeps its bytes, and no truncated or empty file is left behind.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_NAMES = itertools.count()  # names the temporary files in flight within this process


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for the caller to write; when the block ends, it replaces
    ``path`` (which keeps its permissions). If the block raises, the temporary file is removed and
    ``path`` is as it was. A symbolic link is followed: the file it points to is replaced."""
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{next(_NAMES)}.part")
    try:
        yield tmp
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno and str(tmp) in (str(exc.filename), str(exc.filename2)):
            # The temporary file is no name the user knows: the error names the file being written
            # (OSError(errno, ...) is the errno's own subclass, e.g. IsADirectoryError).
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` whole, or raise and leave ``path`` untouched (see the module docstring)."""
    return write_bytes(path, text.encode(encoding))


def write_bytes(path: str | Path, data: bytes) -> Path:
    with replacing(path) as tmp:
        with open(tmp, "xb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())  # on disk before the rename, so a crash cannot leave an empty file
    return Path(path)


def copy_file(source: str | Path, target: str | Path) -> Path:
    """Copy ``source`` to ``target`` whole, or raise and leave ``target`` untouched."""
    with replacing(target) as tmp:
        shutil.copyfile(source, tmp)
    return Path(target)
