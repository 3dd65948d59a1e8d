"""Export a translation model to ONNX Runtime: an encoder graph and a one-step decoder graph.

``lightcompress-export-onnx --path ckpt.pt --data data-bin -o model-onnx [--int8 large|all]``
writes a self-contained directory that :mod:`lightcompress.deploy.onnx_runtime` translates with
(numpy, onnxruntime and, for raw text, sentencepiece; no torch, no fairseq):

- ``encoder.onnx``: ``src_tokens [B x S]`` (left-padded) -> the additive
  source mask ``[B x 1 x 1 x S]`` (0 or -inf) and, per decoder layer, the cross-attention keys
  and values ``[B x H x S x d]`` (computed once per sentence, as fairseq does);
- ``decoder.onnx``: one beam-search step. Inputs: the last tokens ``[N]``, their position
  (``pos``; for sinusoidal positions ``pos_emb``, the embedding row ``[1 x C]``), the
  order of the previous step's hypotheses ``[N]`` (the self-attention caches are reordered
  inside the graph), a per-token score bias ``[V]`` (fairseq's ``-inf`` for padding, the unknown
  penalty, the EOS rules of ``min_len`` / ``max_len``), ``k``, and the caches. Outputs: the
  ``k`` best next tokens of every hypothesis (log-probability + bias, and their ids) and the
  grown self-attention caches;
- ``weights.bin``: every weight once (ONNX external data that both graphs point into): layer
  sharing, tied tables and factorized maps stay as they are, the file is the compressed size;
- ``config.json`` (special ids, layer shapes, maximum positions), ``dict.src.txt`` /
  ``dict.tgt.txt`` (the model's fairseq dictionaries), ``spm.model`` when given, and
  ``translate.py`` (a copy of the runtime: ``python translate.py DIR < in > out``).

The graphs are traced from the model's own modules (``q_proj(x)``, ``fc1(x)``, the output
projection...), so every compressed family whose decoder the lean step of
:class:`~lightcompress.deploy.generator.FastGenerator` computes exports: fairseq's Transformer,
LightFormer (low-rank maps and table, tied factorized output projection, shared layers, Admin),
Hypoformer (fused HTT Q/K/V), Smartformer (CP Q/K/V), Subformer (SAFE block without
cross-attention, sandwich projections, query-projected cross-attention, output reduction). A
decoder with other layers is refused with one line. The export is checked before anything
is written: the float32 graphs must reproduce the model's encoder outputs and log-probabilities
on a probe batch (to 1e-3); an int8 export records how far int8 moved them
(``config.json``: ``int8_error``, relative) and the command prints it.

``--int8``: ONNX Runtime's dynamic int8 quantization (int8 weights, activations quantized on
the fly: ``MatMulInteger``) of the large maps (``large``: at least 2^17 weights, the
:func:`lightcompress.deploy.quantize.quantize_model_int8` rule) or of every map (``all``),
in the decoder and the encoder.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightcompress import cli
from lightcompress.errors import LightcompressError

__all__ = ["ExportError", "cli_main", "export_onnx", "main"]

FORMAT = "lightcompress-onnx"
MANIFEST = "MANIFEST.sha256"  # (the same name as onnx_runtime.MANIFEST)
VERSION = 1
WEIGHTS = "weights.bin"
_K_PLACEHOLDER = 7  # the traced top-k size; replaced by the graph input "k"


class ExportError(LightcompressError, ValueError):
    """A model or an input the exporter cannot use (one line for the user)."""


# --------------------------------------------------------------------------------------------
# what the graphs compute
# --------------------------------------------------------------------------------------------


def _frequencies(dim: int) -> Tensor:
    """The frequencies of fairseq's sinusoidal embedding (its float32 arithmetic)."""
    half = dim // 2
    return torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))


def _sinusoid(positions: Tensor, dim: int) -> Tensor:
    """fairseq's sinusoidal embedding of ``positions`` (the rows of
    ``SinusoidalPositionalEmbedding.get_embedding``, same float32 arithmetic), computed in the
    graph instead of stored: the table would add ``1026 x C`` floats per graph to the export."""
    freq = _frequencies(dim)
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
        return _sinusoid(positions, self.dim) * mask.unsqueeze(-1).float()


@contextlib.contextmanager
def _positions_in_graph(model):
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


def _position_kind(dec) -> str | None:
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


def _qkv(attn, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    qkv = getattr(attn, "qkv", None)
    if qkv is not None:  # Hypoformer's fused Q/K/V map: one call
        return qkv(x)
    return attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)


def _factors(m):
    """``(first, second, bias)`` of a map whose weights the export may regroup: a low-rank
    map (``x v^T u^T + b``: ``(v, u, b)``), a dense one (``(None, W, b)``), else None."""
    from lightcompress.modules.lowrank import LowRankLinear

    if type(m) is LowRankLinear:
        return m.v, m.u, m.bias
    if type(m) is nn.Linear:
        return None, m.weight, m.bias
    return None


class _Regrouped(nn.Module):
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
                first[0] if len(first) == 1
                else self._weight(("stack",) + tuple(map(id, first)), lambda: torch.cat(first))
            )  # fmt: skip
            seconds = [(self._scaled(u, sc), self._scaled(b, sc))
                       for (_v, u, b), sc in zip(parts, scales)]  # fmt: skip
            self._plans[key] = ("lowrank", stacked, [p[0].shape[0] for p in parts], seconds)
        else:  # dense: one product of the stacked (scaled) weights
            ws = [self._scaled(w, sc) for (_f, w, _b), sc in zip(parts, scales)]
            bs = [self._scaled(b, sc) for (_f, _w, b), sc in zip(parts, scales)]
            w = ws[0] if len(ws) == 1 else self._weight(
                ("stack",) + tuple(map(id, ws)), lambda: torch.cat(ws))  # fmt: skip
            b = bs[0] if len(bs) == 1 or bs[0] is None else self._weight(
                ("stack",) + tuple(map(id, bs)), lambda: torch.cat(bs))  # fmt: skip
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


def _qkv_maps(attn):
    """The Q, K, V maps of a fairseq attention and their output scales (the query's scaling),
    or None for Hypoformer's fused map (``qkv``, one call already)."""
    if getattr(attn, "qkv", None) is not None:
        return None
    return [attn.q_proj, attn.k_proj, attn.v_proj], [attn.scaling, 1.0, 1.0]


def _project_qkv(regrouped: _Regrouped, attn, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(q * scaling, k, v)`` of ``x``."""
    spec = _qkv_maps(attn)
    if spec is None:
        q, k, v = _qkv(attn, x)
        return q * attn.scaling, k, v
    return tuple(regrouped.apply(x, *spec))


class _DecoderStep(nn.Module):
    """One incremental decoder step for hypotheses ``N``, as fairseq's
    ``TransformerDecoderLayerBase`` computes it (pre- or post-LN, Admin residuals), with
    constant-shape reshapes (few graph nodes)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        dec = model.decoder
        self.num_layers = len(dec.layers)
        self.position_kind = _position_kind(dec)
        self.regrouped = _Regrouped()
        for layer in dec.layers:
            spec = _qkv_maps(layer.self_attn)
            if spec is not None:
                self.regrouped.prepare(*spec)
            if layer.encoder_attn is not None:
                inner = _inner_attention(layer.encoder_attn)
                self.regrouped.prepare([inner.q_proj], [inner.scaling])

    def forward(self, prev: Tensor, pos: Tensor, order: Tensor, bias: Tensor, *caches: Tensor):
        dec = self.model.decoder
        x = dec.embed_scale * dec.embed_tokens(prev)  # [N x C]
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
        for layer in dec.layers:
            past_k, past_v = rest.pop(0), rest.pop(0)
            cross_k = cross_v = None
            if layer.encoder_attn is not None:
                cross_k, cross_v = rest.pop(0), rest.pop(0)
            x, k, v = self._layer(layer, x, past_k, past_v, cross_k, cross_v, enc_bias, order)
            new += [k, v]
        if dec.layer_norm is not None:
            x = dec.layer_norm(x)
        if dec.project_out_dim is not None:
            x = dec.project_out_dim(x)
        lp = F.log_softmax(dec.output_layer(x).float(), dim=-1)  # [N x V]
        # fairseq's ``lprobs[lprobs != lprobs] = -inf`` on the k best only: a NaN or +inf
        # logit makes every entry of the row NaN or -inf after the log-softmax, so the row
        # ends up -inf, as in fairseq (masking all N x V entries: two more full-width passes)
        top = torch.topk(lp + bias, _K_PLACEHOLDER, dim=-1)
        lp = torch.where(torch.isnan(top[0]), torch.tensor(float("-inf")), top[0])
        return (lp, top[1], *new)

    def _layer(self, layer, x, past_k, past_v, cross_k, cross_v, enc_bias, order):
        """One layer of the step (:func:`layer_step` around the attentions below); returns
        the output and the grown self-attention caches."""
        from lightcompress.deploy.generator import layer_step

        grown = []

        def self_attention(x):
            a = layer.self_attn
            h, d = a.num_heads, a.head_dim
            q, k, v = _project_qkv(self.regrouped, a, x)
            q = q.reshape(-1, h, 1, d)
            k = torch.cat([past_k.index_select(0, order), k.reshape(-1, h, 1, d)], dim=2)
            v = torch.cat([past_v.index_select(0, order), v.reshape(-1, h, 1, d)], dim=2)
            grown.extend([k, v])
            p = F.softmax(torch.matmul(q, k.transpose(2, 3)).float(), dim=-1)
            return a.out_proj(torch.matmul(p, v).reshape(-1, h * d))

        def cross_attention(x):
            a, inner = layer.encoder_attn, _inner_attention(layer.encoder_attn)
            if inner is not a:  # Subformer: attention at the encoder's width
                x = a.project_query(x)
            h, d = inner.num_heads, inner.head_dim
            (q,) = self.regrouped.apply(x, [inner.q_proj], [inner.scaling])
            q = q.reshape(-1, h, 1, d)
            w = torch.matmul(q, cross_k.transpose(2, 3)) + enc_bias  # [N x H x 1 x S]
            p = F.softmax(w.float(), dim=-1)
            x = inner.out_proj(torch.matmul(p, cross_v).reshape(-1, h * d))
            return a.project_back(x) if inner is not a else x

        project_in = getattr(layer, "project_in", None)  # Subformer's sandwich projections
        if project_in is not None:
            x = project_in(x)
        x = layer_step(layer, x, self_attention, cross_attention)
        project_out = getattr(layer, "project_out", None)
        if project_out is not None:
            x = project_out(x)
        return x, grown[0], grown[1]


class _Encoder(nn.Module):
    """The model's encoder, then every decoder layer's cross-attention keys and values.

    ``lean``: the encoder layers as fairseq's ``TransformerEncoderLayerBase`` computes them, on
    ``[B*S x C]`` rows with the head split's shapes computed once (fairseq's attention, traced,
    computes every reshape's target shape from its input: two thirds of the graph's nodes);
    for encoders :func:`lean_encoder_error` accepts. Otherwise the model's own encoder."""

    def __init__(self, model, lean: bool = False):
        super().__init__()
        self.model = model
        self.lean = lean
        self.regrouped = _Regrouped()
        if lean:
            for layer in model.encoder.layers:
                self.regrouped.prepare(*_qkv_maps(layer.self_attn) or ([], []))
        for layer in model.decoder.layers:
            if layer.encoder_attn is not None:
                a = _inner_attention(layer.encoder_attn)
                self.regrouped.prepare([a.k_proj, a.v_proj], [1.0, 1.0])

    def forward(self, src_tokens: Tensor):
        from torch.onnx.operators import reshape_from_tensor_shape, shape_as_tensor

        enc = self.model.encoder
        mask = src_tokens.eq(enc.padding_idx)  # [B x S]
        enc_bias = torch.where(mask, torch.tensor(float("-inf")), torch.tensor(0.0))
        enc_bias = enc_bias.unsqueeze(1).unsqueeze(2)  # [B x 1 x 1 x S] (0 or -inf)
        shape_bs = shape_as_tensor(src_tokens)  # [B, S]
        split_shapes: dict = {}

        def heads(y: Tensor, h: int, d: int) -> Tensor:
            # [B*S x C] or [B x S x C] -> [B x S x H x d]
            if (h, d) not in split_shapes:
                split_shapes[(h, d)] = torch.cat([shape_bs, torch.tensor([h, d])])
            return reshape_from_tensor_shape(y, split_shapes[(h, d)])

        if self.lean:
            x, _ = enc.forward_embedding(src_tokens)  # [B x S x C]
            x = x * (1 - mask.unsqueeze(-1).type_as(x))  # (fairseq: padded rows zeroed)
            x = x.reshape(-1, int(x.shape[-1]))  # [B*S x C] (a constant width)
            for layer in enc.layers:
                x = self._layer(layer, x, enc_bias, heads)
            if enc.layer_norm is not None:
                x = enc.layer_norm(x)
        else:
            out = enc(src_tokens, src_lengths=src_tokens.ne(enc.padding_idx).sum(1))
            x = out["encoder_out"][0].transpose(0, 1)  # [B x S x C]
        outs = [enc_bias]
        for layer in self.model.decoder.layers:
            if layer.encoder_attn is None:  # (Subformer's SAFE block)
                continue
            a = _inner_attention(layer.encoder_attn)
            for y in self.regrouped.apply(x, [a.k_proj, a.v_proj], [1.0, 1.0]):
                y = heads(y, a.num_heads, a.head_dim)  # [B x S x H x d]
                outs.append(y.transpose(1, 2))  # [B x H x S x d]
        return tuple(outs)

    def _layer(self, layer, x: Tensor, enc_bias: Tensor, heads) -> Tensor:
        """fairseq's ``TransformerEncoderLayerBase.forward`` (:func:`layer_step`: pre- or
        post-LN, Admin residuals) on ``[B*S x C]`` rows."""
        from lightcompress.deploy.generator import layer_step

        def self_attention(x):
            a = layer.self_attn
            h, d = a.num_heads, a.head_dim
            q, k, v = _project_qkv(self.regrouped, a, x)
            q = heads(q, h, d).transpose(1, 2)  # [B x H x S x d]
            k = heads(k, h, d).permute(0, 2, 3, 1)  # [B x H x d x S]
            v = heads(v, h, d).transpose(1, 2)
            p = F.softmax((torch.matmul(q, k) + enc_bias).float(), dim=-1)
            return a.out_proj(torch.matmul(p, v).transpose(1, 2).reshape(-1, h * d))

        return layer_step(layer, x, self_attention)


def lean_encoder_error(model) -> str | None:
    """``None`` when :class:`_Encoder`'s lean layers compute ``model``'s encoder (fairseq's
    Transformer encoder and encoder layers, the plugin's compressed ones), else why not."""
    from fairseq.models.transformer import TransformerEncoderBase
    from fairseq.modules import MultiheadAttention
    from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

    from lightcompress.models.compressed import CompressedEncoderLayer

    enc = model.encoder
    if not isinstance(enc, TransformerEncoderBase):
        return f"{type(enc).__name__} is not fairseq's Transformer encoder"
    for name in ("forward", "forward_scriptable"):
        if getattr(type(enc), name) is not getattr(TransformerEncoderBase, name):
            return f"{type(enc).__name__} has its own {name}"
    for i, layer in enumerate(enc.layers):
        if type(layer).forward not in (TransformerEncoderLayerBase.forward,
                                       CompressedEncoderLayer.forward):  # fmt: skip
            return f"encoder.layers.{i}: {type(layer).__name__} has its own forward"
        a = layer.self_attn
        if type(a).forward is not MultiheadAttention.forward:
            return f"encoder.layers.{i}: {type(a).__name__} has its own forward"
        if a.bias_k is not None or a.add_zero_attn or a.head_dim * a.num_heads != a.embed_dim:
            return f"encoder.layers.{i}: attention bias_k / zero attention / uneven heads"
        if getattr(a, "use_xformers", False):
            return f"encoder.layers.{i}: xformers attention"
    return None


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------


def _inner_attention(attn):
    """fairseq's attention inside Subformer's :class:`QueryProjectedAttention` (or ``attn``)."""
    from lightcompress.modules.safe import QueryProjectedAttention

    return attn.attention if isinstance(attn, QueryProjectedAttention) else attn


def export_error(model) -> str | None:
    """``None`` when the model exports, else why not (one line)."""
    from lightcompress.deploy.generator import lean_step_supported
    from lightcompress.models.subformer import SubformerDecoderLayer

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
        _position_kind(model.decoder)
    except ExportError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------


def _names(layers: list):
    """The decoder graph's cache inputs (after ``enc_bias``) and outputs, in the step's order;
    a layer without cross-attention (Subformer's SAFE block) has no ``cross_*``."""
    cache_in = ["enc_bias"]
    cache_out = []
    for i, spec in enumerate(layers):
        cache_in += [f"past_k{i}", f"past_v{i}"]
        if spec["cross"]:
            cache_in += [f"cross_k{i}", f"cross_v{i}"]
        cache_out += [f"new_k{i}", f"new_v{i}"]
    return cache_in, cache_out


def _probe(model, vocab: int, pad: int, eos: int):
    """A padded probe batch of two sentences ``[2 x 7]`` (the encoder is traced with its mask
    path)."""
    g = torch.Generator().manual_seed(0)
    low = min(4, vocab - 1)
    src = torch.randint(low, vocab, (2, 7), generator=g)
    src[:, -1] = eos
    src[1, :2] = pad
    return src


def _trace(module, args, path, input_names, output_names, dynamic_axes) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python values (checked below)
        torch.onnx.export(
            module, args, path, input_names=input_names, output_names=output_names,
            dynamic_axes=dynamic_axes, opset_version=17, dynamo=False,
            do_constant_folding=False,
        )  # fmt: skip


def _k_as_input(model_proto) -> None:
    """The traced ``TopK`` has a constant ``k``: make it the graph input ``k`` ([1] int64)."""
    import onnx
    from onnx import TensorProto, helper

    g = model_proto.graph
    topk = [n for n in g.node if n.op_type == "TopK"]
    if len(topk) != 1:
        raise ExportError(f"the decoder graph has {len(topk)} TopK nodes, expected 1")
    topk[0].input[1] = "k"
    g.input.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
    for out in g.output:  # [N x k]: k is now an input
        if out.name in ("top_lp", "top_ids"):
            dim = out.type.tensor_type.shape.dim[1]
            dim.ClearField("dim_value")
            dim.dim_param = "K"
    onnx.checker.check_model(model_proto)


def _simplify(model_proto) -> None:
    """Remove the reshapes that do not change a shape, and what only computed their target
    shapes (the modules' ``x.view(*lead, out)`` on inputs that already have that shape: one
    third of a factorized decoder step's nodes), by ONNX Runtime's symbolic shape inference."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    g = model_proto.graph
    try:
        inferred = SymbolicShapeInference.infer_shapes(model_proto, auto_merge=True)
    except Exception:  # noqa: BLE001  (an optimization: without shapes, the graph stays as is)
        return
    shapes: dict = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = [
                d.dim_param if d.HasField("dim_param") else
                (d.dim_value if d.HasField("dim_value") else None)
                for d in t.shape.dim
            ]  # fmt: skip
    outputs = {o.name for o in g.output}
    rename: dict = {}
    keep = []
    for n in g.node:
        for i, name in enumerate(n.input):
            if name in rename:
                n.input[i] = rename[name]
        if n.op_type == "Reshape" and n.output[0] not in outputs:
            a, b = shapes.get(n.input[0]), shapes.get(n.output[0])
            if a is not None and a == b and None not in a and "" not in a:
                rename[n.output[0]] = n.input[0]
                continue
        keep.append(n)
    # dead nodes (the shape computations of the removed reshapes), iterated to a fixed point
    while True:
        used = outputs | {i for n in keep for i in n.input}
        alive = [n for n in keep if any(o in used for o in n.output)]
        if len(alive) == len(keep):
            break
        keep = alive
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in keep for i in n.input}
    inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)


def _share_weights(protos: dict, out_dir: str) -> None:
    """Every initializer of the graphs (but constants under 4 KiB) into one ``weights.bin``
    (equal tensors once; ONNX external data)."""
    from onnx import numpy_helper

    offsets: dict = {}
    size = 0
    with open(os.path.join(out_dir, WEIGHTS), "wb") as f:
        for proto in protos.values():
            for init in proto.graph.initializer:
                array = numpy_helper.to_array(init)
                raw = array.tobytes()
                if len(raw) < 4096:  # small constants (shapes, axes) stay in the graph
                    continue
                key = (init.data_type, tuple(init.dims), hashlib.sha256(raw).hexdigest())
                if key not in offsets:
                    pad = (-size) % 64  # aligned (memory-mappable) offsets
                    f.write(b"\0" * pad)
                    size += pad
                    offsets[key] = size
                    f.write(raw)
                    size += len(raw)
                init.ClearField("raw_data")
                for field in ("float_data", "int32_data", "int64_data", "double_data"):
                    init.ClearField(field)
                init.data_location = 1  # EXTERNAL
                del init.external_data[:]
                for k, v in (("location", WEIGHTS), ("offset", str(offsets[key])),
                             ("length", str(len(raw)))):  # fmt: skip
                    entry = init.external_data.add()
                    entry.key, entry.value = k, v


def _quantize(path: str, out_path: str, min_elements: int) -> None:
    """ONNX Runtime dynamic int8 of the MatMul / Gemm nodes whose weight has at least
    ``min_elements`` entries (weights folded first, so transposed weights qualify)."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folded = out_path + ".folded.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = folded
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    proto = onnx.load(folded)
    sizes = {i.name: int(numpy_helper.to_array(i).size) for i in proto.graph.initializer}
    nodes = []
    for n in proto.graph.node:
        if n.op_type in ("MatMul", "Gemm") and sizes.get(n.input[1], 0) >= max(min_elements, 1):
            # (the quantizer turns a Gemm into a MatMul named <gemm>_MatMul first)
            nodes += [n.name, f"{n.name}_MatMul"] if n.op_type == "Gemm" else [n.name]
    if nodes:
        import logging

        level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)  # the quantizer logs every node
        try:
            quantize_dynamic(folded, out_path, weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul", "Gemm"], nodes_to_quantize=nodes)  # fmt: skip
        finally:
            logging.getLogger().setLevel(level)
    else:
        shutil.copyfile(folded, out_path)
    os.remove(folded)


def _write_dict(d, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(sym + "\n" for sym in d.symbols)


def export_onnx(model, task, out_dir: str, int8: str | None = None, spm: str | None = None,
                check: bool = True) -> dict:  # fmt: skip
    """Export ``model`` (eval mode, float32, CPU) into the new directory ``out_dir`` (see the
    module notes); ``int8``: ``None``, ``"large"`` or ``"all"``. Returns the config written.
    Raises :class:`ExportError` (nothing written) for a model it cannot export."""
    why = export_error(model)
    if why is not None:
        raise ExportError(f"{type(model).__name__} cannot be exported to ONNX: {why}")
    if int8 not in (None, "large", "all"):
        raise ExportError(f"int8 must be 'large' or 'all', got {int8!r}")
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ExportError(f"{out_dir} exists: give a new or empty directory")
    model.eval()
    model.float().cpu()
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    dec = model.decoder
    layers = [
        {"heads": int(layer.self_attn.num_heads), "head_dim": int(layer.self_attn.head_dim),
         "cross": layer.encoder_attn is not None}
        for layer in dec.layers
    ]  # fmt: skip
    config = {
        "format": FORMAT, "version": VERSION,
        "pad": tgt_dict.pad(), "eos": tgt_dict.eos(), "unk": tgt_dict.unk(),
        "src_pad": src_dict.pad(), "src_eos": src_dict.eos(), "src_unk": src_dict.unk(),
        "vocab_size": len(tgt_dict), "src_vocab_size": len(src_dict),
        "max_decoder_positions": int(model.max_decoder_positions()),
        "max_source_positions": int(model.max_positions()[0]),
        "position_offset": int(dec.embed_positions.padding_idx) if dec.embed_positions is not None else 0,
        "position_kind": _position_kind(dec),
        "position_dim": int(dec.embed_positions.embedding_dim) if dec.embed_positions is not None else 0,
        # (torch's float32 frequencies: the runtime's rows are then torch's to rounding)
        "position_freq": _frequencies(dec.embed_positions.embedding_dim).tolist()
        if _position_kind(dec) == "sinusoidal" else None,
        "layers": layers, "int8": int8, "architecture": type(model).__name__,
        "spm": "spm.model" if spm else None,
    }  # fmt: skip
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise ExportError(f"cannot create {out_dir}: {parent} is not a directory")
    tmp = tempfile.mkdtemp(prefix=".onnx-export-", dir=parent)
    try:
        src = _probe(model, len(src_dict), src_dict.pad(), src_dict.eos())
        cache_in, cache_out = _names(layers)
        enc_out = ["enc_bias"] + [n for n in cache_in if n.startswith("cross_")]
        enc_axes = {"src_tokens": {0: "B", 1: "S"}}
        enc_axes.update({n: {0: "B", 3 if n == "enc_bias" else 2: "S"} for n in enc_out})
        with torch.no_grad(), _positions_in_graph(model):
            # (eval wrappers: the exporter puts a module back into its own mode afterwards,
            # and a new module is in training mode, which would switch dropout on)
            encoder = _Encoder(model, lean=lean_encoder_error(model) is None).eval()
            if encoder.lean:  # the lean layers must be the model's encoder, exactly
                own = _Encoder(model).eval()(src)
                lean = encoder(src)
                worst = max(_error(a.numpy(), b.numpy()) for a, b in zip(lean, own))
                if not worst <= 1e-4 * max(1.0, max(float(b.abs().max()) for b in own[1:])):
                    encoder = _Encoder(model).eval()  # (the model's own encoder is traced)
            _trace(encoder, (src,), os.path.join(tmp, "encoder.raw.onnx"), ["src_tokens"],
                   enc_out, enc_axes)  # fmt: skip
            cross = encoder(src)
            step = _DecoderStep(model).eval()
            n = 4  # two sentences, two hypotheses each
            expand = torch.tensor([0, 0, 1, 1])
            caches = [cross[0].index_select(0, expand)]
            kv = iter(cross[1:])
            for i, spec in enumerate(layers):
                h, d = spec["heads"], spec["head_dim"]
                g = torch.Generator().manual_seed(i)
                caches += [torch.randn(n, h, 3, d, generator=g),
                           torch.randn(n, h, 3, d, generator=g)]  # fmt: skip
                if spec["cross"]:
                    caches += [next(kv).index_select(0, expand), next(kv).index_select(0, expand)]
            prev = torch.randint(4, len(tgt_dict), (n,))
            pos = torch.tensor([config["position_offset"] + 4])
            pos_name = "pos"
            if step.position_kind == "sinusoidal":  # (the runtime feeds the row: 6 fewer nodes)
                pos = _sinusoid(pos, config["position_dim"])
                pos_name = "pos_emb"
            order = torch.tensor([1, 0, 3, 2])
            bias = torch.zeros(len(tgt_dict))
            bias[tgt_dict.pad()] = float("-inf")
            dec_axes = {"prev": {0: "N"}, "order": {0: "N"}, "enc_bias": {0: "N", 3: "S"},
                        "top_lp": {0: "N"}, "top_ids": {0: "N"}}  # fmt: skip
            for name in cache_in[1:]:
                dec_axes[name] = {0: "N", 2: "S" if name.startswith("cross_") else "t"}
            out_names = ["top_lp", "top_ids"] + cache_out
            for name in cache_out:
                dec_axes[name] = {0: "N", 2: "t1"}
            args = (prev, pos, order, bias, *caches)
            arg_names = ["prev", pos_name, "order", "bias"] + cache_in
            _trace(step, args, os.path.join(tmp, "decoder.raw.onnx"), arg_names, out_names,
                   dec_axes)  # fmt: skip
            ref = step(*args)
        import onnx

        protos = {
            "encoder": onnx.load(os.path.join(tmp, "encoder.raw.onnx")),
            "decoder": onnx.load(os.path.join(tmp, "decoder.raw.onnx")),
        }
        _k_as_input(protos["decoder"])
        for proto in protos.values():
            _simplify(proto)
        if int8:
            from lightcompress.deploy.quantize import LARGE_MAP_ELEMENTS

            limit = LARGE_MAP_ELEMENTS if int8 == "large" else 1
            work = os.path.join(tmp, "int8")
            os.makedirs(work)
            for name, proto in protos.items():
                onnx.save(proto, os.path.join(work, f"{name}.onnx"))
            if check:  # the float32 graphs first, exactly
                _check(work, dict(zip(arg_names, args)), ref, src, cross, strict=True)
            for name in protos:
                path = os.path.join(work, f"{name}.onnx")
                _quantize(path, os.path.join(work, f"{name}.int8.onnx"), limit)
                protos[name] = onnx.load(os.path.join(work, f"{name}.int8.onnx"))
            shutil.rmtree(work)
        _share_weights(protos, tmp)
        for name, proto in protos.items():
            onnx.save(proto, os.path.join(tmp, f"{name}.onnx"))
            os.remove(os.path.join(tmp, f"{name}.raw.onnx"))
        _write_dict(src_dict, os.path.join(tmp, "dict.src.txt"))
        _write_dict(tgt_dict, os.path.join(tmp, "dict.tgt.txt"))
        if spm:
            shutil.copyfile(spm, os.path.join(tmp, "spm.model"))
        shutil.copyfile(os.path.join(os.path.dirname(__file__), "onnx_runtime.py"),
                        os.path.join(tmp, "translate.py"))  # fmt: skip
        if check:  # float32: exact (or ExportError); int8: how far it moved, recorded
            errors = _check(tmp, dict(zip(arg_names, args)), ref, src, cross, strict=not int8)
            if int8:
                config["int8_error"] = errors
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
        _write_manifest(tmp)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)
        from lightcompress.io import current_umask

        os.chmod(tmp, 0o777 & ~current_umask())  # (mkdtemp makes it 0700)
        os.replace(tmp, out_dir)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return config


def _write_manifest(directory: str) -> None:
    """``MANIFEST.sha256`` (``sha256sum`` format) of every file the runtime reads: it refuses
    an export whose config, dictionaries or weights were edited after it was written."""
    lines = []
    for name in sorted(os.listdir(directory)):
        if name in ("translate.py", MANIFEST):
            continue
        digest = hashlib.sha256()
        with open(os.path.join(directory, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        lines.append(f"{digest.hexdigest()}  {name}\n")
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        f.writelines(lines)


def _error(got, ref) -> float:
    """Largest absolute difference (``inf`` where shapes or -inf entries disagree, and for any
    NaN: a model whose outputs hold NaN is never 'equal' to its export)."""
    import numpy as np

    if got.shape != ref.shape or not np.array_equal(np.isfinite(got), np.isfinite(ref)):
        return float("inf")
    if np.isnan(got).any() or np.isnan(ref).any():
        return float("inf")
    fin = np.isfinite(ref)
    return float(np.abs(got[fin].astype(np.float64) - ref[fin]).max()) if fin.any() else 0.0


def _relative_error(got, ref) -> float:
    """Relative (Frobenius) error over the finite entries (``inf`` where they disagree)."""
    import numpy as np

    if got.shape != ref.shape or not np.array_equal(np.isfinite(got), np.isfinite(ref)):
        return float("inf")
    if np.isnan(got).any() or np.isnan(ref).any():  # (as _error: NaN is never equal)
        return float("inf")
    fin = np.isfinite(ref)
    g, r = got[fin].astype(np.float64), ref[fin].astype(np.float64)
    return float(np.linalg.norm(g - r) / max(np.linalg.norm(r), 1e-12))


def _check(folder, args: dict, ref, src, cross, strict: bool) -> dict:
    """Run the graphs in ``folder`` on the probe inputs against the traced modules' outputs.
    ``strict`` (float32): equal to 1e-3 or :class:`ExportError`. Returns the relative errors
    ``{"encoder": ..., "decoder": ...}`` (int8 exports record them: int8 weights and
    activations move the outputs; ONNX Runtime quantizes activations per tensor, which deep
    random-weight encoders feel most)."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    enc = ort.InferenceSession(os.path.join(folder, "encoder.onnx"), so,
                               providers=["CPUExecutionProvider"])  # fmt: skip
    dec = ort.InferenceSession(os.path.join(folder, "decoder.onnx"), so,
                               providers=["CPUExecutionProvider"])  # fmt: skip
    got = enc.run(None, {"src_tokens": src.numpy()})
    feed = {i.name: args[i.name].numpy() for i in dec.get_inputs() if i.name != "k"}
    feed["k"] = np.array([_K_PLACEHOLDER], dtype=np.int64)
    out = dec.run(None, feed)
    pairs = {"encoder": [(g, r.numpy()) for g, r in zip(got, cross)],
             "decoder": [(out[0], ref[0].numpy())]}  # fmt: skip
    errors = {}
    for part, items in pairs.items():
        if strict:
            worst = max(_error(g, r) for g, r in items)
            scale = max(float(np.abs(r[np.isfinite(r)]).max(initial=0.0)) for _g, r in items)
            if not worst <= 1e-3 * max(1.0, scale):
                raise ExportError(
                    f"the exported {part} does not reproduce the model (check failed: largest "
                    f"difference {worst:.3g})"
                )
        errors[part] = round(max(_relative_error(g, r) for g, r in items), 6)
    return errors


# --------------------------------------------------------------------------------------------
# command
# --------------------------------------------------------------------------------------------


def _arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lightcompress-export-onnx",
        description="Export a fairseq translation checkpoint (fairseq's Transformer, "
        "LightFormer, Hypoformer, Smartformer, Subformer) to ONNX Runtime graphs that keep its compressed "
        "weights, with a torch-free runtime (translate.py) in the output directory.",
    )
    p.add_argument("--path", required=True, help="checkpoint")
    p.add_argument("--data", required=True, help="directory with the model's dictionaries")
    p.add_argument(
        "-s",
        "--source-lang",
        help="source language (dict.SRC.txt; needed when the "
        "checkpoint does not name it and --data holds only dictionaries)",
    )
    p.add_argument("-t", "--target-lang", help="target language (as -s)")
    p.add_argument("-o", "--output", required=True, help="output directory (new or empty)")
    p.add_argument("--spm", help="sentencepiece model to ship with the export (raw text)")
    p.add_argument(
        "--int8",
        nargs="?",
        const="large",
        choices=["large", "all"],
        help="ONNX Runtime dynamic int8 of the large maps (default) or of every map",
    )
    return p


PROG = "lightcompress-export-onnx"


def main(argv: Sequence[str] | None = None) -> int:
    """``lightcompress-export-onnx``: the exit status (errors as one line, status 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    prog = PROG
    if args.spm is not None and not os.path.isfile(args.spm):
        raise ExportError(f"sentencepiece model not found: {args.spm}")
    if args.spm is not None:
        import sentencepiece

        try:
            sentencepiece.SentencePieceProcessor(model_file=args.spm)
        except (RuntimeError, OSError) as exc:
            detail = " ".join(str(exc).split())[:200]
            raise ExportError(f"cannot load the sentencepiece model {args.spm}: {detail}")
    if not os.path.isfile(args.path):
        raise ExportError(f"checkpoint not found: {args.path}")
    if os.path.exists(args.output) and (not os.path.isdir(args.output) or os.listdir(args.output)):
        raise ExportError(f"{args.output} exists: give a new or empty directory")
    import lightcompress  # noqa: F401  (plugin architectures)
    from lightcompress.checkpoint import CheckpointError, load_checkpoint

    try:
        model, task, _ = load_checkpoint(args.path, args.data, args.source_lang, args.target_lang)
    except CheckpointError as exc:
        message = str(exc)
        if "size mismatch" in message:
            message = (
                f"the dictionaries in {args.data} do not fit {args.path} (its embedding or "
                "output tables have another size): give the data directory the model was "
                "trained with"
            )
        raise ExportError(message) from None
    try:
        config = export_onnx(model, task, args.output, int8=args.int8, spm=args.spm)
    except OSError as exc:  # a full disk, a read-only file system (nothing is left)
        raise ExportError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    errors = config.get("int8_error")
    if errors:
        print(f"{prog}: int8 moved the encoder's outputs by {100 * errors['encoder']:.1f} % and "
              f"the decoder's log-probabilities by {100 * errors['decoder']:.1f} % (relative, on "
              "a probe batch): compare its BLEU with the float32 export's", file=sys.stderr)  # fmt: skip
    print(f"{prog}: wrote {args.output}", file=sys.stderr)
    return 0


cli_main = cli.entry_point(main, quiet=True)
