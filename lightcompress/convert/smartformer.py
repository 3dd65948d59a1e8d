"""CP weight transfer: a trained dense Transformer -> a Smartformer (CPAC attention).

Each Q, K, V projection the student's spec names is fitted by CP-ALS (torch, from an SVD start) to
the teacher's weight viewed as ``(out, heads, d_k)``; the report gives each projection's kept
energy (1 - relative squared fit error), like the SVD transfer's table. Everything else (the
output projections, FFN, LayerNorms, embeddings) is copied. Widths, depths and heads must match
the teacher.
"""

from __future__ import annotations

from lightcompress.convert.core import (
    ConversionError,
    Converter,
    build_dense_student,
    check_teacher_fits,
    rebuild_student,
    register_converter,
    transfer_by_spec,
)
from lightcompress.models.smartformer import smartformer_spec_text

__all__ = ["SmartformerConverter"]

_SHAPE = (
    "encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim", "decoder_ffn_embed_dim",
    "encoder_attention_heads", "decoder_attention_heads", "encoder_layers", "decoder_layers",
)  # fmt: skip


@register_converter("smartformer")
class SmartformerConverter(Converter):
    """CP-ALS weight transfer into the ``smartformer`` model (module docstring)."""

    def convert(self, teacher, teacher_args, student_args, opts, log):
        check_teacher_fits(teacher_args, student_args, _SHAPE, "CP transfer")
        tsd = teacher.state_dict()
        src = tsd["encoder.embed_tokens.weight"].shape[0]
        tgt = tsd["decoder.embed_tokens.weight"].shape[0]
        try:
            dense = build_dense_student(student_args, src, tgt)
            dense.load_state_dict(tsd, strict=True)
        except (RuntimeError, ValueError) as exc:
            raise ConversionError(f"teacher weights do not fit the student: {exc}") from None
        try:
            spec = smartformer_spec_text(student_args)
        except ValueError as exc:
            raise ConversionError(str(exc)) from None
        records = transfer_by_spec(dense, student_args, spec, getattr(opts, "progress", False))
        for rec in records:
            log(f"{rec.name}: cp rank {rec.rank} kept energy {rec.kept_energy:.4f}")
        return rebuild_student(student_args, dense, src, tgt), records
