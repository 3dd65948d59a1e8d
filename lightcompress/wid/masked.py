"""The DA-WID training-time layers: a post-LN fairseq Transformer layer with compactors and masks
(DA-WID Sec. 3.1, Eq. 6-7, Fig. 3).

Each sublayer (self-attention, cross-attention, FFN) is a *block* ending in a *LayerNorm site*::

    h = x + dropout(z_layer * sublayer(x))                         # residual outside the masks
    y = C_out (z * LN^(z * C_in h)) + bias                         # the site; LN^ has no affine

``C_in``, ``C_out`` are d x d compactors, ``z`` the site's hidden-dimension mask. The LayerNorm
statistics are taken over the kept dimensions only (``z > 0``), as WID's code does once its masks
are fixed (``uer/layers/layer_norm.py`` index-selects the kept entries): then the fused model's
LayerNorm over the kept width computes the same function. The paper's ``M_in`` and ``M_out`` of
one site are one mask here (WID's converter, too, prunes both sides of a LayerNorm with one set of
indices): a dimension dropped on one side but kept on the other cannot be a LayerNorm of an
ordinary model.

Attention (Eq. 6), per head ``i``: ``q' = C_Q^i q_i``, ``k' = C_K^i k_i`` (masked by the head's
query/key dimension mask ``z_qk``; the paper's ``M_K^T M_Q`` is the product of two gates on the
same dimensions, one gate here), ``v' = z_vo * C_V^i v_i``, ``o_i = C_O^i softmax(q'^T k') v'``,
scaled by the head mask and the layer mask before ``W_O``. FFN (Eq. 7): ``W_D (z_f * act(W_U x))``,
no compactors. Identity compactors (WID's initialisation) reproduce the teacher exactly.

The teacher's weight matrices are kept as they are (copied into the student); the compactors
carry the compression and fusion folds them in (:mod:`lightcompress.wid.fuse`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lightcompress.wid.gates import HardConcreteGate

__all__ = [
    "LayerNormSite",
    "MaskedAttention",
    "MaskedFFN",
    "WIDBlock",
    "WIDDecoderLayer",
    "WIDEncoderLayer",
]

# initial log_alpha of each kind of gate (CoFi: hidden, head and layer gates start almost surely
# open; intermediate dimensions at drop rate 0.5, log(1 - 0.5) - log(0.5) = 0)
INIT_HIDDEN, INIT_INTERMEDIATE, INIT_HEAD, INIT_LAYER = 10.0, 0.0, 10.0, 10.0


def masked_layer_norm(u: torch.Tensor, keep: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm without affine over the last dimension, statistics over ``keep`` entries only.

    ``u``: (..., d); ``keep``: (d,) bool or None (all)."""
    if keep is None:
        return F.layer_norm(u, u.shape[-1:], eps=eps)
    w = keep.to(u.dtype)
    n = w.sum().clamp_min(1.0)
    mean = (u * w).sum(-1, keepdim=True) / n
    var = (((u - mean) * w) ** 2).sum(-1, keepdim=True) / n
    return (u - mean) * torch.rsqrt(var + eps)


class LayerNormSite(nn.Module):
    """A LayerNorm with compactors ``C_in``, ``C_out`` (+ bias) and a hidden-dimension gate.

    Parameters
    ----------
    layer_norm : nn.LayerNorm
        The teacher's LayerNorm; identity initialisation: ``C_in = I``, ``C_out = diag(gamma)``,
        ``bias = beta`` (exactly the teacher's LayerNorm).
    """

    def __init__(self, layer_norm: nn.LayerNorm):
        super().__init__()
        d = layer_norm.weight.numel()
        self.eps = float(layer_norm.eps)
        gamma = layer_norm.weight.detach().float()
        self.c_in = nn.Parameter(torch.eye(d))
        self.c_out = nn.Parameter(torch.diag(gamma).clone())
        self.bias = nn.Parameter(layer_norm.bias.detach().float().clone())
        self.gate = HardConcreteGate(d, "dim", INIT_HIDDEN)

    @property
    def width(self) -> int:
        return self.c_in.shape[0]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(T, B, d) -> (T, B, d)."""
        z = self.gate(h.dtype)
        u = F.linear(h, self.c_in)
        keep = None
        if z is not None:
            u = u * z
            keep = z > 0
        u = masked_layer_norm(u, keep, self.eps)
        if z is not None:
            u = u * z
        return F.linear(u, self.c_out, self.bias)


class MaskedAttention(nn.Module):
    """fairseq ``MultiheadAttention`` with per-head compactors and masks (module docstring).

    Parameters
    ----------
    mha : fairseq.modules.MultiheadAttention
        The teacher's attention; its projections are deep-copied.
    """

    def __init__(self, mha):
        super().__init__()
        import copy

        self.num_heads = mha.num_heads
        self.head_dim = mha.head_dim
        self.dropout_p = float(getattr(mha.dropout_module, "p", 0.0))
        self.self_attention = bool(mha.self_attention)
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, copy.deepcopy(getattr(mha, name)))
        h, dh = self.num_heads, self.head_dim
        eye = torch.eye(dh).expand(h, dh, dh).clone()
        self.c_q = nn.Parameter(eye.clone())
        self.c_k = nn.Parameter(eye.clone())
        self.c_v = nn.Parameter(eye.clone())
        self.c_o = nn.Parameter(eye.clone())
        self.gate_qk = HardConcreteGate(h * dh, "dim", INIT_INTERMEDIATE)
        self.gate_vo = HardConcreteGate(h * dh, "dim", INIT_INTERMEDIATE)
        self.gate_head = HardConcreteGate(h, "head", INIT_HEAD)
        self.gate_layer = HardConcreteGate(1, "layer", INIT_LAYER)

    def _heads(self, x):
        # [T x B x H*dh] -> [B x H x T x dh]
        t, b, _ = x.shape
        return x.view(t, b, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def forward(self, query, key, key_padding_mask=None, attn_mask=None):
        """query (Tq, B, d), key (Tk, B, d_kv) -> (Tq, B, d)."""
        h, dh = self.num_heads, self.head_dim
        z_layer = self.gate_layer(query.dtype)
        q = self._heads(self.q_proj(query)) / math.sqrt(dh)
        k = self._heads(self.k_proj(key))
        v = self._heads(self.v_proj(key))
        # per-head compactors: [B x H x T x dh] x [H x dh x dh]^T
        q = torch.einsum("bhti,hji->bhtj", q, self.c_q)
        k = torch.einsum("bhti,hji->bhtj", k, self.c_k)
        v = torch.einsum("bhti,hji->bhtj", v, self.c_v)
        z_qk, z_vo = self.gate_qk(q.dtype), self.gate_vo(q.dtype)
        if z_qk is not None:
            q = q * z_qk.view(1, h, 1, dh)
        if z_vo is not None:
            v = v * z_vo.view(1, h, 1, dh)
        scores = q @ k.transpose(-1, -2)  # [B x H x Tq x Tk]
        if attn_mask is not None:
            scores = scores + attn_mask
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :].bool(), float("-inf"))
        probs = F.dropout(
            F.softmax(scores.float(), dim=-1).type_as(scores), self.dropout_p, self.training
        )
        ctx = probs @ v  # [B x H x Tq x dh]
        ctx = torch.einsum("bhtj,hij->bhti", ctx, self.c_o)
        z_head = self.gate_head(ctx.dtype)
        if z_head is not None:
            ctx = ctx * z_head.view(1, h, 1, 1)
        b, _, tq, _ = ctx.shape
        out = self.out_proj(ctx.permute(2, 0, 1, 3).reshape(tq, b, h * dh))
        if z_layer is not None:
            out = out * z_layer
        return out


class MaskedFFN(nn.Module):
    """``z_layer * W_D (z_f * act(W_U x))`` with the teacher's ``fc1``, ``fc2`` (Eq. 7)."""

    def __init__(self, fc1: nn.Linear, fc2: nn.Linear, activation_fn, activation_dropout: float):
        super().__init__()
        import copy

        self.fc1 = copy.deepcopy(fc1)
        self.fc2 = copy.deepcopy(fc2)
        self.activation_fn = activation_fn
        self.activation_dropout = float(activation_dropout)
        self.gate_ffn = HardConcreteGate(fc1.out_features, "dim", INIT_INTERMEDIATE)
        self.gate_layer = HardConcreteGate(1, "layer", INIT_LAYER)

    def forward(self, x):
        """(T, B, d) -> (T, B, d)."""
        z_layer = self.gate_layer(x.dtype)
        a = self.activation_fn(self.fc1(x))
        z = self.gate_ffn(a.dtype)
        if z is not None:
            a = a * z
        a = F.dropout(a, self.activation_dropout, self.training)
        out = self.fc2(a)
        if z_layer is not None:
            out = out * z_layer
        return out


class WIDBlock(nn.Module):
    """One sublayer with its residual and its LayerNorm site (or the teacher's plain LayerNorm
    where the width must stay: the decoder's last site feeds the tied output projection)."""

    def __init__(self, kind: str, sub: nn.Module, site: nn.Module, dropout: float):
        super().__init__()
        self.kind = kind  # "self_attn" | "cross_attn" | "ffn"
        self.sub = sub
        self.site = site
        self.dropout = float(dropout)

    @property
    def plain(self) -> bool:
        return not isinstance(self.site, LayerNormSite)

    def forward(self, x, *args, **kwargs):
        out = self.sub(x, *args, **kwargs)
        return self.site(x + F.dropout(out, self.dropout, self.training))


def _activation(layer):
    return layer.activation_fn


def _activation_dropout(layer) -> float:
    return float(getattr(layer.activation_dropout_module, "p", 0.0))


def _dropout(layer) -> float:
    return float(getattr(layer.dropout_module, "p", 0.0))


class WIDEncoderLayer(nn.Module):
    """A post-LN fairseq encoder layer with DA-WID compactors and masks (module docstring)."""

    def __init__(self, layer):
        super().__init__()
        p = _dropout(layer)
        self.blocks = nn.ModuleList(
            [
                WIDBlock(
                    "self_attn",
                    MaskedAttention(layer.self_attn),
                    LayerNormSite(layer.self_attn_layer_norm),
                    p,
                ),
                WIDBlock(
                    "ffn",
                    MaskedFFN(layer.fc1, layer.fc2, _activation(layer), _activation_dropout(layer)),
                    LayerNormSite(layer.final_layer_norm),
                    p,
                ),
            ]
        )

    def forward(self, x, encoder_padding_mask=None, attn_mask=None):
        """fairseq's encoder-layer interface: (T, B, d) -> (T, B, d)."""
        x = self.blocks[0](x, x, key_padding_mask=encoder_padding_mask, attn_mask=attn_mask)
        return self.blocks[1](x)


class WIDDecoderLayer(nn.Module):
    """A post-LN fairseq decoder layer with DA-WID compactors and masks. ``last``: the final
    LayerNorm stays the teacher's (no compactor, full width)."""

    def __init__(self, layer, last: bool):
        super().__init__()
        import copy

        p = _dropout(layer)
        final = (
            copy.deepcopy(layer.final_layer_norm) if last else LayerNormSite(layer.final_layer_norm)
        )
        self.blocks = nn.ModuleList(
            [
                WIDBlock(
                    "self_attn",
                    MaskedAttention(layer.self_attn),
                    LayerNormSite(layer.self_attn_layer_norm),
                    p,
                ),
                WIDBlock(
                    "cross_attn",
                    MaskedAttention(layer.encoder_attn),
                    LayerNormSite(layer.encoder_attn_layer_norm),
                    p,
                ),
                WIDBlock(
                    "ffn",
                    MaskedFFN(layer.fc1, layer.fc2, _activation(layer), _activation_dropout(layer)),
                    final,
                    p,
                ),
            ]
        )

    def forward(
        self,
        x,
        encoder_out=None,
        encoder_padding_mask=None,
        incremental_state=None,
        self_attn_mask=None,
        self_attn_padding_mask=None,
        need_attn=False,
        need_head_weights=False,
        **unused,
    ):
        """fairseq's decoder-layer interface, teacher forcing only: (T, B, d) -> (T, B, d)."""
        if incremental_state is not None:
            raise RuntimeError(
                "the DA-WID training model does not decode step by step; fuse it "
                "(lightcompress-convert dawid-fuse) and translate with the fused model"
            )
        x = self.blocks[0](x, x, key_padding_mask=self_attn_padding_mask, attn_mask=self_attn_mask)
        x = self.blocks[1](x, encoder_out, key_padding_mask=encoder_padding_mask)
        return self.blocks[2](x), None, None
