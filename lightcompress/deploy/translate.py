"""The old name of :mod:`lightcompress.deploy.torch_translator` (the PyTorch translator and
``lightcompress-translate``; not an export's ``translate.py``, which is :mod:`lightcompress_runtime`):
``from lightcompress.deploy.translate import Translator`` goes on working."""

from lightcompress.deploy.torch_translator import (
    TranslateError,
    Translator,
    cli_main,
    left_pad_batches,
    main,
)

__all__ = ["TranslateError", "Translator", "cli_main", "left_pad_batches", "main"]
