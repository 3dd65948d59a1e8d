"""Compatibility shims applied when the plugin is imported.

torch >= 2.6 loads checkpoints with ``weights_only=True`` by default, and fairseq's
``checkpoint_utils.load_checkpoint_to_cpu`` calls ``torch.load`` without overriding it, so every
fairseq checkpoint is rejected (``Unsupported global: GLOBAL argparse.Namespace``). Rather than
turning the protection off, we allow-list exactly the types fairseq checkpoints hold:

- ``argparse.Namespace`` (``args`` of checkpoints written from the command line),
- numpy arrays, dtypes and scalars (``--eval-bleu`` stores numpy values in the meters / extra state),
- ``collections.OrderedDict`` and ``defaultdict`` are already allowed by torch.

fairseq imports ``--user-dir`` while parsing its arguments, before any checkpoint is loaded, so
calling :func:`allow_fairseq_checkpoints` from :mod:`lightcompress.plugin` (which the package
``__init__`` imports when fairseq loads it) covers ``fairseq-generate``,
``fairseq-interactive``, ``fairseq-train --restore-file`` / resume and
``TransformerModel.from_pretrained(..., user_dir=...)``.
"""

import argparse

import numpy as np
import torch

__all__ = [
    "allow_fairseq_checkpoints",
    "fairseq_checkpoint_safe_globals",
    "quiet_shared_parameter_logs",
    "report_config_errors",
]


def fairseq_checkpoint_safe_globals():
    """The list of non-tensor types that fairseq checkpoints contain."""
    types = [argparse.Namespace]
    try:  # numpy >= 2
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct, scalar
    types += [_reconstruct, scalar, np.ndarray, np.dtype]
    # dtype classes (numpy.dtypes.Int64DType, Float32DType, ...) are what pickles of np.dtype
    # objects reference under numpy >= 1.25.
    for dt in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    ):
        types.append(type(np.dtype(dt)))
    return types


def allow_fairseq_checkpoints():
    """Register :func:`fairseq_checkpoint_safe_globals` with ``torch.serialization``."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 has no weights_only default to worry about
        add(fairseq_checkpoint_safe_globals())


def _running_a_command() -> bool:
    """True in fairseq's and the plugin's commands (``fairseq-train``, ``lightcompress-*``,
    ``python -m fairseq_cli.* / lightcompress.*``, ``python -c``); False in an interactive
    shell (``python``, ``python -i``) and in a user's own program, which keep the interpreter's
    handling (a traceback, the shell alive, the program's atexit handlers run)."""
    import os
    import sys

    if hasattr(sys, "ps1") or sys.flags.interactive:
        return False
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-c":
        return True
    parts = os.path.normpath(os.path.abspath(argv0)).split(os.sep) if argv0 else []
    name = parts[-1] if parts else ""
    return name.startswith(("fairseq-", "lightcompress-")) or any(
        p in ("fairseq_cli", "lightcompress") for p in parts[:-1]
    )


def report_config_errors() -> None:
    """Make an uncaught :class:`~lightcompress.errors.ConfigError` (a bad plugin flag,
    spec or combination, found when fairseq builds the model) end the command with one line,
    ``<command>: error: <message>``, and exit status 2, instead of a traceback through fairseq.
    Only in commands (:func:`_running_a_command`): a library user's shell or program keeps
    the interpreter's handling. Every other exception keeps it too."""
    import os
    import sys

    from lightcompress.errors import ConfigError

    previous = sys.excepthook
    if getattr(previous, "_lightcompress", False):
        return

    def hook(exc_type, exc, tb):
        if not issubclass(exc_type, ConfigError) or not _running_a_command():
            return previous(exc_type, exc, tb)
        prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "lightcompress"
        if prog in ("-c", "__main__.py", ""):
            prog = "lightcompress"
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(2)

    hook._lightcompress = True
    sys.excepthook = hook


class _SharedParameterFilter:
    """Drops fairseq's ``detected shared parameter: A <- B`` lines (one per tied tensor:
    hundreds for a LightFormer); the model logs one summary line per shared stack instead."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("detected shared parameter")


def quiet_shared_parameter_logs() -> None:
    """Install :class:`_SharedParameterFilter` on fairseq's trainer logger (once)."""
    import logging

    log = logging.getLogger("fairseq.trainer")
    if not any(isinstance(f, _SharedParameterFilter) for f in log.filters):
        log.addFilter(_SharedParameterFilter())
