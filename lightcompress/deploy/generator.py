"""The PyTorch backend of the one beam search: fairseq's translations over the model's own modules.

:class:`FastGenerator` is the beam search of :mod:`lightcompress_runtime.search` (fairseq's
``SequenceGenerator``, translation only: the ONNX export's search too) over :class:`TorchStep`,
which runs eagerly the modules that the ONNX export traces
(:mod:`lightcompress.deploy.onnx_graphs`), with the inputs that the ONNX runtime feeds the
traced graphs (:class:`~lightcompress_runtime.onnx_step.OnnxStep`):

- ``_Encoder``: once per batch, the source mask (``enc_bias``) and every decoder layer's
  cross-attention keys and values, kept once per sentence;
- ``DecoderStep``: one call per step, which reorders the self-attention caches (plain tensors,
  ``[N x H x t x d]``, or the factors' space of low-rank attentions), adds the search's score
  bias and returns each hypothesis' ``k`` best next tokens;
- with a shortlist, ``OutputRows``: the candidates' output rows, once per batch.

So a family is taught to one step: every model the export takes (fairseq's Transformer, the
plugin's compressed families, Subformer, DA-WID's fused layers) runs in PyTorch what its export
computes (the model's own modules, factorized maps regrouped, never densified), to float
rounding of fairseq's (the equality tests against fairseq's generator hold to 1e-5). A model the
export refuses (:func:`~lightcompress.deploy.onnx_graphs.export_error`: cross self-attention, options
such as ``--scale-attn``, a layer with its own ``forward``...) runs fairseq's own decoder with
its incremental state under the same search (:attr:`FastGenerator.lean` is ``False``,
:attr:`FastGenerator.why_not_lean` says why).
"""

from __future__ import annotations

import contextlib
import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lightcompress.deploy.onnx_graphs import export_error
from lightcompress_runtime.search import BeamSearch, SearchError

__all__ = [
    "FastGenerator",
    "TorchStep",
    "beamable_attention",
]

_INCREMENTAL: dict = {}  # a non-None incremental state: positional embeddings of the last step


_UNSET = object()


@contextlib.contextmanager
def beamable_attention(decoder, beam: int):
    """fairseq's beamable encoder-decoder attention (each sentence's keys and values computed
    once for its beam) for the duration of one search; the decoder as it was afterwards.

    ``FairseqIncrementalDecoder.set_beam_size`` sets ``beam_size`` on every
    ``MultiheadAttention`` for good, and with it set, any later call whose query batch equals its
    key batch keeps only every ``beam``-th sentence's encoder output: a teacher-forced forward
    (scoring, validation, ONNX tracing) or a search at another beam size on the same model then
    fails with a shape error, or, when its batch divides by the beam, silently attends to the
    wrong sentences. (fairseq's ``SequenceGenerator`` asks the model, not its decoder, for
    ``set_beam_size``, so on a Transformer it never sets it.) Here every module's ``beam_size``
    and the decoder's own record of it are put back on exit, errors included.
    """
    setter = getattr(decoder, "set_beam_size", None)
    if setter is None:
        yield
        return
    saved = [
        (m, m.__dict__.get("beam_size", _UNSET))
        for m in decoder.modules()
        if m is not decoder and hasattr(m, "set_beam_size")
    ]
    saved.append((decoder, decoder.__dict__.get("_beam_size", _UNSET)))
    try:
        setter(beam)
        yield
    finally:
        for module, value in saved:
            name = "_beam_size" if module is decoder else "beam_size"
            if value is _UNSET:
                module.__dict__.pop(name, None)
            else:
                setattr(module, name, value)


def _beamable(generate):
    """Run ``generate`` under :func:`beamable_attention` at the generator's beam size."""

    @functools.wraps(generate)
    def wrapper(self, *args, **kwargs):
        with beamable_attention(self.model.decoder, self.beam_size):
            return generate(self, *args, **kwargs)

    return wrapper


class TorchStep:
    """The model's encoder and one incremental decoder step in PyTorch, eagerly: the
    :class:`~lightcompress_runtime.search.Step` of the search (see the module notes).

    Parameters
    ----------
    model : fairseq encoder-decoder model (eval mode)
    tgt_dict : fairseq Dictionary
    shortlist : lightcompress.deploy.shortlist.Shortlist, optional
        Score only each batch's candidates (:mod:`lightcompress.deploy.shortlist`: the output
        projection's rows gathered once per batch, log-softmax renormalized over them).
    """

    def __init__(self, model, tgt_dict, shortlist=None):
        self.model = model
        self.pad, self.unk, self.eos = tgt_dict.pad(), tgt_dict.unk(), tgt_dict.eos()
        self.vocab_size = len(tgt_dict)
        self.max_positions = model.max_decoder_positions()
        self.shortlist = shortlist
        self.why_not_lean = export_error(model)  # (None: the export's step computes it)
        self.lean = self.why_not_lean is None
        self._fairseq = None if self.lean else _FairseqStep(model, self.vocab_size, shortlist)
        if self.lean:
            with torch.no_grad():
                self._build()

    def _build(self) -> None:
        """The export's modules (:func:`~lightcompress.deploy.onnx_export.export_onnx` builds
        them so) and the layout of the decoder step's cache inputs."""
        from lightcompress.deploy.onnx_encoder import encoder_module, probe_batch
        from lightcompress.deploy.onnx_graphs import (
            DecoderStep,
            OutputRows,
            layer_layout,
            tied_htt,
        )
        from lightcompress.deploy.shortlist import split_output_rows

        model, dec = self.model, self.model.decoder
        self.encoder = encoder_module(model, probe_batch(model.encoder.dictionary))
        split = None if self.shortlist is None else split_output_rows(dec.output_projection)
        self.rows, n_rows = None, 0  # (a float output layer: its rows gathered per batch)
        if split is not None:
            places = self.vocab_size if tied_htt(dec) else 0
            self.rows = OutputRows(model, split[0], places).eval()
            n_rows = len(split[0](torch.zeros(1, dtype=torch.long))) + (1 if places else 0)
        self.decoder = DecoderStep(
            model,
            shortlist=self.shortlist is not None,
            rows=n_rows,
            score=split[1] if split else None,
        ).eval()
        self.layers = [layer_layout(layer) for layer in dec.layers]
        # (the decoder's cache inputs after enc_bias: per layer past_k, past_v, then its
        # encoder outputs: cross_k, cross_v and in the factors' space cross_b)
        self._cross_counts = [
            (3 if s.get("cross_factors") else 2) if s["cross"] else 0 for s in self.layers
        ]
        self._positions: dict = {}
        self._no_position = torch.zeros(1, dtype=torch.long)

    def _position(self, steps: int) -> Tensor:
        """The decoder's position input of step ``steps`` (1 the first): the position id, or
        for sinusoidal positions fairseq's embedding row ``[1 x C]`` (as the ONNX runtime
        feeds them)."""
        pos = self._positions.get(steps)
        if pos is None:
            dec, kind = self.model.decoder, self.decoder.position_kind
            if kind is None:
                return self._no_position
            if kind == "sinusoidal":  # (fairseq's own table)
                dummy = torch.zeros(1, steps, dtype=torch.long)
                pos = dec.embed_positions(dummy, incremental_state=_INCREMENTAL).reshape(1, -1)
            else:
                pos = torch.tensor([dec.embed_positions.padding_idx + steps])
            self._positions[steps] = pos
        return pos

    def start(self, src_tokens: np.ndarray, src_lengths: np.ndarray, beam: int):
        """The encoder's outputs (once per sentence), empty self-attention caches, a
        shortlist's candidates (and their output rows)."""
        if self._fairseq is not None:
            return self._fairseq.start(src_tokens, src_lengths, beam)
        enc = iter(self.encoder(torch.from_numpy(src_tokens)))
        n = len(src_tokens) * beam
        caches, self._past, self._cross = [next(enc)], [], [0]  # (enc_bias first)
        for spec, count in zip(self.layers, self._cross_counts):
            for c in ("k", "v"):  # (factor-space attention: [1 x rank] per hypothesis)
                heads, width = spec.get(f"{c}_cache", (spec["heads"], spec["head_dim"]))
                self._past.append(len(caches))
                caches.append(torch.zeros(n, heads, 0, width))
            for _ in range(count):
                self._cross.append(len(caches))
                caches.append(next(enc))
        self._caches = caches
        self._cands, vocab, at = [], self.vocab_size, None
        if self.shortlist is not None:  # (at least 2 x beam tokens besides the special ids)
            ids = np.asarray(self.shortlist.candidates(src_tokens, 2 * beam), dtype=np.int64)
            cands = torch.from_numpy(ids)
            self._cands, vocab = [cands], len(ids)
            if self.rows is not None:  # (the step then takes the candidates' bias)
                self._cands += list(self.rows(cands))
                at = ids
        return vocab, at

    def step(
        self,
        tokens: np.ndarray,
        order: np.ndarray,
        bias: np.ndarray,
        k: int,
        kept: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One call of the decoder step: it reorders the caches, adds ``bias`` and takes each
        hypothesis' ``k`` best next tokens (log-probabilities + bias, NaN as -inf; token ids)."""
        if self._fairseq is not None:
            return self._fairseq.step(tokens, order, bias, k, kept)
        caches = self._caches
        if kept is not None:  # finished sentences left the batch
            sent = torch.from_numpy(kept)
            for i in self._cross:
                caches[i] = caches[i].index_select(0, sent)
        prev = torch.from_numpy(np.ascontiguousarray(tokens[:, -1]))
        out = self.decoder(
            prev,
            self._position(tokens.shape[1]),
            torch.from_numpy(order),
            torch.from_numpy(bias),
            *self._cands,
            *caches,
            top_k=k,
        )
        for i, grown in zip(self._past, out[2:]):
            caches[i] = grown
        return out[0].numpy(), out[1].numpy()


class _FairseqStep:
    """The step of a model the export refuses: fairseq's own encoder and decoder, with its
    incremental state (and a shortlist's output rows, once per batch)."""

    def __init__(self, model, vocab_size: int, shortlist=None):
        self.model, self.vocab_size, self.shortlist = model, vocab_size, shortlist

    def start(self, src_tokens: np.ndarray, src_lengths: np.ndarray, beam: int):
        src = torch.from_numpy(src_tokens)
        net_input = {"src_tokens": src, "src_lengths": torch.from_numpy(src_lengths)}
        encoder = self.model.encoder
        encoder_out = encoder.forward_torchscript(net_input)
        new_order = torch.arange(len(src)).view(-1, 1).repeat(1, beam).view(-1)
        self._encoder_out = encoder.reorder_encoder_out(encoder_out, new_order)
        self._incremental: dict = {}
        self._cands = self._project = None
        vocab, at = self.vocab_size, None
        if self.shortlist is not None:  # (at least 2 x beam tokens besides the special ids)
            from lightcompress.deploy.shortlist import output_rows

            at = self.shortlist.candidates(src_tokens, 2 * beam)
            self._cands = torch.from_numpy(at)
            self._project = output_rows(self.model.decoder.output_projection, self._cands)
            vocab = len(at)
        return vocab, at

    def step(
        self,
        tokens: np.ndarray,
        order: np.ndarray,
        bias: np.ndarray,
        k: int,
        kept: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        model, project = self.model, self._project
        if tokens.shape[1] > 1:  # (the first step's hypotheses are in order)
            order_t = torch.from_numpy(order)
            self._encoder_out = model.encoder.reorder_encoder_out(self._encoder_out, order_t)
            model.decoder.reorder_incremental_state_scripting(self._incremental, order_t)
        out = model.decoder.forward(
            torch.from_numpy(tokens),
            encoder_out=self._encoder_out,
            incremental_state=self._incremental,
            features_only=project is not None,
        )
        out = out[0][:, -1:, :] if project is None else project(out[0][:, -1:, :])
        lprobs = F.log_softmax(out.float(), dim=-1)[:, -1, :]  # [N x V (V')]
        lprobs.masked_fill_(torch.isnan(lprobs), -math.inf)  # fairseq: lprobs[nan] = -inf
        values, ids = torch.topk(lprobs + torch.from_numpy(bias), k, dim=-1)
        if self._cands is not None:  # positions among the candidates -> token ids
            ids = self._cands[ids]
        return values.numpy(), ids.numpy()


class FastGenerator(BeamSearch):
    """fairseq's beam search (:class:`~lightcompress_runtime.search.BeamSearch`, the export's
    too) over :class:`TorchStep`: fairseq's hypotheses and scores, with torch results.

    Parameters
    ----------
    model : fairseq encoder-decoder model (eval mode)
    tgt_dict : fairseq Dictionary
    beam_size, len_penalty, min_len, max_len_a, max_len_b, unk_penalty
        As fairseq's ``--beam``, ``--lenpen``, ``--min-len``, ``--max-len-a``,
        ``--max-len-b``, ``--unkpen``: at most ``min(int(max_len_a * src_len + max_len_b),
        max_decoder_positions - 1)`` tokens before EOS, ``src_len`` the padded source length
        (EOS included).
    shortlist : lightcompress.deploy.shortlist.Shortlist, optional
        :class:`TorchStep`'s.
    """

    def __init__(
        self,
        model,
        tgt_dict,
        beam_size: int = 5,
        len_penalty: float = 1.0,
        min_len: int = 1,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        unk_penalty: float = 0.0,
        shortlist=None,
    ):
        step = TorchStep(model, tgt_dict, shortlist)
        super().__init__(
            step,
            beam_size=beam_size,
            len_penalty=len_penalty,
            min_len=min_len,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            unk_penalty=unk_penalty,
        )
        self.model, self.shortlist = model, shortlist
        self.lean, self.why_not_lean = step.lean, step.why_not_lean

    @_beamable  # (fairseq's beamable attention for the search only: see beamable_attention)
    @torch.inference_mode()
    def generate(self, src_tokens: Tensor, src_lengths: Tensor) -> list[list[dict]]:
        """Translate a batch: ``src_tokens`` ``[B x S]`` (left-padded, as fairseq batches
        them), ``src_lengths`` ``[B]``. Returns, per sentence, the ``beam`` finished
        hypotheses best first: ``{"tokens": [T] (ending with EOS), "score": float tensor}``."""
        try:
            out = super().generate(src_tokens.cpu().numpy(), src_lengths.cpu().numpy())
        except SearchError as exc:
            raise ValueError(str(exc)) from None
        return [
            [
                {"tokens": torch.from_numpy(h["tokens"]), "score": torch.tensor(h["score"])}
                for h in hyps
            ]
            for hyps in out
        ]
