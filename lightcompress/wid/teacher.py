"""DA-WID's teacher: the checks a teacher must pass, loading it (frozen) from its checkpoint, and
its configuration as stored in the student's checkpoint (so that fusion needs no teacher file).
"""

from __future__ import annotations

import argparse
import copy
import json

import torch
from fairseq.models import ARCH_MODEL_NAME_REGISTRY

from lightcompress.errors import CheckpointError, ConfigError

__all__ = [
    "FAMILIES",
    "args_namespace",
    "check_teacher",
    "from_json_buffer",
    "json_buffer",
    "load_teacher_model",
    "teacher_structure_args",
]


# --------------------------------------------------------------------------------------------
# the teacher
# --------------------------------------------------------------------------------------------


def args_namespace(args) -> argparse.Namespace:
    """A copy of a model's ``args`` (a Namespace, or a config fairseq gives) as a Namespace."""
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
        targs = args_namespace(model_config(state))
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


def json_buffer(obj) -> torch.Tensor:
    """``obj`` as JSON bytes in a uint8 tensor (a buffer a checkpoint carries)."""
    return torch.tensor(list(json.dumps(obj, sort_keys=True).encode()), dtype=torch.uint8)


def from_json_buffer(t: torch.Tensor):
    """The object :func:`json_buffer` stored."""
    return json.loads(bytes(t.tolist()).decode())
