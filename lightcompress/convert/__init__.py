"""Checkpoint converters (``lightcompress-convert``); plug-ins register per student model."""

from lightcompress.convert import lightformer  # noqa: F401  (registers the converter)
from lightcompress.convert.core import CONVERTERS, ConversionError, register_converter

__all__ = ["CONVERTERS", "ConversionError", "register_converter"]
