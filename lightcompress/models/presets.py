"""Presets: every named architecture of the compressed Transformer, in one table.

A preset is a family configuration (a dataclass: the family's flags and their defaults, as
fairseq's ``TransformerConfig`` does for the Transformer) + the Transformer's shape (layers,
widths, heads, shared embeddings) + the fairseq base architecture that fills in the rest.
:func:`register_presets` registers each entry of :data:`PRESETS` with fairseq under its name;
the tests and the recipe headers read the same table (``PRESETS[name].paper_params``).

The family turns its configuration into spec text (``LightformerModel.spec_text``,
``HypoformerModel.spec_text``); ``--lc-spec`` replaces it for any preset.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from fairseq.models import register_model_architecture
from fairseq.models.transformer import base_architecture
from fairseq.models.transformer.transformer_legacy import transformer_iwslt_de_en
from fairseq.models.transformer_lm import transformer_lm_baevski_wiki103

from lightcompress.modules.safe import subformer_heads

__all__ = [
    "ADMIN_MODES",
    "HEADS",
    "PRESETS",
    "TABLE2",
    "TABLE5",
    "VOCAB",
    "CompressionConfig",
    "HypoformerConfig",
    "LightformerConfig",
    "Preset",
    "SmartformerConfig",
    "SubformerConfig",
    "add_config_args",
    "own_fields",
    "register_presets",
]

from lightcompress.admin import ADMIN_MODES


def _f(default, help, **meta):
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class CompressionConfig:
    """Flags every compressed family has."""

    lc_spec: str | None = _f(
        None,
        "a compression spec ('pattern = kind(params); ...', grammar in "
        "lightcompress.modules.spec and docs/architecture.md) used instead of the rules the "
        "family's flags generate",
        metavar="SPEC",
    )
    lc_encoder_groups: int = _f(
        0,
        "number of unique encoder layers: L layers in N contiguous groups share all "
        "parameters (0: no sharing)",
        type=int, metavar="N",
    )  # fmt: skip
    lc_decoder_groups: int = _f(
        0, "the same for the decoder (0: no sharing)", type=int, metavar="N"
    )
    admin_init: str = _f(
        "none",
        "residual scaling x * omega + f(x) of post-LN layers: profile (Liu et al. 2020, one "
        "training batch), closed-form (admin-torch, sqrt((N+1)/ln(N+1) - 1)) or none",
        choices=ADMIN_MODES,
    )
    admin_profile_file: str | None = _f(
        None,
        "with --admin-init profile: read the omegas from PATH if it exists, otherwise profile "
        "on the first training batch and write them to PATH (JSON)",
        metavar="PATH",
    )


@dataclass(frozen=True)
class LightformerConfig(CompressionConfig):
    """LightFormer (Lv et al.): one rank for every attention and FFN map, one for the table."""

    lc_encoder_groups: int = _f(
        6, CompressionConfig.__dataclass_fields__["lc_encoder_groups"].metadata["help"],
        type=int, metavar="N",
    )  # fmt: skip

    lc_rank: int | None = _f(
        80, "rank of every factorized attention and FFN map (paper: 80)", type=int, metavar="R"
    )
    lc_rank_ratio: float | None = _f(
        None,
        "instead of --lc-rank: per-matrix rank floor(mn / (P (m + n))) (LightFormer Appendix "
        "C, Eq. 12); overrides --lc-rank",
        type=float, metavar="P",
    )  # fmt: skip
    lc_embed_rank: int | None = _f(
        135, "rank of the factorized embedding table (paper IWSLT: 135)", type=int, metavar="R"
    )
    lc_embed_rank_ratio: float | None = _f(
        None, "instead of --lc-embed-rank: the Eq. 12 compression ratio", type=float, metavar="P"
    )
    lc_factorize: str = _f(
        "attn,ffn,embed",
        "comma-separated sublayers to factorize: attn, ffn, embed; or none",
        metavar="PARTS",
    )


EMBED_KINDS = ("dense", "htt", "tt", "lowrank")
LINEAR_KINDS = ("dense", "htt", "hmf", "tt", "lowrank")
FUSED_KINDS = ("dense", "htt", "hmf", "tt", "lowrank")


@dataclass(frozen=True)
class HypoformerConfig(CompressionConfig):
    """Hypoformer (Wu et al.): the kind and settings of each sublayer (registry kind names)."""

    admin_init: str = _f("profile", CompressionConfig.__dataclass_fields__["admin_init"]
                         .metadata["help"], choices=ADMIN_MODES)  # fmt: skip
    hypo_embed: str = _f(
        "htt", "token embedding: htt (HTT EMB, the paper), dense, tt (alpha 0) or lowrank (MF)",
        choices=EMBED_KINDS,
    )  # fmt: skip
    hypo_embed_alpha: float = _f(
        0.5, "dense share of the embedding columns (Table 5 'HTT EMB alpha')", type=float,
        metavar="A",
    )  # fmt: skip
    hypo_embed_cores: int = _f(3, "TT cores of the embedding (Table 5 D1)", type=int, metavar="D")
    hypo_embed_rank: int = _f(
        4, "TT ranks of the embedding (Table 5 R1; 0 = maximal/exact) or the rank of a lowrank "
        "embedding", type=int, metavar="R",
    )  # fmt: skip
    hypo_self_attn: str = _f(
        "htt", "fused Q/K/V map of every self-attention: htt (HTT SAN, the paper), hmf, tt, "
        "lowrank or dense", choices=FUSED_KINDS,
    )  # fmt: skip
    hypo_attn_alpha: float = _f(
        0.25, "dense share of the fused Q/K/V columns (Table 5 'HTT SAN alpha', the paper's "
        "beta); also used by a factorized --hypo-cross-attn", type=float, metavar="B",
    )  # fmt: skip
    hypo_attn_cores: int = _f(3, "TT cores of the attention maps (Table 5 D2)", type=int,
                              metavar="D")  # fmt: skip
    hypo_attn_rank: int = _f(
        2, "TT ranks (Table 5 R2; 0 = maximal/exact) or low-rank rank of the attention maps",
        type=int, metavar="R",
    )  # fmt: skip
    hypo_attn_out_proj: bool = _f(
        False, "keep a dense output projection in every attention (the paper's Eq. 5 has none; "
        "needed to transfer a dense teacher exactly)", flag="store_true",
    )  # fmt: skip
    hypo_cross_attn: str = _f(
        "dense", "each of the cross-attention's Q, K, V maps (the paper leaves them dense)",
        choices=LINEAR_KINDS,
    )  # fmt: skip
    hypo_ffn: str = _f(
        "lowrank", "both FFN maps: lowrank (LMF FFN, the paper), htt, hmf, tt or dense",
        choices=LINEAR_KINDS,
    )  # fmt: skip
    hypo_ffn_rank: int = _f(
        64, "rank of the FFN maps (Table 5 'LMF FFN R'; TT ranks for tt/htt)", type=int,
        metavar="R",
    )  # fmt: skip
    hypo_ffn_alpha: float = _f(
        0.25, "dense share of the FFN output columns (htt/hmf FFN)", type=float, metavar="A"
    )
    hypo_ffn_cores: int = _f(3, "TT cores of the FFN maps (tt/htt FFN)", type=int, metavar="D")


@dataclass(frozen=True)
class SmartformerConfig(CompressionConfig):
    """Smartformer (CPAC attention): every Q, K, V projection a CP decomposition over the
    (heads, d_k) view of its input, the output projection dense. The paper chooses per-layer
    ranks with an A2C agent during training (vision / time series); without that search the
    ranks are fixed by ``--sm-rank`` (our default 64: the paper gives no NMT ranks); the task
    ``translation_smartformer --sm-search`` runs that search inside fairseq-train."""

    sm_rank: int = _f(
        64, "CP rank R of every CPAC Q/K/V projection (R (d + heads + d_k) parameters each)",
        type=int, metavar="R",
    )  # fmt: skip
    sm_attn: str = _f(
        "all", "which attentions get CPAC projections: all (encoder self, decoder self and "
        "cross) or self (self-attention only)", choices=("all", "self"),
    )  # fmt: skip


SUBFORMER_SHARING = ("all", "all-except-last", "all-independent-ffn", "every-2", "none",
                     "sandwich")  # fmt: skip


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
        None, "width d_s of the shared middle layers (sandwich only; default: the model width)",
        type=int, metavar="D",
    )  # fmt: skip
    subformer_sandwich_ffn_dim: int | None = _f(
        None, "FFN width of the middle layers (default: the model's FFN width if d_s = d, else "
        "4 d_s)", type=int, metavar="D",
    )  # fmt: skip
    subformer_sandwich_heads: int | None = _f(
        None, "attention heads of the middle layers (default: the model's heads if d_s = d, "
        "else d_s // 64, d_s // 128 above 1024)", type=int, metavar="H",
    )  # fmt: skip
    safe_dim: int = _f(
        0, "SAFE reduction (embedding) dimension r; 0: plain embeddings", type=int, metavar="R"
    )
    safe_heads: int | None = _f(
        None, "attention heads of the SAFE block (default: r // 64, the authors' rule)",
        type=int, metavar="H",
    )  # fmt: skip
    safe_output: str = _f(
        "linear", "with SAFE and a tied output table: map d -> r with one Linear (linear, the "
        "authors' code) or the paper's two-layer MLP d -> 2r -> r (mlp)",
        choices=("linear", "mlp"),
    )  # fmt: skip
    subformer_init: str = _f(
        "bert", "initialisation: bert (N(0, 0.02), biases 0, pad rows 0; the paper's MT setup) "
        "or fairseq's defaults", choices=("bert", "fairseq"),
    )  # fmt: skip


@dataclass(frozen=True)
class Preset:
    """One named architecture.

    Attributes
    ----------
    model : str
        The fairseq model name (family) it belongs to.
    config : dataclass instance
        The family configuration (flag defaults).
    transformer : dict
        fairseq Transformer settings (``encoder_layers``, widths, heads, ...), in order; a
        callable value is computed from the arguments set so far (``decoder_embed_dim``
        follows ``encoder_embed_dim``).
    base : callable
        fairseq's architecture function that sets the remaining Transformer defaults.
    doc : str
        What it is (paper table and row); shown by ``fairseq-train --help`` lists.
    paper_params : float, optional
        The paper's parameter count in millions.
    vocab : int, optional
        The joined vocabulary at which ``paper_params`` is counted.
    """

    model: str
    config: object
    transformer: dict
    base: object
    doc: str
    paper_params: float | None = None
    vocab: int | None = None

    def apply(self, args) -> None:
        """Set this preset's defaults on ``args`` (anything the user set wins)."""
        for key, value in self.transformer.items():
            if getattr(args, key, None) is None:
                setattr(args, key, value(args) if callable(value) else value)
        for f in dataclasses.fields(self.config):
            if getattr(args, f.name, None) is None:
                setattr(args, f.name, getattr(self.config, f.name))
        self.base(args)


# --------------------------------------------------------------------------------------------
# LightFormer
# --------------------------------------------------------------------------------------------

_LF = LightformerConfig()
_LF_DEPTH = {"encoder_layers": 18, "decoder_layers": 3, "share_all_embeddings": True}

# --------------------------------------------------------------------------------------------
# Hypoformer
# --------------------------------------------------------------------------------------------

# Table 5: (task, row, E, D, d_model, d_ff, emb alpha, D1, R1, san alpha, D2, R2, ffn R, params M)
TABLE5 = {
    "hypoformer_iwslt_de_en": ("de-en", 1, 12, 2, 512, 1024, 0.5, 3, 4, 0.25, 3, 2, 64, 9.8),
    "hypoformer_iwslt_de_en_row2": ("de-en", 2, 12, 1, 512, 1024, 0.5, 3, 4, 0.25, 3, 2, 64, 8.6),
    "hypoformer_iwslt_de_en_row3": ("de-en", 3, 12, 2, 512, 1024, 0.5, 3, 4, 0.25, 3, 2, 32, 8.4),
    "hypoformer_iwslt_de_en_row4": ("de-en", 4, 12, 2, 256, 1024, 0.5, 3, 4, 0.25, 3, 4, 32, 3.6),
    "hypoformer_iwslt_de_en_row5": (
        "de-en", 5, 12, 2, 256, 1024, 0.125, 3, 4, 0.25, 3, 4, 16, 3.0),
    "hypoformer_wmt_en_de": ("en-de", 6, 12, 2, 512, 2048, 0.25, 3, 16, 0.5, 2, 4, 128, 21.3),
    "hypoformer_wmt_en_de_row7": ("en-de", 7, 12, 1, 512, 2048, 0.25, 3, 16, 0.5, 2, 4, 256, 23.6),
    "hypoformer_wmt_en_de_row8": ("en-de", 8, 12, 2, 384, 2048, 0.25, 3, 16, 0.5, 2, 3, 96, 11.4),
    "hypoformer_wmt_en_de_row9": ("en-de", 9, 12, 2, 256, 1024, 0.25, 3, 16, 0.5, 2, 3, 96, 7.7),
    "hypoformer_wmt_en_de_row10": ("en-de", 10, 12, 1, 256, 1024, 0.25, 3, 16, 0.5, 2, 3, 96, 7.1),
    "hypoformer_wmt_en_de_row11": ("en-de", 11, 12, 2, 256, 512, 0.125, 3, 16, 0.5, 2, 3, 64, 5.4),
    "hypoformer_wmt_en_ro": ("en-ro", 12, 12, 2, 512, 2048, 0.125, 3, 32, 0.25, 3, 4, 96, 13.9),
    "hypoformer_wmt_en_ro_row13": ("en-ro", 13, 12, 2, 256, 1024, 0.25, 3, 16, 0.25, 3, 4, 64, 5.6),
}  # fmt: skip
"""Every row of Table 5 as printed, keyed by its architecture name."""

VOCAB = {"de-en": 10152, "en-de": 37232, "en-ro": 34976}
"""Joined dictionary sizes (4 specials included) at which the paper's sizes are counted."""

HEADS = {"de-en": 4, "en-de": 8, "en-ro": 8}  # Tables 6 and 7


def _hypo(layers, dim, ffn, heads, embed, attn, ffn_kind, cross="dense"):
    """A Hypoformer preset's (config, transformer); kind tuples are (kind, alpha, cores, rank)."""
    config = HypoformerConfig(
        hypo_embed=embed[0], hypo_embed_alpha=embed[1], hypo_embed_cores=embed[2],
        hypo_embed_rank=embed[3], hypo_self_attn=attn[0], hypo_attn_alpha=attn[1],
        hypo_attn_cores=attn[2], hypo_attn_rank=attn[3], hypo_ffn=ffn_kind[0],
        hypo_ffn_alpha=ffn_kind[1], hypo_ffn_cores=ffn_kind[2], hypo_ffn_rank=ffn_kind[3],
        hypo_cross_attn=cross,
    )  # fmt: skip
    transformer = {"encoder_layers": layers[0], "decoder_layers": layers[1],
                   "share_all_embeddings": True}  # fmt: skip
    for side in ("encoder", "decoder"):
        transformer.update({f"{side}_embed_dim": dim, f"{side}_ffn_embed_dim": ffn,
                            f"{side}_attention_heads": heads})  # fmt: skip
    return config, transformer


def _table5(name):
    task, row, enc, dec, d, ff, ea, d1, r1, sa, d2, r2, fr, params = TABLE5[name]
    config, transformer = _hypo((enc, dec), d, ff, HEADS[task], ("htt", ea, d1, r1),
                                ("htt", sa, d2, r2), ("lowrank", 0.25, 3, fr))  # fmt: skip
    doc = (
        f"Table 5 row {row} ({task}, {enc}-{dec}, d {d}, d_ff {ff}, HTT EMB {ea}/{d1}/{r1}, "
        f"HTT SAN {sa}/{d2}/{r2}, LMF FFN {fr}): paper {params}M."
    )
    return Preset("hypoformer", config, transformer, base_architecture, doc, params, VOCAB[task])


# Table 2 decomposition baselines (WMT'14 En-De / WMT'16 En-Ro, 12-2). The paper gives no
# settings for them. Rules used here: the same dense shares as the Hypoformer of the scale
# ("we control the same alpha of HTT and HMF"); HTT Transformer = Hypoformer with an HTT FFN
# instead of LMF; HMF = HTT with low-rank instead of TT parts; MF = every map and the embedding
# low-rank at one rank; TT = every map (cross-attention included) and the embedding TT at the
# given TT-ranks. Ranks of MF / HMF are the round values nearest to the paper's sizes (one
# value for both tasks). Computed sizes vs the paper: see the tests and the README table.
# (embedding, self-attention, FFN, cross-attention); kind tuples: (kind, alpha, cores, rank)
_T2_BASE = {  # d 512, d_ff 2048
    "mf": (("lowrank", 0, 3, 128), ("lowrank", 0, 3, 128), ("lowrank", 0, 3, 128), "dense"),
    "hmf": (("htt", 0.25, 3, 16), ("hmf", 0.5, 3, 16), ("hmf", 0.25, 3, 16), "dense"),
    "htt": (("htt", 0.25, 3, 16), ("htt", 0.5, 2, 4), ("htt", 0.25, 2, 4), "dense"),
    "tt2": (("tt", 0, 3, 2), ("tt", 0, 3, 2), ("tt", 0, 3, 2), "tt"),
    "tt32": (("tt", 0, 3, 32), ("tt", 0, 3, 32), ("tt", 0, 3, 32), "tt"),
}
_T2_SMALL = {  # d 256, d_ff 1024; "hypoformer" = Table 5 row 13's settings
    "mf": (("lowrank", 0, 3, 64), ("lowrank", 0, 3, 64), ("lowrank", 0, 3, 64), "dense"),
    "hmf": (("htt", 0.25, 3, 16), ("hmf", 0.25, 3, 8), ("hmf", 0.25, 3, 8), "dense"),
    "htt": (("htt", 0.25, 3, 16), ("htt", 0.25, 3, 4), ("htt", 0.25, 3, 4), "dense"),
    "hypoformer": (("htt", 0.25, 3, 16), ("htt", 0.25, 3, 4), ("lowrank", 0, 3, 64), "dense"),
}

TABLE2 = {
    "hypoformer_wmt_en_de_mf": ("en-de", "base", "mf", (512, 2048), 20.7),
    "hypoformer_wmt_en_de_hmf": ("en-de", "base", "hmf", (512, 2048), 21.0),
    "hypoformer_wmt_en_de_htt": ("en-de", "base", "htt", (512, 2048), 19.4),
    "hypoformer_wmt_en_de_tt2": ("en-de", "base", "tt2", (512, 2048), 1.0),
    "hypoformer_wmt_en_de_tt32": ("en-de", "base", "tt32", (512, 2048), 5.8),
    "hypoformer_wmt_en_de_small_mf": ("en-de", "small", "mf", (256, 1024), 5.8),
    "hypoformer_wmt_en_de_small_hmf": ("en-de", "small", "hmf", (256, 1024), 5.7),
    "hypoformer_wmt_en_de_small_htt": ("en-de", "small", "htt", (256, 1024), 5.7),
    "hypoformer_wmt_en_de_small_hypoformer": ("en-de", "small", "hypoformer", (256, 1024), 5.7),
    "hypoformer_wmt_en_ro_mf": ("en-ro", "base", "mf", (512, 2048), 14.8),
    "hypoformer_wmt_en_ro_hmf": ("en-ro", "base", "hmf", (512, 2048), 20.8),
    "hypoformer_wmt_en_ro_htt": ("en-ro", "base", "htt", (512, 2048), 19.2),
    "hypoformer_wmt_en_ro_tt2": ("en-ro", "base", "tt2", (512, 2048), 1.0),
    "hypoformer_wmt_en_ro_tt32": ("en-ro", "base", "tt32", (512, 2048), 5.8),
    "hypoformer_wmt_en_ro_small_mf": ("en-ro", "small", "mf", (256, 1024), 5.7),
    "hypoformer_wmt_en_ro_small_hmf": ("en-ro", "small", "hmf", (256, 1024), 5.6),
    "hypoformer_wmt_en_ro_small_htt": ("en-ro", "small", "htt", (256, 1024), 5.6),
    "hypoformer_wmt_en_ro_small_hypoformer": ("en-ro", "small", "hypoformer", (256, 1024), 5.6),
}
"""name -> (task, scale, method, (d, d_ff), paper params M) of the Table 2 architectures."""


def _table2(name):
    task, scale, method, dims, paper = TABLE2[name]
    embed, attn, ffn, cross = (_T2_BASE if scale == "base" else _T2_SMALL)[method]
    config, transformer = _hypo((12, 2), dims[0], dims[1], HEADS[task], embed, attn, ffn, cross)
    doc = (
        f"Table 2 {method} ({task}, {scale}: d {dims[0]}, d_ff {dims[1]}): embedding {embed}, "
        f"self-attention {attn}, FFN {ffn}, cross-attention {cross}; paper {paper}M."
    )
    return Preset("hypoformer", config, transformer, base_architecture, doc, paper, VOCAB[task])


# --------------------------------------------------------------------------------------------
# Subformer
# --------------------------------------------------------------------------------------------


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
    return dataclasses.replace(_SF, safe_dim=safe_dim, subformer_sandwich_dim=dim,
                               subformer_sandwich_ffn_dim=ffn, subformer_sharing=sharing)  # fmt: skip


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------

PRESETS: dict[str, Preset] = {
    # LightFormer (sizes: lightcompress/models/lightformer.py and tests/test_lightformer.py)
    "lightformer": Preset(
        "lightformer",
        _LF,
        _LF_DEPTH,
        base_architecture,
        "Transformer-base widths, 18-3, 6 encoder groups, rank 80 maps, embedding rank 135.",
    ),
    "lightformer_iwslt_de_en": Preset(
        "lightformer",
        _LF,
        _LF_DEPTH,
        transformer_iwslt_de_en,
        "Paper's IWSLT'14 De-En LightFormer (Tables 2, 6 r5/r6, 7, 8): 18-3, 6 groups, 7.7M.",
        7.7,
        10200,
    ),
    "lightformer_iwslt_de_en_dense": Preset(
        "lightformer",
        dataclasses.replace(_LF, lc_encoder_groups=0, lc_factorize="none"),
        _LF_DEPTH,
        transformer_iwslt_de_en,
        "Table 6 r2: the dense 18-3 Transformer (52.5M); also the SVD-transfer teacher.",
        52.5,
        10200,
    ),
    "lightformer_iwslt_de_en_sharing": Preset(
        "lightformer",
        dataclasses.replace(_LF, lc_encoder_groups=9, lc_factorize="none"),
        _LF_DEPTH,
        transformer_iwslt_de_en,
        "Table 6 r3: dense 18-3 with weight sharing, 9 unique encoder layers (33.6M).",
        33.6,
        10200,
    ),
    "lightformer_iwslt_de_en_lmf": Preset(
        "lightformer",
        dataclasses.replace(_LF, lc_encoder_groups=0),
        _LF_DEPTH,
        transformer_iwslt_de_en,
        "Table 6 r4: LMF (rank 80, embedding 135) without sharing (14.6M).",
        14.6,
        10200,
    ),
    "lightformer_iwslt_de_en_lmf_sharing": Preset(
        "lightformer",
        _LF,
        _LF_DEPTH,
        transformer_iwslt_de_en,
        "Table 6 r5 (random init) / r6 (SVD weight transfer): LMF + sharing, 7.7M.",
        7.7,
        10200,
    ),
    "lightformer_wmt_en_de": Preset(
        "lightformer",
        dataclasses.replace(_LF, lc_embed_rank=393),
        _LF_DEPTH,
        base_architecture,
        "Table 2 WMT'14 En-De (22.5M at a 37,232-type joined vocabulary, where "
        "transformer_wmt_en_de has the paper's 63.2M): base widths, 18-3, 6 groups, rank 80, "
        "embedding rank 393.",
        22.5,
        37232,
    ),
    "lightformer_wmt_en_ro": Preset(
        "lightformer",
        dataclasses.replace(_LF, lc_embed_rank=214),
        _LF_DEPTH,
        base_architecture,
        "Table 3 WMT'16 En-Ro (15.3M at a 34,976-type joined vocabulary, where "
        "transformer_wmt_en_de has the paper's 62M): base widths, 18-3, 6 groups, rank 80, "
        "embedding rank 214.",
        15.3,
        34976,
    ),
    "lightformer_gigaword": Preset(
        "lightformer",
        dataclasses.replace(_LF, lc_embed_rank=371),
        _LF_DEPTH,
        base_architecture,
        "Table 4 GigaWord summarization: base widths, 18-3, 6 groups, rank 80; embedding rank "
        "371 gives the paper's 13.04M at the 13,952-type vocabulary where the base "
        "Transformer has its 51.28M.",
        13.04,
        13952,
    ),
    # Hypoformer: Table 5 rows (Admin profiling, HTT EMB + HTT SAN + LMF FFN)
    "hypoformer": Preset(
        "hypoformer",
        HypoformerConfig(),
        _hypo(
            (12, 2), 512, 1024, 4, ("htt", 0.5, 3, 4), ("htt", 0.25, 3, 2), ("lowrank", 0.25, 3, 64)
        )[1],
        base_architecture,
        "Table 5 row 1 settings (IWSLT'14 De-En 12-2, 9.8M); fairseq base defaults otherwise.",
    ),
    **{name: _table5(name) for name in TABLE5},
    # Hypoformer: Table 2 decomposition baselines
    **{name: _table2(name) for name in TABLE2},
    # Smartformer: CPAC Q/K/V at fixed ranks (the A2C rank search: task translation_smartformer)
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
    # Subformer (sizes: lightcompress/models/subformer.py and tests/test_subformer.py)
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
"""Architecture name -> :class:`Preset`, for every compressed architecture of the plugin."""


def add_config_args(parser, config_cls, title: str) -> None:
    """Add one flag per field of ``config_cls`` (``--lc-rank`` for ``lc_rank``), with the
    field's ``metadata["help"]`` and no default (the presets set them)."""
    group = parser.add_argument_group(title)
    for f in dataclasses.fields(config_cls):
        meta = dict(f.metadata)
        kwargs: dict = {"help": meta.get("help", "")}
        if meta.get("flag") == "store_true":
            kwargs.update(action="store_true", default=None)
        else:
            kwargs["type"] = meta.get("type", str)
            for key in ("choices", "metavar"):
                if key in meta:
                    kwargs[key] = meta[key]
        group.add_argument("--" + f.name.replace("_", "-"), **kwargs)


def own_fields(config_cls, common_cls):
    """A dataclass of the fields of ``config_cls`` that ``common_cls`` does not have (a
    family's own flags)."""
    common = {f.name for f in dataclasses.fields(common_cls)}
    return dataclasses.make_dataclass(
        config_cls.__name__ + "Flags",
        [(f.name, f.type, f) for f in dataclasses.fields(config_cls) if f.name not in common],
    )


def register_presets(model_name: str) -> None:
    """Register every preset of ``model_name`` as a fairseq architecture."""
    for name, preset in PRESETS.items():
        if preset.model != model_name:
            continue

        def arch(args, preset=preset):
            preset.apply(args)

        arch.__name__ = name
        arch.__doc__ = preset.doc
        register_model_architecture(model_name, name)(arch)
