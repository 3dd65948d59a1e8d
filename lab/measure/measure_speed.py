"""The lab's ``measure_speed``: the product's command (:mod:`lightcompress.measure.speed`, the
papers' protocol) with three more options for the project's own benchmarks:

- ``--fast``: every fairseq row again on lightcompress's PyTorch fast path
  (:class:`lightcompress.deploy.generator.FastGenerator`; with ``--shortlist`` also with it),
  ``speed_fast.py``;
- ``--text SPM``: each ONNX Runtime / CTranslate2 / fast-path row again from raw text to raw
  text, sentencepiece in the timed path (engine ``...+text``), ``speed_text.py``;
- ``--memory``: the peak resident memory of a fresh process per model that imports only its
  engine, loads the model and translates the timing sentences once, ``speed_memory.py``.

Usage (every other option is the product's, ``scripts/measure_speed.sh --help``)::

    python lab/measure/measure_speed.py --data DATA --path teacher=t.pt,lf=lf.pt --bleu \\
        --fast --onnx --ct2 --int8-large --memory [--text spm.model] [--json out.json]
"""

from __future__ import annotations

import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), HERE]

__all__ = ["arg_parser", "check_args", "main", "run"]

MEMORY_PROTOCOL = (
    "peak resident size (VmHWM) of a fresh process that imports the engine (torch + "
    "fairseq + lightcompress, or ctranslate2 alone), loads the model and translates the "
    "timing sentences once; +Model: peak minus the process's size after the imports"
)


def arg_parser():
    """The product's parser and the lab's options."""
    from lightcompress.measure.speed_args import arg_parser as product_parser

    p = product_parser()
    e = p.add_argument_group("the lab's engines and memory")
    e.add_argument(
        "--fast",
        action="store_true",
        help="also time every model on lightcompress's fast path (lightcompress.deploy: "
        "fairseq's beam search and results, the ONNX export's encoder and decoder step run "
        "eagerly in torch), float32 and int8 alike; with --shortlist also with it",
    )
    e.add_argument(
        "--text",
        metavar="SPM",
        help="also time every ONNX Runtime, CTranslate2 and fast-path row from raw text to raw "
        "text with this sentencepiece model (encoding, dictionary lookup and decoding in the "
        "timed path, as the WNGT / WMT efficiency tasks time it): engine ...+text, right after "
        "the row timed on ids",
    )
    e.add_argument(
        "--memory",
        action="store_true",
        help="add the peak resident memory of each model: one fresh process per model (the "
        "engine's imports only) loads it and translates the timing sentences once",
    )
    return p


def check_args(args) -> None:
    """The product's checks and those of ``--text``."""
    import speed_text

    from lightcompress.measure.speed_args import check_args as product_checks

    product_checks(args)
    speed_text.check_args(args)


def run(args) -> dict:
    """The product's steps with the fast path, the text rows and the memory in between."""
    import tempfile

    check_args(args)
    with tempfile.TemporaryDirectory(prefix="measure_speed.") as workdir:
        return _run(args, workdir)


def _run(args, workdir: str) -> dict:
    from lightcompress.measure import speed
    from lightcompress.measure.report import environment

    speed.setup(args)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    candidates, notes = speed.load_models(args, workdir, log)
    sentences, sentences_from = speed.timing_sentences(args, candidates)
    gen_args = speed.generation_settings(args, candidates)
    if args.fast:
        from speed_fast import with_fast

        candidates = with_fast(candidates, gen_args, shortlist=args.shortlist)
    if args.text is not None:
        from speed_text import with_text

        candidates = with_text(candidates, args.text)
    records = speed.time_models(args, candidates, sentences, gen_args, log)
    if args.memory:
        add_memory(candidates, records, sentences, gen_args, workdir, log)
    protocol = speed.protocol_of(args, sentences, sentences_from, gen_args)
    speed.add_bleu(args, candidates, records, protocol)
    if args.memory:
        protocol["memory"] = MEMORY_PROTOCOL
    return {"protocol": protocol, "environment": environment(), "models": records, "notes": notes}


def add_memory(candidates, records, sentences, gen_args, workdir: str, log=None) -> None:
    """Each record's peak and baseline resident memory (a row timed from text shares the
    process of the row timed on ids: none of its own)."""
    from speed_memory import measure_peak_rss, write_job

    from lightcompress.measure.candidates import SpeedError

    for i, (c, rec) in enumerate(zip(candidates, records)):
        if c.text:
            continue
        try:
            mem = measure_peak_rss(write_job(workdir, i, c, sentences, gen_args))
        except (RuntimeError, OSError) as exc:
            raise SpeedError(f"{c.label} [{c.engine} {c.precision}]: {exc}") from None
        rec["peak_rss_kib"] = mem["peak_kib"]
        rec["baseline_rss_kib"] = mem["baseline_kib"]
        if log:
            log(f"memory {c.label} [{c.engine} {c.precision}]: peak {mem['peak_kib']} KiB")


def main(argv=None) -> int:
    """The exit status (errors as one line, status 2), as the product's command."""
    from lightcompress import cli
    from lightcompress.measure.speed_args import PROG

    def _main(argv):
        from lightcompress.measure.speed import print_result

        args = arg_parser().parse_args(argv)
        print_result(args, run(args))
        return 0

    return cli.run(_main, argv, PROG)


if __name__ == "__main__":
    # fairseq logs INFO lines while it is imported: silenced first, so that an error is the
    # one line on stderr it is meant to be (as scripts/measure_speed.sh does)
    logging.disable(logging.WARNING)
    sys.argv[0] = "measure_speed"
    from lightcompress import cli

    cli.entry_point(main, quiet=True)()
