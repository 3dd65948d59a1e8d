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
import json

import numpy as np
import torch
from fairseq import utils
from fairseq.models import ARCH_MODEL_NAME_REGISTRY, register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from torch import nn

from lightcompress.errors import CheckpointError, ConfigError
from lightcompress.wid.calibrate import qk_compactors, site_compactors, vo_compactors
from lightcompress.wid.fused import FusedDecoderLayer, FusedEncoderLayer
from lightcompress.wid.gates import HardConcreteGate, LagrangianSparsity
from lightcompress.wid.masked import (
    LayerNormSite,
    MaskedAttention,
    WIDDecoderLayer,
    WIDEncoderLayer,
)

__all__ = [
    "DAWIDFusedModel",
    "DAWIDModel",
    "check_teacher",
    "load_teacher_model",
    "teacher_structure_args",
]

MASK_LEVELS = ("dim", "head", "layer")


# --------------------------------------------------------------------------------------------
# the teacher
# --------------------------------------------------------------------------------------------


def _namespace(args) -> argparse.Namespace:
    if isinstance(args, argparse.Namespace):
        return copy.deepcopy(args)
    try:
        from omegaconf import OmegaConf

        return argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
    except Exception:  # noqa: BLE001  (a plain dict)
        return argparse.Namespace(**dict(args))


FAMILIES = {  # teacher model name -> what DA-WID calls it, and the student architecture
    "transformer": ("a fairseq Transformer (--arch transformer_*)", "dawid"),
    "roberta": ("a fairseq RoBERTa (--arch roberta_*)", "dawid_roberta"),
}


def check_teacher(targs, where: str, family: str = "transformer") -> None:
    """Refuse a teacher DA-WID cannot compress (ConfigError naming why). ``family``: the model
    name of fairseq the student expects (``transformer``: translation, ``roberta``)."""
    arch = getattr(targs, "arch", None) or getattr(targs, "_name", None)
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch)
    what, student_arch = FAMILIES[family]
    if model_name != family:
        raise ConfigError(
            f"{where}: the teacher is a {model_name or 'unknown'!s} model ({arch}); "
            f"--arch {student_arch} compresses {what}"
        )
    for key, why in (
        ("encoder_normalize_before", "pre-LN"),
        ("decoder_normalize_before", "pre-LN"),
        ("no_cross_attention", "no cross-attention"),
        ("cross_self_attention", "cross+self attention"),
        ("adaptive_softmax_cutoff", "an adaptive softmax"),
        ("encoder_layers_to_keep", "layers to keep"),
    ):
        if getattr(targs, key, None):
            raise ConfigError(
                f"{where}: the teacher has {why} ({key}); DA-WID's compactors sit around the "
                "LayerNorms of a post-LN Transformer (train the teacher without it)"
            )
    if family == "transformer":
        dim = getattr(targs, "decoder_embed_dim", None)
        for key in ("decoder_input_dim", "decoder_output_dim"):
            if getattr(targs, key, dim) != dim:
                raise ConfigError(f"{where}: the teacher's {key} differs from decoder_embed_dim")


def load_teacher_model(path: str, src_dict, tgt_dict=None, family: str = "transformer"):
    """``(teacher_args, teacher)``: a frozen teacher from ``path`` (ConfigError when it is
    missing, damaged, of another architecture or of other dictionaries). A RoBERTa teacher
    (``family="roberta"``) comes with the classification heads its checkpoint holds."""
    import os

    from lightcompress.checkpoint import build_model, model_config, read_checkpoint

    student_arch = FAMILIES[family][1]
    if not path:
        raise ConfigError(
            f"--arch {student_arch} needs --dawid-teacher (a trained {FAMILIES[family][0]} checkpoint)"
        )
    if not os.path.isfile(path):
        raise ConfigError(f"--dawid-teacher: teacher checkpoint {path} not found")
    try:
        state = read_checkpoint(path)
        targs = _namespace(model_config(state))
    except CheckpointError as exc:
        raise ConfigError(f"--dawid-teacher: {exc}") from None
    check_teacher(targs, f"--dawid-teacher {path}", family)
    sd = state["model"]
    if family == "roberta":
        sides = (("input", src_dict, "encoder.sentence_encoder"),)
    else:
        sides = (("source", src_dict, "encoder"), ("target", tgt_dict, "decoder"))
    for side, d, key in sides:
        rows = sd.get(f"{key}.embed_tokens.weight")
        if rows is None or rows.shape[0] != len(d):
            raise ConfigError(
                f"--dawid-teacher {path}: its {side} embedding has "
                f"{None if rows is None else rows.shape[0]} rows, the task's {side} dictionary "
                f"{len(d)} types (the teacher must be trained on the same dictionaries)"
            )
    try:
        teacher = build_model(state, src_dict, tgt_dict, f"--dawid-teacher {path}", args=targs)
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    teacher.requires_grad_(False)
    return targs, teacher


def teacher_structure_args(targs) -> dict:
    """The teacher's configuration as JSON-able values (stored in the student's checkpoint, so
    that fusion can rebuild the training model without the teacher file)."""
    out = {}
    for key, value in vars(targs).items():
        if isinstance(value, (str, int, float, bool)) or value is None:
            out[key] = value
    return out


def _json_buffer(obj) -> torch.Tensor:
    return torch.tensor(list(json.dumps(obj, sort_keys=True).encode()), dtype=torch.uint8)


def _from_json_buffer(t: torch.Tensor):
    return json.loads(bytes(t.tolist()).decode())


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
            "wid_teacher_config", _json_buffer(teacher_structure_args(teacher_args))
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
        parser.add_argument("--dawid-train-weights", action="store_true", help="also train the teacher's weight matrices and embeddings (the paper freezes them)")  # fmt: skip

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

        args = _namespace(model_config(state))
        sd = state["model"]
        if "wid_teacher_config" not in sd:
            raise ConfigError("the checkpoint is not a DA-WID training checkpoint (--arch dawid)")
        targs = argparse.Namespace(**_from_json_buffer(sd["wid_teacher_config"]))
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


# --------------------------------------------------------------------------------------------
# data-aware initialisation
# --------------------------------------------------------------------------------------------


def finish_student(student, teacher, task, args, calibrate_from=None):
    """The last steps of building a DA-WID training model (translation or RoBERTa): the
    data-aware initialisation (``--dawid-init data-aware``; calibration batches from the task
    unless given), the frozen teacher attached, the inherited weights frozen unless
    ``--dawid-train-weights``."""
    if args.dawid_init == "data-aware":
        if calibrate_from is None:
            calibrate_from = calibration_batches(task, args, teacher)
        init_data_aware(
            student, teacher, calibrate_from, args.dawid_calib_tokens, args.dawid_calib_seed
        )
    student.set_teacher(teacher)
    if not args.dawid_train_weights:
        student.freeze_teacher_weights()
    return student


def calibration_batches(task, args, teacher, batch_sentences: int = 32):
    """Batches of randomly chosen training sentence pairs holding at least
    ``--dawid-calib-tokens`` source and target tokens (ConfigError when the data has fewer)."""
    n = args.dawid_calib_tokens
    widest = max(m.embedding_dim for m in teacher.modules() if isinstance(m, nn.Embedding))
    if n < widest:
        raise ConfigError(
            f"--dawid-calib-tokens {n} is smaller than the model width {widest}: the SVD of the "
            "calibration features must span every dimension (give at least the width)"
        )
    split = getattr(args, "train_subset", "train") or "train"
    try:
        dataset = task.dataset(split)
    except KeyError:
        task.load_dataset(split)
        dataset = task.dataset(split)
    src_sizes = getattr(dataset, "src_sizes", None)
    if src_sizes is None:  # sentence_prediction: one input
        src_sizes = np.asarray(dataset.sizes).reshape(len(dataset), -1)[:, 0]
    tgt_sizes = getattr(dataset, "tgt_sizes", None)
    order = np.random.RandomState(args.dawid_calib_seed).permutation(len(dataset))
    chosen, src_tok, tgt_tok = [], 0, 0
    for i in order:
        if src_tok >= n and (tgt_sizes is None or tgt_tok >= n):
            break
        chosen.append(int(i))
        src_tok += int(src_sizes[i])
        tgt_tok += int(tgt_sizes[i]) if tgt_sizes is not None else 0
    if src_tok < n or (tgt_sizes is not None and tgt_tok < n):
        have = f"{src_tok} source and {tgt_tok} target" if tgt_sizes is not None else str(src_tok)
        raise ConfigError(f"--dawid-calib-tokens {n}: the {split} data has only {have} tokens")
    return [
        dataset.collater([dataset[i] for i in chosen[k : k + batch_sentences]])
        for k in range(0, len(chosen), batch_sentences)
    ]


class _Recorder:
    """Forward hooks collecting features of non-padding positions, one list per key."""

    def __init__(self):
        self.features: dict[str, list[torch.Tensor]] = {}
        self.masks = {}
        self.handles = []

    def _store(self, key, side, x):
        keep = self.masks[side]  # [T x B]
        self.features.setdefault(key, []).append(x.detach()[keep].float().cpu())

    def output(self, module, key, side):
        self.handles.append(module.register_forward_hook(lambda m, i, o: self._store(key, side, o)))

    def input(self, module, key, side):
        self.handles.append(
            module.register_forward_pre_hook(lambda m, i: self._store(key, side, i[0]))
        )

    def remove(self):
        for h in self.handles:
            h.remove()


def teacher_layers(teacher):
    """``[(stack name, layers), ...]`` of a teacher: a translation Transformer's encoder and
    decoder, or a RoBERTa's sentence encoder."""
    if hasattr(teacher, "decoder"):
        return [("encoder", teacher.encoder.layers), ("decoder", teacher.decoder.layers)]
    return [("encoder", teacher.encoder.sentence_encoder.layers)]


def collect_features(teacher, batches) -> dict[str, torch.Tensor]:
    """Features of the teacher on ``batches``: per layer the attention queries, keys, per-head
    attention outputs (the input of ``out_proj``) and the inputs of the LayerNorms."""
    from lightcompress.integration import disable_attention_fast_path

    disable_attention_fast_path(teacher, every=True)  # the fast path skips the projection hooks
    rec = _Recorder()
    for name, layers in teacher_layers(teacher):
        side = "src" if name == "encoder" else "tgt"
        for i, layer in enumerate(layers):
            p = f"{name}.{i}."
            rec.output(layer.self_attn.q_proj, p + "self.q", side)
            rec.output(layer.self_attn.k_proj, p + "self.k", side)
            rec.input(layer.self_attn.out_proj, p + "self.ctx", side)
            rec.input(layer.self_attn_layer_norm, p + "self.ln", side)
            rec.input(layer.final_layer_norm, p + "ffn.ln", side)
            if getattr(layer, "encoder_attn", None) is not None:
                rec.output(layer.encoder_attn.q_proj, p + "cross.q", side)
                rec.output(layer.encoder_attn.k_proj, p + "cross.k", "src")
                rec.input(layer.encoder_attn.out_proj, p + "cross.ctx", side)
                rec.input(layer.encoder_attn_layer_norm, p + "cross.ln", side)
    was_training = teacher.training
    teacher.eval()
    pad = teacher.encoder.dictionary.pad()
    try:
        with torch.no_grad():
            for batch in batches:
                net = batch["net_input"]
                rec.masks["src"] = net["src_tokens"].ne(pad).t()
                if "prev_output_tokens" in net:
                    rec.masks["tgt"] = net["prev_output_tokens"].ne(pad).t()
                    teacher(**net)
                else:  # RoBERTa: the encoder only
                    teacher(net["src_tokens"], features_only=True)
    finally:
        rec.remove()
        teacher.train(was_training)
    return {k: torch.cat(v) for k, v in rec.features.items()}


def _sample_rows(x: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    if x.shape[0] <= n:
        return x
    return x[torch.randperm(x.shape[0], generator=gen)[:n]]


@torch.no_grad()
def init_data_aware(student: DAWIDModel, teacher, batches, n_tokens: int, seed: int = 1) -> None:
    """Set every compactor of ``student`` from the teacher's features on ``batches`` (Eq. 8-12),
    ``n_tokens`` sampled tokens per feature matrix."""
    feats = collect_features(teacher, batches)
    gen = torch.Generator().manual_seed(seed)
    feats = {k: _sample_rows(v, n_tokens, gen) for k, v in feats.items()}
    kind_of = {"self_attn": "self", "cross_attn": "cross", "ffn": "ffn"}
    try:
        for name, _, layers, _ in student.wid_stacks():
            for i, layer in enumerate(layers):
                for block in layer.blocks:
                    kind = kind_of[block.kind]
                    p = f"{name}.{i}.{kind}."
                    if isinstance(block.sub, MaskedAttention):
                        _init_attention(block.sub, feats[p + "q"], feats[p + "k"], feats[p + "ctx"])
                    if isinstance(block.site, LayerNormSite):
                        c_in, c_out, bias = site_compactors(
                            feats[p + "ln"], block.site.c_out.diagonal(), block.site.bias
                        )
                        block.site.c_in.copy_(c_in)
                        block.site.c_out.copy_(c_out)
                        block.site.bias.copy_(bias)
    except ValueError as exc:  # too few calibration tokens for a width
        raise ConfigError(f"--dawid-calib-tokens: {exc}") from None


def _init_attention(sub: MaskedAttention, q, k, ctx) -> None:
    dh = sub.head_dim
    for h in range(sub.num_heads):
        sl = slice(h * dh, (h + 1) * dh)
        c_q, c_k = qk_compactors(q[:, sl], k[:, sl])
        c_v, c_o = vo_compactors(ctx[:, sl])
        sub.c_q[h].copy_(c_q)
        sub.c_k[h].copy_(c_k)
        sub.c_v[h].copy_(c_v)
        sub.c_o[h].copy_(c_o)


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


class _FusedEncoder(TransformerEncoder):
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
        return _FusedEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return _FusedDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=False)


@register_model_architecture("dawid_fused", "dawid_fused")
def dawid_fused_architecture(args):
    base_architecture(args)


def fused_args(teacher_args, shapes: dict) -> argparse.Namespace:
    """The fused model's configuration: the teacher's, with ``--arch dawid_fused`` and its shapes."""
    fargs = _namespace(teacher_args)
    fargs.arch = "dawid_fused"
    if hasattr(fargs, "_name"):
        fargs._name = "dawid_fused"
    fargs.dawid_shapes = json.dumps(shapes, separators=(",", ":"))
    dawid_fused_architecture(fargs)
    return fargs


@torch.no_grad()
def fuse_model(student: DAWIDModel, teacher_args):
    """``(fused_model, fused_args, shapes)``: prune ``student`` by its final masks and fuse the
    compactors (:func:`lightcompress.wid.fuse.fuse_state`) into a :class:`DAWIDFusedModel`."""
    from lightcompress.build import build_model_without_data
    from lightcompress.wid.fuse import fuse_state

    shapes, tensors, _ = fuse_state(student)
    fargs = fused_args(teacher_args, shapes)
    src = student.encoder.embed_tokens.weight.shape[0]
    tgt = student.decoder.embed_tokens.weight.shape[0]
    fused = build_model_without_data(fargs, src, tgt)
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
    return fused, fargs, shapes
