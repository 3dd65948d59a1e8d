"""The plan's first two phases (for :mod:`lightcompress.compress.plan`): the options' own checks
and the inputs read (the teacher, the data-bin, the tokenizer, the save directory, the student's
shape, the target and the schedule), into the :class:`_Context` that every later phase's planner
reads and appends its steps to."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from lightcompress.compress.checks import check_extra, check_save_dir, check_target, check_tokenizer
from lightcompress.compress.methods import METHODS, SUBFORMER_REFUSAL, Target
from lightcompress.compress.shape import student_shape
from lightcompress.compress.steps import Step
from lightcompress.compress.teacher import CompressError, read_data_bin, read_teacher

__all__: list[str] = []


@dataclass
class _Context:
    """What every phase's planner reads: the options, the teacher, the data, the paths and the
    settings derived from them; ``steps`` gathers the steps in order."""

    opts: argparse.Namespace
    method: object
    extra: list[str]
    log: object
    kd: bool
    search: list[int]
    teacher: object = None
    data: object = None
    codes: str | None = None
    save: str = ""
    shape_of: object = None
    target: object = None
    default_rank: int | None = None
    schedule: int = 0
    warmup: int = 0
    T: str = ""
    B: str = ""
    user_dir: str = ""
    device: list[str] = field(default_factory=list)
    langs: list[str] = field(default_factory=list)
    post: str | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def init(self) -> str:
        return os.path.join(self.save, "student_init.pt")

    @property
    def train_dir(self) -> str:
        return os.path.join(self.save, "student")

    @property
    def dawid(self) -> bool:
        return self.method.name == "dawid"


def _check_options(opts, extra: list[str], log) -> _Context:
    """The options' own checks (no file read but their existence)."""
    if opts.method == "subformer":
        raise CompressError(SUBFORMER_REFUSAL)
    method = METHODS[opts.method]
    check_extra(extra)
    if opts.energy is not None and method.name != "lightformer":
        raise CompressError(
            "--energy is LightFormer's (per-matrix SVD ranks); give --ratio, "
            "--params or --rank for " + method.name
        )
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
        raise CompressError(
            "--search-ranks runs the rank search's own task, which has no KD "
            "data: give --no-kd with it"
        )
    return _Context(opts, method, extra, log, kd, search)


def _read_inputs(ctx: _Context) -> None:
    """The teacher, the data-bin, the tokenizer, the save directory, the student's shape, the
    target and the schedule: checked, logged and kept in ``ctx``."""
    import lightcompress

    opts, method, log = ctx.opts, ctx.method, ctx.log
    ctx.teacher = teacher = read_teacher(opts.teacher)
    method.check(teacher)
    check_target(opts, teacher)
    ctx.data = read_data_bin(opts.data, teacher, opts.source_lang, opts.target_lang)
    ctx.codes = check_tokenizer(opts, ctx.data)
    if ctx.codes and not opts.bpe_codes:
        log(f"BPE codes: {ctx.codes} (the data-bin's; --bpe-codes to give others)")
    ctx.save = os.path.abspath(opts.save_dir)
    if os.path.exists(ctx.save) and not os.path.isdir(ctx.save):
        raise CompressError(f"--save-dir {opts.save_dir} exists and is not a directory")
    check_save_dir(ctx.save)
    ctx.shape_of = student_shape(teacher, opts, method.name)
    log(f"teacher: {opts.teacher}: {teacher.describe()}, {teacher.params:,} parameters")
    log(f"data: {opts.data} ({ctx.data.src} -> {ctx.data.tgt})")
    ctx.target = Target(opts.ratio, opts.params, opts.rank, opts.energy, opts.sparsity)
    if not any(v is not None for v in vars(ctx.target).values()):
        if method.default_ratio is not None:
            ctx.target.ratio = method.default_ratio
        else:
            ctx.default_rank = method.default_rank(teacher)
    log(f"student shape: {ctx.shape_of.describe()}")
    _read_schedule(ctx)
    ctx.T, ctx.B = os.path.abspath(opts.teacher), os.path.abspath(opts.data)
    ctx.user_dir = os.path.dirname(os.path.abspath(lightcompress.__file__))
    import torch

    ctx.device = ["--cpu"] if opts.cpu or not torch.cuda.is_available() else []
    ctx.langs = ["-s", ctx.data.src, "-t", ctx.data.tgt]
    tokenizer = "sentencepiece" if opts.spm else "subword_nmt" if ctx.codes else None
    ctx.post = opts.post_process or tokenizer


def _read_schedule(ctx: _Context) -> None:
    """The schedule's updates and the warm-up (a warning when it never ends)."""
    opts = ctx.opts
    if opts.warmup is not None and opts.warmup >= opts.max_update:
        ctx.log(
            f"warning: --warmup {opts.warmup} is not below --max-update {opts.max_update}: the "
            "learning rate never reaches its peak"
        )
    ctx.schedule = opts.schedule_updates or opts.max_update
    if ctx.schedule > opts.max_update:
        raise CompressError(
            f"--schedule-updates {ctx.schedule} is above --max-update "
            f"{opts.max_update}: the schedule would not finish"
        )
    ctx.warmup = opts.warmup or max(1, ctx.schedule // 10)


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
