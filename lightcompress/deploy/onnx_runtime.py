"""The old home of the ONNX export's runtime, now the torch-free package :mod:`lightcompress_runtime`
(``from lightcompress.deploy.onnx_runtime import OnnxTranslator`` goes on working)."""

from lightcompress_runtime import (
    FORMAT,
    MANIFEST,
    SHORTLIST_HEADER,
    OnnxError,
    OnnxGenerator,
    OnnxTranslator,
    Shortlist,
    left_pad_batches,
    load_config,
    main,
    sinusoid,
    split_lines,
)

__all__ = ["FORMAT", "MANIFEST", "SHORTLIST_HEADER", "OnnxError", "OnnxGenerator", "OnnxTranslator",
           "Shortlist", "left_pad_batches", "load_config", "main", "sinusoid", "split_lines"]  # fmt: skip
