"""The plan of ``lightcompress-compress``: its steps and commands, one planner per phase.

:func:`build_plan` checks the options, the teacher, the data and the target, chooses the
student, then asks each phase for its steps in order: the student and its weight transfer
(by method), the KD data, the fine-tuning (DA-WID: its training, fusion and size check), the
exports (the shortlist, ONNX Runtime float32 and int8, CTranslate2), the test translations,
the speed runs and the report. Every phase reads the one :class:`_Context` the first two
fill in and appends its :class:`~lightcompress.compress.steps.Step` s to it.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from dataclasses import dataclass

from lightcompress.compress.checks import (
    check_continue_fits,
    check_continue_from,
    check_fused_size,
    check_train_args,
    dawid_gate_scale,
)
from lightcompress.compress.methods import dawid_sparsity, search_rank, tool
from lightcompress.compress.plan_inputs import _check_options, _Context, _read_inputs
from lightcompress.compress.steps import FileArg, Step, render
from lightcompress.compress.teacher import CompressError
from lightcompress_runtime.files import file_sha256

__all__ = ["BATCH_SENTENCES", "build_plan"]

# sentences timed at batch 32: this many times --speed-sentences (several batches, as a
# service translates a file)
BATCH_SENTENCES = 4


def _module(name: str) -> list[str]:
    """A command of the installed package, run by compress's own interpreter (``python -m``):
    the package compress itself runs, never a checkout's ``scripts/`` found by path."""
    return [sys.executable, "-m", name]


@dataclass
class _Student:
    """The student the transfer phase chose: its flags, the words for the plan and DA-WID's
    target (``sparsity``, the teacher's parameter ``counts``)."""

    choice: str
    flags: list
    model: str
    sparsity: float | None = None
    counts: dict | None = None


def build_plan(opts, extra: list[str], log=print):
    """Check the teacher, data and target; choose the ranks; return ``(steps, plan)``."""
    ctx = _check_options(opts, extra, log)
    _read_inputs(ctx)
    student = _plan_student(ctx)
    log(f"student: {student.choice}")
    resume = check_continue_from(opts.continue_from, opts.max_update, student.flags)
    if resume:
        log(f"continuing {opts.continue_from} up to {opts.max_update} updates")
    task, kd = _plan_kd(ctx)
    checkpoint = _plan_train(ctx, task, student, resume)
    listed, ct2_dir = _plan_export(ctx, checkpoint)
    _plan_evaluate(ctx, checkpoint)
    src_len = _plan_speed(ctx, checkpoint, listed)
    return _plan_report(ctx, student, checkpoint, kd, listed, ct2_dir, src_len)


# --- 1. the student and its weights --------------------------------------------------------


def _plan_student(ctx: _Context) -> _Student:
    if ctx.dawid:
        return _plan_dawid_student(ctx)
    if ctx.opts.energy is not None:
        return _plan_energy_student(ctx)
    return _plan_rank_student(ctx)


def _plan_dawid_student(ctx: _Context) -> _Student:
    """DA-WID: no transfer; the target sparsity of its training."""
    sparsity, counts = dawid_sparsity(ctx.T, ctx.target)
    choice = (
        f"DA-WID target sparsity {sparsity:g} of the teacher's {counts['non_embedding']:,} "
        f"non-embedding parameters ({ctx.target.describe()})"
    )
    lr = ctx.opts.lr or 2e-4
    flags = ["--arch", "dawid", "--dawid-teacher", ctx.T, "--criterion", "dawid"]
    flags += _dawid_flags(sparsity, ctx.schedule, lr, ctx.warmup)
    model = f"dawid (fused), sparsity {sparsity:g}"
    return _Student(choice, flags, model, sparsity, counts)


def _plan_energy_student(ctx: _Context) -> _Student:
    """LightFormer with per-matrix ranks at ``--energy`` (the converter writes them)."""
    energy, init, shape = ctx.opts.energy, ctx.init, ctx.shape_of.flags
    flags = ["--lc-encoder-groups", "0", "--lc-decoder-groups", "0"]
    choice = f"LightFormer ranks per matrix at energy {energy:g} (in {init}.spec)"
    convert = tool("lightcompress-convert") + ["-i", ctx.T, "-o", init, "--force"]
    convert += ["-a", "lightformer", *shape, *flags, *ctx.shape_of.convert_flags]
    convert += ["--energy", str(energy), "--embed-energy", str(energy)]
    what = "SVD weight transfer at the chosen energy"
    step = Step("transfer", what, [convert], outputs=[init, init + ".spec"], call=_convert_main)
    ctx.steps.append(step)
    student_flags = ["--arch", "lightformer", *shape, *flags, "--lc-spec", FileArg(init + ".spec")]
    return _Student(choice, student_flags, f"lightformer, per-matrix ranks at energy {energy:g}")


def _plan_rank_student(ctx: _Context) -> _Student:
    """LightFormer, Hypoformer, Smartformer: the rank (searched, given, natural or chosen for
    the target) and the weight transfer."""
    method, teacher, opts = ctx.method, ctx.teacher, ctx.opts
    shape = ctx.shape_of.flags
    if ctx.search:
        rank = max(ctx.search)
        if rank > method.max_rank(teacher):
            raise CompressError(
                f"--search-ranks {rank} is above the largest useful "
                f"smartformer rank of this teacher ({method.max_rank(teacher)})"
            )
        among = ",".join(map(str, ctx.search))
        choice = f"{method.rank_name} searched among {among} (starts at {rank})"
    elif opts.rank is not None or ctx.default_rank is not None:
        rank = opts.rank or ctx.default_rank
        if rank > method.max_rank(teacher):
            raise CompressError(
                f"--rank {rank} is above the largest useful {method.name} "
                f"rank of this teacher ({method.max_rank(teacher)})"
            )
        why = "(given)" if opts.rank else "(the method's natural size: d / 4)"
        choice = f"{method.rank_name} {rank} {why}"
    else:
        rank, n_student, n_teacher = search_rank(
            method, teacher, shape, ctx.target, opts.embed_rank, ctx.log, teacher.shape_flags()
        )
        choice = (
            f"{method.rank_name} {rank}: {n_student:,} parameters, "
            f"{n_teacher / n_student:.2f}x fewer than the teacher ({ctx.target.describe()})"
        )
    flags = method.flags(rank, opts.embed_rank, teacher)
    what = {"lightformer": "SVD", "hypoformer": "TT-SVD", "smartformer": "CP-ALS"}[method.name]
    convert = tool("lightcompress-convert") + ["-i", ctx.T, "-o", ctx.init, "--force"]
    convert += ["-a", method.arch, *shape, *flags, *ctx.shape_of.convert_flags]
    what = f"{what} weight transfer into the {method.name} student"
    ctx.steps.append(Step("transfer", what, [convert], outputs=[ctx.init], call=_convert_main))
    student_flags = ["--arch", method.arch, *shape, *flags]
    return _Student(choice, student_flags, f"{method.arch}, " + " ".join(flags))


# --- 2. optional KD data, fine-tuning (DA-WID: its training and the fusion) ------------------


def _plan_kd(ctx: _Context) -> tuple[list[str], str | bool]:
    """The training task (the rank search's, KD's or plain translation) and the KD data step.
    Returns ``(task flags, KD data directory or False)``."""
    opts = ctx.opts
    task = ["--task", "translation"]
    if ctx.search:
        ranks, interval = ",".join(map(str, ctx.search)), str(max(1, ctx.schedule // 20))
        task = ["--task", "translation_smartformer", "--sm-search", "--sm-search-ranks", ranks]
        task += ["--sm-search-interval", interval, "--sm-search-settle", "3"]
    if not ctx.kd:
        return task, ctx.kd
    kd = os.path.join(ctx.save, "kd-bin")
    # on the CPU the teacher's ONNX Runtime export translates (fairseq's beam search, the
    # same translations in 2.3x less time on one thread, docs/compress.md); on a GPU, or
    # where the teacher does not export, fairseq-generate
    kd_engine = ["--engine", "auto"]
    distill = _module("lightcompress.kd.distill")
    distill += [ctx.B, "--path", ctx.T, "--out-dir", kd, "--user-dir", ctx.user_dir]
    distill += ["--beam", str(opts.beam), "--max-tokens", str(opts.max_tokens)]
    distill += ["--num-shards", "0", "--generate-args", "--max-len-a 1.2 --max-len-b 10"]
    distill += [*ctx.device, *kd_engine]
    what = "the teacher translates the training set (KD data)"
    marker = os.path.join(ctx.save, "kd-bin.done")
    ctx.steps.append(Step("kd-data", what, [distill], outputs=[kd], marker=marker))
    task = ["--task", "translation_seqkd", "--kd-data-mode", "both", "--kd-distilled-data", kd]
    return task, kd


def _train_command(ctx: _Context, task: list[str], student: _Student, resume) -> list:
    """fairseq-train's command (its first word ``fairseq-train``)."""
    opts, dawid = ctx.opts, ctx.dawid
    every = opts.validate_every or max(1, opts.max_update // 8)
    if opts.patience < 0:
        raise CompressError(f"--patience must be 0 or more, not {opts.patience}")
    # (DA-WID: no early stop, its masks' schedule runs to --max-update to reach the target)
    stop = ["--patience", str(opts.patience)] if opts.patience and not dawid else []
    lr = opts.lr or (2e-4 if dawid else 1.5e-3)
    loss = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
    loss = [] if dawid else [*loss, "--dropout", f"{ctx.teacher.dropout:g}"]
    start = [] if dawid else ["--finetune-from-model", ctx.init]
    if resume:  # (fairseq loads it, optimizer and all, when SAVE_DIR/student has no checkpoint)
        start = ["--continue-once", resume]
    train = ["fairseq-train", ctx.B, "--user-dir", ctx.user_dir, *task, *ctx.langs]
    train += [*student.flags, *start]
    train += ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0"]
    train += ["--lr", f"{lr:g}", "--lr-scheduler", "inverse_sqrt"]
    train += ["--warmup-updates", str(ctx.warmup), "--warmup-init-lr", "1e-07", *loss]
    train += ["--weight-decay", "0.0001", "--max-tokens", str(opts.max_tokens)]
    train += ["--max-update", str(opts.max_update)]
    train += ["--validate-interval-updates", str(every), "--save-interval-updates", str(every)]
    train += ["--keep-interval-updates", "1", "--no-epoch-checkpoints"]
    train += ["--save-dir", ctx.train_dir, "--no-progress-bar", "--log-format", "simple"]
    train += ["--log-interval", "10", "--num-workers", "0", "--seed", "1"]
    train += ["--data-buffer-size", "0", *ctx.device, *stop, *ctx.extra]
    return train


def _plan_train(ctx: _Context, task: list[str], student: _Student, resume) -> str:
    """Fine-tuning (DA-WID: its training, the fusion and the size check). Returns the
    student checkpoint the later phases read."""
    opts, dawid, train_dir = ctx.opts, ctx.dawid, ctx.train_dir
    train = _train_command(ctx, task, student, resume)
    parsed = check_train_args(train[1:], ctx.extra)  # (fairseq-train's parser, before any work)
    if resume:
        check_continue_fits(resume, parsed, ctx.data.src_dict_size, ctx.data.tgt_dict_size)
    train[0:1] = tool("fairseq-train")
    best = os.path.join(train_dir, "checkpoint_last.pt" if dawid else "checkpoint_best.pt")
    what = "DA-WID training (masks, compactors, distillation)"
    what = what if dawid else f"fine-tuning the student, {opts.max_update} updates"
    marker = os.path.join(train_dir, "train.done")
    ctx.steps.append(
        Step("fine-tune", what, [train], outputs=[best], marker=marker, workdir=train_dir)
    )
    if not dawid:
        return best
    fused = os.path.join(ctx.save, "student.pt")
    fuse = tool("lightcompress-convert") + ["dawid-fuse", "-i", best, "-o", fused, "--force"]
    what = "DA-WID fusion into an ordinary smaller model"
    ctx.steps.append(Step("fuse", what, [fuse], outputs=[fused], call=_convert_main))
    counts = student.counts
    want = int(counts["embedding"] + (1 - student.sparsity) * counts["non_embedding"])
    total, target = counts["total"], ctx.target.describe()
    check = functools.partial(
        check_fused_size, fused, want, total, target, opts.max_update, ctx.schedule
    )
    ctx.steps.append(Step("size", "the fused student against the target", func=check))
    return fused


# --- 3. deployment export, test translations, speed, report ---------------------------------

LENGTHS = ["--max-len-a", "1.2", "--max-len-b", "10"]


def _plan_export(ctx: _Context, student: str) -> tuple[list[str], str | None]:
    """The shortlist, the ONNX Runtime exports (float32; int8 with its test translation) and
    the CTranslate2 export. Returns ``(the exports' --shortlist flags, the CTranslate2
    folder or None)``."""
    opts, save, B = ctx.opts, ctx.save, ctx.B
    onnx_dir = os.path.join(save, "student-onnx")
    spm = ["--spm", os.path.abspath(opts.spm)] if opts.spm else []
    if ctx.codes:  # (raw text: Moses + BPE, settings from the data-bin)
        spm = ["--bpe-codes", os.path.abspath(ctx.codes)]
    listed = []  # (the exports' shortlist: --shortlist FILE)
    if opts.shortlist:
        shortlist = os.path.join(save, "shortlist.txt")
        listed = ["--shortlist", shortlist]
        build = tool("lightcompress-shortlist") + ["--data", B, *ctx.langs, "-o", shortlist]
        what = "the vocabulary shortlist of the training split"
        step = Step("shortlist", what, [build], outputs=[shortlist], call=_shortlist_main)
        ctx.steps.append(step)
    export = tool("lightcompress-export-onnx") + ["--path", student, "--data", B, *ctx.langs]
    export += ["-o", onnx_dir, *spm, *listed]
    manifest = os.path.join(onnx_dir, "MANIFEST.sha256")
    what = "ONNX Runtime export of the student"
    ctx.steps.append(Step("export", what, [export], outputs=[manifest], call=_export_onnx_main))
    if opts.int8 != "none":
        _plan_int8(ctx, student, spm, listed)
    ct2_dir = None
    if ctx.method.name in ("lightformer", "smartformer"):  # (their factors multiply out exactly)
        # the student's own shape on CTranslate2: its factors multiplied out into the dense
        # Transformer it computes (larger on disk; the report says at which batch size it is
        # the faster engine)
        ct2_dir = os.path.join(save, "student-ct2")
        ct2 = tool("lightcompress-export-ct2") + ["--path", student, "--data", B, "-o", ct2_dir]
        ct2 += ["--quantization", "int8", *listed]
        what = "CTranslate2 int8 export of the student, its factors multiplied out (its shape on "
        what += "CTranslate2)"
        model_bin = os.path.join(ct2_dir, "model.bin")
        ctx.steps.append(Step("ct2", what, [ct2], outputs=[model_bin], call=_ct2_main))
    return listed, ct2_dir


def _plan_int8(ctx: _Context, student: str, spm: list[str], listed: list[str]) -> None:
    """The int8 export and its translation of the test split (one step)."""
    opts, evals = ctx.opts, os.path.join(ctx.save, "eval")
    int8 = _module("lightcompress.compress.int8") + ["--path", student, "--data", ctx.B]
    int8 += [*ctx.langs, "-o", os.path.join(ctx.save, "student-onnx-int8")]
    int8 += ["--int8", opts.int8, "--eval", os.path.join(evals, "student-int8.txt")]
    int8 += ["--skipped", os.path.join(evals, "student-int8.skipped")]
    int8 += ["--beam", str(opts.beam), *LENGTHS]
    int8 += [*(["--post-process", ctx.post] if ctx.post else []), *spm, *listed]
    what = f"ONNX Runtime int8 export of the student ({opts.int8} maps) and its translation of "
    what += "the test split"
    marker = os.path.join(evals, "student-int8.done")
    ctx.steps.append(Step("int8", what, [int8], marker=marker, call=_int8_main))


def _plan_evaluate(ctx: _Context, student: str) -> None:
    """fairseq-generate of the teacher and the student on the test split."""
    for who, ckpt in (("teacher", ctx.T), ("student", student)):
        out = os.path.join(ctx.save, "eval", f"{who}.txt")
        gen = tool("fairseq-generate") + [ctx.B, "--user-dir", ctx.user_dir, "--path", ckpt]
        gen += ["--task", "translation", *ctx.langs, "--gen-subset", "test"]
        gen += ["--beam", str(ctx.opts.beam), *LENGTHS, "--batch-size", "64"]
        gen += ["--required-batch-size-multiple", "1", "--scoring", "sacrebleu"]
        gen += ["--num-workers", "0", "--data-buffer-size", "0", *ctx.device]
        if ctx.post:
            gen += ["--post-process", ctx.post]
        what = f"the {who} translates the test split"
        step = Step(
            f"test-{who}", what, [gen], outputs=[out], stdout_to=[out], call=_fairseq_generate
        )
        ctx.steps.append(step)


def _plan_speed(ctx: _Context, student: str, listed: list[str]) -> int:
    """measure_speed at batch 1 and batch 32. Returns the sentences' source length."""
    opts = ctx.opts
    src_len = max(1, round(ctx.data.mean_source_length("test")))
    speed = ["--data", ctx.B, "--num-sentences", str(opts.speed_sentences)]
    speed += ["--src-len", str(src_len), "--runs", str(opts.speed_runs), "--threads", "1"]
    speed += ["--beam", str(opts.beam), *LENGTHS, "--quiet"]
    int8_speed = {"large": ["--int8-large"], "all": ["--compare-int8"], "none": []}[opts.int8]
    engines = ["--path", f"teacher={ctx.T},student={student}", "--onnx", "--ct2", *int8_speed]
    # every engine in one interleaved run (a disturbance then slows all of them, not one), the
    # best of its runs reported and a wide spread of runs warned about (report.py); at batch 1
    # (the papers' protocol) and at batch 32 (a service's batches: BATCH_SENTENCES times as
    # many sentences, so that several batches are timed); with the shortlist, every ONNX Runtime
    # and CTranslate2 row also with it (CTranslate2: as its vocabulary map), like for like
    b32 = ["--timing-batch-size", "32"]
    b32 += ["--num-sentences", str(opts.speed_sentences * BATCH_SENTENCES)]
    runs = (("speed", "speed.json", []), ("speed-b32", "speed-b32.json", b32))
    for name, file, batch in runs:
        out = os.path.join(ctx.save, file)
        at = "batch 1" if not batch else "batch 32"
        what = "tokens/s of teacher and student (fairseq, ONNX Runtime) and CTranslate2 on the "
        what += f"dense teacher, interleaved, {at}"
        measure = _module("lightcompress.measure.speed")
        measure += [*engines, *listed, *speed, *batch, "--json", out]
        env = {k: os.environ.get(k, "1") for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        step = Step(name, what, [measure], outputs=[out], env=env, call=_measure_main)
        ctx.steps.append(step)
    return src_len


def _plan_report(ctx, student: _Student, checkpoint: str, kd, listed, ct2_dir, src_len: int):
    """The report step, the plan (what a rerun compares) and the protocol the report states.
    Returns ``(steps, plan)``."""
    opts, save = ctx.opts, ctx.save
    report = [os.path.join(save, f"report.{ext}") for ext in ("md", "png", "json")]
    ctx.steps.append(Step("report", "the report (markdown, PNG, JSON)", outputs=report))
    commands = [render(c) for st in ctx.steps for c in st.commands]
    plan = {
        "method": ctx.method.name,
        "choice": student.choice,
        "teacher": {"checkpoint": ctx.T, "model": ctx.teacher.describe()},
        "shortlist": listed[1] if listed else None,
        "student": {
            "checkpoint": checkpoint,
            "model": student.model,
            "shape": ctx.shape_of.describe(),
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
    protocol = _protocol(opts, ctx.post, src_len)
    ctx.steps[-1].func = lambda: _report(save, plan, protocol, opts.ref)
    return ctx.steps, plan


def _protocol(opts, post: str | None, src_len: int) -> dict:
    """How the report's figures were measured (its protocol section)."""
    shortlist = (
        "; with the vocabulary shortlist of the training split (CTranslate2: as its "
        "vocabulary map), each row also without it"
    )
    return {
        "subset": "test",
        "beam": opts.beam,
        "post_process": post or "none",
        "references": os.path.abspath(opts.ref) if opts.ref else "fairseq's post-processed targets",
        "speed": f"measure_speed: {opts.speed_sentences} test sentences of about {src_len} "
        f"tokens at batch 1 ({opts.speed_sentences * BATCH_SENTENCES} at batch 32), one "
        f"thread, beam {opts.beam}, every engine in one run, interleaved, the best of "
        f"{opts.speed_runs} runs; outputs capped at 1.2 x source + 10 tokens (as for BLEU)"
        + (shortlist if opts.shortlist else ""),
        "notes": [],
    }


def _measure_main(argv: list[str]) -> int:
    """measure_speed (the papers' tokens/s protocol), called as a function."""
    from lightcompress.cli import quiet_logs
    from lightcompress.measure.candidates import keep_exports
    from lightcompress.measure.speed import main

    quiet_logs()
    keep_exports()  # (the batch-32 step times the batch-1 step's exports: linked, not redone)
    return main(argv)


def _main_of(module: str):
    """A console script's ``main(argv) -> int`` (``module.main``), imported when its step is
    called in compress's process (no new interpreter importing torch and fairseq)."""

    def call(argv: list[str]) -> int:
        return importlib.import_module(module).main(argv)

    return call


# the int8, transfer (and ``dawid-fuse ...``), shortlist and export steps' commands
_int8_main = _main_of("lightcompress.compress.int8")
_convert_main = _main_of("lightcompress.convert.cli")
_shortlist_main = _main_of("lightcompress.deploy.shortlist_build")
_export_onnx_main = _main_of("lightcompress.deploy.onnx_export")
_ct2_main = _main_of("lightcompress.deploy.ct2")


def _fairseq_generate(argv: list[str]) -> int:
    """fairseq-generate (its console script: ``fairseq_cli.generate.cli_main``, which reads
    ``sys.argv``; the step runner puts it back), called as a function; its hypotheses go to the
    step's output file, its log records to the step's log, as the command's do."""
    from fairseq_cli.generate import cli_main

    sys.argv = ["fairseq-generate", *argv]
    cli_main()
    return 0


def _report(save, plan, protocol, ref):
    from lightcompress.compress.report import write_report

    write_report(save, plan, protocol, ref)


def _dawid_flags(sparsity: float, updates: int, lr: float = 2e-4, warmup: int = 100) -> list[str]:
    """DA-WID's schedule of the results CPU plan (lab/results/run.sh), scaled
    to ``updates``: distillation only for 7.3 %, the target warmed up over 37 %, head and layer
    masks 22 % after the dimension masks; the gates' learning-rate scale raised for a short run
    (:func:`dawid_gate_scale`) so that the masks can reach the target."""
    distill = updates * 11 // 150
    scale = dawid_gate_scale(updates, distill, lr, warmup)
    return [
        "--dawid-lambda",
        "0.5",
        "--dawid-init",
        "data-aware",
        "--dawid-calib-tokens",
        "4096",
        "--dawid-target-sparsity",
        f"{sparsity:g}",
        "--dawid-masks",
        "dim,head,layer",
        "--dawid-distill-updates",
        str(distill),
        "--dawid-sparsity-warmup",
        str(max(1, updates * 11 // 30)),
        "--dawid-structure-updates",
        str(updates * 11 // 50),
        "--dawid-gate-lr-scale",
        str(round(scale)),
    ]
