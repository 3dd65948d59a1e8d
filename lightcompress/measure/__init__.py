"""Measuring compressed models: parameters and MACs, CPU translation speed.

- :mod:`lightcompress.measure.params`: ``lightcompress-params`` (counts without data, the papers'
  shared-embedding convention, MACs of a 20+20-token pass; the compress report's counts,
  :func:`~lightcompress.measure.params.checkpoint_report`), on the counter of
  :mod:`lightcompress.modules.counting`;
- :mod:`lightcompress.measure.specs`: ``build_random_model(arch, vocab_size, flags)`` (the
  papers' convention on :mod:`lightcompress.build`, the package's one way to build without
  data), model specs and :class:`~lightcompress.measure.specs.ParamsError`;
- :mod:`lightcompress.measure.speed`: ``measure_speed``, tokens/s on the papers' protocol
  (``scripts/measure_speed.sh``; compress's speed steps call it), several models side by side,
  int8 and BLEU; its command line in :mod:`~lightcompress.measure.speed_args`, its models in
  :mod:`~lightcompress.measure.candidates`, the timed loop in
  :mod:`~lightcompress.measure.protocol`, its table in :mod:`~lightcompress.measure.report`;
- :mod:`lightcompress.measure.engines`: the other engines timed next to fairseq (ONNX Runtime
  and CTranslate2 exports);
- :mod:`lightcompress.measure.timing`: the protocol's pure logic (trimmed mean, run order, tables).

The lab's benchmarks (``lab/measure``: the PyTorch fast path, raw-text timing and peak memory
next to these) build on this package; nothing here imports them. int8 quantization
(``quantize_model_int8``, ``QUANTIZE_HANDLERS``) is deployment's: :mod:`lightcompress.deploy.quantize`.
"""

import importlib

# Submodules are imported on first use, so that ``python -m lightcompress.measure.speed`` (and
# ``.params``) do not find their module already imported by the package (runpy's warning).
_LAZY = {
    "ModelSpec": "specs",
    "ParamsError": "specs",
    "build_random_model": "specs",
    "count_macs": "params",
    "parse_model_specs": "specs",
    "format_table": "timing",
    "interleaved_schedule": "timing",
    "summarize_runs": "timing",
    "trimmed_mean": "timing",
}

__all__ = [
    "ModelSpec",
    "ParamsError",
    "build_random_model",
    "count_macs",
    "format_table",
    "interleaved_schedule",
    "parse_model_specs",
    "summarize_runs",
    "trimmed_mean",
]


def __getattr__(name):
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
