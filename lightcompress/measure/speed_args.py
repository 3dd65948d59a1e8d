"""The command line of ``measure_speed`` (:mod:`lightcompress.measure.speed`): its parser and
the checks of every value that need no model, run before anything is loaded or timed."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence

from lightcompress import cli
from lightcompress.measure.candidates import SpeedError, split_label

__all__ = [
    "IWSLT_AVG_LEN",
    "PROG",
    "WMT_AVG_LEN",
    "arg_parser",
    "check_args",
    "check_output_file",
    "split_list",
]

PROG = "measure_speed"
IWSLT_AVG_LEN = 23
WMT_AVG_LEN = 30


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


def arg_parser() -> argparse.ArgumentParser:
    """``measure_speed``'s parser: one group of options per part of the protocol."""
    p = cli.OneLineParser(
        prog=PROG,
        description="Translation speed (tokens/s) of fairseq models on the papers' CPU "
        "protocol, side by side. See the module docstring of lightcompress.measure.speed.",
    )
    for add in (
        _model_options,
        _sentence_options,
        _generation_options,
        _timing_options,
        _int8_and_bleu_options,
        _engine_options,
    ):
        add(p)
    p.add_argument("--json", dest="json_out", help="write all results and raw runs to this file")
    p.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    return p


def _model_options(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("models")
    m.add_argument(
        "--path",
        action="append",
        default=[],
        help="comma-separated checkpoints, each [LABEL=]PATH (needs --data)",
    )
    m.add_argument(
        "--arch",
        action="append",
        default=[],
        help="comma-separated random-weight model specs "
        "[LABEL=]ARCH[:--flag[=value]]... (needs --vocab-size or --data)",
    )
    m.add_argument(
        "--vocab-size", type=int, help="joined dictionary size for --arch without --data"
    )
    m.add_argument(
        "--no-share-all-embeddings",
        dest="share_all_embeddings",
        action="store_false",
        help="--arch models: do not add --share-all-embeddings",
    )
    m.add_argument("--user-dir", help="an extra fairseq --user-dir to import")


def _sentence_options(p: argparse.ArgumentParser) -> None:
    d = p.add_argument_group("sentences")
    d.add_argument("--data", help="fairseq data-bin directory (dictionaries, --subset)")
    d.add_argument("--subset", default="test", help="split to take sentences from (default test)")
    d.add_argument("--num-sentences", type=int, default=50, help="default 50")
    d.add_argument(
        "--src-len",
        type=int,
        default=IWSLT_AVG_LEN,
        help=f"average source length: {IWSLT_AVG_LEN} IWSLT (default), {WMT_AVG_LEN} WMT",
    )
    d.add_argument(
        "--natural",
        action="store_true",
        help="with --data: every k-th sentence of --subset at its own length (k = the split's "
        "size // --num-sentences) instead of those closest to --src-len",
    )
    d.add_argument("--seed", type=int, default=1, help="random sentences and random weights")


def _generation_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation")
    g.add_argument("--beam", type=int, default=5)
    g.add_argument("--lenpen", type=float, default=1.0)
    g.add_argument("--min-len", type=int, help="force at least this many output tokens")
    g.add_argument("--max-len", type=int, help="at most this many output tokens (max_len_a=0)")
    g.add_argument(
        "--max-len-a", type=float, default=0.0, help="fairseq max_len_a when --max-len is not given"
    )
    g.add_argument(
        "--max-len-b", type=int, default=200, help="fairseq max_len_b when --max-len is not given"
    )


def _timing_options(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group("timing")
    t.add_argument(
        "--timing-batch-size",
        type=int,
        default=1,
        help="sentences per batch in the timed runs (default 1, the papers' protocol; "
        "consecutive sentences, left-padded)",
    )
    t.add_argument(
        "--sort-batches",
        action="store_true",
        help="batch the timing sentences longest first (as fairseq-generate and the translators "
        "batch a file) instead of in their order; every engine gets the same batches",
    )
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    t.add_argument("--runs", type=int, default=10, help="timed runs per model (default 10)")
    t.add_argument("--warmup", type=int, default=1, help="untimed runs per model first (default 1)")
    t.add_argument(
        "--trim",
        type=float,
        default=0.1,
        help="fraction of fastest and of slowest runs dropped (default 0.1)",
    )


def _int8_and_bleu_options(p: argparse.ArgumentParser) -> None:
    q = p.add_argument_group("int8 and BLEU")
    q.add_argument(
        "--quantize",
        choices=["none", "int8", "int8-large"],
        default="none",
        help="measure dynamically int8-quantized models (int8-large: only the maps with at "
        "least 2^17 weights, e.g. the output projection; small factors stay float32)",
    )
    q.add_argument(
        "--int8-large",
        action="store_true",
        help="also measure each model with only its large maps in int8 (see --quantize)",
    )
    q.add_argument(
        "--compare-int8", action="store_true", help="measure each model in float32 and int8"
    )
    q.add_argument(
        "--bleu", action="store_true", help="also translate all of --subset and report sacreBLEU"
    )
    q.add_argument(
        "--batch-size", type=int, default=32, help="batch size of the --bleu translation"
    )
    q.add_argument(
        "--post-process",
        "--remove-bpe",
        dest="post_process",
        nargs="?",
        const="@@ ",
        default=None,
        help="fairseq post-processing before BLEU (e.g. subword_nmt, sentencepiece)",
    )
    q.add_argument("--bleu-tokenize", default="13a", help="sacreBLEU tokenizer (default 13a)")
    q.add_argument(
        "--bleu-threads",
        type=int,
        default=None,
        help="torch CPU threads of the --bleu translation (default: --threads); the timed runs "
        "always use --threads",
    )


def _engine_options(p: argparse.ArgumentParser) -> None:
    e = p.add_argument_group("engines and size")
    e.add_argument(
        "--ct2",
        action="store_true",
        help="also time CTranslate2 exports (float32 and int8) of every dense model, and of every "
        "student whose factors multiply out as the dense Transformer it computes (lightcompress."
        "deploy.ct2; needs ctranslate2, the [ct2] extra); the others (Admin, Subformer, DA-WID) "
        "are listed as not exportable",
    )
    e.add_argument(
        "--onnx",
        action="store_true",
        help="also time ONNX Runtime exports (lightcompress.deploy.onnx_export: compressed "
        "weights kept, numpy beam search) of every model it can export, in float32 and, with "
        "--int8-large / --compare-int8, in ONNX Runtime's int8 of the large maps / of every map",
    )
    e.add_argument(
        "--shortlist",
        metavar="FILE",
        help="with --onnx / --ct2: also time each of those rows scoring only the candidates "
        "of this vocabulary shortlist (lightcompress-shortlist; CTranslate2: its vmap; BLEU too)",
    )
    e.add_argument(
        "--ct2-dir",
        help="keep the CTranslate2 exports in this (new or empty) directory instead of a "
        "temporary one",
    )


def split_list(values: Sequence[str]) -> list[str]:
    return [x for v in values for x in v.split(",") if x.strip()]


def check_output_file(path: str, flag: str) -> None:
    """Raise :class:`SpeedError` unless ``path`` can be written: not a directory, in an existing
    writable directory (probed by creating and removing a temporary file there). Called before
    any work, so that a measurement of hours does not end in a failed write."""
    from lightcompress.io import output_error

    message = output_error(path, flag)
    if message:
        raise SpeedError(message)


def check_args(args: argparse.Namespace) -> None:
    """The checks of every command-line value that need no model (:class:`SpeedError`)."""
    for name, value in (
        ("--runs", args.runs),
        ("--num-sentences", args.num_sentences),
        ("--src-len", args.src_len),
        ("--beam", args.beam),
        ("--threads", args.threads),
        ("--batch-size", args.batch_size),
        ("--timing-batch-size", args.timing_batch_size),
        ("--bleu-threads", 1 if args.bleu_threads is None else args.bleu_threads),
    ):
        if value < 1:
            raise SpeedError(f"{name} must be >= 1, got {value}")
    if args.vocab_size is not None and args.vocab_size < 5:
        raise SpeedError(
            f"--vocab-size must be >= 5 (4 special symbols + a word), got {args.vocab_size}"
        )
    if args.warmup < 0:
        raise SpeedError("--warmup must be >= 0")
    if not 0 <= args.trim < 0.5:
        raise SpeedError("--trim must be in [0, 0.5)")
    for name, value in (("--min-len", args.min_len), ("--max-len", args.max_len)):
        if value is not None and value < 1:
            raise SpeedError(f"{name} must be >= 1, got {value}")
    if args.max_len_a < 0 or args.max_len_b < 1:
        raise SpeedError("--max-len-a must be >= 0 and --max-len-b >= 1")
    if not math.isfinite(args.lenpen):
        raise SpeedError(f"--lenpen must be a number, got {args.lenpen}")
    if args.path and not args.data:
        raise SpeedError("--path needs --data (the checkpoints' data-bin directory)")
    if args.bleu and not args.data:
        raise SpeedError("--bleu needs --data")
    if args.data and not os.path.isdir(args.data):
        raise SpeedError(f"--data is not a directory: {args.data}")
    for item in split_list(args.path):
        path = split_label(item)[1]
        if not os.path.exists(path):
            raise SpeedError(f"checkpoint not found: {path}")
        if not os.path.isfile(path):
            raise SpeedError(f"checkpoint {path} is not a file")
    if args.json_out is not None:
        check_output_file(args.json_out, "--json")
    if args.shortlist is not None:
        # (the lab's measure_speed adds --fast, the fast path, which takes a shortlist too)
        engines = [f for f in ("fast", "onnx", "ct2") if hasattr(args, f)]
        if not any(getattr(args, f) for f in engines):
            names = [f"--{f}" for f in engines]
            raise SpeedError(f"--shortlist needs {', '.join(names[:-1])} or {names[-1]}")
        if not os.path.isfile(args.shortlist):
            raise SpeedError(f"--shortlist {args.shortlist}: file not found")
    if args.natural and not args.data:
        raise SpeedError("--natural needs --data")
    if args.ct2_dir is not None:
        if not args.ct2:
            raise SpeedError("--ct2-dir needs --ct2")
        if os.path.exists(args.ct2_dir) and (
            not os.path.isdir(args.ct2_dir) or os.listdir(args.ct2_dir)
        ):
            raise SpeedError(f"--ct2-dir {args.ct2_dir} must be a new or empty directory")
        parent = os.path.dirname(os.path.abspath(args.ct2_dir))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise SpeedError(f"--ct2-dir {args.ct2_dir}: cannot create it in {parent}")
