"""The int8 step of ``lightcompress-compress``: the student exported to ONNX Runtime with every
map (or its large maps) in dynamic int8, with the vocabulary shortlist when one is given, and
that export's translation of the test split (with the shortlist, as its translators run),
written in ``fairseq-generate``'s format so that the report scores it as it scores the float32
models (same references, same post-processing).

    python -m lightcompress.compress.int8 --path student.pt --data data-bin -s de -t en \\
        -o student-onnx-int8 --eval eval/student-int8.txt --beam 5 --max-len-a 1.2 \\
        --max-len-b 10 --post-process sentencepiece --spm spm.model --shortlist shortlist.txt

A student with no map or token table large enough for ``--int8 large`` (a small model:
nothing to quantize, the export would be the float32 one, only larger) is not an error: the
reason is written to ``--skipped`` and the report says that the int8 row is left out and why.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from lightcompress import cli
from lightcompress.io import atomic_write

__all__ = ["main", "translate_split"]

PROG = "lightcompress-compress int8"


def _arg_parser() -> argparse.ArgumentParser:
    p = cli.OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="the student checkpoint")
    p.add_argument("--data", required=True, help="the data-bin (dictionaries and the split)")
    p.add_argument("-s", "--source-lang", required=True)
    p.add_argument("-t", "--target-lang", required=True)
    p.add_argument("-o", "--output", required=True, help="the int8 export (new or empty)")
    p.add_argument(
        "--int8",
        choices=["all", "large"],
        default="all",
        help="the maps quantized: every map (default) or those of at least 2^17 weights",
    )
    p.add_argument("--eval", required=True, help="the translations, fairseq-generate's format")
    p.add_argument(
        "--skipped", required=True, help="where the reason goes when there is nothing to quantize"
    )
    p.add_argument("--subset", default="test")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-len-a", type=float, default=0.0)
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads")
    p.add_argument("--post-process", help="fairseq --post-process (e.g. sentencepiece)")
    p.add_argument("--spm", help="the data's sentencepiece model (shipped with the export)")
    p.add_argument("--bpe-codes", help="the data's subword-nmt codes (shipped with the export)")
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="a vocabulary shortlist (lightcompress-shortlist) shipped with the export; "
        "the test split is then translated with it, as the export's translators do "
        "by default",
    )
    return p


def translate_split(
    export: str,
    data: str,
    src: str,
    tgt: str,
    subset: str = "test",
    beam: int = 5,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    batch_size: int = 64,
    threads: int = 1,
    post_process: str | None = None,
    shortlist: bool | None = None,
):
    """The export's best translation of every sentence of ``subset``, as ``fairseq-generate``
    prints it: ``(sentence id, reference, score, hypothesis)`` in id order, hypothesis and
    reference strings made by the data's target dictionary with ``post_process`` (as
    fairseq-generate's ``H-`` / ``T-`` lines). The export's dictionaries are the data's.
    ``shortlist``: as the translators' (None: the export's shortlist when it ships one)."""
    import torch

    from lightcompress.deploy.databin import DataBinTranslation

    split = DataBinTranslation(
        export,
        data,
        subset,
        src,
        tgt,
        beam_size=beam,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        threads=threads,
        shortlist=shortlist,
    )
    targets = split.targets()
    found = {
        i: (score, tokens) for batch in split.batches(batch_size) for i, score, tokens in batch
    }
    tgt_dict = split.tgt_dict
    strip = {tgt_dict.eos()}
    rows = []
    for i in range(len(split)):
        score, tokens = found[i]
        hyp = tgt_dict.string(torch.tensor(tokens), post_process, extra_symbols_to_ignore=strip)
        ref = tgt_dict.string(
            targets[i], post_process, escape_unk=True, extra_symbols_to_ignore=strip
        )
        rows.append((i, ref, score, hyp))
    return rows


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    from lightcompress.deploy.onnx_export import NothingToQuantize
    from lightcompress.deploy.onnx_export import _main as export_main

    manifest = os.path.join(args.output, "MANIFEST.sha256")
    if not os.path.exists(manifest):  # (a finished export is kept: the step resumes)
        export = [
            "--path",
            args.path,
            "--data",
            args.data,
            "-s",
            args.source_lang,
            "-t",
            args.target_lang,
            "-o",
            args.output,
            "--int8",
            args.int8,
        ]
        if args.spm:
            export += ["--spm", args.spm]
        elif args.bpe_codes:
            export += ["--bpe-codes", args.bpe_codes]
        if args.shortlist:
            export += ["--shortlist", args.shortlist]
        try:
            export_main(export)
        except NothingToQuantize as exc:
            with atomic_write(args.skipped) as f:
                f.write(f"{exc}\n")
            print(f"{PROG}: left out: {exc}", file=sys.stderr)
            return 0
    rows = translate_split(
        args.output,
        args.data,
        args.source_lang,
        args.target_lang,
        args.subset,
        args.beam,
        args.max_len_a,
        args.max_len_b,
        args.batch_size,
        args.threads,
        args.post_process,
    )
    lines = [f"T-{i}\t{ref}\nH-{i}\t{score:.6f}\t{hyp}\n" for i, ref, score, hyp in rows]
    with atomic_write(args.eval) as f:
        f.write("".join(lines))
    if os.path.exists(args.skipped):
        os.remove(args.skipped)
    print(f"{PROG}: {len(rows)} sentences translated by {args.output}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    import lightcompress.plugin  # noqa: F401  (plugin architectures; fairseq checkpoints load)

    return cli.run(_main, argv, PROG)


if __name__ == "__main__":
    cli.quiet_logs()
    sys.exit(main())
