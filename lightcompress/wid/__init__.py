"""DA-WID: weight-inherited distillation with data-aware compactors and learned masks.

- :mod:`~lightcompress.wid.gates`: hard-concrete gates, the Lagrangian sparsity objective;
- :mod:`~lightcompress.wid.calibrate`: data-aware compactor initialisation (SVD, Eq. 8-12);
- :mod:`~lightcompress.wid.masked`: the training-time layers (compactors + masks);
- :mod:`~lightcompress.wid.fused`: the fused layers (per-layer and per-head widths);
- :mod:`~lightcompress.wid.fuse`: expected / final size and fusion;
- :mod:`~lightcompress.wid.teacher`: the teacher (checks, loading, its stored configuration);
- :mod:`~lightcompress.wid.model`: the fairseq training model ``dawid`` (translation);
- :mod:`~lightcompress.wid.data_aware`: its data-aware initialisation (calibration batches,
  teacher features);
- :mod:`~lightcompress.wid.fused_model`: the fused model ``dawid_fused`` and the fusion into it;
- :mod:`~lightcompress.wid.roberta`: ``dawid_roberta`` and ``dawid_roberta_fused``
  (``sentence_prediction``);
- :mod:`~lightcompress.wid.criterion`: the ``dawid`` criterion (KL + layer MSE + Lagrangian).

Importing this package registers the models and the criterion with fairseq.
"""

from lightcompress.wid import criterion, fused_model, model, roberta  # noqa: F401  (registration)
