"""Subformer (Reid et al.): SAFE embeddings + sandwich-style parameter sharing.

Built on fairseq's :class:`~fairseq.models.transformer.TransformerModel` through its hooks
(``build_embedding``, ``build_encoder``, ``build_decoder``, ``build_encoder_layer``,
``build_decoder_layer``, ``build_fc2``, ``build_encoder_attention``, ``residual_connection``);
fairseq's encoder and decoder ``forward`` run unchanged, so incremental decoding, alignment
and ``return_all_hiddens`` keep working. No transformer code is copied.

What the model is (checked against the authors' fork ``machelreid/subformer``):

- **SAFE** (``--safe-dim r``): the token table is ``V x r``; positions are added at width
  ``r``; the SAFE block is a post-norm Transformer layer at width ``r`` with ``r // 64``
  heads (authors' rule, :func:`~lightcompress.modules.safe.subformer_heads`): self-attention,
  add & LayerNorm(r), FFN ``r -> r`` (ReLU) ``-> d``, dropout, no residual (widths differ),
  LayerNorm(d). It is ``layers[0]`` of each stack (causal in the decoder, no cross-attention),
  so it runs inside fairseq's layer loop. The encoder scales the table by ``sqrt(r)``, the
  decoder by ``sqrt(d_decoder)`` (the asymmetry of the authors' code, which follows from
  fairseq's own definitions). With a tied output table the decoder ends with
  ``Linear(d, r)`` (``--safe-output linear``, the code; reproduces the paper's sizes) or the
  paper's two-layer MLP ``d -> 2r -> r`` (``--safe-output mlp``).
- **Sharing** (``--subformer-sharing``): a schedule of
  :mod:`lightcompress.modules.sharing` over the ``L`` model layers of each stack, tied with
  :func:`~lightcompress.modules.sharing.tie_layers`; LayerNorms are never shared. ``sandwich``:
  first and last independent, the ``L - 2`` middle layers share attention, FFN and (decoder)
  cross-attention with its query projections. Table 2's variants: ``all``,
  ``all-independent-ffn`` (all shared, plus one unshared ``d x d`` map after each layer's FFN,
  as the authors' ``--add-independent-layer``), ``all-except-last``, ``every-2``, ``none``.
- **Wide sandwich** (``--subformer-sandwich-dim d_s`` != ``d``): the middle layers are
  fairseq layers at width ``d_s`` (FFN ``--subformer-sandwich-ffn-dim``); ``Linear(d, d_s) +
  Dropout(0.05) + LayerNorm(d_s)`` after the first layer, ``Linear(d_s, d) + Dropout(0.05) +
  LayerNorm(d)`` before the last. In the decoder's middle layers the cross-attention stays at
  the encoder's width: query ``Linear(d_s, d) + LayerNorm(d)``, result ``Linear(d, d_s) +
  LayerNorm(d_s)`` (these projections belong to the shared cross-attention, as in the code).
- **Initialisation** (``--subformer-init``): the authors' BERT init (``bert``: Linear and
  Embedding weights N(0, 0.02), biases 0, padding rows 0) with a SAFE token table drawn as
  fairseq draws it, N(0, r^-1/2) (``bert-safe-table``, the default; without SAFE the same as
  ``bert``), the authors' init as it is (``bert``) or fairseq's throughout (``fairseq``). With the authors' init the encoder's token
  table starts at std ``0.02 sqrt(r)`` against sinusoidal positions of RMS 0.71, and at small
  SAFE widths (r = 64: 0.16) such models did not learn to read their source
  (lab/notes/subformer-source.md; building one logs a warning).

Ties are Parameter identities made at build time, so they survive ``state_dict`` round trips
and fairseq checkpoints (tests/test_subformer.py). Shared modules stay distinct objects, so
each position keeps its own incremental-decoding cache (the authors assigned the same module
objects, which makes every shared decoder layer read one cache).

Sizes (``tests/test_subformer.py`` pins them; joined dictionary, ``--share-all-embeddings``).
WMT'14 En-De at V = 32,000: ``subformer`` (only sandwich) 38.5M (paper 38M),
``subformer_only_safe`` 53.4M (54M), ``subformer_small`` 38.4M (38M; the paper's ``4 d_s``
sandwich FFN would be larger, the code's default 2048 gives 38M), ``subformer_base`` 51.7M
(52M), ``subformer_mid`` 62.9M (63M), ``subformer_sandwich_big`` 121.0M (122M),
``subformer_xlarge`` 197.0M (197M); Table 2 at base widths: all 23.8M (24M),
all-independent-ffn 26.9M (27M), all-except-last 31.1M (31M), every-2 38.5M (38M), sandwich
8-8 38.5M (38M), no sharing 60.5M (61M). WMT'16 En-Ro at V = 34,976: ``subformer_wmt_en_ro_small``
20.8M; ``subformer_wmt_en_ro_base`` 43.1M: the paper prints 48M, which the stated widths (d 512,
d_s 640, d_e 384) do not reproduce. CNN-DailyMail (separate tables, V = 32,000 each) 57.4M (57M).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

from fairseq.models import register_model
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.modules import LayerNorm, PositionalEmbedding
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.quant_noise import quant_noise as apply_quant_noise_
from torch import nn

from lightcompress.errors import ConfigError
from lightcompress.models.presets import PRESETS, add_config_args, register_presets
from lightcompress.models.presets_subformer import (
    DEFAULT_INIT,
    INITS,
    SUBFORMER_PRESETS,
    SubformerConfig,
)
from lightcompress.models.subformer_layers import (
    SafeDecoderBlock,
    SafeEncoderBlock,
    SubformerDecoderLayer,
    SubformerEncoderLayer,
)
from lightcompress.modules.safe import (
    OutputReduction,
    SandwichProjection,
    bert_init_model_,
    fairseq_token_tables_,
    subformer_heads,
)
from lightcompress.modules.sharing import (
    all_except_last,
    all_shared,
    every_k,
    sandwich_schedule,
    tie_layers,
)

logger = logging.getLogger(__name__)

__all__ = [
    "SHARING_SCHEDULES",
    "SafeDecoderBlock",
    "SafeEncoderBlock",
    "SubformerDecoder",
    "SubformerDecoderLayer",
    "SubformerEncoder",
    "SubformerEncoderLayer",
    "SubformerModel",
    "SubformerOptions",
    "add_subformer_args",
]

SHARING_SCHEDULES = {
    "sandwich": sandwich_schedule,
    "all": all_shared,
    "all-independent-ffn": all_shared,
    "all-except-last": all_except_last,
    "every-2": lambda n: every_k(n, 2),
    "none": lambda n: list(range(n)),
}
SANDWICH_DROPOUT = 0.05  # the authors' projections between model and sandwich width


@dataclass
class SubformerOptions:
    """The Subformer settings of one model, read from fairseq args (Namespace or DictConfig)."""

    sharing: str = "sandwich"
    sandwich_dim: int | None = None
    sandwich_ffn_dim: int | None = None
    sandwich_heads: int | None = None
    safe_dim: int | None = None
    safe_heads: int | None = None
    safe_output: str = "linear"

    @classmethod
    def from_args(cls, args) -> SubformerOptions:
        def get(name, default=None):
            value = getattr(args, name, None)
            return default if value is None else value

        opts = cls(
            sharing=get("subformer_sharing", "sandwich"),
            sandwich_dim=get("subformer_sandwich_dim") or None,
            sandwich_ffn_dim=get("subformer_sandwich_ffn_dim") or None,
            sandwich_heads=get("subformer_sandwich_heads") or None,
            safe_dim=get("safe_dim") or None,
            safe_heads=get("safe_heads") or None,
            safe_output=get("safe_output", "linear"),
        )
        for flag in (
            "subformer_sandwich_dim",
            "subformer_sandwich_ffn_dim",
            "subformer_sandwich_heads",
            "safe_dim",
            "safe_heads",
        ):
            value = getattr(args, flag, None)
            if value is not None and value < 0:
                raise ConfigError(
                    f"--{flag.replace('_', '-')} must be >= 1 (0 or unset: the default), "
                    f"got {value}"
                )
        width = getattr(args, "encoder_embed_dim", None) or getattr(args, "decoder_embed_dim", None)
        if opts.safe_dim and width and opts.safe_dim >= width:
            raise ConfigError(
                f"--safe-dim {opts.safe_dim} must be smaller than the model width {width} "
                "(SAFE reduces the embedding dimension)"
            )
        if opts.safe_dim and opts.safe_heads and opts.safe_dim % opts.safe_heads:
            raise ConfigError(
                f"--safe-heads {opts.safe_heads} must divide --safe-dim {opts.safe_dim}"
            )
        if opts.safe_dim and not opts.safe_heads and opts.safe_dim % subformer_heads(opts.safe_dim):
            raise ConfigError(
                f"--safe-dim {opts.safe_dim}: the authors' rule gives "
                f"{subformer_heads(opts.safe_dim)} SAFE heads, which do not divide it: give "
                "--safe-heads"
            )
        if opts.sharing not in SHARING_SCHEDULES:
            raise ConfigError(
                f"--subformer-sharing must be one of {sorted(SHARING_SCHEDULES)}, "
                f"got {opts.sharing!r}"
            )
        if opts.safe_output not in OutputReduction.KINDS:
            raise ConfigError(
                f"--safe-output must be one of {OutputReduction.KINDS}, got {opts.safe_output!r}"
            )
        return opts


def add_subformer_args(parser):
    """The ``--subformer-*`` / ``--safe-*`` flags: the fields of
    :class:`~lightcompress.models.presets_subformer.SubformerConfig` (no defaults: presets set them)."""
    add_config_args(parser, SubformerConfig, "Subformer (lightcompress)")


# --- stacks ---------------------------------------------------------------------------------


def _side_cfg(cfg, side, embed_dim, ffn_dim, heads, normalize_before=None):
    """A copy of ``cfg`` whose ``side`` (encoder/decoder) has other widths."""
    out = copy.deepcopy(cfg)
    sub = getattr(out, side)
    sub.embed_dim, sub.ffn_embed_dim, sub.attention_heads = embed_dim, ffn_dim, heads
    if normalize_before is not None:
        sub.normalize_before = normalize_before
    if side == "decoder":
        sub.input_dim = sub.output_dim = embed_dim
    return out


class _StackPlan:
    """Which fairseq config each position of a stack is built with, and how it is tied."""

    def __init__(self, cfg, side: str, opts: SubformerOptions):
        sub = getattr(cfg, side)
        self.opts = opts
        self.side = side
        self.num_layers = n = sub.layers
        self.model_dim = d = sub.embed_dim
        self.schedule = SHARING_SCHEDULES[opts.sharing](n)
        self.independent_ffn = opts.sharing == "all-independent-ffn"
        d_s = opts.sandwich_dim or d
        ffn_s = opts.sandwich_ffn_dim or (sub.ffn_embed_dim if d_s == d else 4 * d_s)
        heads_s = opts.sandwich_heads or (sub.attention_heads if d_s == d else subformer_heads(d_s))
        if opts.sharing != "sandwich" and (d_s, ffn_s) != (d, sub.ffn_embed_dim):
            raise ConfigError(
                "--subformer-sandwich-dim / --subformer-sandwich-ffn-dim need "
                f"--subformer-sharing sandwich (got {opts.sharing!r})"
            )
        self.sandwich_dim = d_s
        self.has_middle = opts.sharing == "sandwich" and n > 2
        self.middle_cfg = cfg
        if self.has_middle and (d_s, ffn_s, heads_s) != (
            d,
            sub.ffn_embed_dim,
            sub.attention_heads,
        ):
            self.middle_cfg = _side_cfg(cfg, side, d_s, ffn_s, heads_s)
        self.cross_heads = sub.attention_heads
        self.safe_cfg = None
        if opts.safe_dim:
            r = opts.safe_dim
            heads = opts.safe_heads or subformer_heads(r)
            self.safe_cfg = _side_cfg(cfg, side, r, r, heads, normalize_before=False)
        self._next = 0  # position of the next layer fairseq builds

    def share(self, name: str) -> bool:
        """Parameters tied between positions: everything but LayerNorms (and the
        independent maps of ``all-independent-ffn``)."""
        if "layer_norm" in name:
            return False
        return not (self.independent_ffn and ".independent." in f".{name}")

    def finish(self, layers) -> None:
        """Attach the sandwich projections and tie the model layers."""
        d, d_s = self.model_dim, self.sandwich_dim
        if self.has_middle and d_s != d:
            layers[0].project_out = SandwichProjection(d, d_s, SANDWICH_DROPOUT)
            layers[-1].project_in = SandwichProjection(d_s, d, SANDWICH_DROPOUT)
        tie_layers(layers, self.schedule, share=self.share)


def _checkpointed(layer, cfg):
    if cfg.checkpoint_activations:
        return checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return layer


class SubformerEncoder(TransformerEncoderBase):
    """fairseq's encoder with the SAFE block as ``layers[0]`` and shared model layers.

    With SAFE the embedding table has width ``r``; fairseq then scales it by ``sqrt(r)`` and
    adds positions at width ``r``, as the authors' code does.
    """

    def __init__(self, cfg, dictionary, embed_tokens, opts: SubformerOptions):
        if opts.safe_dim and cfg.encoder.layerdrop > 0:
            raise ConfigError("--encoder-layerdrop would drop the SAFE block")
        self._plan = _StackPlan(cfg, "encoder", opts)
        super().__init__(cfg, dictionary, embed_tokens)
        d = cfg.encoder.embed_dim
        self.has_safe = bool(opts.safe_dim)
        if self.has_safe:
            if embed_tokens.embedding_dim != opts.safe_dim:
                raise ConfigError(
                    f"SAFE needs a {opts.safe_dim}-dim embedding, got {embed_tokens.embedding_dim}"
                )
            self.layers.insert(0, SafeEncoderBlock(self._plan.safe_cfg, d))
            self.num_layers = len(self.layers)
            if self.layer_norm is not None:  # pre-norm: the final norm is at the model width
                self.layer_norm = LayerNorm(d, export=cfg.export)
        self._plan.finish(self.model_layers)

    @property
    def model_layers(self) -> nn.ModuleList:
        """The ``L`` model layers (without the SAFE block)."""
        return self.layers[1:] if self.has_safe else self.layers

    def build_encoder_layer(self, cfg):
        pos = self._plan._next
        self._plan._next += 1
        plan = self._plan
        middle = plan.has_middle and 0 < pos < plan.num_layers - 1
        layer = SubformerEncoderLayer(
            plan.middle_cfg if middle else cfg, independent_ffn=plan.independent_ffn
        )
        return _checkpointed(layer, cfg)


class SubformerDecoder(TransformerDecoderBase):
    """fairseq's decoder with the (causal) SAFE block as ``layers[0]`` and shared layers.

    With SAFE: no input projection (SAFE maps ``r -> d``), positions at width ``r``, the
    embedding scaled by ``sqrt(d)`` (fairseq's and the authors' decoder), and with a tied
    output table an :class:`~lightcompress.modules.safe.OutputReduction` ``d -> r`` before it.
    """

    def __init__(
        self,
        cfg,
        dictionary,
        embed_tokens,
        opts: SubformerOptions,
        no_encoder_attn=False,
        output_projection=None,
    ):
        if opts.safe_dim and cfg.decoder.layerdrop > 0:
            raise ConfigError("--decoder-layerdrop would drop the SAFE block")
        self._plan = _StackPlan(cfg, "decoder", opts)
        super().__init__(
            cfg,
            dictionary,
            embed_tokens,
            no_encoder_attn=no_encoder_attn,
            output_projection=output_projection,
        )
        d = cfg.decoder.embed_dim
        self.has_safe = bool(opts.safe_dim)
        if self.has_safe:
            r = embed_tokens.embedding_dim
            if r != opts.safe_dim:
                raise ConfigError(f"SAFE needs a {opts.safe_dim}-dim embedding, got {r}")
            self.project_in_dim = None
            if self.embed_positions is not None:
                self.embed_positions = PositionalEmbedding(
                    self.max_target_positions,
                    r,
                    self.padding_idx,
                    learned=cfg.decoder.learned_pos,
                )
            if self.layernorm_embedding is not None:
                self.layernorm_embedding = LayerNorm(r, export=cfg.export)
            if self.quant_noise is not None:
                self.quant_noise = apply_quant_noise_(
                    nn.Linear(r, r, bias=False),
                    cfg.quant_noise.pq,
                    cfg.quant_noise.pq_block_size,
                )
            self.layers.insert(0, SafeDecoderBlock(self._plan.safe_cfg, d))
            self.num_layers = len(self.layers)
            if self.share_input_output_embed and self.adaptive_softmax is None:
                self.project_out_dim = OutputReduction(d, r, opts.safe_output)
        self._plan.finish(self.model_layers)

    @property
    def model_layers(self) -> nn.ModuleList:
        """The ``L`` model layers (without the SAFE block)."""
        return self.layers[1:] if self.has_safe else self.layers

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        pos = self._plan._next
        self._plan._next += 1
        plan = self._plan
        middle = plan.has_middle and 0 < pos < plan.num_layers - 1
        layer = SubformerDecoderLayer(
            plan.middle_cfg if middle else cfg,
            no_encoder_attn,
            independent_ffn=plan.independent_ffn,
            cross_heads=plan.cross_heads,
        )
        return _checkpointed(layer, cfg)


# --- model ----------------------------------------------------------------------------------

# BERT's N(0, 0.02) table times the encoder's sqrt(r) below this std did not learn to read its
# source in our runs (r = 64: 0.16; lab/notes/subformer-source.md); the paper's r = 320 gives 0.36
SMALL_SAFE_TOKEN_STD = 0.2


def init_model_(model, init: str):
    """``model`` initialised as ``--subformer-init`` says, in place: ``bert`` the authors' BERT
    init (every Linear and Embedding N(0, 0.02), biases 0, padding rows 0); ``bert-safe-table``
    (the default) the same with each SAFE token table (a stack with ``--safe-dim``) drawn as
    fairseq draws it, N(0, r^-1/2), so that its tokens start at unit scale after the sqrt(r)
    scaling whatever the SAFE width (without SAFE: ``bert``); ``fairseq`` fairseq's own init
    throughout (nothing re-drawn)."""
    if init not in INITS:
        raise ConfigError(f"--subformer-init must be one of {', '.join(INITS)}, got {init!r}")
    if init in ("bert", "bert-safe-table"):
        bert_init_model_(model)
    if init == "bert-safe-table":
        stacks = [getattr(model, part, None) for part in ("encoder", "decoder")]
        fairseq_token_tables_(s.embed_tokens for s in stacks if getattr(s, "has_safe", False))
    return model


def small_safe_table_warning(args) -> str | None:
    """A warning for SAFE with the BERT init, sinusoidal positions and a small ``--safe-dim``:
    the token table starts small against the positions (measured: such models did not learn
    to read their source), or None."""
    r = getattr(args, "safe_dim", None)
    if not r or (getattr(args, "subformer_init", None) or DEFAULT_INIT) != "bert":
        return None
    if getattr(args, "encoder_learned_pos", False):
        return None
    # the encoder scales the table by sqrt(r) unless --no-scale-embedding (then smaller still)
    std = 0.02 * (1.0 if getattr(args, "no_scale_embedding", False) else r**0.5)
    if std >= SMALL_SAFE_TOKEN_STD:
        return None
    return (
        f"--safe-dim {r} with --subformer-init bert and sinusoidal positions: the token "
        f"table starts at std {std:.2f} against positions of RMS 0.71; such models did not "
        "learn to read their source in lightcompress's runs (lab/notes/subformer-source.md). "
        f"The default --subformer-init {DEFAULT_INIT} draws a SAFE table at unit scale."
    )


@register_model("subformer")
class SubformerModel(TransformerModel):
    """Subformer: fairseq's Transformer + SAFE + sandwich sharing (module docstring)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_subformer_args(parser)

    @classmethod
    def build_model(cls, args, task):
        PRESETS["subformer"].apply(args)  # defaults for flags a checkpoint may lack
        SubformerOptions.from_args(args)  # validate flags before building
        model = super().build_model(args, task)
        init_model_(model, getattr(args, "subformer_init", None) or DEFAULT_INIT)
        warning = small_safe_table_warning(args)
        if warning:
            logger.warning(warning)
        return model

    @classmethod
    def build_embedding(cls, args, dictionary, embed_dim, path=None):
        safe_dim = getattr(args, "safe_dim", None)
        return super().build_embedding(args, dictionary, safe_dim or embed_dim, path)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return SubformerEncoder(cfg, src_dict, embed_tokens, SubformerOptions.from_args(args))

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return SubformerDecoder(
            cfg,
            tgt_dict,
            embed_tokens,
            SubformerOptions.from_args(args),
            no_encoder_attn=cfg.no_cross_attention,
        )


# --- architectures: the ``subformer*`` entries of lightcompress.models.presets.PRESETS ----

register_presets("subformer", SUBFORMER_PRESETS)
