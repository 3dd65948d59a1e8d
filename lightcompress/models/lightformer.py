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
"""

from __future__ import annotations

import logging

from fairseq.models import register_model

from lightcompress.models.compressed import (
    CompressedTransformerModel,
    apply_layer_sharing,
)
from lightcompress.models.presets import (
    CompressionConfig,
    LightformerConfig,
    add_config_args,
    own_fields,
    register_presets,
)
from lightcompress.modules.registry import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "LightformerModel",
    "add_lightformer_args",
    "apply_layer_sharing",
    "lightformer_spec_text",
]

_FACTORIZABLE = ("attn", "ffn", "embed")


def add_lightformer_args(parser):
    """LightFormer's own ``--lc-*`` flags (the fields of LightformerConfig that are not common)."""
    add_config_args(
        parser, own_fields(LightformerConfig, CompressionConfig), "LightFormer (lightcompress)"
    )


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


@register_model("lightformer")
class LightformerModel(CompressedTransformerModel):
    """LightFormer: the compressed Transformer with low-rank maps and group sharing.

    See the module docstring for the configuration that reproduces the paper's sizes; the
    named architectures are the ``lightformer*`` entries of
    :data:`lightcompress.models.presets.PRESETS`.
    """

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_lightformer_args(parser)

    @classmethod
    def spec_text(cls, args) -> str:
        return lightformer_spec_text(args)

    @classmethod
    def check_args(cls, args) -> None:
        super().check_args(args)
        lightformer_spec_text(args)  # rank flags: one clear error before anything is built


register_presets("lightformer")
