"""DA-WID's data-aware initialisation (Eq. 8-12) of a training model: calibration batches of the
training set, the teacher's features on them, and the compactors set from those features
(:mod:`lightcompress.wid.calibrate`); then the frozen teacher attached.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lightcompress.errors import ConfigError
from lightcompress.wid.calibrate import qk_compactors, site_compactors, vo_compactors
from lightcompress.wid.masked import (
    LayerNormSite,
    MaskedAttention,
)

__all__ = [
    "calibration_batches",
    "collect_features",
    "finish_student",
    "init_data_aware",
    "teacher_layers",
]


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
def init_data_aware(student, teacher, batches, n_tokens: int, seed: int = 1) -> None:
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
