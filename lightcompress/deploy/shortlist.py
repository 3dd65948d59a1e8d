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

The file is read by :class:`lightcompress_runtime.Shortlist` (numpy: the ONNX
export's runtime reads it too); this module adds what the PyTorch fast path needs:

- :func:`load_shortlist`: the file against a model's fairseq dictionaries;
- :func:`output_rows`: the output projection restricted to the candidates, its rows gathered
  once per batch: fairseq's dense (or tied) ``nn.Linear`` (its weight rows), the plugin's
  :class:`~lightcompress.integration.TiedOutputProjection` of a table whose kind declares two
  factors (``E = U V``: rows of ``U``, then ``(x V^T) U[ids]^T``) or of any other table
  (rows of its weight: Hypoformer's HTT table), the int8 ones of
  :func:`~lightcompress.deploy.quantize.quantize_model_int8` (rows of the packed int8 weight);
  a module with a ``shortlist_rows(ids)`` method gives its own; any other module is computed
  in full and its candidate columns are taken (correct, not faster);
- :func:`split_output_rows`: for the float ones, the gather of the rows and the scoring with
  them as two functions (the ONNX export gathers once per batch in ``rows.onnx``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightcompress.errors import LightcompressError
from lightcompress_runtime.files import OnnxError
from lightcompress_runtime.shortlist import Shortlist

__all__ = ["Shortlist", "ShortlistError", "load_shortlist", "output_rows", "split_output_rows"]


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


Gather = Callable[[Tensor], tuple[Tensor, ...]]  # ids -> the rows of the candidates
Score = Callable[[Tensor, Sequence[Tensor]], Tensor]  # (x, rows) -> logits


def split_output_rows(proj: nn.Module) -> tuple[Gather, Score] | None:
    """The output projection's shortlist rows in two parts: ``gather(ids) -> rows`` (a tuple of
    tensors with ``len(ids)`` rows) and ``score(x, rows) -> logits``, so that a caller gathers
    once per batch what it scores at every step (the ONNX export's ``rows.onnx``). For fairseq's
    dense (or tied) ``nn.Linear`` and the plugin's ``TiedOutputProjection``; None for any other
    module (see :func:`output_rows`). A module with a ``shortlist_split()`` method gives its
    own pair; one with only ``shortlist_rows`` has none."""
    from lightcompress.integration import TiedOutputProjection
    from lightcompress.modules.registry import two_factors

    own = getattr(proj, "shortlist_split", None)
    if own is not None:
        return own()
    if getattr(proj, "shortlist_rows", None) is not None:
        return None
    if type(proj) is nn.Linear:
        if proj.bias is None:
            return (lambda ids: (proj.weight.index_select(0, ids),)), (
                lambda x, rows: F.linear(x, rows[0])
            )
        return (lambda ids: (proj.weight.index_select(0, ids), proj.bias.index_select(0, ids))), (
            lambda x, rows: F.linear(x, rows[0], rows[1])
        )
    if isinstance(proj, TiedOutputProjection):
        factors = two_factors(proj.embedding)
        if factors is None:  # (the restored table: an HTT one is cached in eval mode)
            emb = proj.embedding

            def gather(ids: Tensor) -> tuple[Tensor]:
                # an HTT table under the ONNX exporter: the candidates' rows from its factors,
                # so that the export stores the factors, not the table (decided at the call:
                # the exporter traces this function after it was made)
                if torch.onnx.is_in_onnx_export() and hasattr(emb, "lookup"):
                    return (emb.lookup(ids),)
                return (emb.weight.index_select(0, ids),)

            return gather, (lambda x, rows: F.linear(x, rows[0]))
        first, second = factors[0], factors[1]  # [r x d], [V x r]: (x V^T) U[ids]^T
        return (lambda ids: (second.index_select(0, ids),)), (
            lambda x, rows: F.linear(F.linear(x, first), rows[0])
        )
    return None


def output_rows(proj: nn.Module, ids: Tensor) -> Callable[[Tensor], Tensor]:
    """``x [... x d] -> logits [... x len(ids)]``: ``proj(x)[..., ids]``, from the rows of
    ``ids`` (sorted ``[V']`` int64) gathered now (see the module notes)."""
    from lightcompress.modules.lowrank import TwoLinear

    own = getattr(proj, "shortlist_rows", None)
    if own is not None:
        return own(ids)
    split = split_output_rows(proj)
    if split is not None:
        gather, score = split
        rows = gather(ids)
        return lambda x: score(x, rows)
    if isinstance(proj, TwoLinear):  # int8 of a factorized tied table: first map, then rows
        rows_of_second = output_rows(proj.second, ids)
        return lambda x: rows_of_second(proj.first(x))
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
