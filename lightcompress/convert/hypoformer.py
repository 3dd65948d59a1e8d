"""TT weight transfer (beyond the papers): a trained dense Transformer -> a Hypoformer.

Every factorized part of the student is initialised from the teacher's matching dense weight
at the student's own shapes and ranks:

- HTT embedding: the first ``alpha d`` columns are copied, the rest TT-SVD'd over the padded
  vocabulary (:meth:`HTTEmbedding.from_embedding`);
- fused Q/K/V: ``[W_q; W_k; W_v]`` rows permuted to the Eq. 8 layout, the dense part sliced,
  the rest TT-SVD'd (:meth:`FusedQKV.from_linears`);
- FFN, factorized cross-attention maps: SVD / TT-SVD (``from_linear``); dense maps, LayerNorms
  and biases are copied; Admin omegas are set to 1 (the teacher's plain ``x + f(x)``) and
  marked as profiled.

At TT rank 0 (= maximal, exact; ``--hypo-embed-rank 0 --hypo-attn-rank 0``), full low-rank
ranks and ``--hypo-attn-out-proj``, the converted model translates exactly like the teacher.
Without ``--hypo-attn-out-proj`` (the paper's design) the teacher's attention output
projections have no place in the student; they cannot be folded into the value map (the
projection mixes heads), so the converter refuses unless ``--hypo-drop-out-proj`` is given
(an approximation: the student is then a fine-tuning start, not an equivalent model).
Depths, widths and head counts must match the teacher.
"""

from __future__ import annotations

from lightcompress.admin import AdminResidual
from lightcompress.convert.core import (
    ConversionError,
    Converter,
    build_dense_student,
    check_teacher_fits,
    rebuild_student,
    register_converter,
    transfer_by_spec,
)
from lightcompress.models.hypoformer import hypoformer_spec_text

__all__ = ["HypoformerConverter"]

_WIDTHS = (
    "encoder_embed_dim",
    "decoder_embed_dim",
    "encoder_ffn_embed_dim",
    "decoder_ffn_embed_dim",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_layers",
    "decoder_layers",
)


@register_converter("hypoformer")
class HypoformerConverter(Converter):
    """TT-SVD weight transfer into the ``hypoformer`` model (see the module docstring)."""

    @staticmethod
    def add_args(parser):
        g = parser.add_argument_group("Hypoformer TT weight transfer")
        g.add_argument(
            "--hypo-drop-out-proj",
            action="store_true",
            help="convert into a student without attention output projections (the paper's "
            "design) by dropping the teacher's out_proj weights (approximate; default: refuse)",
        )

    def convert(self, teacher, teacher_args, student_args, opts, log):
        check_teacher_fits(teacher_args, student_args, _WIDTHS, "TT transfer")
        for key in ("encoder_normalize_before", "decoder_normalize_before"):
            if getattr(teacher_args, key, False):
                raise ConversionError(f"the teacher is pre-LN ({key}); hypoformer is post-LN")
        out_proj = bool(getattr(student_args, "hypo_attn_out_proj", False))
        if not out_proj and not getattr(opts, "hypo_drop_out_proj", False):
            raise ConversionError(
                "the student has no attention output projections (the paper's Eq. 5), so the "
                "teacher's out_proj weights cannot be transferred; add --hypo-attn-out-proj to "
                "the student, or pass --hypo-drop-out-proj to drop them (approximate)"
            )
        tsd = teacher.state_dict()
        src_size = tsd["encoder.embed_tokens.weight"].shape[0]
        tgt_size = tsd["decoder.embed_tokens.weight"].shape[0]
        # 1. the student's shape, every slot dense: the teacher's weights fit it key by key
        try:
            dense = build_dense_student(student_args, src_size, tgt_size)
        except ValueError as exc:
            raise ConversionError(f"cannot build the student: {exc}") from None
        missing, unexpected = dense.load_state_dict(tsd, strict=False)
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
        if not out_proj:
            log("attention out_proj weights dropped (--hypo-drop-out-proj)")
        # 2. TT-SVD / SVD of every slot the spec names (the one transfer path)
        records = transfer_by_spec(
            dense,
            student_args,
            hypoformer_spec_text(student_args),
            progress=getattr(opts, "progress", False),
        )
        for rec in records:
            log(f"{rec.name}: {rec.kind} rank {rec.rank} kept energy {rec.kept_energy}")
        # 3. the student's own flags must rebuild exactly this model
        return rebuild_student(student_args, dense, src_size, tgt_size), records
