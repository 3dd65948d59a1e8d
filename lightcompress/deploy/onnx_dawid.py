"""The ONNX graphs of DA-WID's fused model (:mod:`lightcompress.wid.fused`): post-LN blocks
whose residual is a matrix where widths change, attention heads of their own query/key and value
widths. Used by :mod:`lightcompress.deploy.onnx_graphs` (the decoder step, the encoder) for
fused layers: each attention's maps are padded per head to the widest head in their weights
(:class:`PaddedMaps`, :class:`PaddedKeysValues`), a head without query/key width attends
uniformly (a zero key of width 1), a block with no head or hidden unit left is its residual.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "PaddedKeysValues",
    "PaddedMaps",
    "encoder_layer",
    "fused_error",
    "is_fused",
    "is_fused_encoder",
    "step_layer",
    "traced_keys_values",
]


def is_fused(layer) -> bool:
    """A DA-WID fused decoder layer (per-layer and per-head widths)."""
    from lightcompress.wid.fused import FusedDecoderLayer

    return isinstance(layer, FusedDecoderLayer)


def is_fused_encoder(layer) -> bool:
    """A DA-WID fused encoder layer."""
    from lightcompress.wid.fused import FusedEncoderLayer

    return isinstance(layer, FusedEncoderLayer)


def step_layer(step, layer, x, past_k, past_v, cross, enc_bias, order):
    """One DA-WID fused decoder layer (:class:`~lightcompress.wid.fused.FusedDecoderLayer`:
    post-LN blocks whose residual is a matrix where widths change, heads of their own
    query/key and value widths, zero-padded to the widest) as its modules compute it."""
    self_block, cross_block, ffn_block = layer.blocks
    a = self_block.sub
    if a is None:  # every head pruned: the block is its residual; the caches [N x 1 x t x 1]
        zero = torch.zeros_like(x[:, :1]).unsqueeze(-1).unsqueeze(-1)
        k = torch.cat([past_k.index_select(0, order), zero], dim=2)
        v = torch.cat([past_v.index_select(0, order), zero], dim=2)
        x, _ = self_block(x)
    else:
        x, k, v = _step_self(step, self_block, x, past_k, past_v, order)
    # cross-attention: a sentence's hypotheses against its keys and values ([B x H x S x m])
    c = cross_block.sub
    if c is None:  # every head pruned: no keys and values, the block is its residual
        x, _ = cross_block(x)
        x, _ = ffn_block(x)
        return x, k, v
    cross_k, cross_v = cross
    maps, h = step._padded[id(c)], c.num_heads
    if c.q_proj is None:  # uniform attention over the source (a zero key of width 1)
        q = torch.zeros_like(x[:, :1]).expand(-1, h).unsqueeze(-1)
    else:
        (q,) = maps.project(x)
    q = step._sentence_rows(q, enc_bias, h, max(c.m_qk, 1)).transpose(1, 2)
    w = torch.matmul(q, cross_k.transpose(2, 3)) + enc_bias  # [B x H x beam x S]
    p = F.softmax(w.float(), dim=-1)
    y = torch.matmul(p, cross_v).transpose(1, 2)  # [B x beam x H x m]
    y = maps.out(y.reshape(-1, h * c.m_v))
    x = cross_block.layer_norm(cross_block.residual(x) + y)
    x, _ = ffn_block(x)
    return x, k, v


def _step_self(step, block, x, past_k, past_v, order):
    """A DA-WID self-attention block of the step; returns the output and the grown
    caches ``[N x H x t x width]``."""
    a = block.sub
    maps = step._padded[id(a)]
    q, k, v = _self_qkv(maps, a, x)
    k = torch.cat([past_k.index_select(0, order), k.unsqueeze(2)], dim=2)  # [N x H x t x m]
    v = torch.cat([past_v.index_select(0, order), v.unsqueeze(2)], dim=2)
    p = F.softmax(torch.matmul(q.unsqueeze(2), k.transpose(2, 3)).float(), dim=-1)
    y = maps.out(torch.matmul(p, v).reshape(-1, a.num_heads * a.m_v))
    return block.layer_norm(block.residual(x) + y), k, v


def encoder_layer(encoder, layer, x: Tensor, enc_bias: Tensor, heads) -> Tensor:
    """A DA-WID fused encoder layer (:class:`~lightcompress.wid.fused.FusedEncoderLayer`)
    on ``[B*S x C]`` rows, its attention's maps padded per head (:class:`PaddedMaps`)."""
    block, ffn = layer.blocks
    a = block.sub
    if a is None:  # every head pruned: the block is its residual
        x, _ = block(x)
    else:
        maps, h = encoder._padded[id(layer)], a.num_heads
        q, k, v = _self_qkv(maps, a, x)
        width = max(a.m_qk, 1)
        q = heads(q, h, width).transpose(1, 2)  # [B x H x S x m]
        k = heads(k, h, width).permute(0, 2, 3, 1)  # [B x H x m x S]
        v = heads(v, h, a.m_v).transpose(1, 2)
        p = F.softmax((torch.matmul(q, k) + enc_bias).float(), dim=-1)
        y = torch.matmul(p, v).transpose(1, 2).reshape(-1, h * a.m_v)
        x = block.layer_norm(block.residual(x) + maps.out(y))
    x, _ = ffn(x)
    return x


def traced_keys_values(a, x: Tensor) -> list:
    """A DA-WID cross-attention's keys and values of ``x`` ``[B x S x C]``:
    ``[B x H x S x width]`` each, heads zero-padded (its own ``_project_kv``)."""
    k, v = a._project_kv(x.transpose(0, 1))
    if k is None:  # no query/key width: a zero key of width 1 (uniform attention)
        k = torch.zeros_like(v[..., :1])
    return [k, v]


def _pad_rows(t: Tensor, index: Tensor) -> Tensor:
    """``[sum of the heads' widths (x in)]`` -> ``[H * widest (x in)]``: ``index`` picks each
    padded row from ``[t | a zero row]`` (the fused attention's ``qk_index`` / ``v_index``)."""
    return torch.cat([t, torch.zeros_like(t[:1])]).index_select(0, index)


def _self_qkv(maps: PaddedMaps, a, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """A fused self-attention's padded ``q, k, v`` ``[N x H x width]`` of ``x``; without
    query/key width a zero query and key of width 1 (uniform attention)."""
    if a.q_proj is None:
        (v,) = maps.project(x)
        zero = torch.zeros_like(v[:, :, :1])
        return zero, zero, v
    q, k, v = maps.project(x)
    return q, k, v


class PaddedMaps:
    """A DA-WID attention's maps with each head zero-padded to the widest head, as weights
    of ``owner`` (a :class:`~lightcompress.deploy.onnx_graphs.Regrouped`): the query
    (cross-attention) or query, key and value (self-attention) in one product whose output
    splits into ``[N x H x width]`` heads,
    and the output map over the padded heads (zero columns at the padding). The same numbers
    as the module's projections, padding and gathers, in two products instead of up to four
    products, three concatenations and four gathers; the stored maps grow by the padding."""

    def __init__(self, owner, a):
        self.heads = a.num_heads
        maps = []  # (map, index into [its outputs | a zero], padded width)
        if a.q_proj is not None:
            maps.append((a.q_proj, a.qk_index, a.m_qk))
            if a.self_attention:
                maps.append((a.k_proj, a.qk_index, a.m_qk))
        if a.self_attention:
            maps.append((a.v_proj, a.v_index, a.m_v))
        self.widths = [width for _m, _i, width in maps]

        key = ("dawid", id(a))
        self.weight = self.bias = None
        if maps:
            self.weight = owner._weight(
                key + ("w",), lambda: torch.cat([_pad_rows(m.weight, i) for m, i, _w in maps])
            )
            self.bias = owner._weight(
                key + ("b",), lambda: torch.cat([_pad_rows(m.bias, i) for m, i, _w in maps])
            )
        w = a.out_proj.weight  # [out x sum of value widths] -> zero columns at the padding
        self.out_weight = owner._weight(
            key + ("o",),
            lambda: torch.cat([w, torch.zeros_like(w[:, :1])], dim=1).index_select(1, a.v_index),
        )

    def project(self, x: Tensor) -> list:
        y = F.linear(x, self.weight, self.bias)
        parts = (
            y.split([self.heads * w for w in self.widths], dim=-1) if len(self.widths) > 1 else [y]
        )
        return [p.reshape(-1, self.heads, w) for p, w in zip(parts, self.widths)]

    def out(self, y: Tensor) -> Tensor:
        return F.linear(y, self.out_weight)  # (DA-WID's output map has no bias)


class PaddedKeysValues:
    """A DA-WID cross-attention's key and value maps, each head zero-padded to the widest, in
    one product over the encoder's ``[B*S x C]`` rows (the encoder graph's lean path):
    ``[B x H x S x width]`` keys and values (a zero key of width 1 where no query/key width is
    left: uniform attention)."""

    def __init__(self, owner, a):
        self.a = a
        maps = [(a.v_proj, a.v_index)]
        if a.k_proj is not None:
            maps.insert(0, (a.k_proj, a.qk_index))

        key = ("dawid-kv", id(a))
        self.weight = owner._weight(
            key + ("w",), lambda: torch.cat([_pad_rows(m.weight, i) for m, i in maps])
        )
        self.bias = owner._weight(
            key + ("b",), lambda: torch.cat([_pad_rows(m.bias, i) for m, i in maps])
        )
        self.sizes = [a.num_heads * a.m_qk] * (a.k_proj is not None) + [a.num_heads * a.m_v]

    def keys_values(self, x: Tensor, heads) -> list:
        a = self.a
        y = F.linear(x, self.weight, self.bias)
        if a.k_proj is None:
            v = heads(y, a.num_heads, a.m_v).transpose(1, 2)
            return [torch.zeros_like(v[..., :1]), v]
        k, v = y.split(self.sizes, dim=-1)
        return [
            heads(k, a.num_heads, a.m_qk).transpose(1, 2),
            heads(v, a.num_heads, a.m_v).transpose(1, 2),
        ]


def fused_error(model) -> str | None:
    """``None`` when a DA-WID fused model exports, else why not (one line): fairseq's
    Transformer decoder around fused layers of a self-attention, a cross-attention and an FFN
    block (any of them pruned to its residual; a head without query/key width attends
    uniformly)."""
    from lightcompress.deploy.step import decoder_error

    dec = model.decoder
    why = decoder_error(dec)
    if why is not None:
        return why
    for i, layer in enumerate(dec.layers):
        if not is_fused(layer):
            return f"decoder.layers.{i}: {type(layer).__name__} among DA-WID's fused layers"
        kinds = [b.kind for b in layer.blocks]
        if kinds != ["self_attn", "cross_attn", "ffn"]:
            return f"decoder.layers.{i}: blocks {kinds}"
    return None  # (the encoder and the positions: onnx_graphs.export_error)
