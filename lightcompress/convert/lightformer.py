"""LightFormer's SVD weight transfer: its declaration is ``Transfer`` in
:mod:`lightcompress.models.lightformer`, run by the converter of every family
(:mod:`lightcompress.convert.family`). This module keeps the old import path."""

from lightcompress.convert.family import family_converter, layer_sources

__all__ = ["LightformerConverter", "layer_sources"]

LightformerConverter = family_converter("lightformer")
