"""Subformer's layers (for :mod:`lightcompress.models.subformer`): fairseq's encoder and decoder
layers with the sandwich's width projections around them, an optional unshared map after a
shared FFN (``all-independent-ffn``), cross-attention at the encoder's width through query
projections, and the SAFE blocks (a post-norm layer at width ``r`` whose FFN ends at ``d``)."""

from __future__ import annotations

from fairseq.modules import LayerNorm, MultiheadAttention
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import nn

from lightcompress.modules.safe import QueryProjectedAttention

__all__ = [
    "SafeDecoderBlock",
    "SafeEncoderBlock",
    "SubformerDecoderLayer",
    "SubformerEncoderLayer",
]


class _IndependentFFNOutput(nn.Module):
    """``fc2`` followed by an unshared ``d x d`` map: ``W_i drop(act(fc2(h)))``.

    The authors' "all-shared (independent FFN)": ``fc2`` is shared, ``independent`` is not.
    Shapes: ``(T, B, ffn) -> (T, B, d)``.
    """

    def __init__(self, fc2: nn.Module, dim: int, activation_fn, dropout: float):
        super().__init__()
        self.shared = fc2
        self.independent = nn.Linear(dim, dim)
        self.activation_fn = activation_fn
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.independent(self.dropout(self.activation_fn(self.shared(x))))


class SubformerEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with optional width projections around it.

    ``project_in`` is applied to the layer's input and ``project_out`` to its output; the
    sandwich puts the up-projection after the first layer and the down-projection before the
    last, so the middle (shared) layers are plain fairseq layers at width ``d_s``.
    """

    def __init__(self, cfg, independent_ffn: bool = False):
        self._independent_ffn = independent_ffn
        super().__init__(cfg)
        self.project_in = None
        self.project_out = None

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        fc2 = super().build_fc2(input_dim, output_dim, q_noise, qn_block_size)
        if not self._independent_ffn:
            return fc2
        return _IndependentFFNOutput(fc2, output_dim, self.activation_fn, self.cfg.dropout)

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        if self.project_in is not None:
            x = self.project_in(x)  # [T x B x d_s] -> [T x B x d]
        x = super().forward(x, encoder_padding_mask, attn_mask)
        if self.project_out is not None:
            x = self.project_out(x)  # [T x B x d] -> [T x B x d_s]
        return x


class SubformerDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with width projections and, when its width differs from the
    encoder's, cross-attention at the encoder's width through query projections."""

    def __init__(
        self,
        cfg,
        no_encoder_attn: bool = False,
        independent_ffn: bool = False,
        cross_heads: int | None = None,
    ):
        self._independent_ffn = independent_ffn
        self._cross_heads = cross_heads
        self._dropout_p = cfg.dropout
        super().__init__(cfg, no_encoder_attn)
        self.project_in = None
        self.project_out = None

    def build_encoder_attention(self, embed_dim, cfg):
        enc_dim = cfg.encoder.embed_dim
        if embed_dim == enc_dim:
            return super().build_encoder_attention(embed_dim, cfg)
        attention = MultiheadAttention(
            enc_dim,
            self._cross_heads or cfg.decoder.attention_heads,
            kdim=enc_dim,
            vdim=enc_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )
        return QueryProjectedAttention(attention, embed_dim, enc_dim)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        fc2 = super().build_fc2(input_dim, output_dim, q_noise, qn_block_size)
        if not self._independent_ffn:
            return fc2
        return _IndependentFFNOutput(fc2, output_dim, self.activation_fn, self._dropout_p)

    def forward(self, x, *args, **kwargs):
        if self.project_in is not None:
            x = self.project_in(x)
        x, attn, state = super().forward(x, *args, **kwargs)
        if self.project_out is not None:
            x = self.project_out(x)
        return x, attn, state


class _SafeMixin:
    """SAFE: the FFN ends at ``out_dim``; no residual around it when the widths differ."""

    out_dim: int

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return super().build_fc2(input_dim, self.out_dim, q_noise, qn_block_size)

    def residual_connection(self, x, residual):
        if x.size(-1) != residual.size(-1):
            return x  # [T x B x r] -> [T x B x d]: the authors' "dimensions unmatched"
        return residual + x


class SafeEncoderBlock(_SafeMixin, TransformerEncoderLayerBase):
    """The encoder's SAFE block: a post-norm layer at width ``r`` whose FFN ends at ``d``.

    ``cfg_r`` has ``encoder.embed_dim = encoder.ffn_embed_dim = r``. Shapes: ``(T, B, r) ->
    (T, B, d)``.
    """

    def __init__(self, cfg_r, out_dim: int):
        self.out_dim = out_dim
        super().__init__(cfg_r)
        self.final_layer_norm = LayerNorm(out_dim, export=cfg_r.export)


class SafeDecoderBlock(_SafeMixin, TransformerDecoderLayerBase):
    """The decoder's SAFE block: causal, no cross-attention (fairseq's decoder loop passes the
    causal mask and the incremental state). Shapes: ``(T, B, r) -> (T, B, d)``."""

    def __init__(self, cfg_r, out_dim: int):
        self.out_dim = out_dim
        super().__init__(cfg_r, no_encoder_attn=True)
        self.final_layer_norm = LayerNorm(out_dim, export=cfg_r.export)
