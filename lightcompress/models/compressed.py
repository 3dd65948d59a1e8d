"""One compressed Transformer: fairseq's Transformer whose build hooks ask a compression spec.

Every compressed translation model of the plugin (LightFormer, Hypoformer, Smartformer) is
this model with a *preset*: spec text + layer sharing + Admin mode + sizes
(:mod:`lightcompress.models.presets`). A family is a declaration
(:mod:`lightcompress.models.family`) that says how its flags become spec text
(:meth:`CompressedTransformerModel.spec_text`); building is the same code for all.

How a layer is chosen (``docs/architecture.md`` walks through it): ``build_model`` parses the
spec into a :class:`~lightcompress.modules.spec.SpecPlan`; fairseq then builds the model
through its own hooks, and each hook overridden here asks the plan for the module path the
layer will have:

============================== =============================================================
fairseq hook                   paths asked (first matching rule wins; no rule = dense)
============================== =============================================================
``build_embedding``            ``encoder.embed_tokens``, ``decoder.embed_tokens`` (once when
                               ``--share-all-embeddings``)
``build_self_attention``       ``<layer>.self_attn.{q,k,v}_proj``; if no rule names any of
                               them, ``<layer>.self_attn.qkv_proj`` (a fused Q/K/V map,
                               Hypoformer Eq. 6-8); then ``<layer>.self_attn.out_proj``
``build_encoder_attention``    ``<layer>.encoder_attn.{q,k,v,out}_proj``
``build_fc1`` / ``build_fc2``  ``<layer>.fc1``, ``<layer>.fc2``
``build_output_projection``    tied to a factorized table: ``logits = x E^T``
============================== =============================================================

with ``<layer>`` = ``encoder.layers.3`` etc. The layers are built compressed: no dense copy
is made and replaced. Patterns that match no path are an error (like
:meth:`CompressionSpec.apply`). After the build, layers are tied by the sharing schedule
(``--lc-encoder-groups`` / ``--lc-decoder-groups``) and Admin is connected.
"""

from __future__ import annotations

import contextvars
import logging

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoder,
    TransformerEncoder,
    TransformerModel,
)
from fairseq.modules import MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import nn

from lightcompress.admin import admin_residual, connect_admin
from lightcompress.errors import ConfigError
from lightcompress.integration import TiedOutputProjection, disable_attention_fast_path
from lightcompress.models.presets import CompressionConfig, add_config_args
from lightcompress.modules import CompressionSpec, SpecPlan, group_schedule, tie_layers
from lightcompress.modules.cp import CPLinear
from lightcompress.modules.fused_qkv import FusedQKV

logger = logging.getLogger(__name__)

__all__ = [
    "CompressedTransformerModel",
    "HTTSelfAttention",
    "apply_layer_sharing",
    "module_at",
    "replace_by_plan",
]

_PLAN: contextvars.ContextVar[SpecPlan | None] = contextvars.ContextVar("lc_plan", default=None)


def _plan() -> SpecPlan:
    plan = _PLAN.get()
    if plan is None:
        raise RuntimeError("compressed layers are built by CompressedTransformerModel.build_model")
    return plan


# --------------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------------


class _FusedSlice(nn.Module):
    """Stands in for ``q_proj`` / ``k_proj`` / ``v_proj`` of a fused attention: projection
    ``index`` of the fused map (no parameters of its own)."""

    def __init__(self, qkv: FusedQKV, index: int):
        super().__init__()
        self._qkv = [qkv]  # a list keeps the fused map out of this module's tree
        self.index = index

    def forward(self, x):
        return self._qkv[0].project(x, self.index)

    def extra_repr(self) -> str:
        return f"fused slice {'qkv'[self.index]}"


class HTTSelfAttention(MultiheadAttention):
    """fairseq self-attention whose Q, K, V come from one fused map (Hypoformer Eq. 6-8).

    Everything after the projections (heads, masks, incremental state, beam reordering) is
    fairseq's own :class:`MultiheadAttention`; ``q_proj`` / ``k_proj`` / ``v_proj`` are slices
    of ``qkv_proj`` (:meth:`FusedQKV.project` runs the fused map once per input). The output
    projection is a dense map unless the spec replaces it (``identity`` for the paper's Eq. 5).

    Parameters
    ----------
    embed_dim, num_heads, dropout, ...
        As in fairseq.
    qkv : FusedQKV
        The fused projection (``embed_dim -> 3 x embed_dim``).
    out_proj : bool
        Keep the dense output projection (``False``: ``nn.Identity``).
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        qkv: FusedQKV,
        out_proj: bool = True,
        dropout=0.0,
        add_bias_kv=False,
        add_zero_attn=False,
        **kwargs,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            dropout=dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=True,
            **kwargs,
        )
        self.qkv_proj = qkv
        self.q_proj = _FusedSlice(qkv, 0)
        self.k_proj = _FusedSlice(qkv, 1)
        self.v_proj = _FusedSlice(qkv, 2)
        if not out_proj:
            self.out_proj = nn.Identity()
        self._set_skip_embed_dim_check()  # never take fairseq's fused fast path


def build_attention(
    path: str, dense: MultiheadAttention, fused_ok: bool, **quant
) -> MultiheadAttention:
    """The attention at ``path``: fairseq's ``dense`` one with the projections the spec names
    replaced, or (``fused_ok`` and a rule for ``<path>.qkv_proj``) a fused one."""
    plan = _plan()
    names = ("q_proj", "k_proj", "v_proj")
    d = dense.embed_dim
    separate = any(plan.rule_peek(f"{path}.{n}") is not None for n in names)
    if fused_ok and not separate and plan.rule_peek(f"{path}.qkv_proj") is not None:
        qkv = plan.qkv(f"{path}.qkv_proj", d, bias=dense.q_proj.bias is not None)
        attn = HTTSelfAttention(
            d,
            dense.num_heads,
            qkv,
            dropout=dense.dropout_module.p,
            **{
                "add_bias_kv": dense.bias_k is not None,
                "add_zero_attn": dense.add_zero_attn,
                **quant,
            },
        )
    else:
        attn = dense
        for n in names:
            old = getattr(attn, n)
            new = plan.linear(
                f"{path}.{n}", old.in_features, old.out_features, old.bias is not None
            )
            if new is not None:
                setattr(attn, n, new)
    old = attn.out_proj
    new = plan.linear(f"{path}.out_proj", old.in_features, old.out_features, old.bias is not None)
    if new is not None:
        attn.out_proj = new
    if any(type(getattr(attn, n)) is not nn.Linear for n in (*names, "out_proj")):
        attn._set_skip_embed_dim_check()  # fairseq's fast path would read q_proj.weight
    return attn


def _linear(path, default, input_dim, output_dim):
    new = _plan().linear(path, input_dim, output_dim)
    return default() if new is None else new


# --------------------------------------------------------------------------------------------
# layers and stacks
# --------------------------------------------------------------------------------------------


class _AdminResidualHook:
    """``residual_connection``: fairseq's ``residual + x``, or Admin's ``residual * omega + x``
    when the layer was built with ``--admin-init`` (its ``admin`` child)."""

    def residual_connection(self, x, residual):
        admin = self._modules.get("admin")
        return residual + x if admin is None else admin(x, residual)

    def _start_admin(self, sublayers):
        admin = self._modules.get("admin")
        if admin is not None:
            admin.start(sublayers)  # the residual sublayers this call runs, in order


class _SpecFFN:
    """``build_fc1`` / ``build_fc2`` of both layer classes: ask the spec at ``<prefix>.fc1/2``."""

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        dense = super().build_fc1
        return _linear(
            f"{self.lc_prefix}.fc1",
            lambda: dense(input_dim, output_dim, q_noise, qn_block_size),
            input_dim,
            output_dim,
        )

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        dense = super().build_fc2
        return _linear(
            f"{self.lc_prefix}.fc2",
            lambda: dense(input_dim, output_dim, q_noise, qn_block_size),
            input_dim,
            output_dim,
        )


class CompressedEncoderLayer(_SpecFFN, _AdminResidualHook, TransformerEncoderLayerBase):
    """fairseq's encoder layer; its ``build_*`` hooks ask the spec at ``<prefix>.*``."""

    def __init__(self, cfg, prefix: str, return_fc: bool = False):
        object.__setattr__(self, "lc_prefix", prefix)  # read by the hooks during __init__
        super().__init__(cfg, return_fc=return_fc)
        self.admin = admin_residual(cfg, "encoder", prefix, ["self_attn", "ffn"])

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        self._start_admin(["self_attn", "ffn"])
        return super().forward(x, encoder_padding_mask, attn_mask)

    def build_self_attention(self, embed_dim, cfg):
        dense = super().build_self_attention(embed_dim, cfg)
        return build_attention(f"{self.lc_prefix}.self_attn", dense, True, **self._quant())

    def _quant(self):
        return {"q_noise": self.quant_noise, "qn_block_size": self.quant_noise_block_size}


class CompressedDecoderLayer(_SpecFFN, _AdminResidualHook, TransformerDecoderLayerBase):
    """fairseq's decoder layer; its ``build_*`` hooks ask the spec at ``<prefix>.*``."""

    def __init__(
        self, cfg, prefix: str, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False
    ):
        object.__setattr__(self, "lc_prefix", prefix)
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        subs = ["self_attn", "ffn"] if no_encoder_attn else ["self_attn", "encoder_attn", "ffn"]
        self.admin = admin_residual(cfg, "decoder", prefix, subs)

    def forward(self, x, encoder_out=None, *args, **kwargs):
        # fairseq skips the cross-attention sublayer without encoder output
        cross = self.encoder_attn is not None and encoder_out is not None
        self._start_admin(["self_attn", "encoder_attn", "ffn"] if cross else ["self_attn", "ffn"])
        return super().forward(x, encoder_out, *args, **kwargs)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        dense = super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn)
        return build_attention(
            f"{self.lc_prefix}.self_attn",
            dense,
            not cfg.cross_self_attention,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        dense = super().build_encoder_attention(embed_dim, cfg)
        return build_attention(f"{self.lc_prefix}.encoder_attn", dense, fused_ok=False)


def _wrap(layer, cfg):
    """fairseq's activation checkpointing / FSDP wrapping, as in its own build_*_layer."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


class CompressedEncoder(TransformerEncoder):
    def build_encoder_layer(self, args):
        cfg = TransformerConfig.from_namespace(args)
        index = self.__dict__.get("_lc_built", 0)  # fairseq builds the layers in order
        self.__dict__["_lc_built"] = index + 1
        layer = CompressedEncoderLayer(cfg, f"encoder.layers.{index}", return_fc=self.return_fc)
        return _wrap(layer, cfg)


class CompressedDecoder(TransformerDecoder):
    def build_decoder_layer(self, args, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(args)
        index = self.__dict__.get("_lc_built", 0)
        self.__dict__["_lc_built"] = index + 1
        return _wrap(CompressedDecoderLayer(cfg, f"decoder.layers.{index}", no_encoder_attn), cfg)

    def build_output_projection(self, args, dictionary, embed_tokens):
        if self.share_input_output_embed and not isinstance(embed_tokens, nn.Embedding):
            # a factorized table has no weight Parameter to share: logits = x E^T
            self.output_projection = TiedOutputProjection(embed_tokens)
            return
        super().build_output_projection(args, dictionary, embed_tokens)


# --------------------------------------------------------------------------------------------
# sharing
# --------------------------------------------------------------------------------------------


def _not_admin(name: str) -> bool:
    # Admin's omega is a per-depth scale: every position of a group keeps its own
    return not name.startswith("admin.")


def apply_layer_sharing(model, args) -> None:
    """Tie the encoder (and decoder) layers of each contiguous group
    (``--lc-encoder-groups`` / ``--lc-decoder-groups``; 0 = no sharing)."""
    for side in ("encoder", "decoder"):
        groups = getattr(args, f"lc_{side}_groups", 0) or 0
        layers = getattr(model, side).layers
        check_groups(side, groups, len(layers))
        if 0 < groups < len(layers):
            tied = tie_layers(layers, group_schedule(len(layers), groups), share=_not_admin)
            logger.info(
                "%s: %d layers in %d sharing groups (%d parameter tensors tied to their "
                "group's first layer)",
                side,
                len(layers),
                groups,
                len(tied),
            )


def check_groups(side: str, groups: int, num_layers: int) -> None:
    """One clear error for a group count that cannot be (before anything is built)."""
    if groups < 0:
        raise ConfigError(f"--lc-{side}-groups must be >= 0 (0: no sharing), got {groups}")
    if groups > num_layers:
        raise ConfigError(
            f"--lc-{side}-groups {groups} is larger than --{side}-layers {num_layers}"
        )


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------


class CompressedTransformerModel(TransformerModel):
    """fairseq's Transformer built through a compression spec (see the module docstring).

    The families' models (:class:`~lightcompress.models.family.FamilyModel`, one per
    declaration) override :meth:`spec_text` (their flags -> spec text), :meth:`add_args` and
    :meth:`check_args` from their declaration; ``--lc-spec`` replaces the family's rules for
    any of them.
    """

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_config_args(parser, CompressionConfig, "compression, sharing, Admin (lightcompress)")

    @classmethod
    def spec_text(cls, args) -> str:
        """The compression spec of this configuration (``--lc-spec`` wins)."""
        return getattr(args, "lc_spec", None) or ""

    @classmethod
    def check_args(cls, args) -> None:
        """Validate the flags before anything is built (one clear ValueError)."""
        for side in ("encoder", "decoder"):
            groups = getattr(args, f"lc_{side}_groups", 0) or 0
            check_groups(side, groups, getattr(args, f"{side}_layers"))

    @classmethod
    def build_model(cls, args, task, plan: SpecPlan | None = None):
        """Build the compressed model; ``plan`` (e.g. a convert-mode plan) replaces the one
        parsed from :meth:`spec_text`."""
        cls.check_args(args)
        if plan is None:
            text = cls.spec_text(args)
            spec = CompressionSpec.parse(text)
            if not spec.rules and getattr(args, "lc_spec", None):
                raise ConfigError(
                    f"--lc-spec {args.lc_spec!r} has no rules (leave the flag out for the "
                    "family's rules; write 'pattern = dense' to keep a module dense)"
                )
            plan = SpecPlan(spec)
        token = _PLAN.set(plan)
        try:
            model = super().build_model(args, task)
            plan.finish()
        finally:
            _PLAN.reset(token)
        apply_layer_sharing(model, args)
        connect_admin(model, args)  # --admin-init: profile file or profiling run
        disable_attention_fast_path(model)
        return model

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's loading, refusing different values for one shared parameter: positions
        of a sharing group hold one Parameter, and loading would keep the last of them.

        CP layers whose saved factors have another rank than the flags built (a checkpoint
        of a rank search, :mod:`lightcompress.search`) are resized to the saved rank first,
        so such a checkpoint loads wherever fairseq loads a model (``fairseq-generate``,
        ``--restore-file``, the plugin's tools)."""
        resize_cp_layers(self, state_dict)
        by_param: dict[int, list[str]] = {}
        for name, p in self.named_parameters(remove_duplicate=False):
            by_param.setdefault(id(p), []).append(name)
        for names in by_param.values():
            present = [n for n in names if n in state_dict]
            for other in present[1:]:
                a, b = state_dict[present[0]], state_dict[other]
                if a.shape == b.shape and not torch.equal(a, b):
                    raise ConfigError(
                        f"{present[0]} and {other} share parameters in this model (a sharing "
                        "group or a tied table), but the checkpoint holds different values for "
                        "them (a checkpoint of an unshared model, or an average of different "
                        "models?); loading would silently keep one of them"
                    )
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    @classmethod
    def build_embedding(cls, args, dictionary, embed_dim, path=None):
        plan = _plan()
        # fairseq builds the encoder's table first, then the decoder's (once when shared)
        side = "decoder" if "encoder.embed_tokens" in plan.asked else "encoder"
        new = plan.embedding(f"{side}.embed_tokens", len(dictionary), embed_dim, dictionary.pad())
        if new is None:
            return super().build_embedding(args, dictionary, embed_dim, path)
        if path:
            raise ConfigError(
                f"--{side}-embed-path cannot load pretrained vectors into a factorized table"
            )
        return new

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return CompressedEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return CompressedDecoder(
            args, tgt_dict, embed_tokens, no_encoder_attn=getattr(args, "no_cross_attention", False)
        )


# --------------------------------------------------------------------------------------------
# the same plan on a built model (weight transfer)
# --------------------------------------------------------------------------------------------


def resize_cp_layers(model: nn.Module, state_dict) -> list[str]:
    """Resize every :class:`~lightcompress.modules.CPLinear` of ``model`` whose factors in
    ``state_dict`` have another rank; returns the paths resized."""
    resized = []
    for name, module in model.named_modules():
        if not isinstance(module, CPLinear):
            continue
        saved = state_dict.get(f"{name}.w0")
        if saved is None or saved.dim() != 2 or saved.shape[1] == module.rank:
            continue
        if saved.shape[0] != module.out_features:
            continue  # a shape strict loading reports as the mismatch it is
        module.resize(int(saved.shape[1]))
        resized.append(name)
    return resized


def module_at(model: nn.Module, path: str):
    """The dense module at ``path``; for ``<attention>.qkv_proj`` the ``(q, k, v)`` triple."""
    if path.endswith(".qkv_proj"):
        attn = model.get_submodule(path[: -len(".qkv_proj")])
        return attn.q_proj, attn.k_proj, attn.v_proj
    return model.get_submodule(path)


def plan_paths(model: nn.Module):
    """``(path, slot)`` in the order the build hooks ask them (``slot``: ``embedding``,
    ``attention`` (self / cross, with whether fusing is allowed) or ``linear``)."""
    seen = set()
    for side in ("encoder", "decoder"):
        emb = getattr(model, side).embed_tokens
        if id(emb) not in seen:
            seen.add(id(emb))
            yield f"{side}.embed_tokens", "embedding"
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, side).layers):
            prefix = f"{side}.layers.{i}"
            yield f"{prefix}.self_attn", "self_attention"
            if getattr(layer, "encoder_attn", None) is not None:
                yield f"{prefix}.encoder_attn", "attention"
            yield f"{prefix}.fc1", "linear"
            yield f"{prefix}.fc2", "linear"


def replace_by_plan(model: nn.Module, plan: SpecPlan, progress=None) -> None:
    """Apply ``plan`` to a built dense model of the same family, path by path, as the build
    hooks would (a ``convert`` plan fits each layer to the module it replaces)."""

    def put(path, new):
        parent, _, child = path.rpartition(".")
        setattr(model.get_submodule(parent), child, new)

    for path, slot in list(plan_paths(model)):
        if progress is not None:
            progress(path)
        if slot == "embedding":
            old = model.get_submodule(path)
            new = plan.embedding(path, old.num_embeddings, old.embedding_dim, old.padding_idx)
            if new is not None:
                put(path, new)
                if path == "encoder.embed_tokens" and model.decoder.embed_tokens is old:
                    model.decoder.embed_tokens = new
            continue
        if slot == "linear":
            old = model.get_submodule(path)
            new = plan.linear(path, old.in_features, old.out_features, old.bias is not None)
            if new is not None:
                put(path, new)
            continue
        token = _PLAN.set(plan)
        try:
            attn = model.get_submodule(path)
            new = build_attention(path, attn, fused_ok=slot == "self_attention")
        finally:
            _PLAN.reset(token)
        if new is not attn:  # fused: the dense output projection moves over
            if type(new.out_proj) is nn.Linear:
                new.out_proj.load_state_dict(attn.out_proj.state_dict())
            put(path, new)
    decoder = model.decoder
    if decoder.share_input_output_embed and not isinstance(decoder.embed_tokens, nn.Embedding):
        decoder.output_projection = TiedOutputProjection(decoder.embed_tokens)
    disable_attention_fast_path(model)
