"""The PyTorch backend of the one beam search: fairseq's translations over the model's own modules.

:class:`FastGenerator` is the beam search of :mod:`lightcompress.runtime.search` (fairseq's
``SequenceGenerator``, translation only: the ONNX export's search too) over
:class:`TorchStep`, the model's encoder and a decoder step that keeps only what a step needs:

- **the model's own modules**: every projection is called as a module (``q_proj(x)``,
  ``fc1(x)``, the output projection...), so low-rank, TT, hybrid, fused-QKV and CP maps
  (:class:`~lightcompress.modules.cp.CPLinear`: Smartformer) and shared layers run as built,
  with their factorized weights: nothing is densified or copied;
- **plain tensors as cache**: per layer the self-attention keys/values as one tensor each
  (``[N*H x T x d]``), concatenated per step and reordered with one ``index_select``; the
  cross-attention keys/values computed once per batch (on the un-expanded encoder output, as
  fairseq does with a beam), reordered only when finished sentences leave the batch. No
  incremental-state dictionaries, no per-step masks.

The step computes what fairseq's ``TransformerDecoderLayerBase`` / ``MultiheadAttention``
compute in the same order and shapes (so the float32 results are the same numbers): the
layers of fairseq's Transformer and of the plugin's compressed Transformer (Admin residuals
included). A decoder with other layers (Subformer's SAFE / sandwich layers, options such as
``--scale-attn``) runs fairseq's own decoder with its incremental state under the same lean
search (:attr:`FastGenerator.lean` is ``False``).
"""

from __future__ import annotations

import contextlib
import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lightcompress.runtime.search import BeamSearch, SearchError

__all__ = [
    "FastGenerator",
    "TorchStep",
    "beamable_attention",
    "decoder_error",
    "layer_step",
    "lean_step_supported",
]

_INCREMENTAL: dict = {}  # a non-None incremental state: positional embeddings of the last step


def _lean_layer_error(layer, extra_forwards=()) -> str | None:
    from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

    if not isinstance(layer, TransformerDecoderLayerBase):
        return f"{type(layer).__name__} is not fairseq's decoder layer"
    if type(layer).forward not in (*_LEAN_FORWARDS(), *extra_forwards):
        return f"{type(layer).__name__} has its own forward"
    for name in ("c_attn", "attn_ln", "ffn_layernorm", "w_resid"):
        if getattr(layer, name, None) is not None:
            return f"{name} (--scale-* options)"
    if layer.cross_self_attention:
        return "cross self-attention"
    for attn in (layer.self_attn, layer.encoder_attn):
        attn = getattr(attn, "attention", attn)  # (Subformer's query-projected attention)
        if attn is not None and (attn.bias_k is not None or attn.add_zero_attn):
            return "attention bias_k / zero attention"
    return None


def _LEAN_FORWARDS():
    from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

    from lightcompress.models.compressed import CompressedDecoderLayer

    return (TransformerDecoderLayerBase.forward, CompressedDecoderLayer.forward)


def _sublayer(layer, x: Tensor, norm, f) -> Tensor:
    """``f`` with the layer's residual and ``norm`` around it (pre- or post-LN)."""
    residual = x
    if layer.normalize_before:
        x = norm(x)
    x = layer.residual_connection(f(x), residual)
    if not layer.normalize_before:
        x = norm(x)
    return x


def layer_step(layer, x: Tensor, self_attention, cross_attention=None) -> Tensor:
    """fairseq's ``TransformerDecoderLayerBase.forward`` (or ``TransformerEncoderLayerBase``'s)
    around the attentions, which the caller computes: ``self_attention(x)`` and, for a layer
    with encoder attention, ``cross_attention(x)`` get the normalized input and return the
    output projection's result. Residuals (Admin's too), pre- or post-LN, the feed-forward
    sublayer. The one layer walk of the PyTorch fast path and of the ONNX export."""
    cross = getattr(layer, "encoder_attn", None) is not None
    start_admin = getattr(layer, "_start_admin", None)
    if start_admin is not None:
        start_admin(["self_attn", "encoder_attn", "ffn"] if cross else ["self_attn", "ffn"])
    x = _sublayer(layer, x, layer.self_attn_layer_norm, self_attention)
    if cross:
        x = _sublayer(layer, x, layer.encoder_attn_layer_norm, cross_attention)
    ffn = lambda y: layer.fc2(layer.activation_fn(layer.fc1(y)))
    return _sublayer(layer, x, layer.final_layer_norm, ffn)


def decoder_error(dec) -> str | None:
    """``None`` when ``dec`` is fairseq's Transformer decoder computing its features as
    fairseq does, with a plain output layer (what a step over its layers assumes), else why
    not. Its layers are the caller's to check (the lean step's, the ONNX export's)."""
    from fairseq.models.transformer import TransformerDecoderBase

    if not isinstance(dec, TransformerDecoderBase):
        return f"{type(dec).__name__} is not fairseq's Transformer decoder"
    if (
        type(dec).extract_features_scriptable
        is not TransformerDecoderBase.extract_features_scriptable
    ):
        return f"{type(dec).__name__} computes its own features"
    if dec.adaptive_softmax is not None:
        return "adaptive softmax"
    return None


def lean_step_supported(model, extra_forwards=()) -> str | None:
    """``None`` when the lean decoder step computes ``model``'s decoder, else why not;
    ``extra_forwards``: further layer ``forward`` functions a caller's step computes (the ONNX
    export's step also computes Subformer's layers)."""
    dec = getattr(model, "decoder", None)
    why = decoder_error(dec)
    if why is not None:
        return why
    for i, layer in enumerate(dec.layers):
        why = _lean_layer_error(layer, extra_forwards)
        if why:
            return f"decoder.layers.{i}: {why}"
    return None


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
    :class:`~lightcompress.runtime.search.Step` of the search (see the module notes).

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
        self.why_not_lean = lean_step_supported(model)
        self.lean = self.why_not_lean is None
        self._state: dict = {}
        self._cands: Tensor | None = None
        self._beam = 1

    def start(self, src_tokens: np.ndarray, src_lengths: np.ndarray, beam: int):
        """The encoder's output (expanded to ``beam`` hypotheses per sentence, as fairseq
        does), the cross-attention keys and values, a shortlist's candidates."""
        src = torch.from_numpy(src_tokens)
        net_input = {"src_tokens": src, "src_lengths": torch.from_numpy(src_lengths)}
        encoder_out = self.model.encoder.forward_torchscript(net_input)
        new_order = torch.arange(len(src)).view(-1, 1).repeat(1, beam).view(-1)
        encoder_out = self.model.encoder.reorder_encoder_out(encoder_out, new_order)
        self._cands = None
        vocab, at = self.vocab_size, None
        if self.shortlist is not None:  # (at least 2 x beam tokens besides the special ids)
            at = self.shortlist.candidates(src_tokens, 2 * beam)
            self._cands = torch.from_numpy(at)
            vocab = len(at)
        self._beam = beam
        self._state = self._start(encoder_out, beam, self._cands)
        return vocab, at

    def step(self, tokens: np.ndarray, order: np.ndarray, bias: np.ndarray, k: int,
             kept: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """fairseq's step: the caches reordered, the next token's log-probabilities (NaN as
        -inf) + ``bias``, the ``k`` best of each hypothesis."""
        if tokens.shape[1] > 1:  # (the first step's hypotheses are in order)
            self._reorder(self._state, torch.from_numpy(order), self._beam, kept is not None)
        lprobs = self._decode(torch.from_numpy(tokens), self._state)  # [N x V (V')]
        lprobs.masked_fill_(torch.isnan(lprobs), -math.inf)  # fairseq: lprobs[nan] = -inf
        values, ids = torch.topk(lprobs + torch.from_numpy(bias), k, dim=-1)
        if self._cands is not None:  # positions among the candidates -> token ids
            ids = self._cands[ids]
        return values.numpy(), ids.numpy()

    def _start(self, encoder_out: dict, beam: int, cands: Tensor | None = None) -> dict:
        """The decoder state of a new batch: cross-attention keys/values of every layer, the
        output projection restricted to ``cands`` (a shortlist's candidates)."""
        state: dict = {"encoder_out": encoder_out}
        if cands is not None:
            from lightcompress.deploy.shortlist import output_rows

            state["project"] = output_rows(self.model.decoder.output_projection, cands)
        if not self.lean:
            state["incremental"] = {}
            return state
        enc = encoder_out["encoder_out"][0]  # [S x N x C], N = B * beam
        mask = encoder_out["encoder_padding_mask"]
        mask = mask[0] if len(mask) > 0 else None
        if beam > 1:  # fairseq projects the un-expanded encoder output once per sentence
            enc = enc.view(enc.size(0), -1, beam, enc.size(2))[:, :, 0, :]
            if mask is not None:
                mask = mask.view(-1, beam, mask.size(1))[:, 0, :]
        if mask is not None and not bool(mask.any()):
            mask = None  # masking nothing changes nothing
        layers = []
        for layer in self.model.decoder.layers:
            a = layer.encoder_attn
            if a is None:
                layers.append({})
                continue
            b, h, d = enc.size(1), a.num_heads, a.head_dim
            k = a.k_proj(enc).contiguous().view(-1, b * h, d).transpose(0, 1)  # [B*H x S x d]
            v = a.v_proj(enc).contiguous().view(-1, b * h, d).transpose(0, 1)
            layers.append({"ek": k.view(b, h, -1, d), "ev": v.view(b, h, -1, d), "emask": mask})
        state["layers"] = layers
        return state

    def _reorder(self, state: dict, order: Tensor, beam: int, shrunk: bool) -> None:
        """Reorder the hypotheses' state after a step (``order`` over the ``N`` hypotheses);
        ``shrunk``: finished sentences left the batch."""
        if not self.lean:
            state["encoder_out"] = self.model.encoder.reorder_encoder_out(
                state["encoder_out"], order
            )
            self.model.decoder.reorder_incremental_state_scripting(state["incremental"], order)
            return
        sent = order.reshape(-1, beam)[:, 0] // beam if shrunk else None
        for cache in state["layers"]:
            if "k" in cache:  # [N x H x t x d]
                cache["k"] = cache["k"].index_select(0, order)
                cache["v"] = cache["v"].index_select(0, order)
            if sent is not None and "ek" in cache:  # [B x H x S x d]: per sentence
                cache["ek"] = cache["ek"].index_select(0, sent)
                cache["ev"] = cache["ev"].index_select(0, sent)
                if cache["emask"] is not None:
                    cache["emask"] = cache["emask"].index_select(0, sent)

    def _decode(self, tokens: Tensor, state: dict) -> Tensor:
        """Log-probabilities ``[N x V]`` of the next token after ``tokens`` ``[N x t]``."""
        project = state.get("project")
        if not self.lean:
            out = self.model.decoder.forward(
                tokens, encoder_out=state["encoder_out"], incremental_state=state["incremental"],
                features_only=project is not None,
            )  # fmt: skip
            out = out[0][:, -1:, :] if project is None else project(out[0][:, -1:, :])
            return F.log_softmax(out.float(), dim=-1)[:, -1, :]
        dec = self.model.decoder
        positions = None
        if dec.embed_positions is not None:
            positions = dec.embed_positions(tokens, incremental_state=_INCREMENTAL)[:, -1:]
        prev = tokens[:, -1:].contiguous()
        x = dec.embed_scale * dec.embed_tokens(prev)  # [N x 1 x C]
        if dec.quant_noise is not None:
            x = dec.quant_noise(x)
        if dec.project_in_dim is not None:
            x = dec.project_in_dim(x)
        if positions is not None:
            x += positions
        if dec.layernorm_embedding is not None:
            x = dec.layernorm_embedding(x)
        x = x.transpose(0, 1)  # [1 x N x C]
        for layer, cache in zip(dec.layers, state["layers"]):
            x = self._layer(layer, x, cache)
        if dec.layer_norm is not None:
            x = dec.layer_norm(x)
        x = x.transpose(0, 1)  # [N x 1 x C]
        if dec.project_out_dim is not None:
            x = dec.project_out_dim(x)
        logits = dec.output_layer(x) if project is None else project(x)  # [N x 1 x V (V')]
        return F.log_softmax(logits.float(), dim=-1)[:, -1, :]

    def _layer(self, layer, x: Tensor, cache: dict) -> Tensor:
        """fairseq's ``TransformerDecoderLayerBase.forward`` for one incremental step."""
        return layer_step(
            layer, x, lambda y: self._self_attention(layer.self_attn, y, cache),
            lambda y: self._cross_attention(layer.encoder_attn, y, cache),
        )  # fmt: skip

    @staticmethod
    def _self_attention(a, x: Tensor, cache: dict) -> Tensor:
        n, heads, d = x.size(1), a.num_heads, a.head_dim
        q = a.q_proj(x)  # [1 x N x C]
        k = a.k_proj(x)
        v = a.v_proj(x)
        q *= a.scaling
        q = q.contiguous().view(1, n * heads, d).transpose(0, 1)  # [N*H x 1 x d]
        k = k.contiguous().view(-1, n * heads, d).transpose(0, 1)
        v = v.contiguous().view(-1, n * heads, d).transpose(0, 1)
        if "k" in cache:
            k = torch.cat([cache["k"].view(n * heads, -1, d), k], dim=1)  # [N*H x t x d]
            v = torch.cat([cache["v"].view(n * heads, -1, d), v], dim=1)
        cache["k"], cache["v"] = k.view(n, heads, -1, d), v.view(n, heads, -1, d)
        w = torch.bmm(q, k.transpose(1, 2))
        p = F.softmax(w.float(), dim=-1).type_as(w)
        out = torch.bmm(p, v)  # [N*H x 1 x d]
        out = out.transpose(0, 1).contiguous().view(1, n, heads * d)
        return a.out_proj(out)

    @staticmethod
    def _cross_attention(a, x: Tensor, cache: dict) -> Tensor:
        n, heads, d = x.size(1), a.num_heads, a.head_dim
        q = a.q_proj(x)
        q *= a.scaling
        q = q.contiguous().view(1, n * heads, d).transpose(0, 1)  # [N*H x 1 x d]
        kv_bsz = cache["ek"].size(0)
        k = cache["ek"].view(kv_bsz * heads, -1, d)  # [B*H x S x d]
        v = cache["ev"].view(kv_bsz * heads, -1, d)
        src_len = k.size(1)
        if n != kv_bsz:  # beam: fairseq's einsum over the un-expanded keys
            w = torch.einsum(
                "bxhtd,bhsd->bxhts",
                q.view((kv_bsz, -1, heads) + q.size()[1:]),
                k.view((kv_bsz, heads) + k.size()[1:]),
            )
            w = w.reshape((-1,) + w.size()[-2:])
        else:
            w = torch.bmm(q, k.transpose(1, 2))
        mask = cache["emask"]
        if mask is not None:
            w = w.view(kv_bsz, -1, heads, 1, src_len).masked_fill(
                mask.unsqueeze(1).unsqueeze(2).unsqueeze(3).to(torch.bool), float("-inf")
            )
            w = w.view(n * heads, 1, src_len)
        p = F.softmax(w.float(), dim=-1).type_as(w)
        if n != kv_bsz:
            out = torch.einsum(
                "bxhts,bhsd->bxhtd",
                p.view((kv_bsz, -1, heads) + p.size()[1:]),
                v.view((kv_bsz, heads) + v.size()[1:]),
            )
            out = out.reshape((-1,) + out.size()[-2:])
        else:
            out = torch.bmm(p, v)
        out = out.transpose(0, 1).contiguous().view(1, n, heads * d)
        return a.out_proj(out)


class FastGenerator(BeamSearch):
    """fairseq's beam search (:class:`~lightcompress.runtime.search.BeamSearch`, the export's
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

    def __init__(self, model, tgt_dict, beam_size: int = 5, len_penalty: float = 1.0,
                 min_len: int = 1, max_len_a: float = 0.0, max_len_b: int = 200,
                 unk_penalty: float = 0.0, shortlist=None):  # fmt: skip
        step = TorchStep(model, tgt_dict, shortlist)
        super().__init__(step, beam_size=beam_size, len_penalty=len_penalty, min_len=min_len,
                         max_len_a=max_len_a, max_len_b=max_len_b, unk_penalty=unk_penalty)  # fmt: skip
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
        return [[{"tokens": torch.from_numpy(h["tokens"]), "score": torch.tensor(h["score"])}
                 for h in hyps] for hyps in out]  # fmt: skip
