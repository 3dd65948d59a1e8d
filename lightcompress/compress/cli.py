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
import functools
import json
import math
import os
import re
import signal
import sys

from lightcompress.cli import OneLineParser
from lightcompress.compress.checks import (
    check_continue_fits,
    check_continue_from,
    check_extra,
    check_fused_size,
    check_save_dir,
    check_target,
    check_tokenizer,
    check_train_args,
    compare_plan,
    dawid_gate_scale,
)
from lightcompress.compress.methods import (
    METHODS,
    SUBFORMER_REFUSAL,
    Target,
    dawid_sparsity,
    search_rank,
    tool,
)
from lightcompress.compress.shape import add_shape_args, student_shape
from lightcompress.compress.steps import (
    FileArg,
    Interrupted,
    Runner,
    Step,
    StepFailed,
    acquire_lock,
    remove_stale_temp,
    render,
    train_progress,
)
from lightcompress.compress.teacher import CompressError, read_data_bin, read_teacher
from lightcompress_runtime.files import file_sha256

__all__ = ["build_plan", "cli_main", "get_parser", "main"]

PROG = "lightcompress-compress"
# sentences timed at batch 32: this many times --speed-sentences (several batches, as a
# service translates a file)
BATCH_SENTENCES = 4


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
    p.add_argument("--method", default="lightformer",
                   choices=["lightformer", "hypoformer", "smartformer", "dawid", "subformer"],
                   help="default: lightformer (SVD transfer)")  # fmt: skip
    g = p.add_argument_group(
        "target (one; default: LightFormer and DA-WID --ratio 4, Hypoformer --ratio 3, "
        "Smartformer its natural size: CP rank d / 4)"
    )
    t = g.add_mutually_exclusive_group()
    t.add_argument("--ratio", type=_positive(float, "--ratio", lower=1),
                   help="teacher / student total parameters (the ranks are searched)")  # fmt: skip
    t.add_argument("--params", type=_count, help="at most this many parameters (e.g. 2M)")
    t.add_argument("--rank", type=_positive(int, "--rank"),
                   help="this rank, no search (LightFormer: every map; Hypoformer: the FFN "
                   "maps; Smartformer: CP rank)")  # fmt: skip
    t.add_argument("--energy", type=_positive(float, "--energy", 1.0 + 1e-9),
                   help="LightFormer: per matrix, the smallest rank that keeps this fraction "
                   "of the squared singular values (e.g. 0.9)")  # fmt: skip
    t.add_argument("--sparsity", type=_positive(float, "--sparsity", 1.0),
                   help="DA-WID: the fraction of non-embedding parameters to remove")  # fmt: skip
    g.add_argument("--embed-rank", type=_positive(int, "--embed-rank"),
                   help="LightFormer: the embedding's rank (default: 2 x rank, at most d / 2)")  # fmt: skip
    add_shape_args(p)
    d = p.add_argument_group("data and scoring")
    d.add_argument("-s", "--source-lang", help="default: the teacher's, else the data-bin's pair")
    d.add_argument("-t", "--target-lang")
    d.add_argument("--spm", help="sentencepiece model of the data (post-processing, the export)")
    d.add_argument("--bpe-codes", help="subword-nmt codes of the data (post-processing; the "
                   "export then takes raw text: Moses + BPE, lowercased if the data is)")  # fmt: skip
    d.add_argument("--tokenized", action="store_true",
                   help="a data-bin of subword units (sentencepiece or BPE) without its "
                   "tokenizer: score BLEU on its units (unless --post-process) and export a model "
                   "that takes them (instead of --spm / --bpe-codes)")  # fmt: skip
    d.add_argument("--post-process", help="fairseq --post-process before scoring (default: "
                   "sentencepiece with --spm, subword_nmt with --bpe-codes, else none)")  # fmt: skip
    d.add_argument("--ref", help="raw references of the test split (default: fairseq's "
                   "post-processed targets)")  # fmt: skip
    d.add_argument("--beam", type=_positive(int, "--beam"), default=5)
    f = p.add_argument_group("fine-tuning (fairseq-train)")
    f.add_argument("--kd", action=argparse.BooleanOptionalAction, default=None,
                   help="fine-tune on the teacher's translation of the training set as well "
                   "(sequence-level KD, lightcompress.kd.distill; default: on for lightformer "
                   "and hypoformer, where it was measured to help, off for smartformer and "
                   "dawid, whose training distils from the teacher itself)")  # fmt: skip
    f.add_argument("--search-ranks", metavar="R,R,...",
                   help="Smartformer: its A2C agent picks each layer's CP rank among these "
                   "during fine-tuning (the student starts at the largest; translation_smartformer "
                   "--sm-search; fairseq's --sm-search-* flags after `--`)")  # fmt: skip
    # (4,000 updates with early stopping: on the shipped results teacher the default student's
    # validation loss stopped improving at 4,680 updates, docs/compress.md "What to expect")
    f.add_argument("--max-update", type=_positive(int, "--max-update"), default=4000,
                   help="at most this many fine-tuning updates (default 4000)")  # fmt: skip
    f.add_argument("--patience", type=int, default=4,
                   help="stop after this many validations without a lower validation loss "
                   "(fairseq's --patience; default 4, 0: never)")  # fmt: skip
    f.add_argument("--max-tokens", type=_positive(int, "--max-tokens"), default=4096)
    f.add_argument("--lr", type=_positive(float, "--lr"),
                   help="default 1.5e-3 (DA-WID: 2e-4)")  # fmt: skip
    f.add_argument("--warmup", type=_positive(int, "--warmup"),
                   help="warmup updates (default: a tenth of --schedule-updates, itself --max-update by default)")  # fmt: skip
    f.add_argument("--validate-every", type=_positive(int, "--validate-every"),
                   help="updates between validations and checkpoints (default: max-update / 8)")  # fmt: skip
    f.add_argument("--schedule-updates", type=_positive(int, "--schedule-updates"),
                   help="the updates that the default warm-up, the rank search's interval and "
                   "DA-WID's mask schedule are set for (default: --max-update); with "
                   "--continue-from, the first run's --max-update, so that its schedule goes on "
                   "unchanged")  # fmt: skip
    f.add_argument("--continue-from", metavar="CHECKPOINT",
                   help="go on training this student checkpoint of an earlier run (its "
                   "SAVE_DIR/student/checkpoint_last.pt) up to --max-update, with its optimizer, "
                   "schedule and update count (fairseq's --continue-once), e.g. a DA-WID run "
                   "whose masks missed the target: the same method and target, in another "
                   "--save-dir")  # fmt: skip
    f.add_argument("--cpu", action="store_true", help="train on the CPU even with a GPU")
    e = p.add_argument_group("deployment")
    e.add_argument("--int8", choices=["all", "large", "none"], default="all",
                   help="also export the student with ONNX Runtime's dynamic int8 (all: every "
                   "map and token table, the default, measured the fastest and smallest; large: "
                   "only the maps of at least 2^17 weights; none: no int8 export), translate the "
                   "test split with it and time it: the report shows its BLEU and speed beside "
                   "the float32 export's")  # fmt: skip
    e.add_argument("--shortlist", action=argparse.BooleanOptionalAction, default=True,
                   help="build a vocabulary shortlist from the training split "
                   "(lightcompress-shortlist: each source token's likeliest target tokens) and "
                   "ship it in the exports, whose translators then score only a batch's "
                   "candidates (default; --no-shortlist: every token, as fairseq); the report "
                   "times CTranslate2 on the teacher with the same list as its vocabulary map")  # fmt: skip
    s = p.add_argument_group("speed (measure_speed: python -m lightcompress.measure.speed)")
    s.add_argument("--speed-sentences", type=_positive(int, "--speed-sentences"), default=20)
    s.add_argument("--speed-runs", type=_positive(int, "--speed-runs"), default=3)
    p.add_argument("--dry-run", action="store_true",
                   help="check everything, choose the ranks, print the commands; write nothing")  # fmt: skip
    return p


def _module(name: str) -> list[str]:
    """A command of the installed package, run by compress's own interpreter (``python -m``):
    the package compress itself runs, never a checkout's ``scripts/`` found by path."""
    return [sys.executable, "-m", name]


def build_plan(opts, extra: list[str], log=print):
    """Check the teacher, data and target; choose the ranks; return ``(steps, plan)``."""
    import lightcompress

    if opts.method == "subformer":
        raise CompressError(SUBFORMER_REFUSAL)
    method = METHODS[opts.method]
    check_extra(extra)
    if opts.energy is not None and method.name != "lightformer":
        raise CompressError("--energy is LightFormer's (per-matrix SVD ranks); give --ratio, "
                            "--params or --rank for " + method.name)  # fmt: skip
    if opts.sparsity is not None and method.name != "dawid":
        raise CompressError("--sparsity is DA-WID's; give --ratio, --params or --rank")
    if method.name == "dawid" and (opts.rank or opts.energy):
        raise CompressError("DA-WID has no rank: give --ratio, --params or --sparsity")
    if opts.embed_rank is not None and method.name != "lightformer":
        raise CompressError("--embed-rank is LightFormer's")
    for path, flag in ((opts.spm, "--spm"), (opts.bpe_codes, "--bpe-codes"), (opts.ref, "--ref")):
        if path and not os.path.isfile(path):
            raise CompressError(f"{flag} {path}: no such file")
    kd = method.kd_default if opts.kd is None else opts.kd
    search = _search_ranks(opts.search_ranks, method.name, opts)
    if search and kd:
        raise CompressError("--search-ranks runs the rank search's own task, which has no KD "
                            "data: give --no-kd with it")  # fmt: skip
    teacher = read_teacher(opts.teacher)
    method.check(teacher)
    check_target(opts, teacher)
    data = read_data_bin(opts.data, teacher, opts.source_lang, opts.target_lang)
    codes = check_tokenizer(opts, data)
    if codes and not opts.bpe_codes:
        log(f"BPE codes: {codes} (the data-bin's; --bpe-codes to give others)")
    save = os.path.abspath(opts.save_dir)
    if os.path.exists(save) and not os.path.isdir(save):
        raise CompressError(f"--save-dir {opts.save_dir} exists and is not a directory")
    check_save_dir(save)
    shape_of = student_shape(teacher, opts, method.name)
    log(f"teacher: {opts.teacher}: {teacher.describe()}, {teacher.params:,} parameters")
    log(f"data: {opts.data} ({data.src} -> {data.tgt})")
    target = Target(opts.ratio, opts.params, opts.rank, opts.energy, opts.sparsity)
    default_rank = None
    if not any(v is not None for v in vars(target).values()):
        if method.default_ratio is not None:
            target.ratio = method.default_ratio
        else:
            default_rank = method.default_rank(teacher)
    shape, teacher_shape = shape_of.flags, teacher.shape_flags()
    log(f"student shape: {shape_of.describe()}")
    if opts.warmup is not None and opts.warmup >= opts.max_update:
        log(f"warning: --warmup {opts.warmup} is not below --max-update {opts.max_update}: the "
            "learning rate never reaches its peak")  # fmt: skip
    schedule = opts.schedule_updates or opts.max_update
    if schedule > opts.max_update:
        raise CompressError(f"--schedule-updates {schedule} is above --max-update "
                            f"{opts.max_update}: the schedule would not finish")  # fmt: skip
    warmup = opts.warmup or max(1, schedule // 10)
    T = os.path.abspath(opts.teacher)
    B = os.path.abspath(opts.data)
    user_dir = os.path.dirname(os.path.abspath(lightcompress.__file__))
    import torch

    device = ["--cpu"] if opts.cpu or not torch.cuda.is_available() else []
    langs = ["-s", data.src, "-t", data.tgt]
    post = opts.post_process or ("sentencepiece" if opts.spm else "subword_nmt" if codes else None)
    steps: list[Step] = []
    init = os.path.join(save, "student_init.pt")
    train_dir = os.path.join(save, "student")

    # 1. the student and its weights
    if method.name == "dawid":
        sparsity, counts = dawid_sparsity(T, target)
        choice = (f"DA-WID target sparsity {sparsity:g} of the teacher's {counts['non_embedding']:,} "
                  f"non-embedding parameters ({target.describe()})")  # fmt: skip
        student_flags = ["--arch", "dawid", "--dawid-teacher", T, "--criterion", "dawid",
                         *_dawid_flags(sparsity, schedule, opts.lr or 2e-4, warmup)]  # fmt: skip
        student_model = f"dawid (fused), sparsity {sparsity:g}"
    elif opts.energy is not None:
        flags = ["--lc-encoder-groups", "0", "--lc-decoder-groups", "0"]
        choice = f"LightFormer ranks per matrix at energy {opts.energy:g} (in {init}.spec)"
        steps.append(Step("transfer", "SVD weight transfer at the chosen energy", [
            tool("lightcompress-convert") + ["-i", T, "-o", init, "--force", "-a", "lightformer",
                                             *shape, *flags, *shape_of.convert_flags, "--energy", str(opts.energy),
                                             "--embed-energy", str(opts.energy)]],
            outputs=[init, init + ".spec"]))  # fmt: skip
        student_flags = [
            "--arch",
            "lightformer",
            *shape,
            *flags,
            "--lc-spec",
            FileArg(init + ".spec"),
        ]
        student_model = f"lightformer, per-matrix ranks at energy {opts.energy:g}"
    else:
        if search:
            rank = max(search)
            if rank > method.max_rank(teacher):
                raise CompressError(f"--search-ranks {rank} is above the largest useful "
                                    f"smartformer rank of this teacher ({method.max_rank(teacher)})")  # fmt: skip
            choice = (
                f"{method.rank_name} searched among {','.join(map(str, search))} (starts at {rank})"
            )
        elif opts.rank is not None or default_rank is not None:
            rank = opts.rank or default_rank
            if rank > method.max_rank(teacher):
                raise CompressError(f"--rank {rank} is above the largest useful {method.name} "
                                    f"rank of this teacher ({method.max_rank(teacher)})")  # fmt: skip
            choice = f"{method.rank_name} {rank} " + (
                "(given)" if opts.rank else "(the method's natural size: d / 4)"
            )
        else:
            rank, n_student, n_teacher = search_rank(
                method, teacher, shape, target, opts.embed_rank, log, teacher_shape
            )
            choice = (f"{method.rank_name} {rank}: {n_student:,} parameters, "
                      f"{n_teacher / n_student:.2f}x fewer than the teacher ({target.describe()})")  # fmt: skip
        flags = method.flags(rank, opts.embed_rank, teacher)
        what = {"lightformer": "SVD", "hypoformer": "TT-SVD", "smartformer": "CP-ALS"}[method.name]
        steps.append(Step("transfer", f"{what} weight transfer into the {method.name} student", [
            tool("lightcompress-convert") + ["-i", T, "-o", init, "--force", "-a", method.arch,
                                             *shape, *flags, *shape_of.convert_flags]], outputs=[init]))  # fmt: skip
        student_flags = ["--arch", method.arch, *shape, *flags]
        student_model = f"{method.arch}, " + " ".join(flags)
    log(f"student: {choice}")
    resume = check_continue_from(opts.continue_from, opts.max_update, student_flags)
    if resume:
        log(f"continuing {opts.continue_from} up to {opts.max_update} updates")

    # 2. optional KD data, fine-tuning (DA-WID: its training and the fusion)
    task = ["--task", "translation"]
    if search:
        task = ["--task", "translation_smartformer", "--sm-search", "--sm-search-ranks",
                ",".join(map(str, search)), "--sm-search-interval", str(max(1, schedule // 20)),
                "--sm-search-settle", "3"]  # fmt: skip
    if kd:
        kd = os.path.join(save, "kd-bin")
        # on the CPU the teacher's ONNX Runtime export translates (fairseq's beam search, the
        # same translations in 2.3x less time on one thread, docs/compress.md); on a GPU, or
        # where the teacher does not export, fairseq-generate
        kd_engine = ["--engine", "auto"]
        steps.append(Step("kd-data", "the teacher translates the training set (KD data)", [
            _module("lightcompress.kd.distill") + [B, "--path", T, "--out-dir", kd, "--user-dir", user_dir,
                                                   "--beam", str(opts.beam), "--max-tokens", str(opts.max_tokens),
                                                   "--num-shards", "0", "--generate-args",
                                                   "--max-len-a 1.2 --max-len-b 10", *device,
                                                   *kd_engine]],
            outputs=[kd], marker=os.path.join(save, "kd-bin.done")))  # fmt: skip
        task = ["--task", "translation_seqkd", "--kd-data-mode", "both", "--kd-distilled-data", kd]
    every = opts.validate_every or max(1, opts.max_update // 8)
    if opts.patience < 0:
        raise CompressError(f"--patience must be 0 or more, not {opts.patience}")
    dawid = method.name == "dawid"
    # (DA-WID: no early stop, its masks' schedule runs to --max-update to reach the target)
    stop = ["--patience", str(opts.patience)] if opts.patience and not dawid else []
    lr = opts.lr or (2e-4 if dawid else 1.5e-3)
    loss = [] if dawid else ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                             "--dropout", f"{teacher.dropout:g}"]  # fmt: skip
    start = [] if dawid else ["--finetune-from-model", init]
    if resume:  # (fairseq loads it, optimizer and all, when SAVE_DIR/student has no checkpoint)
        start = ["--continue-once", resume]
    train = ["fairseq-train", B, "--user-dir", user_dir, *task, *langs, *student_flags, *start,
             "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
             "--lr", f"{lr:g}", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(warmup),
             "--warmup-init-lr", "1e-07", *loss, "--weight-decay", "0.0001",
             "--max-tokens", str(opts.max_tokens), "--max-update", str(opts.max_update),
             "--validate-interval-updates", str(every), "--save-interval-updates", str(every),
             "--keep-interval-updates", "1", "--no-epoch-checkpoints", "--save-dir", train_dir,
             "--no-progress-bar", "--log-format", "simple", "--log-interval", "10",
             "--num-workers", "0", "--seed", "1", "--data-buffer-size", "0", *device, *stop, *extra]  # fmt: skip
    parsed = check_train_args(train[1:], extra)  # (fairseq-train's parser, before any work)
    if resume:
        check_continue_fits(resume, parsed, data.src_dict_size, data.tgt_dict_size)
    train[0:1] = tool("fairseq-train")
    best = "checkpoint_last.pt" if dawid else "checkpoint_best.pt"
    steps.append(Step("fine-tune", ("DA-WID training (masks, compactors, distillation)" if dawid else
                                    f"fine-tuning the student, {opts.max_update} updates"),
                      [train], outputs=[os.path.join(train_dir, best)],
                      marker=os.path.join(train_dir, "train.done"), workdir=train_dir))  # fmt: skip
    student = os.path.join(train_dir, best)
    if dawid:
        student = os.path.join(save, "student.pt")
        steps.append(Step("fuse", "DA-WID fusion into an ordinary smaller model", [
            tool("lightcompress-convert") + ["dawid-fuse", "-i", os.path.join(train_dir, best),
                                             "-o", student, "--force"]], outputs=[student]))  # fmt: skip
        want = int(counts["embedding"] + (1 - sparsity) * counts["non_embedding"])
        steps.append(Step("size", "the fused student against the target", func=functools.partial(
            check_fused_size, student, want, counts["total"], target.describe(), opts.max_update,
            schedule)))  # fmt: skip

    # 3. deployment export, test translations, speed, report
    onnx_dir = os.path.join(save, "student-onnx")
    notes = []
    spm = ["--spm", os.path.abspath(opts.spm)] if opts.spm else []
    if codes:  # (raw text: Moses + BPE, settings from the data-bin)
        spm = ["--bpe-codes", os.path.abspath(codes)]
    listed = []  # (the exports' shortlist: --shortlist FILE)
    if opts.shortlist:
        shortlist = os.path.join(save, "shortlist.txt")
        listed = ["--shortlist", shortlist]
        steps.append(Step("shortlist", "the vocabulary shortlist of the training split", [
            tool("lightcompress-shortlist") + ["--data", B, *langs, "-o", shortlist]],
            outputs=[shortlist]))  # fmt: skip
    steps.append(Step("export", "ONNX Runtime export of the student", [
        tool("lightcompress-export-onnx") + ["--path", student, "--data", B, *langs, "-o", onnx_dir,
                                             *spm, *listed]], outputs=[os.path.join(onnx_dir, "MANIFEST.sha256")]))  # fmt: skip
    lengths = ["--max-len-a", "1.2", "--max-len-b", "10"]
    if opts.int8 != "none":
        int8_dir = os.path.join(save, "student-onnx-int8")
        steps.append(Step("int8", f"ONNX Runtime int8 export of the student ({opts.int8} maps) "
                          "and its translation of the test split", [
            _module("lightcompress.compress.int8") + ["--path", student, "--data", B, *langs,
             "-o", int8_dir, "--int8", opts.int8, "--eval", os.path.join(save, "eval", "student-int8.txt"),
             "--skipped", os.path.join(save, "eval", "student-int8.skipped"), "--beam", str(opts.beam),
             *lengths, *(["--post-process", post] if post else []), *spm, *listed]],
            marker=os.path.join(save, "eval", "student-int8.done"), call=_int8_main))  # fmt: skip
    ct2_dir = None
    if method.name in ("lightformer", "smartformer"):  # (their factors multiply out exactly)
        # the student's own shape on CTranslate2: its factors multiplied out into the dense
        # Transformer it computes (larger on disk; the report says at which batch size it is
        # the faster engine)
        ct2_dir = os.path.join(save, "student-ct2")
        steps.append(Step("ct2", "CTranslate2 int8 export of the student, its factors multiplied "
                          "out (its shape on CTranslate2)", [
            tool("lightcompress-export-ct2") + ["--path", student, "--data", B, "-o", ct2_dir,
                                                "--quantization", "int8", *listed]],
            outputs=[os.path.join(ct2_dir, "model.bin")]))  # fmt: skip
    for who, ckpt in (("teacher", T), ("student", student)):
        out = os.path.join(save, "eval", f"{who}.txt")
        gen = tool("fairseq-generate") + [B, "--user-dir", user_dir, "--path", ckpt, "--task", "translation",
                                          *langs, "--gen-subset", "test", "--beam", str(opts.beam),
                                          *lengths, "--batch-size", "64", "--required-batch-size-multiple", "1",
                                          "--scoring", "sacrebleu", "--num-workers", "0",
                                          "--data-buffer-size", "0", *device]  # fmt: skip
        if post:
            gen += ["--post-process", post]
        steps.append(Step(f"test-{who}", f"the {who} translates the test split", [gen],
                          outputs=[out], stdout_to=[out]))  # fmt: skip
    src_len = max(1, round(data.mean_source_length("test")))
    speed = ["--data", B, "--num-sentences", str(opts.speed_sentences), "--src-len", str(src_len),
             "--runs", str(opts.speed_runs), "--threads", "1", "--beam", str(opts.beam), *lengths, "--quiet"]  # fmt: skip
    measure = _module("lightcompress.measure.speed")
    speed_json = os.path.join(save, "speed.json")
    int8_speed = {"large": ["--int8-large"], "all": ["--compare-int8"], "none": []}[opts.int8]
    # every engine in one interleaved run (a disturbance then slows all of them, not one), the
    # best of its runs reported and a wide spread of runs warned about (report.py); at batch 1
    # (the papers' protocol) and at batch 32 (a service's batches: BATCH_SENTENCES times as many
    # sentences, so that several batches are timed); with the shortlist, every ONNX Runtime and CTranslate2
    # row also with it (CTranslate2: as its vocabulary map), like for like
    for name, out, batch in (("speed", speed_json, []),
                             ("speed-b32", os.path.join(save, "speed-b32.json"),
                              ["--timing-batch-size", "32", "--num-sentences",
                               str(opts.speed_sentences * BATCH_SENTENCES)])):  # fmt: skip
        at = "batch 1" if not batch else "batch 32"
        steps.append(Step(name, f"tokens/s of teacher and student (fairseq, ONNX Runtime) and "
                          f"CTranslate2 on the dense teacher, interleaved, {at}", [
            measure + ["--path", f"teacher={T},student={student}", "--onnx", "--ct2", *int8_speed,
                       *listed, *speed, *batch, "--json", out]], outputs=[out],
            env={k: os.environ.get(k, "1") for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
            call=_measure_main))  # fmt: skip
    report = [os.path.join(save, f"report.{ext}") for ext in ("md", "png", "json")]
    steps.append(Step("report", "the report (markdown, PNG, JSON)", outputs=report))
    commands = [render(c) for st in steps for c in st.commands]
    plan = {
        "method": method.name,
        "choice": choice,
        "teacher": {"checkpoint": T, "model": teacher.describe()},
        "shortlist": listed[1] if listed else None,
        "student": {
            "checkpoint": student,
            "model": student_model,
            "shape": shape_of.describe(),
            "kd": kd,
            "int8": opts.int8,
            "ct2_export": ct2_dir,
        },
        "commands": commands,
        # options that change an output without changing a command: a rerun with other
        # values redoes the steps they change (checks.compare_plan)
        "report_options": {
            "ref": os.path.abspath(opts.ref) if opts.ref else None,
            "ref_sha256": file_sha256(opts.ref) if opts.ref else None,
        },
    }
    protocol = {
        "subset": "test",
        "beam": opts.beam,
        "post_process": post or "none",
        "references": os.path.abspath(opts.ref) if opts.ref else "fairseq's post-processed targets",
        "speed": f"measure_speed: {opts.speed_sentences} test sentences of about {src_len} "
        f"tokens at batch 1 ({opts.speed_sentences * BATCH_SENTENCES} at batch 32), one "
        f"thread, beam {opts.beam}, every engine in one run, interleaved, the best of "
        f"{opts.speed_runs} runs; outputs capped at 1.2 x source + 10 tokens (as for BLEU)"
        + (
            "; with the vocabulary shortlist of the training split (CTranslate2: as its "
            "vocabulary map), each row also without it"
            if opts.shortlist
            else ""
        ),
        "notes": notes,
    }
    steps[-1].func = lambda: _report(save, plan, protocol, opts.ref)
    return steps, plan


def _measure_main(argv: list[str]) -> int:
    """measure_speed (the papers' tokens/s protocol), called as a function."""
    from lightcompress.cli import quiet_logs
    from lightcompress.measure.speed import main

    quiet_logs()
    return main(argv)


def _int8_main(argv: list[str]) -> int:
    from lightcompress.compress.int8 import main

    return main(argv)


def _report(save, plan, protocol, ref):
    from lightcompress.compress.report import write_report

    write_report(save, plan, protocol, ref)


def _search_ranks(text, method: str, opts) -> list[int]:
    """``--search-ranks``: Smartformer's, a comma-separated list of ranks >= 1, no target."""
    if text is None:
        return []
    if method != "smartformer":
        raise CompressError(f"--search-ranks is Smartformer's rank search, not {method}'s")
    if opts.ratio is not None or opts.params is not None or opts.rank is not None:
        raise CompressError(
            "--search-ranks chooses the ranks itself: give no --ratio, --params or --rank"
        )
    try:
        ranks = sorted({int(r) for r in text.split(",") if r.strip()})
    except ValueError:
        raise CompressError(f"--search-ranks must be ranks like 32,64,128, not {text!r}") from None
    if not ranks or ranks[0] < 1:
        raise CompressError(f"--search-ranks must be ranks >= 1 like 32,64,128, not {text!r}")
    return ranks


def _dawid_flags(sparsity: float, updates: int, lr: float = 2e-4, warmup: int = 100) -> list[str]:
    """DA-WID's schedule of the results CPU plan (examples/translation/results/run.sh), scaled
    to ``updates``: distillation only for 7.3 %, the target warmed up over 37 %, head and layer
    masks 22 % after the dimension masks; the gates' learning-rate scale raised for a short run
    (:func:`dawid_gate_scale`) so that the masks can reach the target."""
    distill = updates * 11 // 150
    scale = dawid_gate_scale(updates, distill, lr, warmup)
    return ["--dawid-lambda", "0.5", "--dawid-init", "data-aware", "--dawid-calib-tokens", "4096",
            "--dawid-target-sparsity", f"{sparsity:g}", "--dawid-masks", "dim,head,layer",
            "--dawid-distill-updates", str(distill),
            "--dawid-sparsity-warmup", str(max(1, updates * 11 // 30)),
            "--dawid-structure-updates", str(updates * 11 // 50), "--dawid-gate-lr-scale", str(round(scale))]  # fmt: skip


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
    hint = {28: " (free some space, or use another --save-dir; rerun to resume)",
            30: " (use a writable --save-dir)", 13: " (use a writable --save-dir)"}  # fmt: skip
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
        print(f"{PROG}: stopped by signal {exc.signum}; rerun the same command to resume",
              file=sys.stderr)  # fmt: skip
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
