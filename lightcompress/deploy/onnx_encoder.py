"""The encoder's module of an ONNX export (the source mask and every decoder layer's
cross-attention keys and values, once per batch), over the model's own modules (factorized maps
regrouped): traced by :mod:`lightcompress.deploy.onnx_export` into ``encoder.onnx`` and run
eagerly by the PyTorch backend (:class:`~lightcompress.deploy.generator.TorchStep`). Its lean
form (fairseq's encoder layers on ``[B*S x C]`` rows) where :func:`lean_encoder_error` accepts
the model's encoder, else the model's own encoder.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightcompress.deploy.factor_attention import cross_plan
from lightcompress.deploy.onnx_dawid import (
    PaddedKeysValues,
    PaddedMaps,
    encoder_layer,
    is_fused,
    is_fused_encoder,
    traced_keys_values,
)
from lightcompress.deploy.onnx_graphs import (
    Regrouped,
    inner_attention,
    max_abs_error,
    project_qkv,
    qkv_maps,
)
from lightcompress.deploy.step import layer_step

__all__ = ["encoder_module", "lean_encoder_error", "probe_batch"]


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
        self.regrouped = Regrouped()
        self._padded: dict = {}  # (DA-WID's fused layers: their maps padded per head)
        if lean:
            for layer in model.encoder.layers:
                if is_fused_encoder(layer):
                    if layer.blocks[0].sub is not None:
                        self._padded[id(layer)] = PaddedMaps(self.regrouped, layer.blocks[0].sub)
                    continue
                if qkv_maps(layer.self_attn) is not None:
                    self.regrouped.prepare(*qkv_maps(layer.self_attn))
        self._cross_plans = {}
        for layer in model.decoder.layers:
            if is_fused(layer) and layer.blocks[1].sub is not None:
                self._padded[id(layer)] = PaddedKeysValues(self.regrouped, layer.blocks[1].sub)
            if not is_fused(layer) and layer.encoder_attn is not None:
                a = inner_attention(layer.encoder_attn)
                self.regrouped.prepare([a.k_proj, a.v_proj], [1.0, 1.0])
                plan = cross_plan(self.regrouped, layer)
                if plan is not None:
                    self._cross_plans[id(layer)] = plan

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
                if is_fused_encoder(layer):
                    x = encoder_layer(self, layer, x, enc_bias, heads)
                else:
                    x = self._layer(layer, x, enc_bias, heads)
            if enc.layer_norm is not None:
                x = enc.layer_norm(x)
        else:
            out = enc(src_tokens, src_lengths=src_tokens.ne(enc.padding_idx).sum(1))
            x = out["encoder_out"][0].transpose(0, 1)  # [B x S x C]
        outs = [enc_bias]
        for layer in self.model.decoder.layers:
            if is_fused(layer):  # DA-WID: its heads' keys and values, zero-padded
                if layer.blocks[1].sub is None:
                    continue
                if self.lean:  # ([B*S x C] rows)
                    outs += self._padded[id(layer)].keys_values(x, heads)
                else:
                    outs += traced_keys_values(layer.blocks[1].sub, x)
                continue
            if layer.encoder_attn is None:  # (Subformer's SAFE block)
                continue
            a = inner_attention(layer.encoder_attn)
            kv = [
                heads(y, a.num_heads, a.head_dim).transpose(1, 2)  # [B x H x S x d]
                for y in self.regrouped.apply(x, [a.k_proj, a.v_proj], [1.0, 1.0])
            ]
            plan = self._cross_plans.get(id(layer))
            outs += kv if plan is None else plan.keys_values(*kv, enc_bias)
        return tuple(outs)

    def _layer(self, layer, x: Tensor, enc_bias: Tensor, heads) -> Tensor:
        """fairseq's ``TransformerEncoderLayerBase.forward`` (:func:`layer_step`: pre- or
        post-LN, Admin residuals) on ``[B*S x C]`` rows."""

        def self_attention(x):
            a = layer.self_attn
            h, d = a.num_heads, a.head_dim
            q, k, v = project_qkv(self.regrouped, a, x)
            q = heads(q, h, d).transpose(1, 2)  # [B x H x S x d]
            k = heads(k, h, d).permute(0, 2, 3, 1)  # [B x H x d x S]
            v = heads(v, h, d).transpose(1, 2)
            p = F.softmax((torch.matmul(q, k) + enc_bias).float(), dim=-1)
            return a.out_proj(torch.matmul(p, v).transpose(1, 2).reshape(-1, h * d))

        return layer_step(layer, x, self_attention)


def probe_batch(d) -> Tensor:
    """A padded probe batch of two sentences ``[2 x 7]`` of the source dictionary ``d`` (the
    encoder is traced with its mask path)."""
    vocab, pad, eos = len(d), d.pad(), d.eos()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(min(4, vocab - 1), vocab, (2, 7), generator=g)
    src[:, -1] = eos
    src[1, :2] = pad
    return src


def encoder_module(model, probe: Tensor) -> _Encoder:
    """The :class:`_Encoder` of ``model`` (eval mode): its lean layers where they compute the
    model's encoder (:func:`lean_encoder_error`) and give its outputs on ``probe`` (to 1e-4 of
    the largest cross-attention key or value), else the model's own encoder."""
    encoder = _Encoder(model, lean=lean_encoder_error(model) is None).eval()
    if encoder.lean:  # the lean layers must be the model's encoder, exactly
        own = _Encoder(model).eval()(probe)
        lean = encoder(probe)
        worst = max(max_abs_error(a.numpy(), b.numpy()) for a, b in zip(lean, own))
        if not worst <= 1e-4 * max(1.0, max(float(b.abs().max()) for b in own[1:])):
            encoder = _Encoder(model).eval()  # (the model's own encoder)
    return encoder


def lean_encoder_error(model) -> str | None:
    """``None`` when the lean layers of :class:`_Encoder` compute ``model``'s encoder (fairseq's
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
        if is_fused_encoder(layer):  # (DA-WID: onnx_dawid.encoder_layer)
            continue
        if type(layer).forward not in (
            TransformerEncoderLayerBase.forward,
            CompressedEncoderLayer.forward,
        ):
            return f"encoder.layers.{i}: {type(layer).__name__} has its own forward"
        a = layer.self_attn
        if type(a).forward is not MultiheadAttention.forward:
            return f"encoder.layers.{i}: {type(a).__name__} has its own forward"
        if a.bias_k is not None or a.add_zero_attn or a.head_dim * a.num_heads != a.embed_dim:
            return f"encoder.layers.{i}: attention bias_k / zero attention / uneven heads"
        if getattr(a, "use_xformers", False):
            return f"encoder.layers.{i}: xformers attention"
    return None
