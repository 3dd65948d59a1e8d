"""Atomic file and directory writes: the one temp-file-and-rename helper of the package.

A reader (or a rerun after a crash) sees either the old file or the complete new one, never a
half-written one::

    with atomic_write("profile.json") as f:           # text, UTF-8
        json.dump(values, f)
    with atomic_write("checkpoint.pt", "wb") as f:    # torch.save takes the file object
        torch.save(state, f)
    with atomic_path("shard0.gen") as tmp:            # for writers that want a file name
        subprocess.run(cmd, stdout=open(tmp, "w"))
    with atomic_directory("shard0.data") as tmp_dir:  # a whole directory
        write_files_into(tmp_dir)

The temporary file (or directory) is created in the destination's directory, named
``.<name>.<random>.tmp`` (hidden, so globs such as ``checkpoint*.pt`` never match it), and
renamed over the destination only when the ``with`` block ends normally. On any exception,
``KeyboardInterrupt`` included, it is removed and the destination is left as it was.

The new file or directory gets the permissions a plain ``open()`` / ``os.makedirs()`` would give
it under the process's umask (``0o666 & ~umask`` for files, ``0o777 & ~umask`` for directories),
not the ``0o600`` / ``0o700`` of :mod:`tempfile`.

This module imports only the standard library, so that scripts which must not import the
package (and with it fairseq) can load it by file path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO

__all__ = ["atomic_directory", "atomic_path", "atomic_write", "current_umask", "output_error"]

_WRITE_MODES = ("w", "wt", "wb")


def split_lines(text: str) -> list[str]:
    """Input text -> one item per line, as fairseq's text commands read it: split at ``\\n``
    only (U+2028, U+0085, form feed or a lone CR inside a line stay in it), a trailing
    ``\\r`` of a line (CRLF files) removed, no item after a final ``\\n``."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_text_lines(path: str | None) -> list[str]:
    """:func:`split_lines` of a UTF-8 file, or of standard input when ``path`` is None (read
    as bytes: text-mode reading would also break lines at a lone CR). Raises
    UnicodeDecodeError for text that is not UTF-8."""
    if path is None:
        import sys

        data = sys.stdin.buffer.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    return split_lines(data.decode("utf-8"))


def output_error(path: str | os.PathLike, flag: str = "--out") -> str | None:
    """Why ``path`` cannot be written, in one line (``flag`` names the option); ``None`` when
    it can. For checks made before hours of work: an empty name, a directory, a folder that does
    not exist or cannot be written (probed by creating and removing a temporary file there,
    which also catches read-only file systems when running as root), or an existing file that is
    not writable."""
    path = os.fspath(path)
    if not path or not path.strip():
        return f"{flag}: empty file name"
    if os.path.isdir(path):
        return f"{flag} {path} is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{flag} {path}: directory {parent} does not exist"
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=parent)
    except OSError as exc:
        return f"{flag} {path}: cannot write in {parent} ({exc.strerror})"
    os.close(fd)
    os.remove(probe)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{flag} {path}: the file exists and is not writable"
    return None


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no way to read it without setting it: set and restore at once
    os.umask(mask)
    return mask


def _parent_and_prefix(path: str | os.PathLike) -> tuple[str, str]:
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    return parent, f".{os.path.basename(path)}."


def _fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, fsync: bool = True) -> Iterator[str]:
    """Yield the name of an empty temporary file next to ``path``; rename it to ``path`` when the
    block ends normally, remove it otherwise.

    For writers that take a file name (``torch.save(obj, name)``, a builder writing by name). The
    writer may also replace the temporary file by name; whatever is at the temporary name when
    the block ends is renamed into place.
    """
    parent, prefix = _parent_and_prefix(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~current_umask())
        if fsync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    if fsync:
        _fsync_directory(parent)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike,
    mode: str = "w",
    encoding: str | None = "utf-8",
    newline: str | None = None,
    fsync: bool = True,
) -> Iterator[IO]:
    """Yield a file object open on a temporary file next to ``path``; when the block ends
    normally, flush it (``fsync`` unless ``fsync=False``), give it the umask's permissions and
    rename it to ``path``. On any exception the temporary file is removed and ``path`` keeps its
    old content (or stays absent).

    Parameters
    ----------
    path : str or PathLike
        The destination; its directory must exist.
    mode : {"w", "wt", "wb"}
        Text (``encoding``, default UTF-8, and ``newline`` as for :func:`open`) or binary.

    The file object's ``name`` is the temporary file's path (for a check that reads it back
    inside the block: flush first).
    """
    if mode not in _WRITE_MODES:
        raise ValueError(f"atomic_write: mode must be one of {_WRITE_MODES}, got {mode!r}")
    parent, prefix = _parent_and_prefix(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
    os.close(fd)
    try:  # reopened by name, so that ``f.name`` is the temporary file's path
        if "b" in mode:
            f = open(tmp, "wb")  # noqa: SIM115  (closed below)
        else:
            f = open(tmp, "w", encoding=encoding, newline=newline)  # noqa: SIM115
    except BaseException:
        _remove(tmp)
        raise
    try:
        with f:
            yield f
            if not f.closed:
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        if not f.closed:
            with contextlib.suppress(Exception):
                f.close()
        _remove(tmp)
        raise
    if fsync:
        _fsync_directory(parent)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[str]:
    """Yield an empty temporary directory next to ``path``; when the block ends normally, it
    replaces ``path`` (an existing directory there is removed), otherwise it is removed and
    ``path`` is left as it was.

    Replacing a non-empty directory takes two renames (the old one aside, the new one in): a
    reader can find ``path`` missing for that instant, never half-filled. If the second rename
    fails, the old directory is put back.
    """
    parent, prefix = _parent_and_prefix(path)
    path = os.fspath(path)
    tmp = tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent)
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~current_umask())
        old = None
        if os.path.isdir(path) and not os.path.islink(path):
            old = tmp + ".old"
            os.rename(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old is not None:
                os.rename(old, path)
            raise
    except BaseException:
        _remove(tmp)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _fsync_directory(parent)
