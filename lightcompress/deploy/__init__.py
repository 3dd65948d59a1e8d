"""Deploying translation models on CPUs.

- :mod:`lightcompress.deploy.ct2`: export of dense fairseq Transformers (teachers, dense
  baselines, dense plugin architectures) to CTranslate2 (``lightcompress-export-ct2``).
"""
