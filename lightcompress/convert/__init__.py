"""Checkpoint converters (``lightcompress-convert``); plug-ins register per student model."""

from lightcompress.convert import hypoformer, lightformer, smartformer  # noqa: F401  (registers converters)
from lightcompress.convert.core import CONVERTERS, ConversionError, register_converter

__all__ = ["CONVERTERS", "ConversionError", "register_converter"]
