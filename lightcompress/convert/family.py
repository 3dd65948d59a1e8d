"""The one converter of every declared family: a trained dense Transformer -> its student.

A family declares what differs (:class:`~lightcompress.models.family.Transfer`: the settings
the student must share with the teacher, preconditions, options, the spec and the flags
written back); the steps are the same for all:

1. the teacher's settings in ``same`` must equal the student's, and a student sharing all
   embeddings needs a teacher that does; then the family's ``check``;
2. a dense, unshared model of the student's shape (:func:`~lightcompress.convert.core.build_dense_student`)
   takes the teacher's weights. Layers map by the student's sharing groups
   (:func:`layer_sources`): teacher depth = student depth ``L`` gives position ``i`` the
   first teacher layer of its group (``--group-init first``, also when a family has no such
   option) or their mean (``--group-init mean``); teacher depth = number of groups ``N``
   gives group ``g`` teacher layer ``g``; ``--encoder-layers-from`` / ``--decoder-layers-from``
   name the teacher layer of each student position (or group) instead, so that a shallower
   student starts from a deeper teacher (deep encoder, shallow decoder); anything else is
   refused;
3. Admin omegas (``--admin-init``) are set to 1, the dense teacher's plain ``x + f(x)``, and
   marked as profiled;
4. every layer the spec names is fitted by its kind's ``from_dense`` (SVD, TT-SVD, CP-ALS),
   the groups are tied (:func:`~lightcompress.convert.core.transfer_by_spec`);
5. the family's ``finish`` sets the flags that rebuild the result, and the student is
   rebuilt from its own flags and loaded strictly.
"""

from __future__ import annotations

import torch

from lightcompress.admin import AdminResidual
from lightcompress.convert.core import (
    ConversionError,
    Converter,
    build_dense_student,
    check_teacher_fits,
    rebuild_student,
    transfer_by_spec,
)
from lightcompress.models.family import FAMILIES, Family
from lightcompress.modules import group_schedule

__all__ = ["FamilyConverter", "family_converter", "family_converters", "layer_sources"]


def layer_sources(student_layers: int, groups: int, teacher_layers: int, side: str, chosen=None):
    """For each student position, the list of teacher layer indices its weights come from.

    ``chosen`` (``--{side}-layers-from``): the teacher layer of each unique student layer (each
    position, or each sharing group), in order; any depths then."""
    schedule = group_schedule(student_layers, groups) if groups else list(range(student_layers))
    unique = max(schedule) + 1
    if chosen is not None:
        what = f"{unique} sharing groups" if groups else f"{student_layers} {side} layers"
        if len(chosen) != unique:
            raise ConversionError(
                f"--{side}-layers-from names {len(chosen)} teacher layers, but the student has "
                f"{what}: give one teacher layer for each"
            )
        bad = [i for i in chosen if not 0 <= i < teacher_layers]
        if bad:
            raise ConversionError(
                f"--{side}-layers-from: teacher layer {bad[0]} does not exist (the teacher has "
                f"{teacher_layers} {side} layers, numbered 0 to {teacher_layers - 1})"
            )
        return [[chosen[g]] for g in schedule]
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
        f"{unique} {side} layers, or --{side}-layers-from must pick the teacher layer of each"
    )


def map_teacher(teacher, dense, student_args, group_init: str, log, layers_from=None) -> dict:
    """The teacher's state dict with its layers mapped to the student's positions
    (``layers_from``: side -> the teacher layer of each unique student layer, or None)."""
    tsd = teacher.state_dict()
    mapped = {
        k: v for k, v in tsd.items() if not k.startswith(("encoder.layers.", "decoder.layers."))
    }
    for side in ("encoder", "decoder"):
        n_student = len(getattr(dense, side).layers)
        n_teacher = len(getattr(teacher, side).layers)
        groups = getattr(student_args, f"lc_{side}_groups", 0) or 0
        chosen = (layers_from or {}).get(side)
        sources = layer_sources(n_student, groups, n_teacher, side, chosen)
        for pos, src in enumerate(sources):
            if group_init != "mean":
                src = src[:1]
            for key in getattr(dense, side).layers[pos].state_dict():
                vals = [tsd[k] for k in (f"{side}.layers.{i}.{key}" for i in src) if k in tsd]
                if len(vals) == len(src):  # (a key the teacher lacks is reported as missing)
                    mapped[f"{side}.layers.{pos}.{key}"] = (
                        vals[0]
                        if len(vals) == 1
                        else torch.stack(vals).float().mean(0).to(vals[0].dtype)
                    )
            log(f"{side} layer {pos:2d} <- teacher layer(s) {','.join(map(str, src))}")
    return mapped


class FamilyConverter(Converter):
    """The converter of a declared family (``family``; see the module docstring)."""

    family: Family

    @classmethod
    def add_args(cls, parser):
        transfer = cls.family.transfer
        if transfer.options:
            group = parser.add_argument_group(transfer.title or f"{cls.family.name} transfer")
            for flags, kwargs in transfer.options:
                group.add_argument(*flags, **kwargs)

    def convert(self, teacher, teacher_args, student_args, opts, log):
        try:
            return self._convert(teacher, teacher_args, student_args, opts, log)
        except ValueError as exc:  # a configuration the student cannot have (ConfigError)
            raise ConversionError(str(exc)) from None

    def _convert(self, teacher, teacher_args, student_args, opts, log):
        family, transfer = self.family, self.family.transfer
        check_teacher_fits(teacher_args, student_args, transfer.same, transfer.method)
        if transfer.check is not None:
            transfer.check(teacher_args, student_args, opts, log)
        if transfer.spec is not None:
            spec_text = transfer.spec(student_args, opts)
        else:
            spec_text = family.spec_text(student_args)
        tsd = teacher.state_dict()
        src_size = tsd["encoder.embed_tokens.weight"].shape[0]
        tgt_size = tsd["decoder.embed_tokens.weight"].shape[0]
        # 1. a dense, unshared model of the student's shape holding the mapped teacher weights
        try:
            dense = build_dense_student(student_args, src_size, tgt_size)
        except ValueError as exc:
            raise ConversionError(f"cannot build the student: {exc}") from None
        group_init = getattr(opts, "group_init", None) or "first"
        layers_from = {
            side: getattr(opts, f"{side}_layers_from", None) for side in ("encoder", "decoder")
        }
        mapped = map_teacher(teacher, dense, student_args, group_init, log, layers_from)
        try:
            missing, unexpected = dense.load_state_dict(mapped, strict=False)
        except RuntimeError as exc:
            raise ConversionError(
                f"teacher weights do not fit the student's shapes: {exc}"
            ) from None
        missing = [k for k in missing if ".admin." not in k]
        if missing or unexpected:
            raise ConversionError(
                f"teacher weights do not fit the student's shapes (missing {missing[:3]}, "
                f"unexpected {unexpected[:3]})"
            )
        # Admin omegas = 1: the dense teacher's plain x + f(x), marked as profiled
        for m in dense.modules():
            if isinstance(m, AdminResidual):
                m.set_values({s: 1.0 for s in m.sublayers})
                log(f"{m.prefix}: Admin omegas set to 1 (the dense teacher's residuals)")
        # 2. every layer the spec names fitted by its kind (the one transfer path), groups tied
        records = transfer_by_spec(
            dense, student_args, spec_text, progress=getattr(opts, "progress", False), log=log
        )
        for rec in records:
            energy = "-" if rec.kept_energy is None else f"{rec.kept_energy:.4f}"
            log(f"{rec.name}: {rec.kind} rank {rec.rank} kept energy {energy}")
        # 3. the student's own flags must rebuild exactly this model
        if transfer.finish is not None:
            transfer.finish(student_args, opts, records)
        return rebuild_student(student_args, dense, src_size, tgt_size), records


_CLASSES: dict[str, tuple[Family, type]] = {}


def family_converter(name: str) -> type:
    """The converter class of the registered family ``name`` (one class per declaration)."""
    family = FAMILIES.get(name)
    if family is None or family.transfer is None:
        raise KeyError(name)
    known = _CLASSES.get(name)
    if known is None or known[0] is not family:
        title = family.class_name or family.name.title().replace("_", "") + "Model"
        cls_name = title.removesuffix("Model") + "Converter"
        cls = type(
            cls_name,
            (FamilyConverter,),
            {
                "family": family,
                "__module__": __name__,
                "__qualname__": cls_name,
                "__doc__": f"{family.transfer.method} into the {family.name!r} model "
                "(lightcompress.convert.family).",
            },
        )
        _CLASSES[name] = known = (family, cls)
    return known[1]


def family_converters() -> dict[str, type]:
    """Model name -> converter class of every registered family that declares a transfer."""
    return {name: family_converter(name) for name, f in FAMILIES.items() if f.transfer}
