"""DA-WID for fairseq RoBERTa encoders with the ``sentence_prediction`` task (the paper's setting).

``--arch dawid_roberta --dawid-teacher T.pt``: the teacher is a fine-tuned post-LN fairseq RoBERTa
(``roberta_*``, with the classification head the task names); the student wraps every layer of
its sentence encoder with compactors and masks (:mod:`lightcompress.wid.masked`), keeps the
teacher's classification heads (trained on, as CoFi does) and its LM head, and is trained by the
``dawid`` criterion (KL on the class distribution, MSE for a regression head with one output,
plus the layer MSE and the Lagrangian). Sparsity counts the encoder layers only (the paper's
convention after CoFi: embeddings not counted).

``--arch dawid_roberta_fused --dawid-shapes JSON``: the fused model, an ordinary fairseq RoBERTa
whose layers have their own widths; the heads read the last layer's kept dimensions. fairseq's
``sentence_prediction`` task (``fairseq-validate``, ``RobertaModel.from_pretrained``) loads it.
"""

from __future__ import annotations

import argparse
import copy

import torch
from fairseq.models import FairseqEncoderModel, register_model, register_model_architecture
from fairseq.models.roberta import RobertaModel
from fairseq.models.roberta.model import RobertaClassificationHead, RobertaEncoder
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from torch import nn

from lightcompress.checkpoint import classification_heads_in
from lightcompress.errors import ConfigError
from lightcompress.wid.data_aware import finish_student
from lightcompress.wid.fused_model import FusedEncoder, load_fused_weights, parse_shapes
from lightcompress.wid.masked import WIDEncoderLayer
from lightcompress.wid.model import DAWIDModel, WIDMixin, dawid_architecture
from lightcompress.wid.teacher import args_namespace, from_json_buffer, load_teacher_model

__all__ = ["DAWIDFusedRobertaModel", "DAWIDRobertaModel", "fuse_roberta"]


@register_model("dawid_roberta")
class DAWIDRobertaModel(WIDMixin, RobertaModel):
    """A fine-tuned RoBERTa with DA-WID compactors and masks (module docstring)."""

    add_args = staticmethod(DAWIDModel.add_args)
    check_args = staticmethod(DAWIDModel.check_args)

    def __init__(self, args, teacher_args, encoder, heads, levels):
        # not RobertaModel.__init__: it re-initialises every weight (BERT's init), the
        # teacher's included
        FairseqEncoderModel.__init__(self, encoder)
        self.classification_heads = heads
        self.wid_setup(args, teacher_args, levels, {"encoder": self.wid_width})

    @property
    def wid_width(self) -> int:
        return self.encoder.sentence_encoder.embed_tokens.embedding_dim

    def wid_stacks(self):
        layers = self.encoder.sentence_encoder.layers
        return [("encoder", self.wid_width, layers, "encoder.sentence_encoder.layers.")]

    @classmethod
    def build_model(cls, args, task, teacher=None, teacher_args=None, calibrate_from=None):
        dawid_architecture(args)
        levels = cls.check_args(args)
        if teacher is None:
            teacher_args, teacher = load_teacher_model(
                args.dawid_teacher, task.source_dictionary, family="roberta"
            )
        if not teacher.classification_heads:
            raise ConfigError(
                f"--dawid-teacher {args.dawid_teacher}: the teacher has no classification head "
                "(fine-tune it with --task sentence_prediction first)"
            )
        student = cls.from_teacher(args, teacher_args, teacher, levels)
        return finish_student(student, teacher, task, args, calibrate_from)

    @classmethod
    def from_teacher(cls, args, teacher_args, teacher, levels):
        encoder = copy.deepcopy(teacher.encoder)
        encoder.sentence_encoder.layers = nn.ModuleList(
            [WIDEncoderLayer(layer) for layer in teacher.encoder.sentence_encoder.layers]
        )
        encoder.requires_grad_(True)
        heads = copy.deepcopy(teacher.classification_heads).requires_grad_(True)
        return cls(args, teacher_args, encoder, heads, levels)

    @classmethod
    def rebuild(cls, state: dict):
        """The training model of a checkpoint ``state`` (weights loaded), without the teacher."""
        from lightcompress.build import build_model_without_data
        from lightcompress.checkpoint import model_config

        args = args_namespace(model_config(state))
        sd = state["model"]
        targs = argparse.Namespace(**from_json_buffer(sd["wid_teacher_config"]))
        dawid_architecture(args)
        levels = cls.check_args(args)
        skeleton = build_model_without_data(
            targs, sd["encoder.sentence_encoder.embed_tokens.weight"].shape[0]
        )
        for name, (classes, inner) in classification_heads_in(sd).items():
            skeleton.register_classification_head(name, num_classes=classes, inner_dim=inner)
        student = cls.from_teacher(args, targs, skeleton, levels)
        student.load_state_dict(sd, strict=True)
        student.apply_schedule(int(sd["wid_num_updates"]))
        student.eval()
        return student, targs

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        """Keep the teacher's fine-tuned head (RoBERTa's own method would replace it by a new
        one); a head the teacher does not have is an error."""
        head = self.classification_heads[name] if name in self.classification_heads else None  # noqa: SIM401  (a ModuleDict has no get)
        if head is None or (num_classes is not None and head.out_proj.out_features != num_classes):
            have = {k: h.out_proj.out_features for k, h in self.classification_heads.items()}
            raise ConfigError(
                f"the teacher has no classification head {name!r} with {num_classes} classes "
                f"(it has {have}); use the task's --classification-head-name / --num-classes"
            )


@register_model_architecture("dawid_roberta", "dawid_roberta")
def dawid_roberta_architecture(args):
    dawid_architecture(args)


# --------------------------------------------------------------------------------------------
# the fused model
# --------------------------------------------------------------------------------------------


class _FusedRobertaEncoder(RobertaEncoder):
    def build_encoder(self, args, dictionary, embed_tokens):
        return FusedEncoder(args, dictionary, embed_tokens)


@register_model("dawid_roberta_fused")
class DAWIDFusedRobertaModel(RobertaModel):
    """An ordinary fairseq RoBERTa whose layers have the widths DA-WID's masks left."""

    @classmethod
    def add_args(cls, parser):
        RobertaModel.add_args(parser)
        parser.add_argument(
            "--dawid-shapes",
            metavar="JSON",
            help="per-layer widths of the fused model (written by lightcompress-convert dawid-fuse)",
        )

    @classmethod
    def build_model(cls, args, task):
        shapes = parse_shapes(getattr(args, "dawid_shapes", None))
        args.encoder_layers = len(shapes["encoder"]["layers"])
        args.encoder_embed_dim = shapes["encoder"]["embed_dim"]
        args.encoder_normalize_before = False
        roberta_base_architecture(args)
        if not hasattr(args, "max_positions"):
            args.max_positions = getattr(args, "tokens_per_sample", None) or task.max_positions()
        encoder = _FusedRobertaEncoder(args, task.source_dictionary)
        width = cls.output_width(shapes)
        d = args.encoder_embed_dim
        encoder.lm_head.dense = nn.Linear(width, d)  # reads the last layer's kept dimensions
        return cls(args, encoder)

    @staticmethod
    def output_width(shapes) -> int:
        return int(shapes["encoder"]["layers"][-1][-1]["out"])

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        self.classification_heads[name] = RobertaClassificationHead(
            input_dim=self.output_width(parse_shapes(self.args.dawid_shapes)),
            inner_dim=inner_dim or self.args.encoder_embed_dim,
            num_classes=num_classes,
            activation_fn=self.args.pooler_activation_fn,
            pooler_dropout=self.args.pooler_dropout,
        )


@register_model_architecture("dawid_roberta_fused", "dawid_roberta_fused")
def dawid_roberta_fused_architecture(args):
    roberta_base_architecture(args)


@torch.no_grad()
def fuse_roberta(student: DAWIDRobertaModel, teacher_args):
    """``(fused_model, fused_args, shapes)`` of a RoBERTa training model: the layers fused
    (:func:`lightcompress.wid.fuse.fuse_state`), the LM head's and the classification heads'
    first layers rewritten to read the fused model's last hidden state."""
    import json

    from lightcompress.build import build_model_without_data
    from lightcompress.wid.fuse import fold_linear, fuse_state

    shapes, tensors, folds = fuse_state(student)
    P, p = folds["encoder"]
    w, b = fold_linear(student.encoder.lm_head.dense, P, p)
    tensors["encoder.lm_head.dense.weight"], tensors["encoder.lm_head.dense.bias"] = w, b
    for name, head in student.classification_heads.items():
        w, b = fold_linear(head.dense, P, p)
        tensors[f"classification_heads.{name}.dense.weight"] = w
        tensors[f"classification_heads.{name}.dense.bias"] = b
    fargs = args_namespace(teacher_args)
    fargs.arch = "dawid_roberta_fused"
    if hasattr(fargs, "_name"):
        fargs._name = "dawid_roberta_fused"
    fargs.dawid_shapes = json.dumps(shapes, separators=(",", ":"))
    vocab = student.encoder.sentence_encoder.embed_tokens.weight.shape[0]
    fused = build_model_without_data(fargs, vocab)
    for name, head in student.classification_heads.items():
        fused.register_classification_head(
            name, num_classes=head.out_proj.out_features, inner_dim=head.dense.out_features
        )
    load_fused_weights(fused, student, tensors)  # (the translation fusion's loading and checks)
    return fused, fargs, shapes
