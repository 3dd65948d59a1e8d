# ruff: noqa: UP045  (fairseq reads dataclass annotations at run time and needs typing.Optional)
"""Subformer language model (Reid et al., Table 5): fairseq's ``transformer_lm`` decoder with
sandwich sharing and a wider middle.

fairseq builds the input embedding (adaptive input, character CNN or a plain table) and the
output layer (adaptive softmax tied to the adaptive input) exactly as for ``transformer_lm``;
the decoder is :class:`~lightcompress.models.subformer.SubformerDecoder` (pre-norm layers, no
cross-attention, the first and last layers at ``d``, the shared middle at ``d_s`` between
``Linear + Dropout(0.05) + LayerNorm`` projections). SAFE is available (``--safe-dim``, with a
plain table) but the paper's LM uses adaptive input instead.

``subformer_lm_wiki103``: the paper's d 768 (FFN 4096), d_s 2048 (FFN 6144), 12 layers, with
``transformer_lm_wiki103``'s adaptive input/softmax (cutoffs 20000,60000, factor 4, tied
weights and projections), dropout 0.3, attention/activation dropout 0.1, no final norm. At the
WikiText-103 vocabulary (267,744 types) it has 96.3M parameters (paper: 96M); the paper's
Transformer baselines are ``transformer_lm_wiki103`` with 4 layers (95.8M; paper 96M) and 8
layers (146.2M; paper 146M). The authors' LM code builds the d <-> d_s projections only when
there is cross-attention, so a d_s != d LM does not run there; we build them as the paper
describes.
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
)

from lightcompress.errors import ConfigError
from lightcompress.models.presets import register_presets
from lightcompress.models.presets_subformer import SUBFORMER_PRESETS
from lightcompress.models.subformer import (
    SHARING_SCHEDULES,
    SubformerDecoder,
    SubformerOptions,
    init_model_,
)

__all__ = ["SubformerLanguageModel", "SubformerLanguageModelConfig"]


@dataclass
class SubformerLanguageModelConfig(TransformerLanguageModelConfig):
    # fairseq reads these annotations at run time: no ``from __future__ import annotations``
    subformer_sharing: Optional[str] = field(
        default="sandwich",
        metadata={
            "help": "cross-layer sharing: "
            + ", ".join(sorted(SHARING_SCHEDULES))
            + " (LayerNorms are never shared)"
        },
    )
    subformer_sandwich_dim: Optional[int] = field(
        default=None,
        metadata={"help": "width d_s of the shared middle layers (default: the model width)"},
    )
    subformer_sandwich_ffn_dim: Optional[int] = field(
        default=None,
        metadata={
            "help": "FFN width of the middle layers (default: FFN width if d_s = d, else 4 d_s)"
        },
    )
    subformer_sandwich_heads: Optional[int] = field(
        default=None,
        metadata={
            "help": "attention heads of the middle layers (default: d_s // 64, // 128 above 1024)"
        },
    )
    safe_dim: Optional[int] = field(
        default=None,
        metadata={
            "help": "SAFE reduction dimension r (plain table only; the paper's LM uses adaptive input)"
        },
    )
    safe_heads: Optional[int] = field(
        default=None, metadata={"help": "attention heads of the SAFE block (default: r // 64)"}
    )
    safe_output: Optional[str] = field(
        default="linear",
        metadata={
            "help": "with SAFE and a tied table: linear (Linear(d, r)) or mlp (d -> 2r -> r)"
        },
    )
    subformer_init: Optional[str] = field(
        default="fairseq",
        metadata={
            "help": "initialisation: fairseq (the authors' LM), bert (N(0, 0.02)) or "
            "bert-safe-table (bert with a SAFE token table at N(0, r^-1/2))"
        },
    )


@register_model("subformer_lm", dataclass=SubformerLanguageModelConfig)
class SubformerLanguageModel(TransformerLanguageModel):
    """``transformer_lm`` with a :class:`SubformerDecoder` (module docstring)."""

    @classmethod
    def build_model(cls, args, task):
        opts = SubformerOptions.from_args(args)
        if opts.safe_dim and (
            getattr(args, "adaptive_input", False) or getattr(args, "character_embeddings", False)
        ):
            raise ConfigError("--safe-dim needs a plain embedding table (no adaptive input)")
        # fairseq builds the embedding (adaptive input / characters / table) with a decoder;
        # build that decoder without layers and put the Subformer decoder in its place.
        num_layers = args.decoder_layers
        args.decoder_layers = 0
        try:
            plain = super().build_model(args, task)
        finally:
            args.decoder_layers = num_layers
        decoder = SubformerDecoder(
            TransformerConfig.from_namespace(args),
            task.target_dictionary,
            plain.decoder.embed_tokens,
            opts,
            no_encoder_attn=True,
        )
        model = cls(decoder)
        return init_model_(model, getattr(args, "subformer_init", None) or "fairseq")

    @classmethod
    def build_embedding(cls, args, dictionary, embed_dim, path=None):
        safe_dim = getattr(args, "safe_dim", None)
        return super().build_embedding(args, dictionary, safe_dim or embed_dim, path)


# --- architectures: the ``subformer_lm*`` entries of lightcompress.models.presets.PRESETS ---

register_presets("subformer_lm", SUBFORMER_PRESETS)
