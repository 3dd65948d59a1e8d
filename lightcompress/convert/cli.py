"""``lightcompress-convert``: turn a trained dense fairseq Transformer into a compressed model.

Example (SVD weight transfer into the paper's IWSLT'14 LightFormer)::

    lightcompress-convert --input checkpoints/dense18-3/checkpoint_best.pt \\
        --output checkpoints/lightformer/init.pt --arch lightformer_iwslt_de_en
    fairseq-train data-bin/iwslt14.de-en --user-dir $(python -m lightcompress --user-dir) \\
        --arch lightformer_iwslt_de_en --restore-file checkpoints/lightformer/init.pt \\
        --reset-optimizer --reset-dataloader --reset-meters ...

Flags the converter does not know are fairseq model flags of the student (``--encoder-layers
12 --lc-encoder-groups 4``), parsed exactly as ``fairseq-train`` parses them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import warnings

from lightcompress import cli

__all__ = ["cli_main", "convert_checkpoint", "get_parser", "layer_list", "main"]


# a map keeping less of its squared singular values (or its CP fit's share) than this is
# reported: the transferred student then starts far from its teacher
LOW_ENERGY = 0.5


def layer_list(text: str) -> list[int]:
    """``--*-layers-from``: comma-separated teacher layer indices."""
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of teacher layer numbers (e.g. 0,2)"
        ) from None
    if any(i < 0 for i in layers):
        raise argparse.ArgumentTypeError(f"{text!r}: teacher layers are numbered from 0")
    return layers


def get_parser(converters=()):
    methods = sorted(
        {
            f"{c.family.name} ({c.family.transfer.method})"
            for c in converters
            if getattr(c, "family", None) is not None and c.family.transfer is not None
        }
    )
    parser = cli.OneLineParser(
        # (no abbreviations: the student's model flags pass through, and --decoder-layers must
        # stay a model flag, not an abbreviation of --decoder-layers-from)
        allow_abbrev=False,
        prog="lightcompress-convert",
        description="Convert a trained dense fairseq Transformer checkpoint into a compressed "
        "model of the lightcompress plugin, its weights transferred to the student: "
        + (", ".join(methods) if methods else "SVD, TT-SVD or CP")
        + ". The student architecture (--arch) picks the family.",
        epilog="Other flags are passed to the student architecture as fairseq model flags. "
        "DA-WID: `lightcompress-convert dawid-fuse -i CHECKPOINT -o FUSED.pt` fuses a DA-WID "
        "training checkpoint (masks and compactors) into an ordinary smaller model "
        "(`lightcompress-convert dawid-fuse --help`).",
    )
    parser.add_argument("--input", "-i", required=True, help="dense fairseq checkpoint (.pt)")
    parser.add_argument(
        "--output", "-o", required=True, help="where to write the student checkpoint"
    )
    parser.add_argument(
        "--arch",
        "-a",
        required=True,
        help="student architecture, e.g. lightformer_iwslt_de_en",
    )
    for side in ("encoder", "decoder"):
        parser.add_argument(
            f"--{side}-layers-from",
            type=layer_list,
            metavar="I,J,...",
            help=f"the teacher {side} layer each student {side} layer (each sharing group, with "
            f"--lc-{side}-groups) starts from, numbered from 0; lets a student be shallower "
            f"than its teacher, e.g. --{side}-layers 1 --{side}-layers-from 2 keeps the "
            f"teacher's last of 3 (default: the teacher has the student's {side} depth, or one "
            "layer per sharing group)",
        )
    parser.add_argument("--force", action="store_true", help="overwrite an existing output file")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    for conv in converters:
        conv.add_args(parser)
    return parser


def convert_checkpoint(argv=None, out=None):
    """Run a conversion; returns ``(student_model, records)``. Raises ConversionError.

    ``out`` receives the report (default: ``sys.stdout`` at call time)."""
    out = sys.stdout if out is None else out
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    import lightcompress.plugin  # noqa: F401  (registers architectures and the checkpoint allow-list)
    from lightcompress.convert import CONVERTERS
    from lightcompress.convert.core import (
        ConversionError,
        load_teacher,
        save_student_checkpoint,
        student_args_from,
    )
    from lightcompress.modules import count_unique_params

    opts, model_flags = get_parser(set(CONVERTERS.values())).parse_known_args(argv)
    if os.path.abspath(opts.input) == os.path.abspath(opts.output) or (
        os.path.exists(opts.output) and os.path.samefile(opts.input, opts.output)
    ):
        raise ConversionError(
            "--output is the same file as --input; refusing to overwrite the teacher"
        )
    if os.path.isdir(opts.output):
        raise ConversionError(f"--output {opts.output} is a directory; give a file name")
    if os.path.exists(opts.output) and not opts.force:
        raise ConversionError(f"{opts.output} exists (use --force to overwrite)")
    model_name = ARCH_MODEL_NAME_REGISTRY.get(opts.arch)
    if model_name is None:
        raise ConversionError(f"unknown student architecture {opts.arch!r}")
    if model_name not in CONVERTERS:
        raise ConversionError(
            f"no converter for {model_name!r} models (available: {sorted(CONVERTERS)})"
        )
    opts.progress = not opts.quiet and out is sys.stdout and sys.stderr.isatty()

    def log(msg):
        if not opts.quiet:
            print(msg, file=out)

    state, teacher_args, teacher = load_teacher(opts.input)
    import torch

    for name, tensor in teacher.state_dict().items():  # (an SVD / CP fit of NaN or Inf fails
        # deep inside LAPACK or tensorly with a traceback)
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ConversionError(
                f"{opts.input}: the teacher's {name} holds NaN or Inf values (a diverged or "
                "damaged checkpoint): nothing to transfer"
            )
    student_args = student_args_from(teacher_args, opts.arch, model_flags)
    converter = CONVERTERS[model_name]()
    try:
        # (libraries' warnings during the fits, e.g. tensorly's or torch's deprecations, say
        # nothing a user can act on; the converter reports what matters itself)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            student, records = converter.convert(teacher, teacher_args, student_args, opts, log)
    except ValueError as exc:  # a configuration the student cannot have (groups, ranks, ...)
        raise ConversionError(str(exc)) from None

    if not opts.quiet and records:
        log(
            f"{'module':44s} {'kind':18s} {'shape':>11s} {'rank':>6s} {'energy':>7s} {'before':>9s} {'after':>9s}"
        )
        for r in records:
            rank = "x".join(map(str, r.rank)) if isinstance(r.rank, list) else str(r.rank)
            energy = f"{r.kept_energy:.4f}" if r.kept_energy is not None else "-"
            log(
                f"{r.name:44s} {r.kind:18s} {'x'.join(map(str, r.shape)):>11s} {rank:>6s} "
                f"{energy:>7s} {r.params_before:>9d} {r.params_after:>9d}"
            )
    try:
        save_student_checkpoint(state, student_args, student, opts.output)
    except OSError as exc:  # full disk, no permission: nothing is left behind (atomic write)
        raise ConversionError(f"cannot write {opts.output}: {exc}") from None
    spec = getattr(student_args, "lc_spec", None)
    if spec:
        with open(opts.output + ".spec", "w") as f:
            f.write(spec + "\n")
    low = [r for r in records if r.kept_energy is not None and r.kept_energy < LOW_ENERGY]
    if low:  # (fine-tuning has more to recover: say so once, with the worst map)
        worst = min(low, key=lambda r: r.kept_energy)
        print(
            f"warning: {len(low)} of {len(records)} maps keep less than {LOW_ENERGY:.0%} of "
            f"their energy (lowest {worst.kept_energy:.2f}: {worst.name}, {worst.kind} rank "
            f"{worst.rank}); the student starts far from the teacher: fine-tune longer, or "
            "give a higher rank",
            file=sys.stderr,
        )
    t, s = count_unique_params(teacher), count_unique_params(student)
    if s >= t:
        print(
            f"warning: the student has {s:,} parameters, not fewer than the teacher's {t:,} "
            "(ranks at or above full rank?)",
            file=sys.stderr,
        )
    print(
        f"converted {opts.input} ({teacher_args.arch}, {t:,} parameters) -> {opts.output} "
        f"({opts.arch}, {s:,} parameters, compression {t / s:.2f}x)",
        file=out,
    )
    if spec:
        same = " ".join(shlex.quote(f) for f in model_flags if f)
        print(
            f"the student's per-matrix ranks are in {opts.output}.spec; fine-tune with the "
            f"same model flags: --arch {opts.arch} {same + ' ' if same else ''}"
            f'--lc-spec "$(cat {opts.output}.spec)"',
            file=out,
        )
    return student, records


PROG = "lightcompress-convert"


def main(argv=None) -> int:
    """``lightcompress-convert`` (and ``lightcompress-convert dawid-fuse ...``): the exit
    status (errors as one line, status 2)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["dawid-fuse"]:  # DA-WID fusion: lightcompress/convert/wid.py
        from lightcompress.convert.wid import main as dawid_fuse

        return dawid_fuse(argv[1:])
    return cli.run(convert_checkpoint, argv, PROG)


cli_main = cli.entry_point(main, exits=False)


if __name__ == "__main__":
    sys.exit(cli_main())
