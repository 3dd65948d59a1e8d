"""The plugin's errors: one base class, reported by every command as one line.

Library code raises; only the command-line entry points (:mod:`lightcompress.cli`) turn an
error into ``prog: error: <message>`` on stderr and an exit status. Every error of the package
that is meant for a user (a bad flag, spec, checkpoint or input) derives from
:class:`LightcompressError`; its message is one line.

This module imports only the standard library (it sits under every layer of the package).
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "LightcompressError",
    "SpecError",
    "one_line",
]


class LightcompressError(Exception):
    """An error for the user of a command (one clear line); ``exit_status`` is the status the
    command ends with (2: bad input, found before anything was written)."""

    exit_status = 2


class ConfigError(LightcompressError, ValueError):
    """A configuration the plugin cannot build (a bad flag value, spec or combination).

    Raised before anything is built or trained; the plugin's commands and fairseq's (with the
    plugin imported) end with one line (``fairseq-train: error: ...``), exit status 2.
    """


class SpecError(ConfigError):
    """An invalid compression spec or kind configuration (one clear message)."""


class CheckpointError(LightcompressError, ValueError):
    """A checkpoint that cannot be read or built: missing, damaged, not fairseq's, of an
    architecture that is not registered, or with weights that do not fit it."""


def one_line(exc: BaseException, limit: int = 300, first_sentence: bool = False) -> str:
    """An exception's message on one line (torch's state-dict errors span several): long ones
    cut at ``limit`` characters (ending in ``...``), optionally only the first sentence."""
    text = " ".join(str(exc).split())
    if first_sentence and ". " in text:
        text = text.split(". ", 1)[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."
