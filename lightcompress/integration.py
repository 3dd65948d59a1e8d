"""fairseq integration of the factorization library: what fairseq assumes about dense layers.

- :class:`TiedOutputProjection`: fairseq ties ``decoder.output_projection.weight`` to the
  embedding's ``weight`` Parameter; a factorized table has none, so the projection computes
  the logits from the factors when the table's kind declares two (``(x V^T) U^T`` for a
  low-rank table, cheaper than rebuilding ``V x d``; the kind registry's ``factors``), else
  from the restored table. :class:`~lightcompress.models.compressed.CompressedDecoder` builds it.
- :func:`disable_attention_fast_path`: ``MultiheadAttention.forward`` calls
  ``F.multi_head_attention_forward`` with ``q_proj.weight``... whenever it is not decoding
  incrementally, which would silently bypass factorized (or int8-quantized) projections in
  training and validation; ``_set_skip_embed_dim_check()`` turns that path off.
"""

from __future__ import annotations

import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import nn

from lightcompress.modules.registry import two_factors

__all__ = ["TiedOutputProjection", "disable_attention_fast_path"]


class TiedOutputProjection(nn.Module):
    """Output projection tied to a (possibly factorized) embedding: ``logits = x E^T``.

    The embedding is referenced, not registered, so its parameters appear once in
    ``state_dict()`` (under the embedding's own name).

    Parameters
    ----------
    embedding : nn.Module
        Anything with fairseq's embedding interface (``.weight`` of shape ``(V, d)``).
    """

    def __init__(self, embedding: nn.Module):
        super().__init__()
        self._embedding = [embedding]  # a list keeps it out of the module tree

    @property
    def embedding(self) -> nn.Module:
        return self._embedding[0]

    @property
    def weight(self):
        """``(V, d)``, for code that reads ``output_projection.weight``."""
        return self.embedding.weight

    def forward(self, x):
        """``(..., d)`` -> ``(..., V)``."""
        emb = self.embedding
        # One 2-D GEMM: with a 3-D (e.g. transposed, non-contiguous) input and a weight that is
        # not a leaf parameter (the HTT table), F.linear fell back to a batched matmul over an
        # expanded weight, which made Hypoformer's decoding step 2x slower at beam 5.
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])  # [... x d] -> [N x d]
        factors = two_factors(emb)
        if factors is not None:
            # [N x d] -> [N x r] -> [N x V] (a low-rank table: the padding row of u is the pad
            # logit)
            out = F.linear(F.linear(x, factors[0]), factors[1])
        else:
            out = F.linear(x, emb.weight)
        return out.reshape(*lead, out.shape[-1])

    def extra_repr(self) -> str:
        return f"tied to {type(self.embedding).__name__}"


def disable_attention_fast_path(model: nn.Module, every: bool = False) -> int:
    """Make fairseq attention call its projection modules (see the module docstring).

    Parameters
    ----------
    model : nn.Module
    every : bool
        Every attention module (int8: quantized Linears have no weight tensor); default: those
        with a projection that is not an ``nn.Linear``.

    Returns
    -------
    int
        The number of attention modules changed.
    """
    changed = 0
    for module in model.modules():
        if not isinstance(module, MultiheadAttention):
            continue
        projs = [getattr(module, n, None) for n in ("q_proj", "k_proj", "v_proj", "out_proj")]
        if every or any(p is not None and type(p) is not nn.Linear for p in projs):
            module._set_skip_embed_dim_check()
            changed += 1
    return changed
