"""The one way a command of the plugin reports an error: ``prog: error: <message>``, one line.

Every command (``lightcompress-convert``, ``-params``, ``-export-ct2``, ``-export-onnx``,
``-translate``, ``scripts/measure_speed.sh``, ``scripts/distill_data.py``) is a ``main(argv)``
that returns an exit status, written as::

    def main(argv=None) -> int:
        return cli.run(_main, argv, prog="lightcompress-params")

    cli_main = cli.entry_point(main, quiet=True)      # the console script

:func:`run` turns a :class:`~lightcompress.errors.LightcompressError` into one line on stderr
and its ``exit_status``; :class:`OneLineParser` does the same for argparse's errors (no usage
dump). Anything else is a bug and keeps its traceback.

This module imports only the standard library.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from lightcompress.errors import LightcompressError

__all__ = ["OneLineParser", "entry_point", "quiet_logs", "report", "run"]


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports errors as one line (no usage dump) and exits with status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def report(prog: str, exc: BaseException) -> int:
    """Print ``prog: error: <exc>`` on stderr; return the error's exit status (default 2)."""
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return getattr(exc, "exit_status", 2)


def run(body: Callable, argv: Sequence[str] | None, prog: str) -> int:
    """``body(argv)``, its :class:`~lightcompress.errors.LightcompressError` reported by
    :func:`report`. Returns the exit status: ``body``'s when it returns an int, else 0."""
    try:
        status = body(argv)
    except LightcompressError as exc:
        return report(prog, exc)
    return status if isinstance(status, int) else 0


def quiet_logs() -> None:
    """Silence fairseq's INFO / WARNING log lines and Python's UserWarnings (they would
    interleave with a command's output and bury its one-line error)."""
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore", category=UserWarning)


def entry_point(main: Callable, quiet: bool = False, exits: bool = True) -> Callable:
    """A console entry point ``cli_main(argv=None)`` for ``main``: :func:`quiet_logs` first
    when ``quiet``; then ``sys.exit(main(argv))`` (``exits``), or the status returned (for
    commands whose ``cli_main`` is also called from Python)."""

    def cli_main(argv: Sequence[str] | None = None):
        if quiet:
            quiet_logs()
        status = main(argv)
        if exits:
            sys.exit(status)
        return status

    cli_main.__doc__ = f"Console entry point of :func:`{main.__module__}.{main.__name__}`."
    return cli_main
