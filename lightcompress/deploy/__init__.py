"""Deploying translation models on CPUs.

- :mod:`lightcompress.deploy.translate`: :class:`Translator` (raw text in, raw text out, on the
  fast path) and ``lightcompress-translate``;
- :mod:`lightcompress.deploy.generator`: :class:`FastGenerator`, fairseq's beam search and
  results over a lean decoder step that keeps the compressed weights as they are;
- :mod:`lightcompress.deploy.ct2`: export of dense fairseq Transformers (teachers, dense
  baselines, dense plugin architectures) to CTranslate2 (``lightcompress-export-ct2``).
"""

from lightcompress.deploy.generator import FastGenerator
from lightcompress.deploy.translate import TranslateError, Translator

__all__ = ["FastGenerator", "TranslateError", "Translator"]
