"""SVD weight transfer (LightFormer): a trained dense Transformer -> a LightFormer checkpoint.

Layer mapping (documented rule; ``--group-init``):

- teacher encoder depth == student depth ``L``: student position ``i`` in group ``g`` takes
  the **first** teacher layer of its group (default, ``--group-init first``), or the element-wise
  **mean** of the teacher layers of the group (``--group-init mean``);
- teacher encoder depth == number of student groups ``N``: group ``g`` takes teacher layer
  ``g`` (e.g. a 6-layer teacher initialises an 18-layer, 6-group student);
- anything else is refused. The decoder follows the same rule with ``--lc-decoder-groups``.

Then every matrix the student's compression spec names is factorized by truncated SVD of the
(mapped) teacher weight (balanced split, float32), at the student's ranks or at the ranks
given here (``--rank`` / ``--rank-ratio`` / ``--energy``; ``--embed-*`` for the embedding).
With ``--energy`` the rank of each matrix depends on its spectrum; the converter then writes
the exact per-module ranks into the checkpoint as an explicit ``--lc-spec`` (printed, and
saved next to the output as ``OUT.spec`` for fine-tuning with ``--lc-spec "$(cat OUT.spec)"``).
"""

from __future__ import annotations

import torch

from lightcompress.convert.core import (
    ConversionError,
    Converter,
    build_dense_student,
    check_teacher_fits,
    rebuild_student,
    register_converter,
    transfer_by_spec,
)
from lightcompress.models.lightformer import lightformer_spec_text
from lightcompress.modules import group_schedule

__all__ = ["LightformerConverter", "layer_sources"]

_WIDTHS = (
    "encoder_embed_dim",
    "decoder_embed_dim",
    "encoder_ffn_embed_dim",
    "decoder_ffn_embed_dim",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_normalize_before",
    "decoder_normalize_before",
)


def layer_sources(student_layers: int, groups: int, teacher_layers: int, side: str):
    """For each student position, the list of teacher layer indices its weights come from."""
    schedule = group_schedule(student_layers, groups) if groups else list(range(student_layers))
    unique = max(schedule) + 1
    if teacher_layers == student_layers:
        members = {}
        for pos, g in enumerate(schedule):
            members.setdefault(g, []).append(pos)
        return [members[g] for g in schedule]
    if teacher_layers == unique:
        return [[g] for g in schedule]
    raise ConversionError(
        f"{side} depth mismatch: the teacher has {teacher_layers} {side} layers, the student "
        f"{student_layers} in {unique} groups; the teacher must have {student_layers} or "
        f"{unique} {side} layers"
    )


def _rank_param(rank, ratio, energy, flag):
    given = [
        (k, v) for k, v in (("rank", rank), ("ratio", ratio), ("energy", energy)) if v is not None
    ]
    if len(given) > 1:
        energy = "--energy" if flag == "rank" else "--embed-energy"
        raise ConversionError(f"give at most one of --{flag}, --{flag}-ratio, {energy}")
    if not given:
        return None
    k, v = given[0]
    if k == "energy" and not 0 < v <= 1:
        raise ConversionError(f"an energy threshold must be in (0, 1], got {v}")
    if k == "rank" and v <= 0:
        raise ConversionError(f"--{flag} must be a positive integer, got {v}")
    if k == "ratio" and v <= 0:
        raise ConversionError(f"a compression ratio must be > 0, got {v}")
    return f"{k}={v}"


@register_converter("lightformer")
class LightformerConverter(Converter):
    """SVD weight transfer into the ``lightformer`` model (see the module docstring)."""

    @staticmethod
    def add_args(parser):
        g = parser.add_argument_group("LightFormer SVD weight transfer")
        g.add_argument(
            "--rank",
            type=int,
            help="rank of every attention/FFN map (default: the student's --lc-rank)",
        )
        g.add_argument("--rank-ratio", type=float, help="per-matrix Eq. 12 compression ratio")
        g.add_argument(
            "--energy",
            type=float,
            help="keep the smallest rank whose singular values "
            "hold this fraction of the squared spectrum, per matrix (e.g. 0.9)",
        )
        g.add_argument(
            "--embed-rank",
            type=int,
            help="rank of the embedding (default: the student's --lc-embed-rank)",
        )
        g.add_argument("--embed-rank-ratio", type=float, help="Eq. 12 ratio for the embedding")
        g.add_argument("--embed-energy", type=float, help="energy threshold for the embedding")
        g.add_argument(
            "--group-init",
            choices=("first", "mean"),
            default="first",
            help="weights of a shared group when the teacher has one layer per "
            "student position: the group's first layer (default) or the mean",
        )

    def convert(self, teacher, teacher_args, student_args, opts, log):
        check_teacher_fits(teacher_args, student_args, _WIDTHS, "SVD transfer")
        map_param = _rank_param(opts.rank, opts.rank_ratio, opts.energy, "rank")
        embed_param = _rank_param(
            opts.embed_rank, opts.embed_rank_ratio, opts.embed_energy, "embed-rank"
        )
        if map_param and map_param.startswith("energy") and student_args.lc_spec:
            raise ConversionError("--energy cannot be combined with a student --lc-spec")

        tsd = teacher.state_dict()
        src_size = tsd["encoder.embed_tokens.weight"].shape[0]
        tgt_size = tsd["decoder.embed_tokens.weight"].shape[0]

        # 1. a dense, unshared model of the student's depth holding the mapped teacher weights
        dense = build_dense_student(student_args, src_size, tgt_size)
        mapped = {}
        for key, value in tsd.items():
            if not key.startswith(("encoder.layers.", "decoder.layers.")):
                mapped[key] = value
        for side in ("encoder", "decoder"):
            n_student = len(getattr(dense, side).layers)
            n_teacher = len(getattr(teacher, side).layers)
            groups = getattr(student_args, f"lc_{side}_groups", 0) or 0
            sources = layer_sources(n_student, groups, n_teacher, side)
            for pos, src in enumerate(sources):
                if opts.group_init == "first" or len(src) == 1:
                    src = src[:1]
                prefix_t = [f"{side}.layers.{i}." for i in src]
                for key in getattr(dense, side).layers[pos].state_dict():
                    vals = [tsd[p + key] for p in prefix_t]
                    mapped[f"{side}.layers.{pos}.{key}"] = (
                        vals[0]
                        if len(vals) == 1
                        else torch.stack(vals).float().mean(0).to(vals[0].dtype)
                    )
                log(f"{side} layer {pos:2d} <- teacher layer(s) {','.join(map(str, src))}")
        try:
            dense.load_state_dict(mapped, strict=True)
        except RuntimeError as exc:
            raise ConversionError(
                f"teacher weights do not fit the student's shapes: {exc}"
            ) from None

        # 2. SVD of every matrix the spec names (the one transfer path), groups tied
        try:
            spec_text = lightformer_spec_text(student_args, map_param, embed_param)
        except ValueError as exc:
            raise ConversionError(str(exc)) from None
        records = transfer_by_spec(
            dense, student_args, spec_text, progress=getattr(opts, "progress", False)
        )

        # 3. the student's configuration must rebuild exactly this model
        if (map_param or "").startswith("energy") or (embed_param or "").startswith("energy"):
            by_rank: dict[tuple, list[str]] = {}
            for r in records:
                by_rank.setdefault((r.kind, r.rank), []).append(r.name)
            student_args.lc_spec = ";\n".join(
                f"{', '.join(names)} = {kind}(rank={rank})"
                for (kind, rank), names in by_rank.items()
            )
        else:
            for attr, param in (("lc_rank", map_param), ("lc_embed_rank", embed_param)):
                if param:
                    k, v = param.split("=")
                    setattr(student_args, attr, int(v) if k == "rank" else None)
                    setattr(
                        student_args,
                        attr + "_ratio",
                        float(v) if k == "ratio" else None,
                    )
        return rebuild_student(student_args, dense, src_size, tgt_size), records
