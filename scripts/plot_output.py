"""The output check of the plotting scripts (plot_curves.py, plot_frontier.py).

``image_output_error(path)`` says, before anything is read or drawn, why matplotlib could not
write the image ``path``: a file name without an image extension matplotlib knows (it would
otherwise append ``.png`` to a name without one and fail on an unknown one only after drawing),
or anything ``lightcompress.io.output_error`` finds. Standard library and matplotlib only.
"""

from __future__ import annotations

import os

__all__ = ["image_formats", "image_output_error", "plugin_io"]


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
    return plugin_io().output_error(path, flag)


def plugin_io():
    """``lightcompress/io.py`` loaded by file path (standard library only): the plotting
    scripts stay fast and do not import the package, and with it fairseq."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lightcompress", "io.py")
    spec = importlib.util.spec_from_file_location("_lightcompress_io", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
