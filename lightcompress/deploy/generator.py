"""A lean beam search over the model's own modules: fairseq's translations, less Python per step.

:class:`FastGenerator` is fairseq's ``SequenceGenerator`` beam search (the same candidate
selection, finalization, length penalty, ``min_len`` / ``max_len`` rules and batch shrinking)
without what translation does not use (attention tracking, constraints, prefixes, language-model
fusion, ensembles), over a decoder step that keeps only what a step needs:

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

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "FastGenerator",
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


class FastGenerator:
    """Beam search with fairseq's results (see the module notes).

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
        Score only each batch's candidates (:mod:`lightcompress.deploy.shortlist`: the output
        projection's rows gathered once per batch, log-softmax renormalized over them).
    """

    def __init__(self, model, tgt_dict, beam_size: int = 5, len_penalty: float = 1.0,
                 min_len: int = 1, max_len_a: float = 0.0, max_len_b: int = 200,
                 unk_penalty: float = 0.0, shortlist=None):  # fmt: skip
        self.model = model
        self.pad, self.unk, self.eos = tgt_dict.pad(), tgt_dict.unk(), tgt_dict.eos()
        self.vocab_size = len(tgt_dict)
        self.beam_size = min(beam_size, self.vocab_size - 1)
        self.len_penalty, self.unk_penalty = len_penalty, unk_penalty
        self.min_len, self.max_len_a, self.max_len_b = min_len, max_len_a, max_len_b
        self.max_positions = model.max_decoder_positions()
        self.shortlist = shortlist
        self.why_not_lean = lean_step_supported(model)
        self.lean = self.why_not_lean is None

    # ----------------------------------------------------------------------------------------
    # decoder step
    # ----------------------------------------------------------------------------------------

    def _vocabulary(self, src_tokens: Tensor) -> tuple[int, Tensor | None]:
        """The number of tokens scored for a batch and, with a shortlist, their ids."""
        if self.shortlist is None:
            return self.vocab_size, None
        # (at least 2 x beam tokens besides the special ids: the ONNX runtime's rule)
        ids = self.shortlist.candidates(src_tokens.cpu().numpy(), 2 * self.beam_size)
        cands = torch.from_numpy(ids)
        return cands.numel(), cands.to(src_tokens.device)

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

    # ----------------------------------------------------------------------------------------
    # beam search (fairseq's SequenceGenerator._generate, translation only)
    # ----------------------------------------------------------------------------------------

    # Mirrors: lightcompress.runtime.search.OnnxGenerator.generate@31d3741edd81, fairseq.sequence_generator.SequenceGenerator._generate@bd6adae3d7c8; self@4c74e40e92d5
    @_beamable  # (fairseq's beamable attention for the search only: see beamable_attention)
    @torch.inference_mode()
    def generate(self, src_tokens: Tensor, src_lengths: Tensor) -> list[list[dict]]:
        """Translate a batch: ``src_tokens`` ``[B x S]`` (left-padded, as fairseq batches
        them), ``src_lengths`` ``[B]``. Returns, per sentence, the ``beam`` finished
        hypotheses best first: ``{"tokens": [T] (ending with EOS), "score": float}``."""
        beam, eos, pad = self.beam_size, self.eos, self.pad
        bsz, src_len = src_tokens.size()
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_positions - 1)
        if self.min_len > max_len:
            raise ValueError(f"min_len {self.min_len} is larger than max_len {max_len}")
        net_input = {"src_tokens": src_tokens, "src_lengths": src_lengths}
        encoder_out = self.model.encoder.forward_torchscript(net_input)
        new_order = torch.arange(bsz).view(-1, 1).repeat(1, beam).view(-1).to(src_tokens.device)
        encoder_out = self.model.encoder.reorder_encoder_out(encoder_out, new_order)
        vocab, cands = self._vocabulary(src_tokens)  # (a shortlist's candidates, or all)
        state = self._start(encoder_out, beam, cands)

        scores = torch.zeros(bsz * beam, max_len + 1).float()
        tokens = torch.full((bsz * beam, max_len + 2), pad, dtype=torch.long)
        tokens[:, 0] = eos
        cands_to_ignore = torch.zeros(bsz, beam, dtype=torch.bool)
        finalized: list[list[dict]] = [[] for _ in range(bsz)]
        finished = [False] * bsz
        num_remaining = bsz
        cand_size = 2 * beam
        bbsz_offsets = (torch.arange(0, bsz) * beam).unsqueeze(1).type_as(tokens)
        cand_offsets = torch.arange(0, cand_size).type_as(tokens)
        reorder_state: Tensor | None = None
        batch_idxs: Tensor | None = None

        for step in range(max_len + 1):  # one extra step for EOS
            if reorder_state is not None:
                if batch_idxs is not None:
                    corr = batch_idxs - torch.arange(batch_idxs.numel()).type_as(batch_idxs)
                    reorder_state.view(-1, beam).add_(corr.unsqueeze(-1) * beam)
                self._reorder(state, reorder_state, beam, batch_idxs is not None)
            lprobs = self._decode(tokens[:, : step + 1], state)
            lprobs.masked_fill_(torch.isnan(lprobs), -math.inf)  # fairseq: lprobs[nan] = -inf
            lprobs[:, pad] = -math.inf
            lprobs[:, self.unk] -= self.unk_penalty
            if step >= max_len:
                lprobs[:, :eos] = -math.inf
                lprobs[:, eos + 1 :] = -math.inf
            elif step < self.min_len:
                lprobs[:, eos] = -math.inf
            scores = scores.type_as(lprobs)

            # fairseq's BeamSearch.step
            lp = lprobs.view(bsz, -1, vocab)
            if step == 0:
                lp = lp[:, ::beam, :].contiguous()
            else:
                lp = lp + scores.view(bsz, beam, -1)[:, :, step - 1].unsqueeze(-1)
            top = torch.topk(lp.view(bsz, -1), k=min(cand_size, lp.view(bsz, -1).size(1) - 1))
            cand_scores, cand_indices = top[0], top[1]
            cand_beams = torch.div(cand_indices, vocab, rounding_mode="trunc")
            cand_indices = cand_indices.fmod(vocab)
            if cands is not None:  # positions in the shortlist's candidates -> token ids
                cand_indices = cands[cand_indices]

            cand_bbsz_idx = cand_beams.add(bbsz_offsets)
            eos_mask = cand_indices.eq(eos) & cand_scores.ne(-math.inf)
            eos_mask[:, :beam][cands_to_ignore] = torch.tensor(0).to(eos_mask)
            eos_bbsz_idx = torch.masked_select(cand_bbsz_idx[:, :beam], mask=eos_mask[:, :beam])
            finalized_sents: list[int] = []
            if eos_bbsz_idx.numel() > 0:
                eos_scores = torch.masked_select(cand_scores[:, :beam], mask=eos_mask[:, :beam])
                finalized_sents = self._finalize(
                    step, eos_bbsz_idx, eos_scores, tokens, finalized, finished, beam, max_len
                )
                num_remaining -= len(finalized_sents)
            if num_remaining == 0:
                break
            if len(finalized_sents) > 0:
                new_bsz = bsz - len(finalized_sents)
                batch_mask = torch.ones(bsz, dtype=torch.bool)
                batch_mask[finalized_sents] = False
                batch_idxs = torch.arange(bsz).masked_select(batch_mask)
                eos_mask = eos_mask[batch_idxs]
                cand_beams = cand_beams[batch_idxs]
                bbsz_offsets.resize_(new_bsz, 1)
                cand_bbsz_idx = cand_beams.add(bbsz_offsets)
                cand_scores = cand_scores[batch_idxs]
                cand_indices = cand_indices[batch_idxs]
                cands_to_ignore = cands_to_ignore[batch_idxs]
                scores = scores.view(bsz, -1)[batch_idxs].view(new_bsz * beam, -1)
                tokens = tokens.view(bsz, -1)[batch_idxs].view(new_bsz * beam, -1)
                bsz = new_bsz
            else:
                batch_idxs = None

            eos_mask[:, :beam] = ~((~cands_to_ignore) & (~eos_mask[:, :beam]))
            active_mask = torch.add(
                eos_mask.type_as(cand_offsets) * cand_size, cand_offsets[: eos_mask.size(1)]
            )
            new_cands_to_ignore, active_hypos = torch.topk(
                active_mask, k=beam, dim=1, largest=False
            )
            cands_to_ignore = new_cands_to_ignore.ge(cand_size)[:, :beam]
            active_bbsz_idx = torch.gather(cand_bbsz_idx, dim=1, index=active_hypos).view(-1)
            tokens[:, : step + 1] = torch.index_select(
                tokens[:, : step + 1], dim=0, index=active_bbsz_idx
            )
            tokens.view(bsz, beam, -1)[:, :, step + 1] = torch.gather(
                cand_indices, dim=1, index=active_hypos
            )
            if step > 0:
                scores[:, :step] = torch.index_select(
                    scores[:, :step], dim=0, index=active_bbsz_idx
                )
            scores.view(bsz, beam, -1)[:, :, step] = torch.gather(
                cand_scores, dim=1, index=active_hypos
            )
            reorder_state = active_bbsz_idx

        for sent in range(len(finalized)):
            s = torch.tensor([float(h["score"]) for h in finalized[sent]])
            _, order = torch.sort(s, descending=True)
            finalized[sent] = [finalized[sent][i] for i in order]
        return finalized

    # Mirrors: lightcompress.runtime.search.OnnxGenerator._finalize@371ee7610fb6, fairseq.sequence_generator.SequenceGenerator.finalize_hypos@388f067e383e; self@2cf60f12a9f8
    def _finalize(self, step, bbsz_idx, eos_scores, tokens, finalized, finished, beam, max_len):
        """fairseq's ``finalize_hypos``: store the hypotheses that end in EOS; returns the
        batch positions of the sentences that are now finished."""
        tokens_clone = tokens.index_select(0, bbsz_idx)[:, 1 : step + 2]  # no leading EOS
        tokens_clone[:, step] = self.eos
        eos_scores = eos_scores / (step + 1) ** self.len_penalty
        cum_unfin: list[int] = []
        prev = 0
        for f in finished:
            if f:
                prev += 1
            else:
                cum_unfin.append(prev)
        cum_fin = torch.tensor(cum_unfin, dtype=torch.int).to(bbsz_idx)
        unfin_idx = torch.div(bbsz_idx, beam, rounding_mode="trunc")
        sent = unfin_idx + torch.index_select(cum_fin, 0, unfin_idx)
        seen = (sent << 32) + unfin_idx
        unique_seen: list[int] = torch.unique(seen).tolist()
        sent_list: list[int] = sent.tolist()
        for i in range(bbsz_idx.size(0)):
            if len(finalized[sent_list[i]]) < beam:
                finalized[sent_list[i]].append({"tokens": tokens_clone[i], "score": eos_scores[i]})
        newly_finished: list[int] = []
        for unique_s in unique_seen:
            unique_sent = unique_s >> 32
            unique_unfin_idx = unique_s - (unique_sent << 32)
            if not finished[unique_sent] and (
                len(finalized[unique_sent]) == beam or step == max_len
            ):
                finished[unique_sent] = True
                newly_finished.append(unique_unfin_idx)
        return newly_finished
