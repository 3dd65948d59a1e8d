"""Subformer's configuration and named architectures (entries of the one presets table).

Subformer keeps its own model (:mod:`lightcompress.models.subformer`, its language model
:mod:`lightcompress.models.subformer_lm`): its sandwich layers have other widths than the
model, which is structure, not a layer kind. Its flags are the fields of
:class:`SubformerConfig`; :data:`SUBFORMER_PRESETS` holds the ``subformer*`` and
``subformer_lm*`` architectures, which the two model modules add to
:data:`lightcompress.models.presets.PRESETS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fairseq.models.transformer import base_architecture
from fairseq.models.transformer_lm import transformer_lm_baevski_wiki103

from lightcompress.models.presets import Preset, flag_field
from lightcompress.modules.safe import subformer_heads

__all__ = ["DEFAULT_INIT", "INITS", "SUBFORMER_PRESETS", "SUBFORMER_SHARING", "SubformerConfig"]

_f = flag_field

# --subformer-init: the default is the one that learned best at every SAFE width of the toy in
# lab/notes/subformer-source.md and without SAFE (the authors' BERT init did not learn at small
# SAFE widths; a fairseq-drawn table without SAFE learned later than theirs)
INITS = ("bert-safe-table", "bert", "fairseq")
DEFAULT_INIT = "bert-safe-table"
SUBFORMER_SHARING = ("all", "all-except-last", "all-independent-ffn", "every-2", "none", "sandwich")


@dataclass(frozen=True)
class SubformerConfig:
    """Subformer (Reid et al.): SAFE embeddings and cross-layer sharing."""

    subformer_sharing: str = _f(
        "sandwich",
        "cross-layer sharing of each stack: sandwich (first and last independent, middle "
        "shared), all, all-independent-ffn, all-except-last, every-2, none (Subformer Table "
        "2); LayerNorms are never shared",
        choices=SUBFORMER_SHARING,
    )
    subformer_sandwich_dim: int | None = _f(
        None,
        "width d_s of the shared middle layers (sandwich only; default: the model width)",
        type=int,
        metavar="D",
    )
    subformer_sandwich_ffn_dim: int | None = _f(
        None,
        "FFN width of the middle layers (default: the model's FFN width if d_s = d, else 4 d_s)",
        type=int,
        metavar="D",
    )
    subformer_sandwich_heads: int | None = _f(
        None,
        "attention heads of the middle layers (default: the model's heads if d_s = d, "
        "else d_s // 64, d_s // 128 above 1024)",
        type=int,
        metavar="H",
    )
    safe_dim: int = _f(
        0, "SAFE reduction (embedding) dimension r; 0: plain embeddings", type=int, metavar="R"
    )
    safe_heads: int | None = _f(
        None,
        "attention heads of the SAFE block (default: r // 64, the authors' rule)",
        type=int,
        metavar="H",
    )
    safe_output: str = _f(
        "linear",
        "with SAFE and a tied output table: map d -> r with one Linear (linear, the "
        "authors' code) or the paper's two-layer MLP d -> 2r -> r (mlp)",
        choices=("linear", "mlp"),
    )
    subformer_init: str = _f(
        DEFAULT_INIT,
        "initialisation: bert-safe-table (the default: the authors' BERT init, "
        "N(0, 0.02), biases 0, pad rows 0, with a SAFE token table (--safe-dim) drawn as fairseq "
        "draws it, N(0, r^-1/2): unit-scale tokens whatever the SAFE width; without SAFE the "
        "authors' init as it is), bert (the authors' init as it is, the paper's MT setup; at "
        "small --safe-dim it did not learn to read the source here: "
        "lab/notes/subformer-source.md) or fairseq (fairseq's defaults)",
        choices=INITS,
    )


def _sf(dim=512, ffn=None, layers=6, **extra):
    """A Subformer MT shape: the decoder follows the encoder, heads follow the width."""
    return {
        "encoder_embed_dim": dim,
        "encoder_ffn_embed_dim": ffn or 4 * dim,
        "encoder_attention_heads": lambda a: subformer_heads(a.encoder_embed_dim),
        "encoder_layers": layers,
        "decoder_embed_dim": lambda a: a.encoder_embed_dim,
        "decoder_ffn_embed_dim": lambda a: a.encoder_ffn_embed_dim,
        "decoder_attention_heads": lambda a: subformer_heads(a.decoder_embed_dim),
        "decoder_layers": lambda a: a.encoder_layers,
        "share_all_embeddings": True,
        **extra,
    }


_SF = SubformerConfig()


def _sandwich(safe_dim=0, dim=None, ffn=None, sharing="sandwich"):
    return dataclasses.replace(
        _SF,
        safe_dim=safe_dim,
        subformer_sandwich_dim=dim,
        subformer_sandwich_ffn_dim=ffn,
        subformer_sharing=sharing,
    )


SUBFORMER_PRESETS: dict[str, Preset] = {
    "subformer": Preset(
        "subformer",
        _SF,
        _sf(),
        base_architecture,
        "Transformer-base widths with sandwich sharing, no SAFE (Tables 2/3 'Only SANDWICH', "
        "38.5M at V = 32,000). --subformer-sharing selects Table 2's other variants.",
    ),
    "subformer_only_safe": Preset(
        "subformer",
        _sandwich(safe_dim=256, sharing="none"),
        _sf(),
        base_architecture,
        "Table 3 'Only SAFE, d_e = 256': Transformer-base with SAFE, no sharing.",
    ),
    "subformer_small": Preset(
        "subformer",
        _sandwich(256, 768, 2048),
        _sf(layers=8),
        base_architecture,
        "Table 3 SUBFORMER-SMALL: d 512, d_s 768 (FFN 2048, the code's default), r 256, 8-8.",
    ),
    "subformer_base": Preset(
        "subformer",
        _sandwich(320, 1024, 3072),
        _sf(),
        base_architecture,
        "Table 3 SUBFORMER-BASE: d 512, d_s 1024, sandwich FFN 3072, r 320, 6-6.",
    ),
    "subformer_mid": Preset(
        "subformer",
        _sandwich(350, 768),
        _sf(dim=768),
        base_architecture,
        "Table 3 SUBFORMER-MID: d = d_s = 768 (FFN 3072), r 350, 6-6.",
    ),
    "subformer_xlarge": Preset(
        "subformer",
        _sandwich(512, 2048, 8192),
        _sf(dim=1024, dropout=0.3),
        base_architecture,
        "Table 4 SUBFORMER-XLARGE: d 1024 (FFN 4096), d_s 2048 (FFN 8192 = 4 d_s), r 512, 6-6.",
    ),
    "subformer_sandwich_big": Preset(
        "subformer",
        _SF,
        _sf(dim=1024, dropout=0.3),
        base_architecture,
        "Table 4 SANDWICH-BIG: Transformer-big widths with sandwich sharing, no SAFE.",
    ),
    "sandwich_big": Preset(
        "subformer",
        _SF,
        _sf(dim=1024, dropout=0.3),
        base_architecture,
        "The same as subformer_sandwich_big (the name the first recipes used).",
    ),
    "subformer_wmt_en_ro_small": Preset(
        "subformer",
        _sandwich(192, 512),
        _sf(dim=320),
        base_architecture,
        "Table 3 WMT'16 En-Ro small: d 320 (FFN 1280), d_s 512 (FFN 2048), r 192, 6-6.",
    ),
    "subformer_wmt_en_ro_base": Preset(
        "subformer",
        _sandwich(384, 640),
        _sf(),
        base_architecture,
        "Table 3 WMT'16 En-Ro base: d 512, d_s 640 (FFN 2560), r 384, 6-6 (43.1M; the paper "
        "prints 48M, which these widths do not give).",
    ),
    "subformer_cnn_dm": Preset(
        "subformer",
        _sandwich(256, 1024, 3072),
        _sf(share_all_embeddings=False, share_decoder_input_output_embed=True),
        base_architecture,
        "Table 6 CNN-DailyMail: SUBFORMER-BASE with r 256 (d 512, d_s 1024, FFN 3072); separate "
        "source and target tables (decoder input/output tied), as Edunov et al.'s 77M "
        "Transformer baseline.",
    ),
    "subformer_lm_wiki103": Preset(
        "subformer_lm",
        dataclasses.replace(
            _SF,
            subformer_sandwich_dim=2048,
            subformer_sandwich_ffn_dim=6144,
            subformer_init="fairseq",
        ),
        {
            "decoder_layers": 12,
            "decoder_embed_dim": 768,
            "decoder_ffn_embed_dim": 4096,
            "decoder_attention_heads": lambda a: subformer_heads(a.decoder_embed_dim),
        },
        transformer_lm_baevski_wiki103,
        "Table 5: d 768 (FFN 4096), d_s 2048 (FFN 6144), 12 layers, adaptive input/softmax of "
        "transformer_lm_wiki103; 96.3M at 267,744 types.",
        96.3,
        267744,
    ),
}
"""Architecture name -> :class:`~lightcompress.models.presets.Preset` of Subformer (MT and LM)."""
