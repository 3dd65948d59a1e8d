"""Parameter and MAC counts of fairseq translation models, built without data.

``lightcompress-params --arch transformer_iwslt_de_en --vocab-size 10200`` prints one JSON object::

    {"arch": "transformer_iwslt_de_en", "vocab_size": 10200, "share_all_embeddings": true,
     "total": 36765696, "embedding": 5222400, "encoder": 12616704, "decoder": 18926592,
     "other": 0}

Convention (the papers')
------------------------
The model is built with a **joined** dictionary of ``--vocab-size`` entries in total (fairseq's 4
specials ``<s> <pad> </s> <unk>`` included), used as source and target dictionary, and with
``--share-all-embeddings`` (one table for encoder input, decoder input and output projection).
That is how the papers count: ``transformer_iwslt_de_en`` at a 10.2k joined vocabulary has
36.8M parameters (LightFormer Tables 2/6/7, Hypoformer Table 8). fairseq's architecture function
does NOT turn sharing on by itself: without it the same model has 47.2M parameters (three
tables), with only ``--share-decoder-input-output-embed`` 42.0M. ``--no-share-all-embeddings``
turns the default off. An architecture whose encoder and decoder widths differ cannot share all
embeddings; it is then built unshared (with a note on stderr and ``share_all_embeddings: false``).

Counted on fairseq's own models (verified by tests/test_params.py):

====================================== ============ ============
model                                  vocabulary   parameters
====================================== ============ ============
transformer_iwslt_de_en (6-6, 512)     10,200       36.77M  (papers: 36.8M)
transformer_wmt_en_de (base, 6-6)      32,768       60.92M  (Hypoformer: 61.0M)
transformer_wmt_en_de (base, 6-6)      37,000       63.08M  (LightFormer: 63.2M)
====================================== ============ ============

(The base model has 44.14M non-embedding parameters plus 512 per vocabulary entry, so
LightFormer's 63.2M corresponds to a ~37.2k joined vocabulary, close to the "about 37000 tokens"
shared BPE vocabulary of Vaswani et al.; Hypoformer's 61.0M to fairseq's 32,768-entry WMT'16
En-De dictionary.)

Categories (every tensor counted once)
--------------------------------------
Parameters are deduplicated by :func:`lightcompress.modules.sharing.unique_parameters` (by
``Parameter`` identity and, for tensors with storage, by the storage view: address, offset,
shape, stride), so a tied output projection, a shared embedding table or layers shared by
LightFormer/Subformer schedules count once, and distinct tensors of equal shape on the meta
device are not merged. Each unique tensor is put in exactly one category, from all the names it
is reachable under (``named_parameters(remove_duplicate=False)``):

- ``embedding``: anything under a module named ``embed_tokens`` or ``output_projection`` (the
  token embedding tables, factorized ones included, and an untied output projection), or
  ``adaptive_softmax``;
- ``encoder`` / ``decoder``: every other parameter whose name starts with ``encoder.`` /
  ``decoder.`` (layers, LayerNorms, learned positional embeddings, projections);
- ``other``: anything else (usually 0);
- ``total`` = the sum of the four.

Sentence encoders (fairseq RoBERTa and the models built on it, e.g. DA-WID's
``dawid_roberta_fused``) are counted with fairseq's ``sentence_prediction`` task instead of the
translation convention (one dictionary of ``--vocab-size`` entries, no sharing flags; a
classification head when ``--num-classes N`` is given, named by ``--classification-head-name``),
with the categories of Xia et al. (2022), which DA-WID's paper follows (BERT-base: 85M):

- ``embedding``: the embedding layer (token and position embeddings, the embedding LayerNorm)
  and the LM head's output table tied to it;
- ``encoder``: the Transformer layers (and a final LayerNorm);
- ``other``: the output heads (the LM head's dense map, LayerNorm and bias, the classification
  heads).

Every report has ``non_embedding`` = ``encoder + decoder``: the count the papers give without
embeddings and output heads (a translation model's layers, LayerNorms and learned positions; a
sentence encoder's layers).

MACs (``--macs``)
-----------------
The Hypoformer Table 2 convention: multiply-accumulate operations of ONE forward pass of the model
on a batch of one sentence pair with 20 source tokens (19 random words + ``</s>``) and 20 target
positions (teacher forcing: ``</s>`` + 19 words as ``prev_output_tokens``), i.e. the encoder on
20 tokens, the decoder (self-attention, cross-attention, FFN) and the output projection on 20
positions. ``macs`` is the total of that pass, ``macs_per_token`` = ``macs / 20`` (per
source+target token pair).

Counting rule: every matrix product that is actually executed, counted at the ATen level with
:class:`torch.utils.flop_counter.FlopCounterMode` (``mm``, ``addmm``, ``bmm``, ``baddbmm``,
convolutions, scaled-dot-product attention; a product ``(n x k) @ (k x m)`` counts ``n k m``
MACs; ``flops / 2``). This covers ``nn.Linear``, ``F.linear`` on a tied embedding table (the output
projection), the attention score (``QK^T``) and value (``AV``) products, and whatever factorized
layers compute inside (two thin products of a low-rank layer, the tensordot chain of a TT layer,
...) - which forward hooks on ``nn.Linear`` alone would miss. Element-wise work (activations,
LayerNorm, softmax, bias adds, the element-wise product-and-sum of a CP projection) and embedding
lookups are not counted. The paper's own figures (7.9B for a 6-6 base model) are not reproduced
by this rule (which gives 1.22B at 32k): the paper does not state its rule; use these counts to
compare models with each other.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import torch
from torch import nn

from lightcompress import cli
from lightcompress.measure.specs import (
    ModelSpec,
    ParamsError,
    _import_plugin,
    build_random_model,
    is_sentence_encoder,
    parse_model_specs,
)
from lightcompress.measure.timing import format_table, human_count
from lightcompress.modules.counting import count_parameters

# (the models built without data, their specs and ParamsError live in
# lightcompress.measure.specs; the counter in lightcompress.modules.counting)
__all__ = [
    "MAC_SRC_LEN",
    "MAC_TGT_LEN",
    "checkpoint_report",
    "cli_main",
    "count_macs",
    "report",
    "table",
]

PROG = "lightcompress-params"
MAC_SRC_LEN = 20
MAC_TGT_LEN = 20

# --------------------------------------------------------------------------------------------
# counting
# --------------------------------------------------------------------------------------------


def _sdpa_cpu_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kw):
    # [B x H x Tq x D] @ [B x H x D x Tk] and [B x H x Tq x Tk] @ [B x H x Tk x Dv]
    b, h, tq, d = query_shape
    tk, dv = key_shape[-2], value_shape[-1]
    return 2 * b * h * tq * tk * d + 2 * b * h * tq * tk * dv


def _custom_flop_mapping() -> dict:
    """Formulas for ATen attention kernels the flop counter does not know (CPU flash SDPA)."""
    mapping = {}
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is not None:
        mapping[op] = _sdpa_cpu_flops
    return mapping


@torch.no_grad()
def count_macs(
    model: nn.Module,
    src_len: int = MAC_SRC_LEN,
    tgt_len: int = MAC_TGT_LEN,
    vocab_size: int | None = None,
    seed: int = 0,
) -> dict:
    """MACs of one teacher-forced forward pass on one ``src_len`` + ``tgt_len`` sentence pair.

    Parameters
    ----------
    model : fairseq encoder-decoder model
        Called as ``model(src_tokens, src_lengths, prev_output_tokens)``; put in eval mode for the
        count and restored afterwards.
    src_len, tgt_len : int
        Source tokens (including the final ``</s>``) and target positions.
    vocab_size : int, optional
        Range of the random word ids; default ``len(model.encoder.dictionary)``.

    Returns
    -------
    dict
        ``macs`` (int, the whole pass), ``macs_encoder``, ``macs_decoder`` (the decoder includes
        the output projection), ``macs_per_token`` (``macs / tgt_len``), ``macs_src_tokens``,
        ``macs_tgt_tokens``. See the module docstring for the counting rule.
    """
    from torch.utils.flop_counter import FlopCounterMode

    if vocab_size is None:
        vocab_size = len(model.encoder.dictionary)
    eos = model.encoder.dictionary.eos() if hasattr(model.encoder, "dictionary") else 2
    nspecial = getattr(getattr(model.encoder, "dictionary", None), "nspecial", 4)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(nspecial, vocab_size, (1, src_len), generator=gen)
    src[0, -1] = eos
    prev = torch.randint(nspecial, vocab_size, (1, tgt_len), generator=gen)
    prev[0, 0] = eos
    was_training = model.training
    model.eval()
    try:
        counter = FlopCounterMode(display=False, custom_mapping=_custom_flop_mapping())
        with counter:
            model(src, torch.tensor([src_len]), prev)
    finally:
        model.train(was_training)
    total = counter.get_total_flops() // 2
    by_module = counter.get_flop_counts()
    parts = {"encoder": 0, "decoder": 0}
    for mod_name, ops in by_module.items():
        tail = mod_name.split(".")
        if len(tail) == 2 and tail[1] in parts:
            parts[tail[1]] = sum(ops.values()) // 2
    return {
        "macs": int(total),
        "macs_encoder": int(parts["encoder"]),
        "macs_decoder": int(parts["decoder"]),
        "macs_per_token": total / tgt_len,
        "macs_src_tokens": src_len,
        "macs_tgt_tokens": tgt_len,
    }


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


_NO_ENCODER_MACS = (
    "--macs counts a translation model's forward pass; {arch} is a sentence encoder "
    "(parameters only)"
)


def _with_non_embedding(counts: dict) -> dict:
    """``counts`` with ``non_embedding`` = encoder + decoder (module docstring)."""
    return {**counts, "non_embedding": counts["encoder"] + counts["decoder"]}


def report(
    arch: str,
    vocab_size: int,
    extra_args: Sequence[str] = (),
    share_all_embeddings: bool = True,
    reference_arch: str | None = None,
    macs: bool = False,
) -> dict:
    """The JSON report of ``lightcompress-params`` as a dict."""
    if macs and is_sentence_encoder(arch):
        raise ParamsError(_NO_ENCODER_MACS.format(arch=arch))
    model, _task, args = build_random_model(
        arch, vocab_size, extra_args, share_all_embeddings, return_task=True
    )
    out = {"arch": arch, "vocab_size": vocab_size}
    if is_sentence_encoder(arch):
        out["task"] = "sentence_prediction"
    else:
        out["share_all_embeddings"] = bool(getattr(args, "share_all_embeddings", False))
    out.update(_with_non_embedding(count_parameters(model)))
    if reference_arch:
        ref = build_random_model(reference_arch, vocab_size, (), share_all_embeddings)
        out["reference_arch"] = reference_arch
        out["reference_total"] = count_parameters(ref)["total"]
        out["ratio"] = out["reference_total"] / out["total"]
    if macs:
        out.update(count_macs(model, vocab_size=vocab_size))
    return out


def checkpoint_report(path: str, macs: bool = False) -> dict:
    """The JSON report of ``lightcompress-params --path`` as a dict: the model a checkpoint
    holds, built from its own flags and loaded strictly (so the counts are those of the
    weights in the file)."""
    import copy

    from lightcompress.checkpoint import build_model, model_config, read_checkpoint

    _import_plugin()
    state = read_checkpoint(path)
    args = copy.deepcopy(model_config(state))
    sd = state["model"]
    arch = getattr(args, "arch", None) or getattr(args, "_name", None)
    if isinstance(args, dict):
        arch = args.get("arch") or args.get("_name")
    if arch in ("dawid", "dawid_roberta") or "wid_teacher_config" in sd:
        raise ParamsError(
            f"{path} is a DA-WID training checkpoint (the teacher with compactors and masks): "
            f"fuse it first (lightcompress-convert dawid-fuse -i {path} -o FUSED.pt) and count "
            "FUSED.pt"
        )
    if is_sentence_encoder(arch):
        return _sentence_encoder_checkpoint_report(path, args, arch, state, macs)

    def table_rows(side):  # a dense table's weight, a low-rank table's (V, r) factor, or a
        # hybrid TT table's dense (V, alpha d) part (Hypoformer's HTT embedding)
        for key in (
            f"{side}.embed_tokens.weight",
            f"{side}.embed_tokens.u",
            f"{side}.embed_tokens.dense",
        ):
            if key in sd:
                return sd[key]
        raise ParamsError(
            f"{path}: no {side} embedding table whose size gives the dictionary "
            "(a translation checkpoint with a dense or low-rank table is needed)"
        )

    src, tgt = table_rows("encoder"), table_rows("decoder")
    model = build_model(state, src.shape[0], tgt.shape[0], path, args=args)
    out = {"path": path, "arch": arch, "vocab_size": int(src.shape[0])}
    out.update(_with_non_embedding(count_parameters(model)))
    if macs:
        out.update(count_macs(model, vocab_size=int(src.shape[0])))
    return out


def _sentence_encoder_checkpoint_report(
    path: str, args, arch: str, state: dict, macs: bool
) -> dict:
    """:func:`checkpoint_report` of a RoBERTa-style sentence encoder (with the classification
    heads the checkpoint holds)."""
    if macs:
        raise ParamsError(_NO_ENCODER_MACS.format(arch=arch))
    rows = state["model"].get("encoder.sentence_encoder.embed_tokens.weight")
    if rows is None:
        raise ParamsError(
            f"{path}: no encoder.sentence_encoder.embed_tokens.weight (the dictionary)"
        )
    from lightcompress.checkpoint import build_model

    model = build_model(state, int(rows.shape[0]), None, path, args=args)
    out = {
        "path": path,
        "arch": arch,
        "vocab_size": int(rows.shape[0]),
        "task": "sentence_prediction",
    }
    out.update(_with_non_embedding(count_parameters(model)))
    return out


def table(
    specs: Sequence[ModelSpec], vocab_size: int, share_all_embeddings: bool = True
) -> tuple[str, list[dict]]:
    """An aligned Params / Ratio / MACs table; the first model is the reference."""
    rows, records = [], []
    ref_total = None
    for spec in specs:
        if is_sentence_encoder(spec.arch):
            raise ParamsError(
                f"--table compares translation models (with MACs); count {spec.arch} with --arch"
            )
        model = build_random_model(
            spec.arch,
            vocab_size,
            spec.args,
            share_all_embeddings and spec.share_all_embeddings,
        )
        counts = count_parameters(model)
        counts.update(count_macs(model, vocab_size=vocab_size))
        ref_total = ref_total or counts["total"]
        ratio = ref_total / counts["total"]
        records.append(
            {
                "label": spec.name,
                "arch": spec.arch,
                "args": spec.args,
                "ratio": ratio,
                **counts,
            }
        )
        rows.append(
            [
                spec.name,
                human_count(counts["total"]),
                f"{counts['total']:,}",
                human_count(counts["embedding"]),
                f"{ratio:.2f}x",
                human_count(counts["macs"], 2),
            ]
        )
    headers = [
        "Model",
        "Params",
        "(exact)",
        "Embedding",
        "Ratio",
        f"MACs ({MAC_SRC_LEN}+{MAC_TGT_LEN} tok)",
    ]
    return format_table(headers, rows), records


def _arg_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(
        prog=PROG,
        description="Parameter (and MAC) counts of a fairseq translation model built without "
        "data (or of a RoBERTa-style sentence encoder, counted with the sentence_prediction task: "
        "--num-classes N adds its classification head). Unknown flags are passed to fairseq as "
        "model flags (e.g. --encoder-layers 12). non_embedding = encoder + decoder (the papers' "
        "count without embeddings and output heads).",
        epilog="Convention: joined dictionary of --vocab-size entries (4 specials included), "
        "--share-all-embeddings on (the papers' 36.8M for transformer_iwslt_de_en at 10200).",
    )
    p.add_argument("--arch", "-a", help="architecture (fairseq's or the plugin's)")
    p.add_argument(
        "--vocab-size",
        type=int,
        help="joined dictionary size, specials included (not with --path)",
    )
    p.add_argument(
        "--path",
        help="count a trained checkpoint instead (its architecture, flags and dictionary "
        "sizes; CP layers at the ranks it holds, e.g. after a rank search)",
    )
    p.add_argument("--reference-arch", help="adds 'ratio' = reference total / total")
    p.add_argument(
        "--table",
        help="comma-separated model specs [LABEL=]ARCH[:--flag[=value]]...; prints a "
        "Params / Ratio / MACs table with the first as reference",
    )
    p.add_argument(
        "--macs",
        action="store_true",
        help=f"add MACs of a {MAC_SRC_LEN}+{MAC_TGT_LEN}-token forward pass",
    )
    p.add_argument(
        "--no-share-all-embeddings",
        dest="share_all_embeddings",
        action="store_false",
        help="do not add --share-all-embeddings (default: shared, the papers' convention)",
    )
    p.add_argument("--json", action="store_true", help="with --table: print JSON records instead")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``lightcompress-params``: the exit status (errors as one line, status 2)."""
    import lightcompress.plugin  # noqa: F401  (plugin architectures; fairseq checkpoints load)

    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    parser = _arg_parser()
    args, extra = parser.parse_known_args(argv)
    if args.path:
        if args.table or args.arch or extra or args.vocab_size or args.reference_arch:
            raise ParamsError("--path counts one checkpoint: give no other model options")
        out = checkpoint_report(args.path, args.macs)
        print(json.dumps(out))
        return 0
    if args.vocab_size is None:
        raise ParamsError("give --vocab-size N (or --path CHECKPOINT)")
    if args.table:
        if extra:
            raise ParamsError(
                f"with --table give model flags per model (ARCH:--flag=value), not {extra}"
            )
        text, records = table(
            parse_model_specs(args.table),
            args.vocab_size,
            args.share_all_embeddings,
        )
        print(json.dumps(records, indent=1) if args.json else text)
        return 0
    if not args.arch:
        raise ParamsError("give --arch ARCH or --table ARCH1,ARCH2,...")
    out = report(
        args.arch,
        args.vocab_size,
        extra,
        args.share_all_embeddings,
        args.reference_arch,
        args.macs,
    )
    print(json.dumps(out))
    return 0


cli_main = cli.entry_point(main, quiet=True)

if __name__ == "__main__":
    cli_main()
