"""``lightcompress-compress``: a trained fairseq Transformer -> a compressed, fine-tuned student,
exported to ONNX Runtime and measured beside its teacher, in one resumable command.

    lightcompress-compress checkpoints/teacher/checkpoint_best.pt --data data/demo/bin \\
        --spm data/demo/spm/spm.model --save-dir compressed --ratio 4
    lightcompress-compress ... --method smartformer --rank 32 --dry-run   # print the commands

Steps (each skipped when its outputs exist; rerun the same command after a stop): transfer
(``lightcompress-convert``), optional KD data (``--kd``: ``python -m lightcompress.kd.distill``),
fine-tuning (``fairseq-train --finetune-from-model``; DA-WID: its own training, then
``lightcompress-convert dawid-fuse``), the vocabulary shortlist of the training split
(``lightcompress-shortlist``; ``--no-shortlist`` leaves it out), ONNX Runtime exports
(``lightcompress-export-onnx``: float32, and int8 of every map, both with the shortlist), the
student's CTranslate2 int8 export with its factors multiplied out (LightFormer, Smartformer), test
translations of teacher and student (``fairseq-generate``; the int8 export's own), speed
(``measure_speed`` at batch 1 and 32: fairseq and ONNX Runtime, CTranslate2 on the dense teacher
with and without the shortlist as its vocabulary map) and the report (``report.md``,
``report.png``, ``report.json``). Everything is checked, and a teacher the method cannot take
refused, before anything is written. See docs/compress.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys

from lightcompress.cli import OneLineParser
from lightcompress.compress.checks import compare_plan
from lightcompress.compress.plan import build_plan
from lightcompress.compress.shape import add_shape_args
from lightcompress.compress.steps import (
    Interrupted,
    Runner,
    StepFailed,
    acquire_lock,
    remove_stale_temp,
    render,
    train_progress,
)
from lightcompress.compress.teacher import CompressError

__all__ = ["cli_main", "get_parser", "main"]

PROG = "lightcompress-compress"


def _count(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"not a parameter count: {text!r} (e.g. 2000000, 2M, 500k)"
        )
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _positive(kind, name, upper=None, lower=0):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, not {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number, not {text!r}")
        if lower > 0 and value <= lower:
            raise argparse.ArgumentTypeError(
                f"{name} must be above {lower:g}, not {text!r}: it is teacher / student "
                "parameters, and the student would be as large as the teacher or larger"
            )
        if value <= 0 or (upper is not None and value >= upper):
            bound = f" and below {upper}" if upper is not None else ""
            raise argparse.ArgumentTypeError(f"{name} must be above 0{bound}, not {text!r}")
        return value

    return parse


def _target_args(p: argparse.ArgumentParser) -> None:
    """The target group: --ratio, --params, --rank, --energy, --sparsity (one)."""
    g = p.add_argument_group(
        "target (one; default: LightFormer and DA-WID --ratio 4, Hypoformer --ratio 3, "
        "Smartformer its natural size: CP rank d / 4)"
    )
    t = g.add_mutually_exclusive_group()
    t.add_argument(
        "--ratio",
        type=_positive(float, "--ratio", lower=1),
        help="teacher / student total parameters (the ranks are searched)",
    )
    t.add_argument("--params", type=_count, help="at most this many parameters (e.g. 2M)")
    t.add_argument(
        "--rank",
        type=_positive(int, "--rank"),
        help="this rank, no search (LightFormer: every map; Hypoformer: the FFN "
        "maps; Smartformer: CP rank)",
    )
    t.add_argument(
        "--energy",
        type=_positive(float, "--energy", 1.0 + 1e-9),
        help="LightFormer: per matrix, the smallest rank that keeps this fraction "
        "of the squared singular values (e.g. 0.9)",
    )
    t.add_argument(
        "--sparsity",
        type=_positive(float, "--sparsity", 1.0),
        help="DA-WID: the fraction of non-embedding parameters to remove",
    )
    g.add_argument(
        "--embed-rank",
        type=_positive(int, "--embed-rank"),
        help="LightFormer: the embedding's rank (default: 2 x rank, at most d / 2)",
    )


def _data_args(p: argparse.ArgumentParser) -> None:
    """Data and scoring: languages, tokenizer, references, beam."""
    d = p.add_argument_group("data and scoring")
    d.add_argument("-s", "--source-lang", help="default: the teacher's, else the data-bin's pair")
    d.add_argument("-t", "--target-lang")
    d.add_argument("--spm", help="sentencepiece model of the data (post-processing, the export)")
    d.add_argument(
        "--bpe-codes",
        help="subword-nmt codes of the data (post-processing; the "
        "export then takes raw text: Moses + BPE, lowercased if the data is)",
    )
    d.add_argument(
        "--tokenized",
        action="store_true",
        help="a data-bin of subword units (sentencepiece or BPE) without its "
        "tokenizer: score BLEU on its units (unless --post-process) and export a model "
        "that takes them (instead of --spm / --bpe-codes)",
    )
    d.add_argument(
        "--post-process",
        help="fairseq --post-process before scoring (default: "
        "sentencepiece with --spm, subword_nmt with --bpe-codes, else none)",
    )
    d.add_argument(
        "--ref", help="raw references of the test split (default: fairseq's post-processed targets)"
    )
    d.add_argument("--beam", type=_positive(int, "--beam"), default=5)


def _training_args(p: argparse.ArgumentParser) -> None:
    """Fine-tuning: KD, the rank search, updates, schedule, resuming."""
    f = p.add_argument_group("fine-tuning (fairseq-train)")
    f.add_argument(
        "--kd",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fine-tune on the teacher's translation of the training set as well "
        "(sequence-level KD, lightcompress.kd.distill; default: on for lightformer "
        "and hypoformer, where it was measured to help, off for smartformer and "
        "dawid, whose training distils from the teacher itself)",
    )
    f.add_argument(
        "--search-ranks",
        metavar="R,R,...",
        help="Smartformer: its A2C agent picks each layer's CP rank among these "
        "during fine-tuning (the student starts at the largest; translation_smartformer "
        "--sm-search; fairseq's --sm-search-* flags after `--`)",
    )
    # (4,000 updates with early stopping: on the shipped results teacher the default student's
    # validation loss stopped improving at 4,680 updates, docs/compress.md "What to expect")
    f.add_argument(
        "--max-update",
        type=_positive(int, "--max-update"),
        default=4000,
        help="at most this many fine-tuning updates (default 4000)",
    )
    f.add_argument(
        "--patience",
        type=int,
        default=4,
        help="stop after this many validations without a lower validation loss "
        "(fairseq's --patience; default 4, 0: never)",
    )
    f.add_argument("--max-tokens", type=_positive(int, "--max-tokens"), default=4096)
    f.add_argument("--lr", type=_positive(float, "--lr"), help="default 1.5e-3 (DA-WID: 2e-4)")
    f.add_argument(
        "--warmup",
        type=_positive(int, "--warmup"),
        help="warmup updates (default: a tenth of --schedule-updates, itself --max-update by default)",
    )
    f.add_argument(
        "--validate-every",
        type=_positive(int, "--validate-every"),
        help="updates between validations and checkpoints (default: max-update / 8)",
    )
    f.add_argument(
        "--schedule-updates",
        type=_positive(int, "--schedule-updates"),
        help="the updates that the default warm-up, the rank search's interval and "
        "DA-WID's mask schedule are set for (default: --max-update); with "
        "--continue-from, the first run's --max-update, so that its schedule goes on "
        "unchanged",
    )
    f.add_argument(
        "--continue-from",
        metavar="CHECKPOINT",
        help="go on training this student checkpoint of an earlier run (its "
        "SAVE_DIR/student/checkpoint_last.pt) up to --max-update, with its optimizer, "
        "schedule and update count (fairseq's --continue-once), e.g. a DA-WID run "
        "whose masks missed the target: the same method and target, in another "
        "--save-dir",
    )
    f.add_argument("--cpu", action="store_true", help="train on the CPU even with a GPU")


def _deployment_args(p: argparse.ArgumentParser) -> None:
    """Deployment: the int8 export, the shortlist; speed runs."""
    e = p.add_argument_group("deployment")
    e.add_argument(
        "--int8",
        choices=["all", "large", "none"],
        default="all",
        help="also export the student with ONNX Runtime's dynamic int8 (all: every "
        "map and token table, the default, measured the fastest and smallest; large: "
        "only the maps of at least 2^17 weights; none: no int8 export), translate the "
        "test split with it and time it: the report shows its BLEU and speed beside "
        "the float32 export's",
    )
    e.add_argument(
        "--shortlist",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="build a vocabulary shortlist from the training split "
        "(lightcompress-shortlist: each source token's likeliest target tokens) and "
        "ship it in the exports, whose translators then score only a batch's "
        "candidates (default; --no-shortlist: every token, as fairseq); the report "
        "times CTranslate2 on the teacher with the same list as its vocabulary map",
    )
    s = p.add_argument_group("speed (measure_speed: python -m lightcompress.measure.speed)")
    s.add_argument("--speed-sentences", type=_positive(int, "--speed-sentences"), default=20)
    s.add_argument("--speed-runs", type=_positive(int, "--speed-runs"), default=3)


def get_parser() -> argparse.ArgumentParser:
    p = OneLineParser(  # (errors as one line, no usage dump)
        prog=PROG,
        description="Compress a trained fairseq Transformer checkpoint: weight transfer into a "
        "smaller student whose shape is read from the teacher, ranks chosen for the target, "
        "fine-tuning, ONNX Runtime export and a side-by-side report. Resumable: rerun the same "
        "command after a stop.",
        epilog="Arguments after `--` are passed to fairseq-train (e.g. -- --patience 5). "
        "See docs/compress.md.",
    )
    p.add_argument("teacher", help="the trained teacher: a dense fairseq Transformer checkpoint")
    p.add_argument("--data", required=True, help="the teacher's fairseq data-bin")
    p.add_argument("--save-dir", "-o", required=True, help="where every output goes")
    p.add_argument(
        "--method",
        default="lightformer",
        choices=["lightformer", "hypoformer", "smartformer", "dawid", "subformer"],
        help="default: lightformer (SVD transfer)",
    )
    _target_args(p)
    add_shape_args(p)
    _data_args(p)
    _training_args(p)
    _deployment_args(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything, choose the ranks, print the commands; write nothing",
    )
    return p


def main(argv=None) -> int:
    import lightcompress.plugin  # noqa: F401  (plugin architectures; fairseq checkpoints load)

    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    opts = get_parser().parse_args(argv)
    # its commands run with this interpreter (python -m lightcompress...), the one with torch,
    # and so does any script they start through $PYTHON (found: a clone without .venv once ran
    # the speed step with the system python3 and failed)
    os.environ.setdefault("PYTHON", sys.executable)
    say = lambda msg: print(f"[compress] {msg}", flush=True)
    try:
        steps, plan = build_plan(opts, extra, log=say)
        save = os.path.abspath(opts.save_dir)
        redo = compare_plan(save, plan, steps)
    except CompressError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if opts.dry_run:
        say(f"dry run: {len(steps)} steps in {save}; nothing is run or written")
        if redo:
            say("the report options changed (--ref): the report would be redone")
        for n, step in enumerate(steps, 1):
            state = " (done before: would be skipped)" if step.complete() else ""
            print(f"step {n}/{len(steps)} {step.name}: {step.what}{state}")
            for cmd in step.commands:
                print("+ " + render(cmd))
            if step.func is not None:
                print(
                    f"  (writes {', '.join(step.outputs)})" if step.outputs else "  (checked here)"
                )
        return 0
    try:
        return _run(opts, save, steps, plan, redo, say)
    except OSError as exc:  # a full disk, a read-only or vanished save directory, ...
        print(f"{PROG}: error: {_os_error(exc)}", file=sys.stderr)
        return 1


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    what = exc.strerror or str(exc)
    hint = {
        28: " (free some space, or use another --save-dir; rerun to resume)",
        30: " (use a writable --save-dir)",
        13: " (use a writable --save-dir)",
    }
    return f"{where}{what}{hint.get(exc.errno, '')}"


def _run(opts, save, steps, plan, redo, say) -> int:
    try:
        lock = acquire_lock(save)  # noqa: F841  (held until the process ends)
    except CompressError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    for path in remove_stale_temp(save):
        say(f"removed {path} (left by a stopped run)")
    if redo:
        say("the report options changed (--ref): the report is redone")
        for path in redo:
            os.remove(path)
    tmp = os.path.join(save, "plan.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(plan, f, indent=1)
    os.replace(tmp, os.path.join(save, "plan.json"))
    runner = Runner(steps, os.path.join(save, "logs"))
    runner.parsers["fine-tune"] = train_progress(opts.max_update)
    os.makedirs(os.path.join(save, "eval"), exist_ok=True)

    def stop(signum, _frame):
        runner.stop(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        runner.run()
    except Interrupted as exc:
        print(
            f"{PROG}: stopped by signal {exc.signum}; rerun the same command to resume",
            file=sys.stderr,
        )
        return 128 + exc.signum
    except (StepFailed, CompressError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    plotted = os.path.exists(os.path.join(save, "report.png"))
    say(f"done: {os.path.join(save, 'report.md')}, {'report.png, ' if plotted else ''}report.json")
    with open(os.path.join(save, "report.md"), encoding="utf-8") as f:
        table = [line for line in f if line.startswith("|")]
    print("".join(table), end="")
    return 0


def cli_main(argv=None) -> int:
    return main(argv)


if __name__ == "__main__":
    sys.exit(cli_main())
