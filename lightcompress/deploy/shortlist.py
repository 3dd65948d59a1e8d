"""A vocabulary shortlist for the output layer: score only the likely target tokens of a batch.

As Marian's lexical shortlists and CTranslate2's vocabulary maps do, the output layer of a
translation with a shortlist computes the logits of a per-batch candidate list only: the union
of the lists of the batch's source tokens (built from the training corpus by
``lightcompress-shortlist``, :mod:`lightcompress.deploy.shortlist_build`), the tokens always
included (the most frequent targets, EOS, UNK) and the ids up to the largest special symbol
(BOS, PAD, EOS, UNK keep their ids in the list; PAD is scored -inf as in fairseq). The
log-softmax is renormalized over the candidates (as Marian and CTranslate2 do), so scores
differ from fairseq's full-vocabulary ones; a list that covers the whole vocabulary gives
fairseq's translations (tests).

The file is read by :class:`lightcompress.deploy.onnx_runtime.Shortlist` (numpy: the ONNX
export's ``translate.py`` reads it too); this module adds what the PyTorch fast path needs:

- :func:`load_shortlist`: the file against a model's fairseq dictionaries;
- :func:`output_rows`: the output projection restricted to the candidates, its rows gathered
  once per batch: fairseq's dense (or tied) ``nn.Linear`` (its weight rows), the plugin's
  :class:`~lightcompress.integration.TiedOutputProjection` of a table whose kind declares two
  factors (``E = U V``: rows of ``U``, then ``(x V^T) U[ids]^T``) or of any other table
  (rows of its weight: Hypoformer's HTT table), the int8 ones of
  :func:`~lightcompress.deploy.quantize.quantize_model_int8` (rows of the packed int8 weight);
  a module with a ``shortlist_rows(ids)`` method gives its own; any other module is computed
  in full and its candidate columns are taken (correct, not faster).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightcompress.deploy.onnx_runtime import OnnxError, Shortlist
from lightcompress.errors import LightcompressError

__all__ = ["Shortlist", "ShortlistError", "load_shortlist", "output_rows"]


class ShortlistError(LightcompressError, ValueError):
    """A shortlist that cannot be used with a model (one line for the user)."""


def load_shortlist(path: str, src_dict, tgt_dict) -> Shortlist:
    """The shortlist file ``path`` for a model with these fairseq dictionaries."""
    specials = (tgt_dict.bos(), tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk())
    try:
        return Shortlist(path, src_dict.symbols, tgt_dict.symbols, specials=specials)
    except OnnxError as exc:
        raise ShortlistError(str(exc)) from None


def _select(t: Tensor | None, ids: Tensor) -> Tensor | None:
    return None if t is None else t.index_select(0, ids)


def output_rows(proj: nn.Module, ids: Tensor) -> Callable[[Tensor], Tensor]:
    """``x [... x d] -> logits [... x len(ids)]``: ``proj(x)[..., ids]``, from the rows of
    ``ids`` (sorted ``[V']`` int64) gathered now (see the module notes)."""
    from lightcompress.integration import TiedOutputProjection
    from lightcompress.modules.lowrank import TwoLinear
    from lightcompress.modules.registry import two_factors

    own = getattr(proj, "shortlist_rows", None)
    if own is not None:
        return own(ids)
    if type(proj) is nn.Linear:
        weight, bias = proj.weight.index_select(0, ids), _select(proj.bias, ids)
        return lambda x: F.linear(x, weight, bias)
    if isinstance(proj, TiedOutputProjection):
        factors = two_factors(proj.embedding)
        if factors is None:  # (the restored table: an HTT one is cached in eval mode)
            weight = proj.embedding.weight.index_select(0, ids)
            return lambda x: F.linear(x, weight)
        first, second = factors[0], factors[1].index_select(0, ids)  # [r x d], [V' x r]
        return lambda x: F.linear(F.linear(x, first), second)
    if isinstance(proj, TwoLinear):  # int8 of a factorized tied table: first map, then rows
        rows = output_rows(proj.second, ids)
        return lambda x: rows(proj.first(x))
    quantized = _quantized_rows(proj, ids)
    if quantized is not None:
        return quantized
    return lambda x: proj(x).index_select(-1, ids)


def _quantized_rows(proj: nn.Module, ids: Tensor) -> Callable[[Tensor], Tensor] | None:
    """The rows of a dynamically quantized ``Linear`` (int8 weights as they are: the same
    arithmetic as the full map's, per output), or None for another module."""
    from torch.ao.nn.quantized import dynamic as qd

    if type(proj) is not qd.Linear:
        return None
    weight, bias = proj.weight(), proj.bias()
    if weight.qscheme() == torch.per_tensor_affine:
        rows = torch._make_per_tensor_quantized_tensor(
            weight.int_repr().index_select(0, ids), weight.q_scale(), weight.q_zero_point()
        )
    elif weight.qscheme() == torch.per_channel_affine:
        rows = torch._make_per_channel_quantized_tensor(
            weight.int_repr().index_select(0, ids),
            weight.q_per_channel_scales().index_select(0, ids),
            weight.q_per_channel_zero_points().index_select(0, ids),
            0,
        )
    else:
        return None
    out = qd.Linear(proj.in_features, len(ids), bias_=bias is not None, dtype=torch.qint8)
    out.set_weight_bias(rows, _select(bias, ids))
    out.version = proj.version  # (the same reduce_range rule)
    return out
