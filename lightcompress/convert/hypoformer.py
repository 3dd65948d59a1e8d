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

import torch
from torch import nn

from lightcompress.convert.core import (
    ConversionError,
    Converter,
    build_fairseq_model,
    register_converter,
)
from lightcompress.modules import (
    HTTEmbedding,
    HybridLinear,
    LowRankEmbedding,
    LowRankLinear,
    ReplacementRecord,
    TTLinear,
)
from lightcompress.modules.fused_qkv import FusedQKV

__all__ = ["HypoformerConverter", "transfer_linear"]

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


def _numel(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def transfer_linear(dense: nn.Linear, target: nn.Module) -> nn.Module:
    """Decompose ``dense`` into a module shaped exactly like ``target`` (same kind and ranks)."""
    if isinstance(target, nn.Linear):
        return dense
    if isinstance(target, LowRankLinear):
        return LowRankLinear.from_linear(dense, rank=target.rank)
    if isinstance(target, TTLinear):
        return TTLinear.from_linear(dense, target.in_shape, target.out_shape, target.rank)
    if isinstance(target, HybridLinear):
        f = target.factorized
        if target.kind == "tt":
            return HybridLinear.from_linear(
                dense, target.alpha, "tt", ranks=f.rank if f is not None else None,
                in_shape=f.in_shape if f is not None else None,
                out_shape=f.out_shape if f is not None else None,
            )  # fmt: skip
        return HybridLinear.from_linear(dense, target.alpha, "lowrank", rank=target.rank)
    raise ConversionError(f"cannot transfer a dense map into {type(target).__name__}")


def _load(target: nn.Module, source: nn.Module, name: str) -> None:
    try:
        target.load_state_dict(source.state_dict(), strict=True)
    except RuntimeError as exc:
        raise ConversionError(f"{name}: converted weights do not fit the student: {exc}") from None


def _record(name, kind, shape, new, before) -> ReplacementRecord:
    rank = getattr(new, "rank", None)
    return ReplacementRecord(
        name, kind, tuple(shape), rank, getattr(new, "kept_energy", None), before, _numel(new), ""
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
        for key in _WIDTHS:
            t, s = getattr(teacher_args, key, None), getattr(student_args, key, None)
            if t != s:
                raise ConversionError(
                    f"mismatch: teacher {key}={t}, student {key}={s} (TT transfer keeps widths "
                    "and depths; change the student flags)"
                )
        for key in ("encoder_normalize_before", "decoder_normalize_before"):
            if getattr(teacher_args, key, False):
                raise ConversionError(f"the teacher is pre-LN ({key}); hypoformer is post-LN")
        if student_args.share_all_embeddings and not getattr(
            teacher_args, "share_all_embeddings", False
        ):
            raise ConversionError(
                "the student shares all embeddings but the teacher does not (train the teacher "
                "with --share-all-embeddings)"
            )
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
        try:
            student = build_fairseq_model(student_args, src_size, tgt_size)
        except ValueError as exc:
            raise ConversionError(f"cannot build the student: {exc}") from None
        records = []
        with torch.no_grad():
            records += self._embeddings(teacher, student, log)
            for side in ("encoder", "decoder"):
                for i, (tl, sl) in enumerate(
                    zip(getattr(teacher, side).layers, getattr(student, side).layers)
                ):
                    records += self._layer(f"{side}.layers.{i}", tl, sl, out_proj, log)
        student.eval()
        return student, records

    # ---------------------------------------------------------------------------------------

    def _embeddings(self, teacher, student, log):
        records = []
        done = {}
        for side in ("encoder", "decoder"):
            t_emb = getattr(teacher, side).embed_tokens
            s_emb = getattr(student, side).embed_tokens
            if id(s_emb) in done:
                continue
            done[id(s_emb)] = True
            name = f"{side}.embed_tokens"
            if isinstance(s_emb, nn.Embedding):
                new = t_emb
            elif isinstance(s_emb, HTTEmbedding):
                tt = s_emb.tt
                new = HTTEmbedding.from_embedding(
                    t_emb, s_emb.alpha, tt.rank if tt is not None else None,
                    tt.in_shape if tt is not None else None,
                    tt.out_shape if tt is not None else None,
                )  # fmt: skip
            elif isinstance(s_emb, LowRankEmbedding):
                new = LowRankEmbedding.from_embedding(t_emb, rank=s_emb.rank)
            else:
                raise ConversionError(f"{name}: unsupported embedding {type(s_emb).__name__}")
            _load(s_emb, new, name)
            s_emb.train(False)  # drop any cached table
            records.append(_record(name, type(s_emb).__name__, t_emb.weight.shape, new,
                                   t_emb.weight.numel()))  # fmt: skip
            log(f"{name}: {type(s_emb).__name__} kept energy {records[-1].kept_energy}")
        for side in ("encoder", "decoder"):
            for key in ("embed_positions", "layernorm_embedding"):
                t_m, s_m = (
                    getattr(getattr(teacher, side), key, None),
                    getattr(getattr(student, side), key, None),
                )
                if (t_m is None) != (s_m is None):
                    raise ConversionError(f"{side}.{key}: present in only one of the models")
                if t_m is not None:
                    _load(s_m, t_m, f"{side}.{key}")
        return records

    def _attention(self, name, t_attn, s_attn, out_proj, log):
        records = []
        if hasattr(s_attn, "qkv_proj"):  # fused self-attention
            fused = s_attn.qkv_proj
            p = fused.proj
            kw = {"kind": fused.kind, "beta": fused.num_dense / fused.dim}
            if fused.kind in ("htt", "tt"):
                tt = p.factorized if isinstance(p, HybridLinear) else p
                kw.update(ranks=tt.rank, in_shape=tt.in_shape, out_shape=tt.out_shape)
            elif fused.kind in ("hmf", "lowrank"):
                kw.update(rank=p.rank)
            new = FusedQKV.from_linears(t_attn.q_proj, t_attn.k_proj, t_attn.v_proj, **kw)
            _load(fused, new, f"{name}.qkv_proj")
            before = sum(_numel(getattr(t_attn, n)) for n in ("q_proj", "k_proj", "v_proj"))
            records.append(_record(f"{name}.qkv_proj", f"fused-{fused.kind}",
                                   (3 * fused.dim, fused.dim), new, before))  # fmt: skip
        else:
            for n in ("q_proj", "k_proj", "v_proj"):
                t_lin, s_lin = getattr(t_attn, n), getattr(s_attn, n)
                new = transfer_linear(t_lin, s_lin)
                _load(s_lin, new, f"{name}.{n}")
                records.append(_record(f"{name}.{n}", type(s_lin).__name__,
                                       t_lin.weight.shape, new, _numel(t_lin)))  # fmt: skip
        if out_proj:
            _load(s_attn.out_proj, t_attn.out_proj, f"{name}.out_proj")
        else:
            log(f"{name}.out_proj: dropped (--hypo-drop-out-proj)")
        for rec in records:
            log(f"{rec.name}: {rec.kind} rank {rec.rank} kept energy {rec.kept_energy}")
        return records

    def _layer(self, name, t_layer, s_layer, out_proj, log):
        records = self._attention(f"{name}.self_attn", t_layer.self_attn, s_layer.self_attn,
                                  out_proj, log)  # fmt: skip
        if getattr(s_layer, "encoder_attn", None) is not None:
            records += self._attention(f"{name}.encoder_attn", t_layer.encoder_attn,
                                       s_layer.encoder_attn, out_proj, log)  # fmt: skip
        for n in ("fc1", "fc2"):
            t_lin, s_lin = getattr(t_layer, n), getattr(s_layer, n)
            new = transfer_linear(t_lin, s_lin)
            _load(s_lin, new, f"{name}.{n}")
            records.append(_record(f"{name}.{n}", type(s_lin).__name__, t_lin.weight.shape,
                                   new, _numel(t_lin)))  # fmt: skip
            log(f"{name}.{n}: {type(s_lin).__name__} kept energy {records[-1].kept_energy}")
        for n in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
            t_ln, s_ln = getattr(t_layer, n, None), getattr(s_layer, n, None)
            if s_ln is not None:
                _load(s_ln, t_ln, f"{name}.{n}")
        admin = getattr(s_layer, "admin", None)
        if admin is not None:
            admin.set_values({s: 1.0 for s in admin.sublayers})
            log(f"{name}: Admin omegas set to 1 (the dense teacher's residuals)")
        return records
