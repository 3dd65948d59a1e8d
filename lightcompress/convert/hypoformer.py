"""Hypoformer's TT weight transfer: its declaration is ``Transfer`` in
:mod:`lightcompress.models.hypoformer`, run by the converter of every family
(:mod:`lightcompress.convert.family`). This module keeps the old import path."""

from lightcompress.convert.family import family_converter

__all__ = ["HypoformerConverter"]

HypoformerConverter = family_converter("hypoformer")
