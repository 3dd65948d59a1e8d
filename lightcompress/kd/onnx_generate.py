"""A data-bin split translated by an ONNX Runtime export of the teacher, printed as
``fairseq-generate`` prints it (``S-i`` source and ``H-i`` score / hypothesis lines, the score
in base 2): the KD data's engine on the CPU (``lightcompress.kd.distill --engine onnx``), with
fairseq's own beam search (``lightcompress_runtime``): the same translations as
``fairseq-generate`` in 2.3x less time on one thread (the shipped teacher, docs/compress.md).

    python -m lightcompress.kd.onnx_generate SHARD_DATA --export teacher-onnx --gen-subset train \\
        -s de -t en --beam 5 --max-len-a 1.2 --max-len-b 10 > shard.gen

Sentences go in batches of similar length (longest first, ``--batch-size`` sentences); each
batch's lines are written and flushed as it is done, so that a reader can follow the progress.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from lightcompress import cli
from lightcompress.errors import LightcompressError

__all__ = ["GENERATE_ARGS", "choose", "command", "export_teacher", "main", "refuses"]

PROG = "lightcompress.kd.onnx_generate"


class OnnxGenerateError(LightcompressError):
    """Bad input (one line)."""


def _arg_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="the data-bin (its dictionaries are the export's)")
    p.add_argument("--export", required=True, help="the teacher's ONNX Runtime export (float32)")
    p.add_argument("--gen-subset", default="train", help="the split (default: train)")
    p.add_argument("-s", "--source-lang", required=True)
    p.add_argument("-t", "--target-lang", required=True)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--unkpen", type=float, default=0.0)
    p.add_argument("--min-len", type=int, default=1)
    p.add_argument("--max-len-a", type=float, default=0.0)
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="ONNX Runtime threads (default 0: as torch, OMP_NUM_THREADS when it is "
        "set, else one per core)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    import os

    for name in ("beam", "batch_size", "min_len"):
        if getattr(args, name) < 1:
            raise OnnxGenerateError(f"--{name.replace('_', '-')} must be >= 1")
    if args.threads < 0:
        raise OnnxGenerateError("--threads must be >= 0")
    threads = args.threads
    if not threads and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        threads = int(os.environ["OMP_NUM_THREADS"])

    import torch

    from lightcompress.deploy.databin import DataBinError, DataBinTranslation

    try:
        split = DataBinTranslation(
            args.export,
            args.data,
            args.gen_subset,
            args.source_lang,
            args.target_lang,
            beam_size=args.beam,
            len_penalty=args.lenpen,
            min_len=args.min_len,
            max_len_a=args.max_len_a,
            max_len_b=args.max_len_b,
            unk_penalty=args.unkpen,
            threads=threads,
        )
        src_dict, tgt_dict = split.src_dict, split.tgt_dict
        strip = {tgt_dict.eos()}
        out = sys.stdout
        for batch in split.batches(args.batch_size):
            for i, score, tokens in batch:
                # as fairseq-generate: the source as the dictionary prints it, the score in base 2
                source = src_dict.string(torch.as_tensor(split.sentences[i]))
                hyp = tgt_dict.string(torch.as_tensor(tokens), extra_symbols_to_ignore=strip)
                out.write(f"S-{i}\t{source}\nH-{i}\t{score / math.log(2)}\t{hyp}\n")
            out.flush()
    except DataBinError as exc:
        raise OnnxGenerateError(str(exc)) from None
    return 0


# -- the engine of lightcompress.kd.distill (--engine onnx / auto) ----------------------------
GENERATE_ARGS = ("--max-len-a", "--max-len-b", "--min-len", "--unkpen")


def refuses(args) -> str | None:
    """Why this engine cannot honour distill's settings (one line), or None."""
    import shlex

    for flag, value in (("--post-process", args.post_process), ("--fp16", args.fp16)):
        if value:
            return f"{flag} needs --engine fairseq (the ONNX engine writes subwords)"
    try:
        words = shlex.split(args.generate_args)
    except ValueError as exc:
        return f"--generate-args: {exc}"
    other = [w for w in words if w.startswith("-") and w.split("=")[0] not in GENERATE_ARGS]
    if other:
        return (
            f"--generate-args {other[0]}: --engine onnx takes only "
            f"{', '.join(GENERATE_ARGS)} (--engine fairseq takes any fairseq-generate flag)"
        )
    return None


def command(args, shard_dir: str, export: str) -> list[str]:
    """The command that translates distill's shard ``shard_dir`` with the export."""
    import shlex

    return [
        sys.executable,
        "-m",
        "lightcompress.kd.onnx_generate",
        shard_dir,
        "--export",
        export,
        "--gen-subset",
        "train",
        "-s",
        args.source_lang,
        "-t",
        args.target_lang,
        "--beam",
        str(args.beam),
        "--lenpen",
        str(args.lenpen),
        "--batch-size",
        str(args.batch_size or 64),
        "--threads",
        str(args.threads),
        *shlex.split(args.generate_args),
    ]


def export_teacher(args, out: str, progress) -> None:
    """The teacher's float32 ONNX Runtime export into ``out`` (once: a finished one is kept)."""
    import os
    import shutil

    if os.path.exists(os.path.join(out, "MANIFEST.sha256")):
        return
    from lightcompress.deploy.onnx_export import _main as export

    progress(f"exporting the teacher to ONNX Runtime ({out}): the KD data's engine")
    shutil.rmtree(out, ignore_errors=True)
    argv = [
        "--path",
        args.path,
        "--data",
        args.data,
        "-s",
        args.source_lang,
        "-t",
        args.target_lang,
        "-o",
        out,
    ]
    try:
        export(argv)
    except LightcompressError as exc:
        shutil.rmtree(out, ignore_errors=True)
        raise OnnxGenerateError(f"the teacher's ONNX Runtime export failed: {exc}") from None


def choose(args, export, progress) -> None:
    """``--engine auto``: the engine the work directory was made with; else this one on the CPU
    (``--cpu``, or no GPU) where the settings allow it and ``export()`` succeeds, else
    ``fairseq-generate`` (with a line saying why)."""
    import json
    import os

    if args.engine != "auto":
        return
    path = os.path.join(args.work_dir, "config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            args.engine = json.load(f).get("engine", "fairseq")
        return
    import torch

    why = "a GPU" if not args.cpu and torch.cuda.is_available() else refuses(args)
    if why is None:
        args.engine = "onnx"
        try:
            export()
            return
        except LightcompressError as exc:
            why = str(exc)
    args.engine = "fairseq"
    progress(f"translating with fairseq-generate ({why})")


if __name__ == "__main__":
    sys.exit(main())
