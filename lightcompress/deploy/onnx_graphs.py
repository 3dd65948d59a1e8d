"""The one beam-search step of the decoder, over the model's own modules (factorized maps
regrouped): the module that :mod:`lightcompress.deploy.onnx_export` traces into the decoder
graph and that the PyTorch backend (:class:`~lightcompress.deploy.generator.TorchStep`) runs
eagerly, with the same inputs; the candidates' output rows of a shortlist; and the check of what
the graphs compute (:func:`export_error`; the decoder layers' walk and checks:
:mod:`lightcompress.deploy.step`). The encoder's module: :mod:`lightcompress.deploy.onnx_encoder`.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightcompress.deploy.factor_attention import cross_plan, low_rank_lookup, self_plan
from lightcompress.deploy.factor_attention import map_factors as _factors
from lightcompress.deploy.onnx_dawid import (
    PaddedMaps,
    step_layer,
)
from lightcompress.deploy.onnx_dawid import is_fused as _fused
from lightcompress.deploy.step import layer_step, lean_step_supported
from lightcompress.deploy.tt_graph import fused_qkv, fused_qkv_step
from lightcompress.errors import LightcompressError

__all__ = ["ExportError", "export_error"]

K_PLACEHOLDER = 7  # the traced top-k size; replaced by the graph input "k"


class ExportError(LightcompressError, ValueError):
    """A model or an input the exporter cannot use (one line for the user)."""


# --------------------------------------------------------------------------------------------
# what the graphs compute
# --------------------------------------------------------------------------------------------


def sinusoid_frequencies(dim: int) -> Tensor:
    """The frequencies of fairseq's sinusoidal embedding (its float32 arithmetic)."""
    half = dim // 2
    return torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))


def sinusoid_rows(positions: Tensor, dim: int) -> Tensor:
    """fairseq's sinusoidal embedding of ``positions`` (the rows of
    ``SinusoidalPositionalEmbedding.get_embedding``, same float32 arithmetic), computed in the
    graph instead of stored: the table would add ``1026 x C`` floats per graph to the export."""
    freq = sinusoid_frequencies(dim)
    angles = positions.float().unsqueeze(-1) * freq
    emb = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    if dim % 2 == 1:
        emb = F.pad(emb, (0, 1))
    return emb


class _SinusoidalInGraph(nn.Module):
    """Stands in for the encoder's ``SinusoidalPositionalEmbedding`` while it is traced:
    fairseq's positions (``make_positions``), embeddings computed, padding rows zero."""

    def __init__(self, original):
        super().__init__()
        self.dim, self.padding_idx = original.embedding_dim, original.padding_idx

    def forward(self, input, incremental_state=None, timestep=None, positions=None):
        mask = input.ne(self.padding_idx).long()
        positions = torch.cumsum(mask, dim=1) * mask + self.padding_idx
        return sinusoid_rows(positions, self.dim) * mask.unsqueeze(-1).float()


@contextlib.contextmanager
def positions_in_graph(model):
    """The encoder's sinusoidal table replaced by :class:`_SinusoidalInGraph` (restored after)."""
    from fairseq.modules import SinusoidalPositionalEmbedding

    enc = model.encoder
    original = getattr(enc, "embed_positions", None)
    if isinstance(original, SinusoidalPositionalEmbedding):
        enc.embed_positions = _SinusoidalInGraph(original)
    try:
        yield
    finally:
        if original is not None:
            enc.embed_positions = original


def position_kind(dec) -> str | None:
    """``"sinusoidal"``, ``"learned"`` or None (no positions) for the decoder."""
    from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding

    ep = dec.embed_positions
    if ep is None:
        return None
    if isinstance(ep, SinusoidalPositionalEmbedding):
        return "sinusoidal"
    if isinstance(ep, LearnedPositionalEmbedding):
        return "learned"
    raise ExportError(f"positional embedding {type(ep).__name__} is not supported")


class Regrouped(nn.Module):
    """Maps that read the same input, regrouped at export time (the same products, in fewer,
    larger graph nodes; the stored weights are the same size):

    - several low-rank maps (the Q, K, V of an attention; the cross-attention K, V of a
      decoder layer): their first factors stacked, one product, then each second factor;
      several dense maps: their weights stacked, one product;
    - a scale on a map's output (fairseq's query scaling) folded into its last weight and bias.

    :meth:`prepare` (before tracing: the regrouped weights are parameters of this module, so
    a weight shared by several layers stays one initializer) and :meth:`apply`; maps of other
    kinds are applied as they are."""

    def __init__(self):
        super().__init__()
        self._plans: dict = {}
        self._weights: dict = {}

    def _weight(self, key, make) -> nn.Parameter:
        if key not in self._weights:
            weight = nn.Parameter(make().detach().clone(), requires_grad=False)
            self.register_parameter(f"regrouped_{len(self._weights)}", weight)
            self._weights[key] = weight
        return self._weights[key]

    def _scaled(self, t, scale: float):
        if t is None or scale == 1.0:
            return t
        return self._weight(("scaled", id(t), scale), lambda: t * scale)

    def prepare(self, maps, scales) -> None:
        parts = [_factors(m) for m in maps]
        if any(p is None for p in parts) or len({p[0] is None for p in parts}) > 1:
            return
        if len({p[1].shape[1] if p[0] is None else p[0].shape[1] for p in parts}) > 1:
            return  # (different input widths)
        if len({p[2] is None for p in parts}) > 1:
            return
        key = tuple(id(m) for m in maps) + tuple(scales)
        if parts[0][0] is not None:  # low-rank: one first product, then each second factor
            first = tuple(p[0] for p in parts)
            stacked = (
                first[0]
                if len(first) == 1
                else self._weight(("stack",) + tuple(map(id, first)), lambda: torch.cat(first))
            )
            seconds = [
                (self._scaled(u, sc), self._scaled(b, sc)) for (_v, u, b), sc in zip(parts, scales)
            ]
            self._plans[key] = ("lowrank", stacked, [p[0].shape[0] for p in parts], seconds)
        else:  # dense: one product of the stacked (scaled) weights
            ws = [self._scaled(w, sc) for (_f, w, _b), sc in zip(parts, scales)]
            bs = [self._scaled(b, sc) for (_f, _w, b), sc in zip(parts, scales)]
            w = (
                ws[0]
                if len(ws) == 1
                else self._weight(("stack",) + tuple(map(id, ws)), lambda: torch.cat(ws))
            )
            b = (
                bs[0]
                if len(bs) == 1 or bs[0] is None
                else self._weight(("stack",) + tuple(map(id, bs)), lambda: torch.cat(bs))
            )
            self._plans[key] = ("dense", w, b, [p[1].shape[0] for p in parts])

    def apply(self, x: Tensor, maps, scales) -> list:
        plan = self._plans.get(tuple(id(m) for m in maps) + tuple(scales))
        if plan is None:
            return [m(x) if sc == 1.0 else m(x) * sc for m, sc in zip(maps, scales)]
        if plan[0] == "lowrank":
            _kind, stacked, ranks, seconds = plan
            h = F.linear(x, stacked)
            hs = h.split(ranks, dim=-1) if len(ranks) > 1 else [h]
            return [F.linear(hi, u, b) for hi, (u, b) in zip(hs, seconds)]
        _kind, w, b, sizes = plan
        y = F.linear(x, w, b)
        return list(y.split(sizes, dim=-1)) if len(sizes) > 1 else [y]


def qkv_maps(attn):
    """The Q, K, V maps of a fairseq attention and their output scales (the query's scaling),
    or None for Hypoformer's fused map (:func:`~lightcompress.deploy.tt_graph.fused_qkv_step`)."""
    if fused_qkv(attn) is not None:
        return None
    return [attn.q_proj, attn.k_proj, attn.v_proj], [attn.scaling, 1.0, 1.0]


def project_qkv(regrouped: Regrouped, attn, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(q * scaling, k, v)`` of ``x``."""
    spec = qkv_maps(attn)
    if spec is None:
        return fused_qkv_step(fused_qkv(attn), x, attn.scaling)
    return tuple(regrouped.apply(x, *spec))


class DecoderStep(nn.Module):
    """One incremental decoder step for hypotheses ``N``, as fairseq's
    ``TransformerDecoderLayerBase`` computes it (pre- or post-LN, Admin residuals), with
    constant-shape reshapes (few graph nodes). ``shortlist``: the input after ``bias`` is the
    sorted candidate ids ``[V']``; the output layer scores only them (its rows gathered in the
    graph, :func:`~lightcompress.deploy.shortlist.output_rows`), the bias is taken at them and
    the ids returned are token ids. Traced by the export; run eagerly by
    :class:`~lightcompress.deploy.generator.TorchStep` with the inputs the ONNX runtime feeds
    the traced graph (``top_k``: the graph's input ``k``, a constant while traced)."""

    def __init__(self, model, shortlist: bool = False, rows: int = 0, score=None):
        super().__init__()
        self.model = model
        self.shortlist = shortlist
        # rows > 0: the candidates' output rows are ``rows`` inputs after ``cands`` (gathered
        # once per batch by :class:`OutputRows`), scored by ``score`` (the second function of
        # :func:`~lightcompress.deploy.shortlist.split_output_rows`), and ``bias`` is already
        # the candidates' ``[V']``
        self.rows = rows
        self._score = score
        dec = model.decoder
        # an HTT output table tied to the input one, scored from rows.onnx's rows of the
        # candidates (the table's rows from its factors): the step takes its input rows from
        # them too, instead of computing each id's TT row at every step (the previous tokens
        # are candidates, or EOS, which every shortlist holds); rows.onnx's last output is
        # then each id's place among the candidates (``[V]``, :class:`OutputRows`)
        self._tied_rows = bool(rows) and tied_htt(dec)
        self.num_layers = len(dec.layers)
        self.position_kind = position_kind(dec)
        self.regrouped = Regrouped()
        self._kept_rows = None  # (run eagerly: the candidates' output rows of the batch)
        # a low-rank input table: looked up lean (factor_attention.low_rank_lookup)
        self._lookup = None if self._tied_rows else low_rank_lookup(self.regrouped, dec)
        # attentions of low-rank maps: in their factors' space (factor_attention)
        self._self_plans, self._cross_plans = {}, {}
        self._padded: dict = {}
        for layer in dec.layers:
            if _fused(layer):  # (DA-WID: onnx_dawid.step_layer, its maps padded per head)
                for block in layer.blocks[:2]:
                    if block.sub is not None:
                        self._padded[id(block.sub)] = PaddedMaps(self.regrouped, block.sub)
                continue
            plan = self_plan(self.regrouped, layer.self_attn)
            if plan is not None:
                self._self_plans[id(layer)] = plan
            elif qkv_maps(layer.self_attn) is not None:
                self.regrouped.prepare(*qkv_maps(layer.self_attn))
            plan = cross_plan(self.regrouped, layer)
            if plan is not None:
                self._cross_plans[id(layer)] = plan
            elif layer.encoder_attn is not None:
                inner = inner_attention(layer.encoder_attn)
                self.regrouped.prepare([inner.q_proj], [inner.scaling])

    def forward(
        self,
        prev: Tensor,
        pos: Tensor,
        order: Tensor,
        bias: Tensor,
        *caches: Tensor,
        top_k: int = K_PLACEHOLDER,
    ):
        dec = self.model.decoder
        cands = rows = None
        if self.shortlist:
            cands, caches = caches[0], caches[1:]
            rows, caches = caches[: self.rows], caches[self.rows :]
        if self._tied_rows:  # (the candidates' rows at prev's places among them)
            rows, places = rows[:-1], rows[-1]
            x = dec.embed_scale * rows[0].index_select(0, places.index_select(0, prev))  # [N x C]
        elif self._lookup is not None:
            x = self._lookup(prev)  # [N x C]
        else:
            x = dec.embed_scale * dec.embed_tokens(prev)  # [N x C]
        if dec.quant_noise is not None:
            x = dec.quant_noise(x)
        if dec.project_in_dim is not None:
            x = dec.project_in_dim(x)
        if self.position_kind == "sinusoidal":  # the row, computed by the runtime
            x = x + pos  # [1 x C]
        elif self.position_kind == "learned":
            x = x + dec.embed_positions.weight.index_select(0, pos)
        if dec.layernorm_embedding is not None:
            x = dec.layernorm_embedding(x)
        new = []
        enc_bias, rest = caches[0], list(caches[1:])
        self._by_sentence = {}  # (the [B x beam x H x d] shapes, computed once per graph)
        for layer in dec.layers:
            past_k, past_v = rest.pop(0), rest.pop(0)
            cross = ()
            if _has_cross(layer):  # (k, v; factor space: ck, cv, cross_b)
                cross = tuple(
                    rest.pop(0) for _ in range(3 if id(layer) in self._cross_plans else 2)
                )
            x, k, v = self._layer(layer, x, past_k, past_v, cross, enc_bias, order)
            new += [k, v]
        if dec.layer_norm is not None:
            x = dec.layer_norm(x)
        if dec.project_out_dim is not None:
            x = dec.project_out_dim(x)
        if cands is None:
            logits = dec.output_layer(x)
        elif self.rows:  # (the rows and the bias of the candidates: gathered per batch)
            logits = self._score(x, rows)  # [N x V']
        else:
            logits = self._output_rows(cands)(x)  # [N x V']
            bias = bias.index_select(0, cands)
        lp = F.log_softmax(logits.float(), dim=-1)  # [N x V]
        # fairseq's ``lprobs[lprobs != lprobs] = -inf`` on the k best only: a NaN or +inf
        # logit makes every entry of the row NaN or -inf after the log-softmax, so the row
        # ends up -inf, as in fairseq (masking all N x V entries: two more full-width passes)
        top = torch.topk(lp + bias, top_k, dim=-1)
        lp = torch.where(torch.isnan(top[0]), torch.tensor(float("-inf")), top[0])
        ids = top[1] if cands is None else cands[top[1]]  # (candidates -> token ids)
        return (lp, ids, *new)

    def _output_rows(self, cands: Tensor):
        """The output layer over the candidates (:func:`~lightcompress.deploy.shortlist.output_rows`):
        gathered in the traced graph at every step; run eagerly, once per batch (``cands``)."""
        from lightcompress.deploy.shortlist import output_rows

        proj = self.model.decoder.output_projection
        if torch.jit.is_tracing():
            return output_rows(proj, cands)
        if self._kept_rows is None or self._kept_rows[0] is not cands:
            self._kept_rows = (cands, output_rows(proj, cands))
        return self._kept_rows[1]

    def _sentence_rows(self, q: Tensor, enc_bias: Tensor, h: int, d: int) -> Tensor:
        """``[N x H*d]`` hypotheses (``beam`` per sentence, in order) -> ``[B x beam x H x d]``,
        ``B`` read from the per-sentence ``enc_bias`` (the beam size is the runtime's)."""
        from torch.onnx.operators import reshape_from_tensor_shape, shape_as_tensor

        if (h, d) not in self._by_sentence:
            first = shape_as_tensor(enc_bias)[:1]
            self._by_sentence[(h, d)] = torch.cat([first, torch.tensor([-1, h, d])])
        return reshape_from_tensor_shape(q, self._by_sentence[(h, d)])

    def _layer(self, layer, x, past_k, past_v, cross, enc_bias, order):
        """One layer of the step (:func:`layer_step` around the attentions below); returns
        the output and the grown self-attention caches."""
        if _fused(layer):
            return step_layer(self, layer, x, past_k, past_v, cross, enc_bias, order)
        grown = []
        self_factors = self._self_plans.get(id(layer))
        cross_factors = self._cross_plans.get(id(layer))

        def self_attention(x):
            if self_factors is not None:
                y, k, v = self_factors.step(x, past_k, past_v, order)
                grown.extend([k, v])
                return y
            a = layer.self_attn
            h, d = a.num_heads, a.head_dim
            q, k, v = project_qkv(self.regrouped, a, x)
            q = q.reshape(-1, h, 1, d)
            k = torch.cat([past_k.index_select(0, order), k.reshape(-1, h, 1, d)], dim=2)
            v = torch.cat([past_v.index_select(0, order), v.reshape(-1, h, 1, d)], dim=2)
            grown.extend([k, v])
            p = F.softmax(torch.matmul(q, k.transpose(2, 3)).float(), dim=-1)
            return a.out_proj(torch.matmul(p, v).reshape(-1, h * d))

        def cross_attention(x):
            if cross_factors is not None:
                rows = lambda y, h, d: self._sentence_rows(y, enc_bias, h, d)
                return cross_factors.step(x, *cross, rows)
            cross_k, cross_v = cross
            a, inner = layer.encoder_attn, inner_attention(layer.encoder_attn)
            if inner is not a:  # Subformer: attention at the encoder's width
                x = a.project_query(x)
            h, d = inner.num_heads, inner.head_dim
            (q,) = self.regrouped.apply(x, [inner.q_proj], [inner.scaling])
            # the encoder's keys and values are kept once per sentence ([B x H x S x d]): the
            # queries of a sentence's hypotheses, [B x H x beam x d], attend to them in one
            # product per head (beam rows), instead of a one-row product per hypothesis over
            # keys and values repeated beam times (and copied whenever sentences finish)
            q = self._sentence_rows(q, enc_bias, h, d).transpose(1, 2)
            w = torch.matmul(q, cross_k.transpose(2, 3)) + enc_bias  # [B x H x beam x S]
            p = F.softmax(w.float(), dim=-1)
            y = torch.matmul(p, cross_v).transpose(1, 2)  # [B x beam x H x d]
            x = inner.out_proj(y.reshape(-1, h * d))
            return a.project_back(x) if inner is not a else x

        project_in = getattr(layer, "project_in", None)  # Subformer's sandwich projections
        if project_in is not None:
            x = project_in(x)
        x = layer_step(layer, x, self_attention, cross_attention)
        project_out = getattr(layer, "project_out", None)
        if project_out is not None:
            x = project_out(x)
        return x, grown[0], grown[1]


def _has_cross(layer) -> bool:
    """The decoder layer attends to the encoder (not Subformer's SAFE block, nor a DA-WID
    layer whose cross-attention heads were all pruned)."""
    if _fused(layer):
        return layer.blocks[1].sub is not None
    return layer.encoder_attn is not None


def layer_layout(layer) -> dict:
    """What the export's ``config.json`` records of a decoder layer: heads, head width, whether
    it attends to the encoder, and where they differ from ``heads x head_dim`` the
    self-attention caches' ``[heads, width]`` per hypothesis (``k_cache``, ``v_cache``:
    factor-space attention; DA-WID's padded per-head widths)."""
    from lightcompress.deploy.factor_attention import layout

    if _fused(layer):  # (a self-attention without heads: caches [1, 1] of zeros)
        a = layer.blocks[0].sub
        h, qk, v = (1, 1, 1) if a is None else (int(a.num_heads), max(int(a.m_qk), 1), int(a.m_v))
        return {
            "heads": h,
            "head_dim": v,
            "cross": _has_cross(layer),
            "k_cache": [h, qk],
            "v_cache": [h, v],
        }
    return {
        "heads": int(layer.self_attn.num_heads),
        "head_dim": int(layer.self_attn.head_dim),
        "cross": layer.encoder_attn is not None,
        **layout(layer),
    }


def tied_htt(dec) -> bool:
    """The decoder's output layer is its HTT input table, tied (``TiedOutputProjection``):
    ``split_output_rows``' first row tensor is then the table's rows of the candidates."""
    from lightcompress.integration import TiedOutputProjection
    from lightcompress.modules.embeddings import HTTEmbedding

    proj = dec.output_projection
    return (
        isinstance(proj, TiedOutputProjection)
        and proj.embedding is dec.embed_tokens
        and isinstance(dec.embed_tokens, HTTEmbedding)
    )


class OutputRows(nn.Module):
    """``cands [V']`` -> the output layer's rows of the candidates
    (:func:`~lightcompress.deploy.shortlist.split_output_rows`): the export's ``rows.onnx``,
    run once per batch, so that the decoder step does not gather them at every step."""

    def __init__(self, model, gather, places: int = 0):
        super().__init__()
        self.model = model  # (its parameters: the graph's initializers)
        self._gather = gather  # (the first function of split_output_rows)
        self.places = places  # > 0: also each of the ``places`` ids' place among the candidates

    def forward(self, cands: Tensor):
        rows = tuple(self._gather(cands))
        if not self.places:
            return rows
        at = torch.zeros(self.places, dtype=torch.long)  # (ids that are not candidates: 0)
        return (*rows, at.scatter(0, cands, torch.arange(cands.shape[0])))  # [V]


def inner_attention(attn):
    """fairseq's attention inside Subformer's :class:`QueryProjectedAttention` (or ``attn``)."""
    from lightcompress.modules.safe import QueryProjectedAttention

    return attn.attention if isinstance(attn, QueryProjectedAttention) else attn


def max_abs_error(got, ref) -> float:
    """Largest absolute difference (``inf`` where shapes or -inf entries disagree, and for any
    NaN: a model whose outputs hold NaN is never 'equal' to its export)."""
    import numpy as np

    if got.shape != ref.shape or not np.array_equal(np.isfinite(got), np.isfinite(ref)):
        return float("inf")
    if np.isnan(got).any() or np.isnan(ref).any():
        return float("inf")
    fin = np.isfinite(ref)
    return float(np.abs(got[fin].astype(np.float64) - ref[fin]).max()) if fin.any() else 0.0


def export_error(model) -> str | None:
    """``None`` when the model exports (the encoder and decoder step of
    :mod:`lightcompress.deploy.onnx_graphs` compute it), else why not (one line)."""
    from lightcompress.deploy.onnx_dawid import fused_error, is_fused
    from lightcompress.models.subformer import SubformerDecoderLayer

    layers = getattr(getattr(model, "decoder", None), "layers", None)
    if layers and any(is_fused(layer) for layer in layers):  # DA-WID's fused layers
        why = fused_error(model)
        if why is not None:
            return why
    else:
        why = lean_step_supported(model, extra_forwards=(SubformerDecoderLayer.forward,))
        if why is not None:
            return why
        for i, layer in enumerate(model.decoder.layers):
            if layer.self_attn.head_dim * layer.self_attn.num_heads != layer.self_attn.embed_dim:
                return f"decoder.layers.{i}: heads do not split the width"
    enc = getattr(model, "encoder", None)
    if enc is None or not hasattr(enc, "padding_idx"):
        return "its encoder is not fairseq's Transformer encoder"
    try:
        position_kind(model.decoder)
    except ExportError as exc:
        return str(exc)
    return None
