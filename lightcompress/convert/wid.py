"""``lightcompress-convert dawid-fuse``: a DA-WID training checkpoint -> an ordinary smaller model
(translation: ``--arch dawid`` -> ``dawid_fused``; RoBERTa: ``dawid_roberta`` -> ``dawid_roberta_fused``).

::

    lightcompress-convert dawid-fuse -i checkpoints/dawid/checkpoint_last.pt -o dawid_fused.pt
    fairseq-generate DATA --user-dir $(python -m lightcompress --user-dir) --path dawid_fused.pt ...
    lightcompress-params --path dawid_fused.pt      # or, without the weights:
    lightcompress-params --arch dawid_fused --vocab-size V --dawid-shapes "$(cat dawid_fused.pt.shapes.json)"

The training model (``--arch dawid``) is rebuilt from the checkpoint alone (the teacher's
configuration is stored in it; the teacher file is not needed), pruned by its final masks
(CoFi's deterministic masks of the levels its schedule had switched on) and its compactors fused
into the weights (:mod:`lightcompress.wid.fuse`). Before anything is written, the fused model is
checked against the training model on a random batch (teacher forcing, evaluation mode). The
checkpoint is written atomically, with ``OUTPUT.shapes.json`` (the fused model's widths) beside
it; on any error neither is left behind.
"""

from __future__ import annotations

import json
import os
import sys

from lightcompress import cli
from lightcompress.errors import one_line

__all__ = ["cli_main", "fuse_checkpoint", "get_parser", "main"]

PROG = "lightcompress-convert dawid-fuse"
_TOLERANCE = 1e-3  # relative to the largest logit


def get_parser():
    p = cli.OneLineParser(
        prog=PROG,
        description="Prune a DA-WID training checkpoint (--arch dawid) by its final masks and fuse "
        "its compactors into an ordinary smaller fairseq model (--arch dawid_fused).",
    )
    p.add_argument("--input", "-i", required=True, help="DA-WID training checkpoint (.pt)")
    p.add_argument("--output", "-o", required=True, help="where to write the fused checkpoint")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    return p


def _check_output(opts):
    from lightcompress.convert.core import ConversionError
    from lightcompress.io import output_error

    if (
        os.path.exists(opts.output)
        and os.path.exists(opts.input)
        and os.path.samefile(opts.input, opts.output)
    ):
        raise ConversionError("--output is the same file as --input; refusing to overwrite it")
    if os.path.exists(opts.output) and not opts.force and not os.path.isdir(opts.output):
        raise ConversionError(f"{opts.output} exists (use --force to overwrite)")
    why = output_error(opts.output, "--output")
    if why:
        raise ConversionError(why)


def _check_equivalence(student, fused) -> float:
    """Largest |fused - training model| output difference on a random batch (relative to the
    largest output): teacher-forced logits of a translation model, every classification head's
    outputs and the LM head's of a RoBERTa."""
    import torch

    from lightcompress.convert.core import ConversionError

    gen = torch.Generator().manual_seed(0)
    nspecial = 4
    worst = 0.0
    with torch.no_grad():
        if hasattr(student, "decoder"):
            vocab = student.encoder.embed_tokens.weight.shape[0]
            src = torch.randint(nspecial, vocab, (2, 9), generator=gen)
            tgt_vocab = student.decoder.embed_tokens.weight.shape[0]
            prev = torch.randint(nspecial, tgt_vocab, (2, 7), generator=gen)
            prev[:, 0] = student.decoder.dictionary.eos()
            lengths = torch.full((2,), 9, dtype=torch.long)
            pairs = [(student(src, lengths, prev)[0], fused(src, lengths, prev)[0])]
        else:
            vocab = student.encoder.sentence_encoder.embed_tokens.weight.shape[0]
            src = torch.randint(nspecial, vocab, (2, 9), generator=gen)
            src[:, 0] = student.encoder.dictionary.bos()
            pairs = [(student(src)[0], fused(src)[0])]
            for name in student.classification_heads:
                pairs.append(
                    (
                        student(src, classification_head_name=name)[0],
                        fused(src, classification_head_name=name)[0],
                    )
                )
    for a, b in pairs:
        # NaN-aware: max() keeps its first argument when the other is NaN, so a non-finite
        # output of either model is an error of its own, never a difference of 0
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            which = "the training model" if not torch.isfinite(a).all() else "the fused model"
            raise ConversionError(
                f"{which} gives non-finite outputs (NaN or Inf): the checkpoint's weights are "
                "damaged or training diverged; nothing written"
            )
        worst = max(worst, float((a - b).abs().max() / a.abs().max().clamp_min(1e-6)))
    if not worst <= _TOLERANCE:
        raise ConversionError(
            f"internal error: the fused model differs from the training model (relative {worst:.2e})"
        )
    return worst


def _with_evaluation_criterion(state: dict, arch: str) -> dict:
    """The fused checkpoint names fairseq's own criterion of its task instead of ``dawid``
    (which needs the training model and its teacher): fairseq-validate builds the criterion a
    checkpoint names. Translation: label-smoothed cross-entropy without smoothing (the loss is
    then the NLL); RoBERTa: ``sentence_prediction`` with the head and regression setting the
    training used (Pearson / Spearman reported for a regression task, as STS-B is scored)."""
    cfg = state.get("cfg")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("criterion"), dict):
        return state
    old = cfg["criterion"]
    if arch == "dawid":
        new = {
            "_name": "label_smoothed_cross_entropy",
            "label_smoothing": 0.0,
            "sentence_avg": False,
            "ignore_prefix_size": 0,
            "report_accuracy": False,
        }
    else:
        regression = bool(old.get("regression_target", False))
        new = {
            "_name": "sentence_prediction",
            "classification_head_name": old.get(
                "classification_head_name", "sentence_classification_head"
            ),
            "regression_target": regression,
            "report_mcc": False,
            "report_acc_and_f1": False,
            "report_pearson_and_spearman": regression,
        }
    return {**state, "cfg": {**cfg, "criterion": new}}


def fuse_checkpoint(argv=None, out=None):
    """Run the fusion; returns ``(fused_model, shapes)``. Raises ConversionError."""
    out = sys.stdout if out is None else out
    import lightcompress.plugin  # noqa: F401  (registers the models, allow-lists checkpoint types)
    from lightcompress.checkpoint import checkpoint_arch, model_config, read_checkpoint
    from lightcompress.convert.core import ConversionError, save_student_checkpoint
    from lightcompress.errors import ConfigError
    from lightcompress.io import atomic_write
    from lightcompress.modules.counting import count_parameters
    from lightcompress.wid.fuse import FusionError
    from lightcompress.wid.fused_model import fuse_model
    from lightcompress.wid.model import DAWIDModel
    from lightcompress.wid.roberta import DAWIDRobertaModel, fuse_roberta

    opts = get_parser().parse_args(argv)
    _check_output(opts)
    state = read_checkpoint(opts.input)
    model_config(state)  # a checkpoint without a model configuration: CheckpointError
    arch = checkpoint_arch(state)  # args.arch, or cfg.model._name (fairseq-hydra-train)
    if arch not in ("dawid", "dawid_roberta") or "wid_teacher_config" not in state["model"]:
        raise ConversionError(
            f"{opts.input} is not a DA-WID training checkpoint (arch {arch!r}; train with "
            "--arch dawid or dawid_roberta)"
        )
    try:
        if arch == "dawid":
            student, targs = DAWIDModel.rebuild(state)
            fused, fargs, shapes = fuse_model(student, targs)
        else:
            student, targs = DAWIDRobertaModel.rebuild(state)
            fused, fargs, shapes = fuse_roberta(student, targs)
    except FusionError as exc:
        raise ConversionError(str(exc)) from None
    except (ConfigError, RuntimeError) as exc:
        raise ConversionError(f"{opts.input}: {one_line(exc, 400)}") from None
    except (KeyError, ValueError, TypeError) as exc:  # a damaged teacher configuration
        raise ConversionError(
            f"{opts.input}: a damaged DA-WID training checkpoint "
            f"({type(exc).__name__}: {one_line(exc, 400)})"
        ) from None
    rel = _check_equivalence(student, fused)

    counts = count_parameters(fused)
    if arch == "dawid":
        body = counts["encoder"] + counts["decoder"]  # non-embedding parameters
    else:  # RoBERTa: the layers, the paper's count after CoFi
        body = sum(p.numel() for p in fused.encoder.sentence_encoder.layers.parameters())
    teacher = student.teacher_size()
    if not opts.quiet:
        for part in ("encoder", "decoder"):
            for i, layer in enumerate(shapes.get(part, {"layers": []})["layers"]):
                desc = []
                for s in layer:
                    if s["kind"] == "ffn":
                        desc.append(f"ffn {s['ffn']}")
                    else:
                        desc.append(
                            f"{s['kind']} {len(s.get('v', []))} heads qk {sum(s.get('qk', []))} v {sum(s.get('v', []))}"
                        )
                    desc[-1] += f" -> {s['out']}"
                print(f"{part} layer {i}: " + "; ".join(desc), file=out)
        print(f"fusion check: max relative logit difference {rel:.1e}", file=out)

    state = _with_evaluation_criterion(state, arch)
    shapes_path = opts.output + ".shapes.json"
    try:
        with atomic_write(shapes_path) as f:
            json.dump(shapes, f, separators=(",", ":"))
            f.write("\n")
        try:
            save_student_checkpoint(state, fargs, fused, opts.output)
        except BaseException:
            os.remove(shapes_path)
            raise
    except OSError as exc:
        raise ConversionError(f"cannot write {opts.output}: {exc}") from None
    what = "non-embedding" if arch == "dawid" else "encoder-layer"
    print(
        f"fused {opts.input} -> {opts.output} ({fargs.arch}): {body:,} {what} parameters "
        f"(teacher {teacher:,}, sparsity {1 - body / teacher:.3f}), {counts['total']:,} in total",
        file=out,
    )
    if not opts.quiet:
        print(f"count it with: lightcompress-params --path {opts.output}", file=out)
    return fused, shapes


def main(argv=None) -> int:
    """``lightcompress-convert dawid-fuse``: the exit status (errors as one line, status 2)."""
    return cli.run(fuse_checkpoint, argv, PROG)


cli_main = cli.entry_point(main, exits=False)


if __name__ == "__main__":
    sys.exit(cli_main())
