"""Deploying translation models on CPUs.

- :mod:`lightcompress.deploy.torch_translator`: :class:`Translator` (raw text in, raw text out,
  on the fast path) and ``lightcompress-translate``;
- :mod:`lightcompress.deploy.generator`: :class:`FastGenerator`, the one beam search
  (:mod:`lightcompress_runtime.search`, fairseq's results) over the ONNX export's decoder step
  run eagerly in PyTorch, which keeps the compressed weights as they are;
- :mod:`lightcompress.deploy.ct2`: export of dense fairseq Transformers (teachers, dense
  baselines, dense plugin architectures) to CTranslate2 (``lightcompress-export-ct2``), and of
  students whose factors multiply out as the dense Transformer they compute
  (:mod:`lightcompress.deploy.densify`, which also writes it as a fairseq checkpoint);
- :mod:`lightcompress.deploy.onnx_export`: export of the Transformer, LightFormer, Hypoformer,
  Smartformer and Subformer to ONNX Runtime graphs that keep the compressed weights
  (``lightcompress-export-onnx``); they translate with the torch-free package
  :mod:`lightcompress_runtime` (:class:`OnnxTranslator`, :class:`OnnxGenerator`: fairseq's beam
  search in numpy over them), which every export carries as ``runtime/`` beside its
  ``translate.py``;
- :mod:`lightcompress.deploy.shortlist`: a vocabulary shortlist for the output layer of both
  paths (``--shortlist``), built by :mod:`lightcompress.deploy.shortlist_build`
  (``lightcompress-shortlist``);
- :mod:`lightcompress.deploy.quantize`: dynamic int8 of every map, factorized ones included
  (``quantize_model_int8``; the large maps only with ``min_weight_elements``).
"""

from lightcompress.deploy.generator import FastGenerator
from lightcompress.deploy.torch_translator import TranslateError, Translator

__all__ = ["FastGenerator", "TranslateError", "Translator"]
