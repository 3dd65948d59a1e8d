"""Smartformer (CPAC attention) on fairseq's Transformer: the compressed Transformer of the plugin
with every Q, K, V projection in CP form over the (heads, d_k) view of its input.

``y[m] = sum_r W0[m, r] sum_(a, c) x[a, c] W1[a, r] W2[c, r]`` with ``W0 (d, R)``, ``W1 (h, R)``,
``W2 (d_k, R)`` (the kind ``cp`` of the registry, :class:`~lightcompress.modules.CPLinear`);
the output projection stays dense. The ranks the model is built with are fixed: ``--sm-rank``
for every projection, or per layer through ``--lc-spec``. The paper (vision and time series)
picks each layer's rank with an A2C agent during training: ``fairseq-train --task
translation_smartformer --sm-search`` (:mod:`lightcompress.search`); a checkpoint of such a
run loads at the ranks it holds (CP layers resize on load). Architectures: the
``smartformer*`` entries of :data:`lightcompress.models.presets.PRESETS`.
"""

from __future__ import annotations

from fairseq.models import register_model

from lightcompress.models.compressed import CompressedTransformerModel
from lightcompress.models.presets import (
    CompressionConfig,
    SmartformerConfig,
    add_config_args,
    own_fields,
    register_presets,
)
from lightcompress.modules.registry import ConfigError

__all__ = ["SmartformerModel", "smartformer_spec_text"]


def smartformer_spec_text(args) -> str:
    """CPAC rules for the Q, K, V projections (``--lc-spec`` wins)."""
    if getattr(args, "lc_spec", None):
        return args.lc_spec
    rank = args.sm_rank
    if rank is None or rank < 1:
        raise ConfigError(f"--sm-rank must be >= 1, got {rank}")
    enc_h, dec_h = args.encoder_attention_heads, args.decoder_attention_heads
    rules = [
        f"encoder.layers.*.self_attn.[qkv]_proj = cp(rank={rank}, heads={enc_h})",
        f"decoder.layers.*.self_attn.[qkv]_proj = cp(rank={rank}, heads={dec_h})",
    ]
    if args.sm_attn == "all":
        # cross-attention: q reads the decoder state, k and v the encoder output, each viewed
        # as (decoder heads, width / heads)
        rules.append(f"decoder.layers.*.encoder_attn.[qkv]_proj = cp(rank={rank}, heads={dec_h})")
    return ";\n".join(rules)


@register_model("smartformer")
class SmartformerModel(CompressedTransformerModel):
    """Smartformer's CPAC attention at fixed ranks (module docstring)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_config_args(
            parser, own_fields(SmartformerConfig, CompressionConfig), "Smartformer (lightcompress)"
        )

    @classmethod
    def spec_text(cls, args) -> str:
        return smartformer_spec_text(args)

    @classmethod
    def check_args(cls, args) -> None:
        super().check_args(args)
        smartformer_spec_text(args)


register_presets("smartformer")
