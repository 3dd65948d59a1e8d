"""fairseq models of DA-WID: the training model ``dawid`` and the fused model ``dawid_fused``.

``--arch dawid --dawid-teacher T.pt``: the student is the teacher (a trained post-LN fairseq
``transformer_*``) with compactors and masks in every layer (:mod:`lightcompress.wid.masked`),
initialised from calibration data of the training set (Eq. 8-12; ``--dawid-init identity``: WID's
identity). The teacher itself stays outside the module tree (``model.teacher``): it is frozen, used
by the ``dawid`` criterion and never saved. The multi-stage schedule switches the mask levels on
by update number: distillation only for ``--dawid-distill-updates``, then the dimension masks and
the Lagrangian with the target warmed up linearly over ``--dawid-sparsity-warmup`` updates, then,
``--dawid-structure-updates`` later, the head and layer masks; ``--dawid-masks`` chooses the
levels (the paper's ablations: ``dim``, ``dim,head``, ``dim,layer``, ...).

``--arch dawid_fused --dawid-shapes JSON``: the fused model (:mod:`lightcompress.wid.fused`), an
ordinary fairseq Transformer encoder-decoder whose layers have their own widths; written by
``lightcompress-convert dawid-fuse`` and loaded by ``fairseq-generate`` like any checkpoint.
"""

from __future__ import annotations

import argparse
import copy

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from torch import nn

from lightcompress.errors import ConfigError
from lightcompress.wid.data_aware import (
    finish_student,
)
from lightcompress.wid.gates import HardConcreteGate, LagrangianSparsity
from lightcompress.wid.masked import (
    WIDDecoderLayer,
    WIDEncoderLayer,
)
from lightcompress.wid.teacher import (
    args_namespace,
    from_json_buffer,
    json_buffer,
    load_teacher_model,
    teacher_structure_args,
)

__all__ = [
    "MASK_LEVELS",
    "DAWIDModel",
    "WIDMixin",
    "dawid_architecture",
]

MASK_LEVELS = ("dim", "head", "layer")


# --------------------------------------------------------------------------------------------
# the training model
# --------------------------------------------------------------------------------------------
class WIDMixin:
    """What the DA-WID training models share: the frozen teacher (outside the module tree), the
    gates and the multi-stage schedule, the Lagrangian, the sizes. A model defines
    ``wid_stacks()``: ``[(name, d, layers, state-dict prefix of the layers), ...]``."""

    def wid_setup(self, args, teacher_args, levels, widths: dict) -> None:
        self.args = args
        self.levels = list(levels)
        # W_layer of Eq. 15 (one per stack), identity-initialised
        self.layer_map = nn.ModuleDict({k: nn.Linear(d, d, bias=False) for k, d in widths.items()})
        for m in self.layer_map.values():
            nn.init.eye_(m.weight)
        self.lagrangian = LagrangianSparsity(
            args.dawid_target_sparsity, args.dawid_sparsity_warmup, args.dawid_gate_lr_scale
        )
        for gate in self.gates():
            gate.rescale(args.dawid_gate_lr_scale)
        self.register_buffer(
            "wid_teacher_config", json_buffer(teacher_structure_args(teacher_args))
        )
        self.register_buffer("wid_num_updates", torch.zeros((), dtype=torch.long))
        self._teacher = []  # a list keeps the teacher out of parameters() and state_dict()
        self._teacher_params = None
        self.apply_schedule(0)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        result = super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        self.apply_schedule(int(self.wid_num_updates))
        return result

    # ---- teacher --------------------------------------------------------------------------

    @property
    def teacher(self):
        return self._teacher[0] if self._teacher else None

    def set_teacher(self, teacher):
        teacher.eval()
        teacher.requires_grad_(False)
        self._teacher = [teacher]

    def teacher_on_device(self):
        """The teacher, moved to this model's device and dtype on first use."""
        teacher = self.teacher
        if teacher is None:
            raise ConfigError("the DA-WID model has no teacher (--dawid-teacher)")
        ref = next(iter(self.wid_stacks()))[2][0].blocks[0].site.c_in
        tref = next(teacher.parameters())
        if tref.device != ref.device or tref.dtype != ref.dtype:  # fairseq moved the student
            teacher.to(device=ref.device, dtype=ref.dtype)
        teacher.eval()
        return teacher

    def freeze_teacher_weights(self):
        """The paper (App. C.1): embeddings and the MHA/FFN weight matrices stay frozen."""
        frozen = (
            "embed_tokens",
            "embed_positions",
            "q_proj",
            "k_proj",
            "v_proj",
            "out_proj",
            "fc1",
            "fc2",
            "output_projection",
        )
        for name, p in self.named_parameters():
            if any(part in frozen for part in name.split(".")):
                p.requires_grad_(False)

    # ---- gates and schedule ------------------------------------------------------------------

    def gates(self):
        return [m for m in self.modules() if isinstance(m, HardConcreteGate)]

    def apply_schedule(self, num_updates: int) -> None:
        """Switch the gate levels on or off for update ``num_updates`` (module docstring)."""
        a = self.args
        start = a.dawid_distill_updates
        on = {
            "dim": "dim" in self.levels and num_updates >= start,
            "head": "head" in self.levels and num_updates >= start + a.dawid_structure_updates,
            "layer": "layer" in self.levels and num_updates >= start + a.dawid_structure_updates,
        }
        for g in self.gates():
            g.active = on[g.level]

    def set_num_updates(self, num_updates):
        super().set_num_updates(num_updates)
        self.wid_num_updates.fill_(int(num_updates))
        for g in self.gates():
            g.constrain()
        self.apply_schedule(int(num_updates))

    def pruning_on(self) -> bool:
        return any(g.active for g in self.gates())

    def target_sparsity(self) -> float:
        n = int(self.wid_num_updates)
        return self.lagrangian.target_at(n - self.args.dawid_distill_updates)

    def teacher_size(self) -> int:
        """The teacher's non-embedding parameter count (what sparsity is relative to): its
        attention and FFN matrices, its LayerNorms and the constant part (learned positions)."""
        if self._teacher_params is None:
            n = self.constant_params()
            for _, d, layers, _ in self.wid_stacks():
                for layer in layers:
                    for block in layer.blocks:
                        mods = [
                            getattr(block.sub, k, None)
                            for k in ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")
                        ]
                        n += sum(p.numel() for m in mods if m is not None for p in m.parameters())
                        n += 2 * d
            self._teacher_params = n
        return self._teacher_params

    def constant_params(self) -> int:
        """Counted non-embedding parameters outside the layers, kept as they are by fusion."""
        return 0

    def expected_sparsity(self):
        from lightcompress.wid.fuse import expected_size

        return 1.0 - (expected_size(self) + self.constant_params()) / self.teacher_size()


# --------------------------------------------------------------------------------------------


@register_model("dawid")
class DAWIDModel(WIDMixin, TransformerModel):
    """The teacher with DA-WID compactors and masks (module docstring)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--dawid-teacher",
            metavar="PATH",
            help="trained post-LN fairseq Transformer checkpoint (the teacher; frozen, never saved with the student)",
        )
        parser.add_argument(
            "--dawid-init",
            choices=["data-aware", "identity"],
            help="compactor initialisation: SVD of calibration features (DA-WID) or identity (WID, the ablation)",
        )
        parser.add_argument(
            "--dawid-calib-tokens",
            type=int,
            metavar="N",
            help="calibration tokens per side sampled from the training set (default 4096)",
        )
        parser.add_argument(
            "--dawid-calib-seed", type=int, metavar="S", help="seed of the calibration sample"
        )
        parser.add_argument(
            "--dawid-target-sparsity",
            type=float,
            metavar="T",
            help="final target sparsity in [0, 1): 1 - student / teacher non-embedding parameters",
        )
        parser.add_argument(
            "--dawid-masks",
            metavar="LEVELS",
            help="comma-separated mask levels: dim, head, layer (or none)",
        )
        parser.add_argument(
            "--dawid-distill-updates",
            type=int,
            metavar="N",
            help="updates of distillation only before any mask",
        )
        parser.add_argument(
            "--dawid-sparsity-warmup",
            type=int,
            metavar="N",
            help="updates over which the target rises linearly from 0 once masks are on",
        )
        parser.add_argument(
            "--dawid-structure-updates",
            type=int,
            metavar="N",
            help="updates after the dimension masks before the head and layer masks start",
        )
        parser.add_argument(
            "--dawid-gate-lr-scale",
            type=float,
            metavar="S",
            help="the masks' log_alpha and the Lagrange multipliers train at S times --lr "
            "(default 20; CoFi trains them at 0.01 while the model trains at 2e-5)",
        )
        parser.add_argument(
            "--dawid-train-weights",
            action="store_true",
            help="also train the teacher's weight matrices and embeddings (the paper freezes them)",
        )

    @staticmethod
    def check_args(args) -> list[str]:
        """Validate the flags (ConfigError); returns the mask levels."""
        t = args.dawid_target_sparsity
        if t is None or not (0.0 <= t < 1.0):
            raise ConfigError(f"--dawid-target-sparsity must be in [0, 1), got {t}")
        n = args.dawid_calib_tokens
        if n is None or n < 1:
            raise ConfigError(f"--dawid-calib-tokens must be >= 1, got {n}")
        if not args.dawid_gate_lr_scale > 0:
            raise ConfigError(f"--dawid-gate-lr-scale must be > 0, got {args.dawid_gate_lr_scale}")
        for key in ("dawid_distill_updates", "dawid_sparsity_warmup", "dawid_structure_updates"):
            if getattr(args, key) < 0:
                raise ConfigError(
                    f"--{key.replace('_', '-')} must be >= 0, got {getattr(args, key)}"
                )
        text = (args.dawid_masks or "").strip()
        levels = [] if text in ("", "none") else [s.strip() for s in text.split(",")]
        bad = [s for s in levels if s not in MASK_LEVELS]
        if bad:
            raise ConfigError(
                f"--dawid-masks: unknown level(s) {bad}; choose from {list(MASK_LEVELS)} or none"
            )
        return levels

    def __init__(self, args, teacher_args, encoder, decoder, levels):
        super().__init__(teacher_args, encoder, decoder)
        self.wid_setup(
            args,
            teacher_args,
            levels,
            {
                "encoder": encoder.embed_tokens.embedding_dim,
                "decoder": decoder.embed_tokens.embedding_dim,
            },
        )

    def wid_stacks(self):
        return [
            (name, part.embed_tokens.embedding_dim, part.layers, f"{name}.layers.")
            for name, part in (("encoder", self.encoder), ("decoder", self.decoder))
        ]

    def constant_params(self) -> int:
        """Non-embedding parameters outside the layers (learned positions), kept by fusion."""
        n = 0
        for part in (self.encoder, self.decoder):
            if part.embed_positions is not None:
                n += sum(p.numel() for p in part.embed_positions.parameters())
        return n

    # ---- building ----------------------------------------------------------------------------

    @classmethod
    def build_model(cls, args, task, teacher=None, teacher_args=None, calibrate_from=None):
        """Build the student from ``--dawid-teacher`` (or the given ``teacher``) and initialise the
        compactors (data-aware from the task's training data, or identity)."""
        dawid_architecture(args)
        levels = cls.check_args(args)
        if teacher is None:
            teacher_args, teacher = load_teacher_model(
                args.dawid_teacher, task.source_dictionary, task.target_dictionary
            )
        student = cls.from_teacher(args, teacher_args, teacher, levels)
        return finish_student(student, teacher, task, args, calibrate_from)

    @classmethod
    def from_teacher(cls, args, teacher_args, teacher, levels):
        """The training model: a copy of ``teacher`` with every layer wrapped (identity compactors)."""
        encoder = copy.deepcopy(teacher.encoder)
        decoder = copy.deepcopy(teacher.decoder)
        encoder.layers = nn.ModuleList([WIDEncoderLayer(layer) for layer in teacher.encoder.layers])
        n = len(teacher.decoder.layers)
        decoder.layers = nn.ModuleList(
            [
                WIDDecoderLayer(layer, last=i == n - 1)
                for i, layer in enumerate(teacher.decoder.layers)
            ]
        )
        for part in (encoder, decoder):
            part.requires_grad_(True)
        return cls(args, teacher_args, encoder, decoder, levels)

    @classmethod
    def rebuild(cls, state: dict):
        """The training model of a checkpoint ``state`` (weights loaded), without the teacher file."""
        from lightcompress.build import build_model_without_data
        from lightcompress.checkpoint import model_config

        args = args_namespace(model_config(state))
        sd = state["model"]
        if "wid_teacher_config" not in sd:
            raise ConfigError("the checkpoint is not a DA-WID training checkpoint (--arch dawid)")
        targs = argparse.Namespace(**from_json_buffer(sd["wid_teacher_config"]))
        dawid_architecture(args)
        levels = cls.check_args(args)
        skeleton = build_model_without_data(
            targs,
            sd["encoder.embed_tokens.weight"].shape[0],
            sd["decoder.embed_tokens.weight"].shape[0],
        )
        student = cls.from_teacher(args, targs, skeleton, levels)
        student.load_state_dict(sd, strict=True)
        student.apply_schedule(int(sd["wid_num_updates"]))
        student.eval()
        return student, targs


@register_model_architecture("dawid", "dawid")
def dawid_architecture(args):
    args.dawid_teacher = getattr(args, "dawid_teacher", None)
    args.dawid_init = getattr(args, "dawid_init", None) or "data-aware"
    args.dawid_calib_tokens = (
        4096 if getattr(args, "dawid_calib_tokens", None) is None else args.dawid_calib_tokens
    )
    args.dawid_calib_seed = (
        1 if getattr(args, "dawid_calib_seed", None) is None else args.dawid_calib_seed
    )
    args.dawid_target_sparsity = (
        0.5 if getattr(args, "dawid_target_sparsity", None) is None else args.dawid_target_sparsity
    )
    args.dawid_masks = getattr(args, "dawid_masks", None) or "dim,head,layer"
    for key in ("dawid_distill_updates", "dawid_sparsity_warmup", "dawid_structure_updates"):
        setattr(args, key, 0 if getattr(args, key, None) is None else getattr(args, key))
    args.dawid_train_weights = bool(getattr(args, "dawid_train_weights", False))
    if getattr(args, "dawid_gate_lr_scale", None) is None:
        args.dawid_gate_lr_scale = 20.0
