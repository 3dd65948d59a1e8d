"""LightFormer (Lv et al.): low-rank factorized Transformer with group-wise encoder sharing.

Built on fairseq's :class:`~fairseq.models.transformer.TransformerModel`: ``build_model`` builds
the dense model with fairseq's own hooks, then applies a compression spec (the same
:class:`~lightcompress.modules.CompressionSpec` the SVD weight-transfer converter uses) and ties
the encoder layers of each group. No transformer code is copied.

The configuration that reproduces the paper's tables (found by arithmetic on Tables 6-8 and
checked by counting real fairseq models, see ``tests/test_lightformer.py``):

- every attention map (Q, K, V and the output projection of encoder self-attention, decoder
  self-attention and decoder cross-attention) and both FFN maps are low-rank ``W = U V`` at one
  rank ``r = 80``, with the bias on the output factor;
- the shared source/target/output embedding (joined dictionary) is factorized at its own rank
  (135 at the IWSLT'14 vocabulary of ~10.2k types, about 1.45M parameters);
- sharing is in the encoder only: ``L`` layers in ``N`` contiguous groups, every parameter of a
  layer (attention, FFN **and** LayerNorms) shared inside its group; "groups" in Table 8 counts
  unique encoder layers; the decoder is not shared.

At V = 10,200 this gives 7.650M for 18-3 with 6 groups (paper: 7.7M), 14.60M without sharing
(14.6M), 9/3/1 groups 9.39M/5.91M/4.76M (9.4M/5.9M/4.8M), 18-2 6.74M (6.7M), 18-1 5.83M
(5.8M), 12-3 and 24-3 7.65M (7.7M), 12-2 6.74M (6.7M); the dense 18-3 is 52.5M and the dense
"weight sharing" row (33.6M) is 9 unique dense encoder layers. Rows that no consistent reading
reproduces: Table 1 (LMF 6-6 at ranks 256...4), Table 7's 6-6 row (7.7M) and Table 8's 6-6
rows (6.9M/6.4M/5.8M): with the reading above, 6-6 with 6 encoder groups (one layer each, so
nothing shared) is 10.38M and with 3/2/1 groups 8.64M/8.06M/7.48M (the decoder's six unshared
layers alone are 5.46M); sharing the decoder with the same 3/2/1 groups
(``--lc-decoder-groups``) gives 5.91M/4.42M/2.94M, which matches none of those rows either.
The 6-6 rows are offered through the flags (``--lc-encoder-groups``, ``--lc-decoder-groups``)
and reported as computed (examples/translation/lightformer/README.md lists every row).

The paper gives no ranks for WMT. ``lightformer_wmt_en_de`` / ``lightformer_wmt_en_ro`` keep the
IWSLT rule (Transformer-base widths, 18-3, 6 encoder groups, every map at rank 80) and set the
embedding rank so that the model has the paper's size at the paper's vocabulary (the paper
chooses ranks "according to the proportion of singular values to be retained", which for the
embedding is a data-dependent energy threshold; ``lightcompress-convert --embed-energy`` does
exactly that).

**SVD weight transfer** (``lightcompress-convert --arch lightformer_*``; the declaration's
:class:`~lightcompress.models.family.Transfer`, run by :mod:`lightcompress.convert.family`):
a trained dense Transformer -> a LightFormer checkpoint.

Layer mapping (documented rule; ``--group-init``):

- teacher encoder depth == student depth ``L``: student position ``i`` in group ``g`` takes
  the **first** teacher layer of its group (default, ``--group-init first``), or the element-wise
  **mean** of the teacher layers of the group (``--group-init mean``);
- teacher encoder depth == number of student groups ``N``: group ``g`` takes teacher layer
  ``g`` (e.g. a 6-layer teacher initialises an 18-layer, 6-group student);
- anything else is refused. The decoder follows the same rule with ``--lc-decoder-groups``.

Then every matrix the student's compression spec names is factorized by truncated SVD of the
(mapped) teacher weight (balanced split, float32), at the student's ranks or at the ranks
given here (``--rank`` / ``--rank-ratio`` / ``--energy``; ``--embed-*`` for the embedding).
With ``--energy`` the rank of each matrix depends on its spectrum; the converter then writes
the exact per-module ranks into the checkpoint as an explicit ``--lc-spec`` (printed, and
saved next to the output as ``OUT.spec`` for fine-tuning with ``--lc-spec "$(cat OUT.spec)"``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fairseq.models.transformer import base_architecture
from fairseq.models.transformer.transformer_legacy import transformer_iwslt_de_en

from lightcompress.errors import ConfigError
from lightcompress.models.compressed import apply_layer_sharing
from lightcompress.models.family import Family, Transfer, register_family
from lightcompress.models.presets import (
    CompressionConfig,
    Preset,
    add_config_args,
    flag_field,
)

__all__ = [
    "LIGHTFORMER",
    "LightformerConfig",
    "LightformerModel",
    "add_lightformer_args",
    "apply_layer_sharing",
    "lightformer_spec_text",
]

_f = flag_field


@dataclass(frozen=True)
class LightformerConfig(CompressionConfig):
    """LightFormer (Lv et al.): one rank for every attention and FFN map, one for the table."""

    lc_encoder_groups: int = _f(
        6,
        CompressionConfig.__dataclass_fields__["lc_encoder_groups"].metadata["help"],
        type=int,
        metavar="N",
    )

    lc_rank: int | None = _f(
        80, "rank of every factorized attention and FFN map (paper: 80)", type=int, metavar="R"
    )
    lc_rank_ratio: float | None = _f(
        None,
        "instead of --lc-rank: per-matrix rank floor(mn / (P (m + n))) (LightFormer Appendix "
        "C, Eq. 12); overrides --lc-rank",
        type=float,
        metavar="P",
    )
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


_FACTORIZABLE = ("attn", "ffn", "embed")


def _rank_param(rank, ratio, what):
    if ratio is not None:
        if ratio <= 0:
            raise ConfigError(f"--lc-{what}-ratio must be > 0, got {ratio}")
        return f"ratio={ratio}"
    if rank is None:
        raise ConfigError(f"factorizing needs a rank: give --lc-{what} or --lc-{what}-ratio")
    if rank < 1:
        raise ConfigError(f"--lc-{what} must be >= 1, got {rank}")
    return f"rank={rank}"


def factorized_parts(args) -> set[str]:
    text = getattr(args, "lc_factorize", "") or ""
    parts = {p.strip() for p in text.split(",") if p.strip()} - {"none"}
    unknown = parts - set(_FACTORIZABLE)
    if unknown:
        raise ConfigError(
            f"--lc-factorize: unknown part(s) {sorted(unknown)}; choose from {list(_FACTORIZABLE)}"
        )
    return parts


def lightformer_spec_text(args, map_param: str | None = None, embed_param: str | None = None):
    """The compression spec of a LightFormer configuration, as text.

    ``map_param`` / ``embed_param`` (e.g. ``"energy=0.9"``) override the rank flags; the
    converter uses them for energy thresholds, which need trained weights.
    """
    if getattr(args, "lc_spec", None):
        return args.lc_spec
    parts = factorized_parts(args)
    rules = []
    if parts & {"attn", "ffn"}:
        p = map_param or _rank_param(args.lc_rank, getattr(args, "lc_rank_ratio", None), "rank")
        if "attn" in parts:
            rules.append(
                "encoder.layers.*.self_attn.*_proj, decoder.layers.*.self_attn.*_proj, "
                f"decoder.layers.*.encoder_attn.*_proj = lowrank({p})"
            )
        if "ffn" in parts:
            rules.append(
                "encoder.layers.*.fc1, encoder.layers.*.fc2, "
                f"decoder.layers.*.fc1, decoder.layers.*.fc2 = lowrank({p})"
            )
    if "embed" in parts:
        p = embed_param or _rank_param(
            args.lc_embed_rank, getattr(args, "lc_embed_rank_ratio", None), "embed-rank"
        )
        targets = ["encoder.embed_tokens"]
        if not args.share_all_embeddings:
            targets.append("decoder.embed_tokens")
        rules.append(f"{', '.join(targets)} = lowrank({p})")
    return ";\n".join(rules)


# --------------------------------------------------------------------------------------------
# presets
# --------------------------------------------------------------------------------------------

_LF = LightformerConfig()
_LF_DEPTH = {"encoder_layers": 18, "decoder_layers": 3, "share_all_embeddings": True}

_PRESETS = {
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
}


# --------------------------------------------------------------------------------------------
# SVD weight transfer (the converter's options and the flags it writes back)
# --------------------------------------------------------------------------------------------


def _transfer_param(rank, ratio, energy, flag):
    given = [
        (k, v) for k, v in (("rank", rank), ("ratio", ratio), ("energy", energy)) if v is not None
    ]
    if len(given) > 1:
        energy = "--energy" if flag == "rank" else "--embed-energy"
        raise ConfigError(f"give at most one of --{flag}, --{flag}-ratio, {energy}")
    if not given:
        return None
    k, v = given[0]
    if k == "energy" and not 0 < v <= 1:
        raise ConfigError(f"an energy threshold must be in (0, 1], got {v}")
    if k == "rank" and v <= 0:
        raise ConfigError(f"--{flag} must be a positive integer, got {v}")
    if k == "ratio" and v <= 0:
        raise ConfigError(f"a compression ratio must be > 0, got {v}")
    return f"{k}={v}"


def _transfer_params(opts):
    """``(map parameter, embedding parameter)`` of the converter's options (None: the
    student's own flags)."""

    def get(name):
        return getattr(opts, name, None)

    return (
        _transfer_param(get("rank"), get("rank_ratio"), get("energy"), "rank"),
        _transfer_param(
            get("embed_rank"), get("embed_rank_ratio"), get("embed_energy"), "embed-rank"
        ),
    )


def _transfer_spec(student_args, opts) -> str:
    map_param, embed_param = _transfer_params(opts)
    if map_param and map_param.startswith("energy") and student_args.lc_spec:
        raise ConfigError("--energy cannot be combined with a student --lc-spec")
    return lightformer_spec_text(student_args, map_param, embed_param)


def _transfer_finish(student_args, opts, records) -> None:
    """The student's flags must rebuild exactly the converted model: with an energy threshold
    the ranks it chose as an explicit ``--lc-spec``, else the ranks / ratios given."""
    map_param, embed_param = _transfer_params(opts)
    if (map_param or "").startswith("energy") or (embed_param or "").startswith("energy"):
        by_rank: dict[tuple, list[str]] = {}
        for r in records:
            by_rank.setdefault((r.kind, r.rank), []).append(r.name)
        student_args.lc_spec = ";\n".join(
            f"{', '.join(names)} = {kind}(rank={rank})" for (kind, rank), names in by_rank.items()
        )
        return
    for attr, param in (("lc_rank", map_param), ("lc_embed_rank", embed_param)):
        if param:
            k, v = param.split("=")
            setattr(student_args, attr, int(v) if k == "rank" else None)
            setattr(student_args, attr + "_ratio", float(v) if k == "ratio" else None)


_TRANSFER_OPTIONS = (
    (("--rank",), {"type": int, "help": "rank of every attention/FFN map (default: the "
                   "student's --lc-rank)"}),
    (("--rank-ratio",), {"type": float, "help": "per-matrix Eq. 12 compression ratio"}),
    (("--energy",), {"type": float, "help": "keep the smallest rank whose singular values "
                     "hold this fraction of the squared spectrum, per matrix (e.g. 0.9)"}),
    (("--embed-rank",), {"type": int, "help": "rank of the embedding (default: the student's "
                         "--lc-embed-rank)"}),
    (("--embed-rank-ratio",), {"type": float, "help": "Eq. 12 ratio for the embedding"}),
    (("--embed-energy",), {"type": float, "help": "energy threshold for the embedding"}),
    (("--group-init",), {"choices": ("first", "mean"), "default": "first",
                         "help": "weights of a shared group when the teacher has one layer per "
                         "student position: the group's first layer (default) or the mean"}),
)  # fmt: skip


# --------------------------------------------------------------------------------------------
# the declaration
# --------------------------------------------------------------------------------------------

LIGHTFORMER = Family(
    name="lightformer",
    config=LightformerConfig,
    spec=lightformer_spec_text,
    presets=_PRESETS,
    title="LightFormer (lightcompress)",
    doc="""LightFormer: the compressed Transformer with low-rank maps and group sharing.

    See the module docstring for the configuration that reproduces the paper's sizes; the
    named architectures are the ``lightformer*`` entries of
    :data:`lightcompress.models.presets.PRESETS`.
    """,
    transfer=Transfer(
        method="SVD transfer",
        same=(
            "encoder_embed_dim",
            "decoder_embed_dim",
            "encoder_ffn_embed_dim",
            "decoder_ffn_embed_dim",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_normalize_before",
            "decoder_normalize_before",
        ),
        title="LightFormer SVD weight transfer",
        options=_TRANSFER_OPTIONS,
        spec=_transfer_spec,
        finish=_transfer_finish,
    ),
)

LightformerModel = register_family(LIGHTFORMER, __name__)


def add_lightformer_args(parser):
    """LightFormer's own ``--lc-*`` flags (the fields of LightformerConfig that are not common)."""
    add_config_args(parser, LIGHTFORMER.flags(), "LightFormer (lightcompress)")
