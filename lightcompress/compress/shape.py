"""The student's depth: by default the deep-encoder / shallow-decoder student (the teacher's
encoder, one decoder layer), as LightFormer (18-3) and Hypoformer (12-2) build theirs; or the
depth the user names, or the teacher's (``--keep-depth``).

The decoder runs once per output token and the encoder once per sentence, so the decoder's depth
sets the speed of translation: on the results corpus the 3-1 LightFormer met the 2x-CTranslate2
goal where the 3-3 one did not (lab/notes/deployment-experiments.md). Each student layer starts
from a teacher layer (``lightcompress-convert --encoder-layers-from / --decoder-layers-from``); by
default the first ones (the first decoder layer of a 3-3 teacher started a 3-1 LightFormer best:
validation loss 9.13 after the transfer against 10.10 and 10.22 for the second and third,
docs/compress.md).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from lightcompress.compress.teacher import CompressError, Teacher
from lightcompress.convert.cli import layer_list  # (lightcompress-convert's own parser)

__all__ = ["StudentShape", "add_shape_args", "student_shape"]


@dataclass
class StudentShape:
    flags: list[str]  # the student's model flags (the teacher's, with the depths replaced)
    convert_flags: list[str]  # lightcompress-convert's --*-layers-from, when shallower
    encoder_layers: int
    decoder_layers: int
    reason: str

    def describe(self) -> str:
        return f"{self.encoder_layers}-{self.decoder_layers} ({self.reason})"


def _depth(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of layers: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a student has at least 1 layer, not {text!r}")
    return value


def add_shape_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "student shape (default: the teacher's encoder depth and one decoder layer, the fast "
        "deep-encoder / shallow-decoder shape; DA-WID keeps the teacher's)"
    )
    g.add_argument(
        "--encoder-layers",
        type=_depth,
        metavar="N",
        help="the student's encoder layers (default: the teacher's)",
    )
    g.add_argument(
        "--decoder-layers",
        type=_depth,
        metavar="N",
        help="the student's decoder layers (default: 1)",
    )
    g.add_argument(
        "--encoder-layers-from",
        type=layer_list,
        metavar="I,J,...",
        help="the teacher encoder layer each student encoder layer starts from, "
        "numbered from 0 (default: the first ones)",
    )
    g.add_argument(
        "--decoder-layers-from",
        type=layer_list,
        metavar="I,J,...",
        help="the teacher decoder layer each student decoder layer starts from "
        "(default: the first ones; for one layer, the teacher's first)",
    )
    g.add_argument(
        "--keep-depth",
        action="store_true",
        help="keep the teacher's encoder and decoder depth (slower to decode)",
    )


def _replace(flags: list[str], key: str, value: int) -> list[str]:
    out = list(flags)
    out[out.index(key) + 1] = str(value)
    return out


def student_shape(teacher: Teacher, opts, method_name: str) -> StudentShape:
    """The student's depth and the teacher layers it starts from, checked against the teacher."""
    te, td = teacher.settings["encoder_layers"], teacher.settings["decoder_layers"]
    given = {
        k: getattr(opts, k, None)
        for k in ("encoder_layers", "decoder_layers", "encoder_layers_from", "decoder_layers_from")
    }
    named = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None]
    flags = teacher.shape_flags()
    if method_name == "dawid":
        if named:
            raise CompressError(
                f"DA-WID keeps the teacher's depth (its layer masks remove whole layers while it "
                f"trains): leave out {', '.join(named)}, or use --method lightformer for a "
                "shallower student"
            )
        return StudentShape(flags, [], te, td, "the teacher's: DA-WID prunes inside it")
    if opts.keep_depth:
        if given["encoder_layers"] is not None or given["decoder_layers"] is not None:
            raise CompressError(
                "--keep-depth keeps the teacher's depth: leave out "
                "--encoder-layers / --decoder-layers"
            )
        enc, dec = te, td
        reason = "the teacher's depth (--keep-depth)"
    else:
        enc = given["encoder_layers"] or te
        dec = given["decoder_layers"] or 1
        if given["encoder_layers"] is None and given["decoder_layers"] is None:
            reason = (
                "deep encoder, shallow decoder: the decoder runs once per output token, so "
                "one decoder layer decodes fastest (--keep-depth keeps the teacher's)"
            )
        else:
            reason = "as asked"
    for side, n, have in (("encoder", enc, te), ("decoder", dec, td)):
        if n > have:
            raise CompressError(
                f"a {n}-layer student {side} is deeper than the teacher's ({have}): every "
                f"student layer starts from a teacher layer; ask for --{side}-layers {have} or fewer"
            )
    convert = []
    for side, n, have in (("encoder", enc, te), ("decoder", dec, td)):
        src = given[f"{side}_layers_from"]
        if src is None:
            if n == have:
                continue
            src = list(range(n))
        if len(src) != n or any(i >= have for i in src):
            raise CompressError(
                f"--{side}-layers-from {','.join(map(str, src))}: give {n} teacher {side} layer "
                f"numbers between 0 and {have - 1} (one for each student {side} layer)"
            )
        convert += [f"--{side}-layers-from", ",".join(map(str, src))]
    flags = _replace(_replace(flags, "--encoder-layers", enc), "--decoder-layers", dec)
    if not teacher.shared:  # the plugin's presets share all tables unless told not to
        flags.append("--no-share-all-embeddings")
    return StudentShape(flags, convert, enc, dec, reason)
