"""Hypoformer (Wu et al.): HTT embedding + fused-QKV HTT self-attention + LMF FFN, with Admin.

The compressed Transformer of the plugin (:mod:`lightcompress.models.compressed`) with a spec
made from the ``--hypo-*`` flags (:func:`hypoformer_spec_text`); the named architectures are
the ``hypoformer*`` entries of :data:`lightcompress.models.presets.PRESETS` (Table 5 rows and
the Table 2 baselines).

The reading that reproduces Table 5 (rows 1-4, 6, 9, 12 to the printed 0.1M, checked by
counting real models in ``tests/test_hypoformer.py``):

- **HTT EMB**: one table shared by encoder input, decoder input and output projection
  (``--share-all-embeddings``): ``alpha d`` dense columns + a TT matrix (3 cores, ranks R1)
  over a padded vocabulary (``V_pad = prod(pad_factorize(V, 3)) >= V``; rows ``>= V`` dropped).
  At inference the full table is restored once (HTTEmbedding caches it in eval/no-grad).
- **HTT SAN**: ``W = [W_q, W_k, W_v]`` (``3d x d``) is one HTT layer, ``3 beta d`` dense
  columns + TT (cores D2, ranks R2), split per Eq. 8 (:mod:`lightcompress.modules.fused_qkv`),
  and **no output projection** (the paper's Eq. 5 has none): the concatenated heads are the
  sublayer output.
- **Cross-attention**: the paper does not compress it; we keep three dense maps (Q, K, V with
  biases) and, consistently with the self-attention, **no output projection**. This is the
  only choice under which rows 1-4 fit (with a dense ``d x d`` output projection per
  cross-attention row 1 would be 10.31M, not 9.8M).
- **LMF FFN**: both FFN maps low-rank ``U V`` (rank R) with the bias on the output (Eq. 10).
- **Admin**: one ``d``-vector omega per residual (``x_i = LN(x_(i-1) * omega_i + f_i(x_(i-1)))``,
  :mod:`lightcompress.admin`), counted in the parameters.

At the IWSLT'14 joined vocabulary V = 10,152 (a padded TT vocabulary 21x22x22) row 1 has
exactly 9,782,672 parameters (7,179,904 without the embedding: Table 4's "7.2M #Params").
WMT'14 En-De: V = 37,232 (where fairseq's transformer_wmt_en_de has Table 8's 63.2M and the
12-2 teacher 65.3M); WMT'16 En-Ro: V = 34,976 (transformer 12-2: Table 2's 64.1M).
Rows 5, 7, 8, 11 and 13 do not reproduce under this (or any consistent) reading and are built
as printed; row 10 is 7.18M at V = 37,232 (paper 7.1M). See ``TABLE5`` and the tests.

``--hypo-attn-out-proj`` adds dense output projections to every attention (used by the
TT weight-transfer converter to reproduce a dense teacher exactly); the ``--hypo-*`` kinds
also build the decomposition baselines of Table 2 (MF, TT, HMF, HTT Transformers).

**TT weight transfer** (beyond the papers; ``lightcompress-convert --arch hypoformer_*``,
the declaration's :class:`~lightcompress.models.family.Transfer`, run by
:mod:`lightcompress.convert.family`): a trained dense Transformer -> a Hypoformer.

Every factorized part of the student is initialised from the teacher's matching dense weight
at the student's own shapes and ranks:

- HTT embedding: the first ``alpha d`` columns are copied, the rest TT-SVD'd over the padded
  vocabulary (:meth:`HTTEmbedding.from_embedding`);
- fused Q/K/V: ``[W_q; W_k; W_v]`` rows permuted to the Eq. 8 layout, the dense part sliced,
  the rest TT-SVD'd (:meth:`FusedQKV.from_linears`);
- FFN, factorized cross-attention maps: SVD / TT-SVD (``from_linear``); dense maps, LayerNorms
  and biases are copied; Admin omegas are set to 1 (the teacher's plain ``x + f(x)``) and
  marked as profiled.

At TT rank 0 (= maximal, exact; ``--hypo-embed-rank 0 --hypo-attn-rank 0``), full low-rank
ranks and ``--hypo-attn-out-proj``, the converted model translates exactly like the teacher.
Without ``--hypo-attn-out-proj`` (the paper's design) the teacher's attention output
projections have no place in the student; they cannot be folded into the value map (the
projection mixes heads), so the converter refuses unless ``--hypo-drop-out-proj`` is given
(an approximation: the student is then a fine-tuning start, not an equivalent model).
Depths, widths and head counts must match the teacher.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairseq.models.transformer import base_architecture

from lightcompress.admin import ADMIN_MODES
from lightcompress.errors import ConfigError
from lightcompress.models.compressed import HTTSelfAttention
from lightcompress.models.family import Family, Transfer, register_family
from lightcompress.models.presets import (
    CompressionConfig,
    Preset,
    add_config_args,
    flag_field,
)

__all__ = [
    "EMBED_KINDS",
    "FUSED_KINDS",
    "HEADS",
    "HYPOFORMER",
    "LINEAR_KINDS",
    "TABLE2",
    "TABLE5",
    "VOCAB",
    "HTTSelfAttention",
    "HypoformerConfig",
    "HypoformerModel",
    "add_hypoformer_args",
    "hypoformer_spec_text",
    "table5_vocab",
]

_f = flag_field

# the registry kinds the --hypo-* flags can express (each with its alpha / cores / rank)
EMBED_KINDS = ("dense", "htt", "tt", "lowrank")
LINEAR_KINDS = ("dense", "htt", "hmf", "tt", "lowrank")
FUSED_KINDS = ("dense", "htt", "hmf", "tt", "lowrank")


@dataclass(frozen=True)
class HypoformerConfig(CompressionConfig):
    """Hypoformer (Wu et al.): the kind and settings of each sublayer (registry kind names)."""

    admin_init: str = _f(
        "profile",
        CompressionConfig.__dataclass_fields__["admin_init"].metadata["help"],
        choices=ADMIN_MODES,
    )
    hypo_embed: str = _f(
        "htt",
        "token embedding: htt (HTT EMB, the paper), dense, tt (alpha 0) or lowrank (MF)",
        choices=EMBED_KINDS,
    )
    hypo_embed_alpha: float = _f(
        0.5,
        "dense share of the embedding columns (Table 5 'HTT EMB alpha')",
        type=float,
        metavar="A",
    )
    hypo_embed_cores: int = _f(3, "TT cores of the embedding (Table 5 D1)", type=int, metavar="D")
    hypo_embed_rank: int = _f(
        4,
        "TT ranks of the embedding (Table 5 R1; 0 = maximal/exact) or the rank of a lowrank "
        "embedding",
        type=int,
        metavar="R",
    )
    hypo_self_attn: str = _f(
        "htt",
        "fused Q/K/V map of every self-attention: htt (HTT SAN, the paper), hmf, tt, "
        "lowrank or dense",
        choices=FUSED_KINDS,
    )
    hypo_attn_alpha: float = _f(
        0.25,
        "dense share of the fused Q/K/V columns (Table 5 'HTT SAN alpha', the paper's "
        "beta); also used by a factorized --hypo-cross-attn",
        type=float,
        metavar="B",
    )
    hypo_attn_cores: int = _f(
        3, "TT cores of the attention maps (Table 5 D2)", type=int, metavar="D"
    )
    hypo_attn_rank: int = _f(
        2,
        "TT ranks (Table 5 R2; 0 = maximal/exact) or low-rank rank of the attention maps",
        type=int,
        metavar="R",
    )
    hypo_attn_out_proj: bool = _f(
        False,
        "keep a dense output projection in every attention (the paper's Eq. 5 has none; "
        "needed to transfer a dense teacher exactly)",
        flag="store_true",
    )
    hypo_cross_attn: str = _f(
        "dense",
        "each of the cross-attention's Q, K, V maps (the paper leaves them dense)",
        choices=LINEAR_KINDS,
    )
    hypo_ffn: str = _f(
        "lowrank",
        "both FFN maps: lowrank (LMF FFN, the paper), htt, hmf, tt or dense",
        choices=LINEAR_KINDS,
    )
    hypo_ffn_rank: int = _f(
        64,
        "rank of the FFN maps (Table 5 'LMF FFN R'; TT ranks for tt/htt)",
        type=int,
        metavar="R",
    )
    hypo_ffn_alpha: float = _f(
        0.25, "dense share of the FFN output columns (htt/hmf FFN)", type=float, metavar="A"
    )
    hypo_ffn_cores: int = _f(3, "TT cores of the FFN maps (tt/htt FFN)", type=int, metavar="D")


def _kind_params(kind: str, alpha, cores, rank) -> str:
    """Spec parameters of a ``--hypo-*`` kind with its alpha / cores / rank flags."""
    if kind == "dense":
        return "dense"
    if kind == "lowrank":
        return f"lowrank(rank={rank})"
    if kind == "hmf":
        return f"hmf(alpha={alpha}, rank={rank})"
    if kind == "tt":
        return f"tt(ranks={rank}, num_cores={cores})"
    if kind == "htt":
        return f"htt(alpha={alpha}, ranks={rank}, num_cores={cores})"
    raise ConfigError(f"unknown kind {kind!r}")


def hypoformer_spec_text(args) -> str:
    """The compression spec of a Hypoformer configuration (``--lc-spec`` wins).

    HTT EMB on the (shared) table, the fused Q/K/V map of every self-attention
    (``*.self_attn.qkv_proj``), optional factorized cross-attention maps, no attention output
    projections (``identity``, the paper's Eq. 5) unless ``--hypo-attn-out-proj``, and the
    FFN maps.
    """
    if getattr(args, "lc_spec", None):
        return args.lc_spec
    a = args
    rules = []
    embed = _kind_params(a.hypo_embed, a.hypo_embed_alpha, a.hypo_embed_cores, a.hypo_embed_rank)
    if a.hypo_embed == "tt":  # a TT table is an HTT table without dense columns
        embed = f"tt(ranks={a.hypo_embed_rank}, num_cores={a.hypo_embed_cores})"
    if embed != "dense":
        tables = ["encoder.embed_tokens"]
        if not a.share_all_embeddings:
            tables.append("decoder.embed_tokens")
        rules.append(f"{', '.join(tables)} = {embed}")
    qkv = _kind_params(a.hypo_self_attn, a.hypo_attn_alpha, a.hypo_attn_cores, a.hypo_attn_rank)
    rules.append(
        f"encoder.layers.*.self_attn.qkv_proj, decoder.layers.*.self_attn.qkv_proj = {qkv}"
    )
    cross = _kind_params(a.hypo_cross_attn, a.hypo_attn_alpha, a.hypo_attn_cores, a.hypo_attn_rank)
    if cross != "dense":
        rules.append(f"decoder.layers.*.encoder_attn.[qkv]_proj = {cross}")
    if not a.hypo_attn_out_proj:
        rules.append("*.self_attn.out_proj, *.encoder_attn.out_proj = identity")
    ffn = _kind_params(a.hypo_ffn, a.hypo_ffn_alpha, a.hypo_ffn_cores, a.hypo_ffn_rank)
    if ffn != "dense":
        rules.append(
            f"encoder.layers.*.fc1, encoder.layers.*.fc2, decoder.layers.*.fc1, "
            f"decoder.layers.*.fc2 = {ffn}"
        )
    return ";\n".join(rules)


def _check(args) -> None:
    if getattr(args, "cross_self_attention", False):
        raise ConfigError("hypoformer does not support --cross-self-attention")


# --------------------------------------------------------------------------------------------
# presets
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
        hypo_embed=embed[0],
        hypo_embed_alpha=embed[1],
        hypo_embed_cores=embed[2],
        hypo_embed_rank=embed[3],
        hypo_self_attn=attn[0],
        hypo_attn_alpha=attn[1],
        hypo_attn_cores=attn[2],
        hypo_attn_rank=attn[3],
        hypo_ffn=ffn_kind[0],
        hypo_ffn_alpha=ffn_kind[1],
        hypo_ffn_cores=ffn_kind[2],
        hypo_ffn_rank=ffn_kind[3],
        hypo_cross_attn=cross,
    )
    transformer = {
        "encoder_layers": layers[0],
        "decoder_layers": layers[1],
        "share_all_embeddings": True,
    }
    for side in ("encoder", "decoder"):
        transformer.update(
            {
                f"{side}_embed_dim": dim,
                f"{side}_ffn_embed_dim": ffn,
                f"{side}_attention_heads": heads,
            }
        )
    return config, transformer


def _table5(name):
    task, row, enc, dec, d, ff, ea, d1, r1, sa, d2, r2, fr, params = TABLE5[name]
    config, transformer = _hypo(
        (enc, dec),
        d,
        ff,
        HEADS[task],
        ("htt", ea, d1, r1),
        ("htt", sa, d2, r2),
        ("lowrank", 0.25, 3, fr),
    )
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


_PRESETS = {
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
}


# --------------------------------------------------------------------------------------------
# TT weight transfer: its preconditions
# --------------------------------------------------------------------------------------------


def _transfer_check(teacher_args, student_args, opts, log) -> None:
    # A pre-LN teacher's student keeps its LayerNorm placement (the student follows the
    # teacher's function settings); Admin, the paper's post-LN initialisation, cannot apply
    for key in ("encoder_normalize_before", "decoder_normalize_before"):
        if (
            getattr(teacher_args, key, False)
            and getattr(student_args, "admin_init", "none") != "none"
        ):
            raise ConfigError(
                f"the teacher is pre-LN ({key}) and Admin (--admin-init "
                f"{student_args.admin_init}) is for post-LN layers: add --admin-init none"
            )
    if getattr(student_args, "hypo_attn_out_proj", False):
        return
    if not getattr(opts, "hypo_drop_out_proj", False):
        raise ConfigError(
            "the student has no attention output projections (the paper's Eq. 5), so the "
            "teacher's out_proj weights cannot be transferred; add --hypo-attn-out-proj to "
            "the student, or pass --hypo-drop-out-proj to drop them (approximate)"
        )
    log("attention out_proj weights dropped (--hypo-drop-out-proj)")


# --------------------------------------------------------------------------------------------
# the declaration
# --------------------------------------------------------------------------------------------

HYPOFORMER = Family(
    name="hypoformer",
    config=HypoformerConfig,
    spec=hypoformer_spec_text,
    presets=_PRESETS,
    title="Hypoformer (lightcompress)",
    doc="Hypoformer: the compressed Transformer with HTT / LMF layers and Admin (module doc).",
    check=_check,
    transfer=Transfer(
        method="TT transfer",
        same=(
            "encoder_embed_dim",
            "decoder_embed_dim",
            "encoder_ffn_embed_dim",
            "decoder_ffn_embed_dim",
            "encoder_attention_heads",
            "decoder_attention_heads",
        ),  # (depths may differ: --encoder/decoder-layers-from pick the teacher layers)
        title="Hypoformer TT weight transfer",
        options=(
            (
                ("--hypo-drop-out-proj",),
                {
                    "action": "store_true",
                    "help": "convert into a student without attention output projections (the paper's "
                    "design) by dropping the teacher's out_proj weights (approximate; default: refuse)",
                },
            ),
        ),
        check=_transfer_check,
    ),
)

HypoformerModel = register_family(HYPOFORMER, __name__)


def add_hypoformer_args(parser):
    """The ``--hypo-*`` flags (the fields of HypoformerConfig that are not common)."""
    add_config_args(parser, HYPOFORMER.flags(), "Hypoformer (lightcompress)")


def table5_vocab(name: str) -> int:
    """The joined vocabulary size at which a Table 5 / Table 2 architecture is counted."""
    return _PRESETS[name].vocab
