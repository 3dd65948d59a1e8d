"""Measuring compressed models: parameters and MACs, CPU translation speed, int8 quantization.

- :mod:`lightcompress.measure.params`: ``lightcompress-params`` (counts without data, the papers'
  shared-embedding convention, MACs of a 20+20-token pass), ``count_parameters`` (per category,
  on :func:`lightcompress.modules.sharing.unique_parameters`, the counter behind
  ``count_unique_params``), ``build_random_model(arch, vocab_size, flags)`` (the papers'
  convention on :mod:`lightcompress.build`, the package's one way to build without data);
- :mod:`lightcompress.measure.speed`: tokens/s on the papers' protocol, several models side by
  side (``scripts/measure_speed.sh``), int8 and BLEU;
- :mod:`lightcompress.measure.engines`: the other engines timed next to fairseq (CTranslate2
  exports, lightcompress's fast path); :mod:`lightcompress.measure.memory`: peak resident memory
  of a fresh process per model;
- :mod:`lightcompress.measure.timing`: the protocol's pure logic (trimmed mean, run order, tables).

int8 quantization (``quantize_model_int8``, ``QUANTIZE_HANDLERS``) is deployment's:
:mod:`lightcompress.deploy.quantize`.
"""

import importlib

# Submodules are imported on first use, so that ``python -m lightcompress.measure.speed`` (and
# ``.params``) do not find their module already imported by the package (runpy's warning).
_LAZY = {
    "ModelSpec": "params",
    "ParamsError": "params",
    "build_random_model": "params",
    "count_macs": "params",
    "count_parameters": "params",
    "parse_model_specs": "params",
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
    "count_parameters",
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
