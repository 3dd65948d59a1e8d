"""Smartformer's CP weight transfer: its declaration is ``Transfer`` in
:mod:`lightcompress.models.smartformer`, run by the converter of every family
(:mod:`lightcompress.convert.family`). This module keeps the old import path."""

from lightcompress.convert.family import family_converter

__all__ = ["SmartformerConverter"]

SmartformerConverter = family_converter("smartformer")
