"""The fused DA-WID model ``dawid_fused``: an ordinary fairseq Transformer whose layers have the
widths DA-WID's masks left (:mod:`lightcompress.wid.fused`), and the fusion of a training model
into it (:func:`fuse_model`).
"""

from __future__ import annotations

import argparse
import json

import torch
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture

from lightcompress.errors import ConfigError
from lightcompress.wid.fused import FusedDecoderLayer, FusedEncoderLayer
from lightcompress.wid.masked import (
    WIDEncoderLayer,
)
from lightcompress.wid.teacher import args_namespace

__all__ = [
    "DAWIDFusedModel",
    "FusedEncoder",
    "dawid_fused_architecture",
    "fuse_model",
    "fused_args",
    "load_fused_weights",
    "parse_shapes",
]


# --------------------------------------------------------------------------------------------
# the fused model
# --------------------------------------------------------------------------------------------


def parse_shapes(text, parts=("encoder",)) -> dict:
    """The ``--dawid-shapes`` JSON (a dict passes through); ``parts`` must be there."""
    if isinstance(text, dict):
        return text
    try:
        shapes = json.loads(text or "")
        layers = [shapes[p]["layers"] for p in parts]
        assert all(isinstance(x, list) and x for x in layers)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise ConfigError(
            "--dawid-shapes must be the JSON lightcompress-convert dawid-fuse writes "
            "(OUTPUT.shapes.json)"
        ) from None
    return shapes


def _layer_kwargs(cfg):
    return {
        "activation_fn": utils.get_activation_fn(getattr(cfg, "activation_fn", "relu") or "relu"),
        "dropout": float(getattr(cfg, "dropout", 0.0) or 0.0),
        "attention_dropout": float(getattr(cfg, "attention_dropout", 0.0) or 0.0),
        "activation_dropout": float(
            getattr(cfg, "activation_dropout", 0.0) or getattr(cfg, "relu_dropout", 0.0) or 0.0
        ),
    }


class FusedEncoder(TransformerEncoder):
    """fairseq's encoder whose layers take their widths from ``--dawid-shapes``."""

    def build_encoder_layer(self, cfg):
        if not hasattr(self, "_dawid_next"):
            self._dawid_next = iter(parse_shapes(self.args.dawid_shapes)["encoder"]["layers"])
        return FusedEncoderLayer(next(self._dawid_next), **_layer_kwargs(cfg))


class _FusedDecoder(TransformerDecoder):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if not hasattr(self, "_dawid_next"):
            self._dawid_next = iter(parse_shapes(self.args.dawid_shapes)["decoder"]["layers"])
        return FusedDecoderLayer(next(self._dawid_next), **_layer_kwargs(cfg))


def _no_upgrade(self, state_dict, name):
    """Fused layers have no legacy state-dict layouts to upgrade."""


FusedEncoderLayer.upgrade_state_dict_named = _no_upgrade
WIDEncoderLayer.upgrade_state_dict_named = _no_upgrade


@register_model("dawid_fused")
class DAWIDFusedModel(TransformerModel):
    """An ordinary fairseq Transformer whose layers have the widths DA-WID's masks left."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--dawid-shapes",
            metavar="JSON",
            help="per-layer widths of the fused model (written by lightcompress-convert dawid-fuse)",
        )

    @classmethod
    def build_model(cls, args, task):
        shapes = parse_shapes(getattr(args, "dawid_shapes", None), ("encoder", "decoder"))
        args.encoder_layers = len(shapes["encoder"]["layers"])
        args.decoder_layers = len(shapes["decoder"]["layers"])
        args.encoder_embed_dim = shapes["encoder"]["embed_dim"]
        args.decoder_embed_dim = shapes["decoder"]["embed_dim"]
        args.decoder_input_dim = args.decoder_output_dim = args.decoder_embed_dim
        args.encoder_normalize_before = args.decoder_normalize_before = False
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return FusedEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return _FusedDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=False)


@register_model_architecture("dawid_fused", "dawid_fused")
def dawid_fused_architecture(args):
    base_architecture(args)


def fused_args(teacher_args, shapes: dict) -> argparse.Namespace:
    """The fused model's configuration: the teacher's, with ``--arch dawid_fused`` and its shapes."""
    fargs = args_namespace(teacher_args)
    fargs.arch = "dawid_fused"
    if hasattr(fargs, "_name"):
        fargs._name = "dawid_fused"
    fargs.dawid_shapes = json.dumps(shapes, separators=(",", ":"))
    dawid_fused_architecture(fargs)
    return fargs


@torch.no_grad()
def fuse_model(student, teacher_args):
    """``(fused_model, fused_args, shapes)``: prune ``student`` by its final masks and fuse the
    compactors (:func:`lightcompress.wid.fuse.fuse_state`) into a :class:`DAWIDFusedModel`."""
    from lightcompress.build import build_model_without_data
    from lightcompress.wid.fuse import fuse_state

    shapes, tensors, _ = fuse_state(student)
    fargs = fused_args(teacher_args, shapes)
    src = student.encoder.embed_tokens.weight.shape[0]
    tgt = student.decoder.embed_tokens.weight.shape[0]
    fused = build_model_without_data(fargs, src, tgt)
    load_fused_weights(fused, student, tensors)
    return fused, fargs, shapes


def load_fused_weights(fused, student, tensors: dict) -> None:
    """Load ``tensors`` (the fused weights) into ``fused``, every other weight inherited from
    ``student`` by name; a weight that does not fit, or a fused weight without a place in the
    fused model (it would be dropped silently), is an internal error. Leaves ``fused`` in eval
    mode. Used by the translation and the RoBERTa fusion."""
    inherited = student.state_dict()
    sd = fused.state_dict()
    for key, value in sd.items():
        new = tensors.get(key, inherited.get(key))
        if new is None or tuple(new.shape) != tuple(value.shape):
            raise RuntimeError(
                f"internal error: fused weight {key} {None if new is None else tuple(new.shape)} "
                f"does not fit the fused model's {tuple(value.shape)}"
            )
        sd[key] = new.to(value.dtype)
    unused = [k for k in tensors if k not in sd]
    if unused:
        raise RuntimeError(f"internal error: fused weights without a place: {unused[:5]}")
    fused.load_state_dict(sd, strict=True)
    fused.eval()
