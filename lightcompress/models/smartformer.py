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

**CP weight transfer** (``lightcompress-convert --arch smartformer_*``, the declaration's
:class:`~lightcompress.models.family.Transfer`, run by :mod:`lightcompress.convert.family`):
a trained dense Transformer -> a Smartformer (CPAC attention).

Each Q, K, V projection the student's spec names is fitted by CP-ALS (torch, from an SVD start) to
the teacher's weight viewed as ``(out, heads, d_k)``; the report gives each projection's kept
energy (1 - relative squared fit error), like the SVD transfer's table. Everything else (the
output projections, FFN, LayerNorms, embeddings) is copied. Widths, depths and heads must match
the teacher.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairseq.models.transformer import base_architecture
from fairseq.models.transformer.transformer_legacy import transformer_iwslt_de_en

from lightcompress.errors import ConfigError
from lightcompress.models.family import Family, Transfer, register_family
from lightcompress.models.presets import CompressionConfig, Preset, flag_field

__all__ = ["SMARTFORMER", "SmartformerConfig", "SmartformerModel", "smartformer_spec_text"]

_f = flag_field


@dataclass(frozen=True)
class SmartformerConfig(CompressionConfig):
    """Smartformer (CPAC attention): every Q, K, V projection a CP decomposition over the
    (heads, d_k) view of its input, the output projection dense. The paper chooses per-layer
    ranks with an A2C agent during training (vision / time series); without that search the
    ranks are fixed by ``--sm-rank`` (our default 64: the paper gives no NMT ranks); the task
    ``translation_smartformer --sm-search`` runs that search inside fairseq-train."""

    sm_rank: int = _f(
        64,
        "CP rank R of every CPAC Q/K/V projection (R (d + heads + d_k) parameters each)",
        type=int,
        metavar="R",
    )
    sm_attn: str = _f(
        "all",
        "which attentions get CPAC projections: all (encoder self, decoder self and "
        "cross) or self (self-attention only)",
        choices=("all", "self"),
    )


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


# the A2C rank search is the task translation_smartformer (lightcompress.tasks)
_PRESETS = {
    "smartformer": Preset(
        "smartformer",
        SmartformerConfig(),
        {"share_all_embeddings": True},
        base_architecture,
        "CPAC attention (rank 64) on Transformer-base widths, 6-6.",
    ),
    "smartformer_iwslt_de_en": Preset(
        "smartformer",
        SmartformerConfig(),
        {"share_all_embeddings": True},
        transformer_iwslt_de_en,
        "CPAC attention (rank 64) on transformer_iwslt_de_en, 6-6.",
    ),
    "smartformer_iwslt_de_en_12_2": Preset(
        "smartformer",
        SmartformerConfig(),
        {"encoder_layers": 12, "decoder_layers": 2, "share_all_embeddings": True},
        transformer_iwslt_de_en,
        "CPAC attention (rank 64), IWSLT widths, deep-shallow 12-2.",
    ),
    "smartformer_iwslt_de_en_18_3": Preset(
        "smartformer",
        SmartformerConfig(),
        {"encoder_layers": 18, "decoder_layers": 3, "share_all_embeddings": True},
        transformer_iwslt_de_en,
        "CPAC attention (rank 64), IWSLT widths, deep-shallow 18-3.",
    ),
    "smartformer_wmt_en_de": Preset(
        "smartformer",
        SmartformerConfig(),
        {"share_all_embeddings": True},
        base_architecture,
        "CPAC attention (rank 64) on transformer_wmt_en_de widths, 6-6.",
    ),
}

SMARTFORMER = Family(
    name="smartformer",
    config=SmartformerConfig,
    spec=smartformer_spec_text,
    presets=_PRESETS,
    title="Smartformer (lightcompress)",
    doc="Smartformer's CPAC attention at fixed ranks (module docstring).",
    transfer=Transfer(
        method="CP transfer",
        same=(
            "encoder_embed_dim",
            "decoder_embed_dim",
            "encoder_ffn_embed_dim",
            "decoder_ffn_embed_dim",
            "encoder_attention_heads",
            "decoder_attention_heads",
        ),  # (depths may differ: --encoder/decoder-layers-from pick the teacher layers)
    ),
)

SmartformerModel = register_family(SMARTFORMER, __name__)
