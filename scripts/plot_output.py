"""The output check of the plotting scripts (plot_curves.py, plot_frontier.py).

``image_output_error(path)`` says, before anything is read or drawn, why matplotlib could not
write the image ``path``: an empty name, a directory, a folder that does not exist or cannot be
written (probed by creating and removing a temporary file there), or a file name without an
image extension matplotlib knows (it would otherwise append ``.png`` to a name without one and
fail on an unknown one only after drawing). Standard library and matplotlib only.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["image_formats", "image_output_error"]


def image_formats() -> list[str]:
    """The file extensions matplotlib can save to (``png``, ``pdf``, ``svg``, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def image_output_error(path: str, flag: str = "--out") -> str | None:
    """Why ``path`` cannot be written as an image, in one line; ``None`` when it can."""
    if not path or not path.strip():
        return f"{flag}: empty file name"
    if os.path.isdir(path):
        return f"{flag} {path} is a directory"
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    formats = image_formats()
    if ext not in formats:
        what = f"'.{ext}' is not an image format matplotlib writes" if ext else "no extension"
        return f"{flag} {path}: {what} (use one of .{', .'.join(formats)})"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{flag} {path}: directory {parent} does not exist"
    try:
        fd, probe = tempfile.mkstemp(prefix=".plot.", suffix=".probe", dir=parent)
    except OSError as exc:
        return f"{flag} {path}: cannot write in {parent} ({exc.strerror})"
    os.close(fd)
    os.remove(probe)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{flag} {path}: the file exists and is not writable"
    return None
