"""Checkpoint conversion framework: read a trained dense fairseq Transformer, build a student,
transfer weights, write a checkpoint that fairseq's own commands accept.

A converter plug-in is registered for the fairseq *model* name of the student::

    @register_converter("lightformer")
    class LightformerConverter(Converter):
        @staticmethod
        def add_args(parser): ...
        def convert(self, teacher, teacher_args, student_args, opts, log): ...

``convert`` returns the student model (weights transferred) and a list of per-module records;
it raises :class:`ConversionError` for anything that does not fit.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import re

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import (
    ARCH_CONFIG_REGISTRY,
    ARCH_MODEL_NAME_REGISTRY,
    ARCH_MODEL_REGISTRY,
    MODEL_REGISTRY,
)

from lightcompress.build import NoDataTask
from lightcompress.checkpoint import build_model, model_config, read_checkpoint
from lightcompress.errors import LightcompressError

__all__ = [
    "CONVERTERS",
    "ConversionError",
    "Converter",
    "FakeTask",
    "build_dense_student",
    "build_fairseq_model",
    "check_teacher_fits",
    "load_teacher",
    "model_arg_names",
    "rebuild_student",
    "register_converter",
    "save_student_checkpoint",
    "student_args_from",
    "transfer_by_spec",
]

CONVERTERS: dict[str, type] = {}

# teacher model names whose state dicts are those of a dense fairseq Transformer
DENSE_TEACHER_MODELS = ("transformer", "lightformer")


# teacher settings that change what the transferred weights compute
FUNCTION_SETTINGS = (
    "activation_fn",
    "no_scale_embedding",
    "layernorm_embedding",
    "no_token_positional_embeddings",
    "encoder_learned_pos",
    "decoder_learned_pos",
    "encoder_normalize_before",
    "decoder_normalize_before",
    "share_decoder_input_output_embed",
    "cross_self_attention",
    "no_cross_attention",
    "max_source_positions",
    "max_target_positions",
)


class ConversionError(LightcompressError):
    """A checkpoint or a configuration that cannot be converted (one clear message)."""


class Converter:
    """Base class of conversion plug-ins (see the module docstring)."""

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        """Add converter-specific options."""

    def convert(self, teacher, teacher_args, student_args, opts, log):  # pragma: no cover
        raise NotImplementedError


def register_converter(model_name: str):
    """Class decorator registering a :class:`Converter` for a student model name."""

    def wrap(cls):
        if model_name in CONVERTERS and CONVERTERS[model_name] is not cls:
            raise ValueError(f"a converter for {model_name!r} is already registered")
        CONVERTERS[model_name] = cls
        return cls

    return wrap


class FakeTask(NoDataTask):
    """Just enough of a translation task to build a model without data: the dictionaries
    (:class:`lightcompress.build.NoDataTask`, whose signature it keeps)."""

    def __init__(self, src_dict: Dictionary, tgt_dict: Dictionary):
        super().__init__(src_dict, tgt_dict)


def dictionary_of_size(size: int) -> Dictionary:
    """A fairseq Dictionary with ``size`` entries (:func:`lightcompress.build.dictionary_of_size`)."""
    from lightcompress.build import dictionary_of_size as make

    return make(size)


def build_fairseq_model(args, src_size: int, tgt_size: int | None = None):
    """Build ``args.arch`` with dictionaries of the given sizes (no data needed):
    :func:`lightcompress.build.build_model_without_data`."""
    from lightcompress.build import build_model_without_data

    return build_model_without_data(args, src_size, tgt_size)


def load_teacher(path: str):
    """Load a dense fairseq Transformer checkpoint: ``(state, teacher_args, teacher_model)``
    (:mod:`lightcompress.checkpoint`; a checkpoint of another kind is a ConversionError)."""
    state = read_checkpoint(path)
    targs = model_config(state)
    arch = getattr(targs, "arch", None) or getattr(targs, "_name", None)
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch)
    if model_name is None:
        raise ConversionError(
            f"{path}: architecture {arch!r} is not registered (a plugin checkpoint needs its "
            "--user-dir imported)"
        )
    dense = model_name == "transformer" or (
        model_name == "lightformer"
        and not (getattr(targs, "lc_factorize", "") or "").replace("none", "").strip(", ")
        and not getattr(targs, "lc_encoder_groups", 0)
        and not getattr(targs, "lc_decoder_groups", 0)
        and not getattr(targs, "lc_spec", None)
    )
    if not dense:
        raise ConversionError(
            f"{path} is a {model_name!r} model ({arch}); the converter reads a dense, unshared "
            "fairseq Transformer (arch transformer_* or lightformer_*_dense)"
        )
    sd = state["model"]
    key = "encoder.embed_tokens.weight"
    if key not in sd or "decoder.embed_tokens.weight" not in sd:
        raise ConversionError(f"{path}: no encoder/decoder embedding in the model weights")
    targs = copy.deepcopy(targs)
    model = build_model(
        state, sd[key].shape[0], sd["decoder.embed_tokens.weight"].shape[0], path, args=targs
    )
    return state, targs, model


def check_teacher_fits(teacher_args, student_args, keys, method: str) -> None:
    """Refuse a student whose ``keys`` (widths, depths, heads...) differ from the teacher's, or
    that shares all embeddings when the teacher does not (one ConversionError)."""
    for key in keys:
        t, s = getattr(teacher_args, key, None), getattr(student_args, key, None)
        if t != s:
            raise ConversionError(
                f"width mismatch: teacher {key}={t}, student {key}={s} ({method} keeps the "
                "widths and depths; change the student flags)"
            )
    if student_args.share_all_embeddings and not getattr(
        teacher_args, "share_all_embeddings", False
    ):
        raise ConversionError(
            "the student shares all embeddings but the teacher does not (train the teacher "
            "with --share-all-embeddings)"
        )


def model_arg_names(model_name: str) -> set[str]:
    """Destinations of every flag the model class defines (its architecture settings)."""
    parser = argparse.ArgumentParser(add_help=False)
    MODEL_REGISTRY[model_name].add_args(parser)
    return {a.dest for a in parser._actions}


def student_args_from(teacher_args, arch: str, model_flags: list[str]):
    """The student's namespace: the teacher's task/data settings + ``arch`` with its defaults
    and ``model_flags`` (fairseq parses them exactly as ``fairseq-train`` would)."""
    if arch not in ARCH_MODEL_REGISTRY:
        raise ConversionError(f"unknown architecture {arch!r}")
    parser = options.get_training_parser()
    data = getattr(teacher_args, "data", None) or "data-bin"
    argv = [data, "--task", "translation", "--arch", arch] + list(model_flags)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):  # fairseq prints its whole usage first
            parsed = options.parse_args_and_arch(parser, input_args=argv)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        why = re.sub(r"^[\w.-]+: error: ", "", lines[-1]) if lines else " ".join(model_flags)
        raise ConversionError(f"invalid model flags for {arch}: {why}") from None
    model_keys = model_arg_names(ARCH_MODEL_NAME_REGISTRY[arch])
    student = copy.deepcopy(teacher_args)
    for key in list(vars(student)):
        if key in model_keys:
            delattr(student, key)
    for key, value in vars(parsed).items():
        if key in model_keys or key in ("arch", "_name") or not hasattr(student, key):
            setattr(student, key, value)
    student.arch = arch
    if hasattr(student, "_name"):
        student._name = arch
    # settings that change the function the weights compute follow the teacher unless the
    # student's flags say otherwise; a student flag that contradicts the teacher is refused
    given = {f.split("=", 1)[0] for f in model_flags if f.startswith("--")}
    for key in FUNCTION_SETTINGS:
        if not hasattr(teacher_args, key):
            continue
        want = getattr(teacher_args, key)
        flag = "--" + key.replace("_", "-")
        if flag not in given:
            setattr(student, key, want)
        elif getattr(student, key, None) != want:
            raise ConversionError(
                f"{flag} {getattr(student, key, None)!r} differs from the teacher's "
                f"{want!r}: the transferred weights would compute another function"
            )
    # share_all_embeddings follows the teacher when the flags did not say otherwise
    if "--share-all-embeddings" not in model_flags and getattr(
        teacher_args, "share_all_embeddings", False
    ):
        student.share_all_embeddings = True
    ARCH_CONFIG_REGISTRY[arch](student)
    return student


def save_student_checkpoint(teacher_state: dict, student_args, student_model, output: str) -> None:
    """Write a fairseq checkpoint of the student atomically (:func:`lightcompress.io.atomic_write`).

    The teacher's task/data configuration is kept; the optimizer history is reset so that
    ``fairseq-train --restore-file`` starts fresh (with or without --reset-optimizer).
    """
    state = {k: v for k, v in teacher_state.items() if k not in ("model", "last_optimizer_state")}
    cfg = teacher_state.get("cfg")
    if cfg is not None:
        cfg = dict(cfg)
        cfg["model"] = student_args
        state["cfg"] = cfg
        state["args"] = None
    else:
        state["args"] = student_args
    state["model"] = student_model.state_dict()
    hist = (teacher_state.get("optimizer_history") or [{}])[-1]
    state["optimizer_history"] = [
        {
            "criterion_name": hist.get("criterion_name", "LabelSmoothedCrossEntropyCriterion"),
            "optimizer_name": hist.get("optimizer_name", "FairseqAdam"),
            "lr_scheduler_state": {"best": None},
            "num_updates": 0,
        }
    ]
    state["last_optimizer_state"] = None
    state["extra_state"] = {
        "train_iterator": {"epoch": 1, "iterations_in_epoch": 0, "shuffle": True},
        "converted_by": "lightcompress-convert",
    }
    from lightcompress.io import atomic_write

    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with atomic_write(output, "wb") as f:
        torch.save(state, f)


# --------------------------------------------------------------------------------------------
# the one transfer path: a dense model of the student's shape -> the spec in convert mode
# --------------------------------------------------------------------------------------------


def build_dense_student(student_args, src_size: int, tgt_size: int | None = None):
    """The student's family and shape with every slot dense and no sharing (an empty spec):
    the model the teacher's weights are mapped into before the spec is applied."""
    from lightcompress.build import build_model_without_data
    from lightcompress.modules import CompressionSpec, SpecPlan

    args = copy.deepcopy(student_args)
    args.lc_encoder_groups = args.lc_decoder_groups = 0
    return build_model_without_data(args, src_size, tgt_size, plan=SpecPlan(CompressionSpec([])))


def transfer_by_spec(dense, student_args, spec_text: str, progress: bool = False, log=None):
    """Fit every layer the spec names to ``dense``'s weights (SVD / TT-SVD / CP through the
    kind registry), in the order the build hooks ask, then tie the student's groups.

    ``progress``: a progress bar (a terminal); else ``log`` (when given) receives one line per
    slot as its fit starts, with the time so far (a log file or a pipe sees the conversion
    move: a CP fit of a paper-size model takes minutes).

    Returns the :class:`~lightcompress.modules.CompressionReport` (one record per layer).
    """
    import time

    from tqdm import tqdm

    from lightcompress.models.compressed import (
        apply_layer_sharing,
        module_at,
        plan_paths,
        replace_by_plan,
    )
    from lightcompress.modules import CompressionSpec, SpecError, SpecPlan

    try:
        plan = SpecPlan(
            CompressionSpec.parse(spec_text), "convert", source=lambda p: module_at(dense, p)
        )
        total = len(list(plan_paths(dense)))
        start, done = time.monotonic(), [0]

        def step(path, bar):
            bar.update(1)
            done[0] += 1
            if not progress and log is not None:
                log(f"transfer {done[0]}/{total} +{time.monotonic() - start:.1f}s: {path}")

        with tqdm(desc="weight transfer", disable=not progress, unit="slot", total=total) as bar:
            replace_by_plan(dense, plan, progress=lambda path: step(path, bar))
        report = plan.finish()
        apply_layer_sharing(dense, student_args)
    except (SpecError, ValueError) as exc:
        raise ConversionError(str(exc)) from None
    return report


def rebuild_student(student_args, converted, src_size: int, tgt_size: int | None = None):
    """Build the student from its own configuration and load the converted weights (strict):
    the checkpoint's flags must rebuild exactly the converted model."""
    try:
        student = build_fairseq_model(student_args, src_size, tgt_size)
    except ValueError as exc:
        raise ConversionError(f"cannot build the student: {exc}") from None
    try:
        student.load_state_dict(converted.state_dict(), strict=True)
    except RuntimeError as exc:  # pragma: no cover - a bug, not a user error
        raise ConversionError(f"internal error: converted weights do not rebuild: {exc}") from None
    student.eval()
    return student
