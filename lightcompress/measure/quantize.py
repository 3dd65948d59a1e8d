"""Dynamic int8 quantization: moved to :mod:`lightcompress.deploy.quantize` (the exporters and
the translator use it, and deployment sits under measurement); this module keeps the old
import path working."""

from lightcompress.deploy.quantize import (
    LARGE_MAP_ELEMENTS,
    QUANTIZE_HANDLERS,
    count_quantized_linears,
    disable_attention_fast_path,
    linear_names,
    prepare_for_int8,
    quantize_model_int8,
    register_quantize_handler,
)

__all__ = [
    "LARGE_MAP_ELEMENTS",
    "QUANTIZE_HANDLERS",
    "count_quantized_linears",
    "disable_attention_fast_path",
    "linear_names",
    "prepare_for_int8",
    "quantize_model_int8",
    "register_quantize_handler",
]
