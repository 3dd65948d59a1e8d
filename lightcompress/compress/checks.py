"""Checks of ``lightcompress-compress`` that refuse a command before anything is written (its
target against the teacher, the arguments it passes to fairseq-train, the save directory), the
comparison of a rerun's plan with the one a save directory holds, and DA-WID's: a schedule that
can reach the target, a fused student that did.
"""

from __future__ import annotations

import json
import math
import os

from lightcompress.compress.teacher import CompressError

__all__ = [
    "check_continue_fits",
    "check_continue_from",
    "check_extra",
    "check_fused_size",
    "check_save_dir",
    "check_target",
    "check_tokenizer",
    "check_train_args",
    "compare_plan",
    "dawid_gate_scale",
]


# fairseq-train options that compress sets itself: given after `--` they would override the
# plan silently (or, for --save-dir, send the student where compress does not look)
OWN = {
    "--save-dir": "the save directory is compress's own (SAVE_DIR/student): give --save-dir "
    "before `--`",
    "--arch": "the student's architecture comes from --method and the teacher",
    "-a": "the student's architecture comes from --method and the teacher",
    "--task": "compress sets the task (--kd for sequence-level KD)",
    "--user-dir": "compress passes this plugin's --user-dir",
    "--finetune-from-model": "compress starts from its own transferred student",
    "--restore-file": "compress resumes from SAVE_DIR/student itself",
    "--continue-once": "give compress's --continue-from",
    "--no-save": "compress needs the student's checkpoints",
    "--max-update": "give compress's --max-update (it also scales the schedule)",
    "--max-tokens": "give compress's --max-tokens",
    "--lr": "give compress's --lr",
    "--warmup-updates": "give compress's --warmup",
}


def check_extra(extra: list[str]) -> None:
    """Refuse fairseq-train arguments (after ``--``) that compress sets itself."""
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in OWN:
            raise CompressError(f"`-- {flag}` is not for fairseq-train here: {OWN[flag]}")


def check_train_args(argv: list, extra: list[str]):
    """The fine-tuning command's arguments (``fairseq-train ARGV``, the flags after ``--`` among
    them) parsed by fairseq-train's own parser before anything runs: a mistyped flag (``--max-upd
    5``) or a bad value is refused in one line. Returns the parsed ``Namespace``. (An argument
    that a step writes, such as a per-matrix spec, is parsed as a placeholder.)"""
    import contextlib
    import io
    import logging
    import re

    from fairseq import options

    from lightcompress.errors import LightcompressError

    argv = ["x" if not isinstance(a, (str, int, float)) else str(a) for a in argv]
    parser = options.get_training_parser()
    err = io.StringIO()
    quiet = logging.root.manager.disable  # (fairseq logs "--user-dir ... already imported")
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return options.parse_args_and_arch(parser, argv)
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        msg = re.sub(r"^[\w.-]+: error: ", "", lines[-1] if lines else "its arguments do not parse")
    except (LightcompressError, ValueError) as exc:
        msg = " ".join(str(exc).split())
    finally:
        logging.disable(quiet)
    given = f" (given after `--`: {' '.join(extra)})" if extra else ""
    raise CompressError(
        f"fairseq-train would refuse the fine-tuning command: {msg}{given}; "
        "`fairseq-train --help` lists its flags"
    )


def check_continue_fits(path: str, args, src_vocab: int, tgt_vocab: int) -> None:
    """``--continue-from``'s weights against the student this command trains (``args``: the
    fine-tuning command, parsed), built without data: a checkpoint of another model, other
    dictionaries or one tensor of another shape is refused before the transfer and KD run
    (fairseq-train would fail after them: "Cannot load model parameters from checkpoint")."""
    import copy

    from lightcompress.build import build_model_without_data
    from lightcompress.checkpoint import read_checkpoint

    state = read_checkpoint(path)
    args = copy.deepcopy(args)
    if getattr(args, "dawid_init", None) == "data-aware":
        args.dawid_init = "identity"  # (the same shapes, without calibration data)
    import logging

    quiet = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        model = build_model_without_data(args, src_vocab, tgt_vocab)
    except Exception:  # noqa: BLE001  (not built here: fairseq-train's own loading says why)
        return
    finally:
        logging.disable(quiet)
    want = model.state_dict()
    have = dict(state["model"])
    model.upgrade_state_dict(have)
    for name, tensor in want.items():
        if name not in have:
            raise CompressError(
                f"--continue-from {path} does not fit the student this command "
                f"trains: it has no {name} (a checkpoint of another model)"
            )
        if tuple(have[name].shape) != tuple(tensor.shape):
            raise CompressError(
                f"--continue-from {path} does not fit the student this command trains: its "
                f"{name} is {list(have[name].shape)}, the student's {list(tensor.shape)} (a "
                "checkpoint of another model, teacher or data)"
            )
    extra = [k for k in have if k not in want]
    if extra:
        raise CompressError(
            f"--continue-from {path} does not fit the student this command "
            f"trains: its {extra[0]} is not the student's (a checkpoint of "
            "another model)"
        )


def check_target(opts, teacher) -> None:
    """A target the student cannot meet, found before anything is written."""
    s = teacher.settings
    d = min(s["encoder_embed_dim"], s["decoder_embed_dim"])
    if opts.embed_rank is not None and opts.embed_rank >= d:
        raise CompressError(
            f"--embed-rank {opts.embed_rank} is not below the teacher's embedding dimension "
            f"({d}): the factorized table would be larger than the teacher's; give at most {d - 1}"
        )
    if opts.params is not None and opts.params >= teacher.params:
        raise CompressError(
            f"--params {opts.params:,} is not below the teacher's {teacher.params:,} parameters: "
            "the student would be as large as the teacher or larger"
        )


def check_tokenizer(opts, data) -> str | None:
    """The data's tokenizer, checked against the data-bin's dictionaries before any work:
    ``--spm`` or ``--bpe-codes`` (not both) that load and fit them; without either (and without
    ``--tokenized``), the data-bin's own ``bpe.code`` (fairseq's IWSLT'14 recipe leaves it there),
    else a dictionary of subword units is refused naming the flag it needs (its BLEU would be
    scored on subword units and its export would take them). Returns the BPE codes to use."""
    from lightcompress.deploy.text_fit import (
        TextFitError,
        check_tokenizer_fits,
        dictionary_kind,
        read_symbols,
    )
    from lightcompress_runtime.tokenizers import TextError, check_codes, load_sentencepiece

    if opts.spm and opts.bpe_codes:
        raise CompressError(
            "give --spm (a sentencepiece model) or --bpe-codes (subword-nmt "
            "codes), not both: the data was made with one of them"
        )
    if opts.tokenized and (opts.spm or opts.bpe_codes):
        flag = "--spm" if opts.spm else "--bpe-codes"
        raise CompressError(
            f"--tokenized takes the data's subword units as they are: give it without {flag}"
        )
    sides = []
    for side, lang in (("source", data.src), ("target", data.tgt)):
        path = os.path.join(data.path, f"dict.{lang}.txt")
        try:
            sides.append((f"the {side} dictionary of --data ({path})", read_symbols(path)))
        except (OSError, UnicodeDecodeError) as exc:
            raise CompressError(f"cannot read {path}: {exc}") from None
    codes = opts.bpe_codes
    if not (opts.spm or codes or opts.tokenized):
        recipe = os.path.join(data.path, "bpe.code")
        kind = dictionary_kind(sides[0][1])
        if os.path.isfile(recipe):  # (as lightcompress-export-onnx and -translate take it)
            codes = recipe
        elif kind == "bpe":
            raise CompressError(
                f"--data {data.path} is Moses + BPE data (its dictionary's units end in @@): "
                "give the codes it was made with, --bpe-codes FILE (fairseq's IWSLT'14 recipe: "
                "iwslt14.tokenized.de-en/code), for BLEU on text and an export that takes "
                "raw text; or --tokenized to score and export its subword units as they are"
            )
        elif kind == "sentencepiece":
            raise CompressError(
                f"--data {data.path} is sentencepiece data (its dictionary's units start with "
                "\u2581): give the model it was made with, --spm FILE, for BLEU on text and an "
                "export that takes raw text; or --tokenized to score and export its pieces "
                "as they are"
            )
    try:
        if codes:
            check_codes(codes)
        if opts.spm:
            load_sentencepiece(opts.spm)
        check_tokenizer_fits(sides, spm=opts.spm, codes=codes)
    except (TextError, TextFitError) as exc:
        raise CompressError(str(exc)) from None
    return codes


def check_save_dir(save: str) -> None:
    """A save directory that cannot be created or written is refused in one line (also in a
    dry run): the nearest existing folder must be a writable directory."""
    probe = save
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise CompressError(f"--save-dir {save}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CompressError(f"--save-dir {save}: {probe} is not writable")


def _difference(new: list[str], old: dict) -> str:
    """Where the commands first differ, in a few words: ``now ... --beam 4 ..., before ...
    --beam 5 ...``."""
    import shlex

    before = old.get("commands") or []
    if len(before) != len(new):
        return f"{len(new)} commands now, {len(before)} before (--kd or --method?)"
    for a, b in zip(new, before):
        if a == b:
            continue
        try:
            ta, tb = shlex.split(a), shlex.split(b)
        except ValueError:
            return f"now: {a[:120]}..."
        i = next((k for k, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        lo = max(0, i - 2)
        return (
            f"in `{os.path.basename(ta[0])}`: now ... {shlex.join(ta[lo : i + 2])} ..., before "
            f"... {shlex.join(tb[lo : i + 2])} ..."
        )
    return "other commands"


def check_continue_from(path: str | None, max_update: int, student_flags: list[str]) -> str | None:
    """``--continue-from``: a training checkpoint (with its optimizer state) of the student this
    command trains (its architecture and every ``--flag value`` of ``student_flags`` that the
    checkpoint's configuration holds), below ``max_update`` updates. Its absolute path."""
    if not path:
        return None
    from lightcompress.checkpoint import (
        CheckpointError,
        checkpoint_arch,
        model_config,
        read_checkpoint,
    )

    try:
        state = read_checkpoint(path)
        cfg = model_config(state)
    except CheckpointError as exc:
        raise CompressError(f"--continue-from: {exc}") from None
    if not state.get("last_optimizer_state") or not state.get("optimizer_history"):
        raise CompressError(
            f"--continue-from {path} holds no optimizer state: give a training "
            "checkpoint (an earlier run's SAVE_DIR/student/checkpoint_last.pt)"
        )
    flags, i = {}, 0
    while i < len(student_flags):  # (--flag value, or a switch such as --share-all-embeddings)
        has_value = i + 1 < len(student_flags) and not student_flags[i + 1].startswith("--")
        flags[student_flags[i]] = student_flags[i + 1] if has_value else True
        i += 2 if has_value else 1
    arch = checkpoint_arch(state)
    if arch != flags.get("--arch"):
        raise CompressError(
            f"--continue-from {path} is a {arch!r} model; this command trains "
            f"a {flags.get('--arch')!r} student"
        )
    for flag, want in flags.items():
        key = flag.lstrip("-").replace("-", "_")
        had = cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)
        if flag in ("--arch", "--dawid-teacher") or had is None:
            continue
        try:
            same = math.isclose(float(had), float(want), rel_tol=1e-9)
        except (TypeError, ValueError):
            same = str(had) == str(want)
        if not same:
            hint = (
                " (its schedule: give the first run's --max-update as --schedule-updates)"
                if flag.startswith("--dawid-") or flag == "--warmup-updates"
                else ""
            )
            raise CompressError(
                f"--continue-from {path} was trained with {flag} {had}; this "
                f"command gives {want}{hint}"
            )
    done = state["optimizer_history"][-1].get("num_updates", 0)
    if done >= max_update:
        raise CompressError(
            f"--continue-from {path} has trained {done} updates already: give a "
            f"--max-update above {done}"
        )
    return os.path.abspath(path)


def compare_plan(save: str, plan: dict, steps) -> list[str]:
    """Compare ``plan`` with the one ``save`` holds (``plan.json`` of an earlier run).

    Other commands are refused (the outputs of one would be taken for the other's) unless no
    step from the first one whose commands differ has written anything yet: a run refused or
    failed on its settings (at its first step, or at fine-tuning before its first checkpoint)
    is replaced by the corrected command, whose steps before that one are the same and are kept.
    Other report options (``plan["report_options"]``, e.g. ``--ref``) only change the report:
    its outputs are returned, for the caller to remove so that the report step is redone.
    """
    from lightcompress.compress.steps import render

    path = os.path.join(save, "plan.json")
    if not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = {}
    if not isinstance(old, dict):
        old = {}
    if old.get("commands") != plan["commands"]:
        before, i, first = old.get("commands") or [], 0, len(steps)
        for k, st in enumerate(steps):  # (the first step whose commands differ)
            mine = [render(c) for c in st.commands]
            if before[i : i + len(mine)] != mine:
                first = k
                break
            i += len(mine)
        if not [p for st in steps[first:] for p in st.written()]:
            return []
        raise CompressError(
            f"{save} holds a run with other settings ({_difference(plan['commands'], old)}): "
            "rerun with the settings it was made with to resume, or use another --save-dir "
            "(or delete that one)"
        )
    if old.get("report_options") != plan.get("report_options"):  # (--ref: path and content)
        return [p for p in steps[-1].outputs if os.path.exists(p)]
    return []


def count_checkpoint(path: str) -> dict:
    """What ``lightcompress-params --path PATH`` reports (total, embedding, non_embedding), by
    its function."""
    from lightcompress.errors import LightcompressError
    from lightcompress.measure.params import checkpoint_report

    try:
        return checkpoint_report(path)
    except LightcompressError as exc:
        raise CompressError(f"cannot count {path}: {exc}") from exc


SIZE_TOLERANCE = 0.02  # DA-WID's masks meet the target in expectation: 2 % above it is allowed


def check_fused_size(
    student: str,
    want: int,
    teacher_total: int,
    target: str,
    updates: int,
    schedule: int | None = None,
):
    """DA-WID reaches its target or fails: a fused student above ``want`` total parameters (by
    more than :data:`SIZE_TOLERANCE`) or not smaller than its teacher is an error naming the
    size it reached."""
    got = count_checkpoint(student)["total"]
    if got <= want * (1 + SIZE_TOLERANCE) and got < teacher_total:
        return got
    than = "the teacher's" if got >= teacher_total else "the target"
    raise CompressError(
        f"DA-WID's fused student has {got:,} parameters ({teacher_total / got:.2f}x fewer than "
        f"the teacher's {teacher_total:,}), more than {than} ({target}: at most {want:,}): its "
        f"masks did not reach the target sparsity in {updates} updates. Go on training it: the "
        "same command in another --save-dir with a larger --max-update, --schedule-updates "
        f"{schedule or updates} and --continue-from {os.path.join(os.path.dirname(student), 'student', 'checkpoint_last.pt')}"
        ", or ask for a smaller --ratio"
    )


# sum of lr x scale over the pruning updates that a short run needs to reach its target: on the
# tests' tiny teacher, 100 updates (lr 2e-4, warmup 100, target 0.78) fused at sparsity 0.63 at
# a budget of 12 (the results CPU plan's 600-update run, lr 2e-4 warmed up over 250, scale 150),
# 0.76 at 21, 0.81 at 26. Not enough for every length: 1,000 updates (scale 285 here) fused at
# 0.763 (aimed at 0.81 or 0.83 instead: 0.770, 0.773), at scale 2,600 at 0.788; 20 updates at
# scale 28,592 at 0.695, at 40,000 with every cross-attention head removed. A run that misses
# its target ends with its size (check_fused_size), never "done".
GATE_BUDGET = 26.0


def dawid_gate_scale(updates: int, distill: int, lr: float, warmup: int, base=150.0) -> float:
    """The gates' (and Lagrange multipliers') learning-rate scale: ``base`` (the results CPU
    plan's), or more when fewer or slower updates (fairseq's inverse_sqrt schedule from 1e-7)
    leave less than :data:`GATE_BUDGET` of summed step size after the distillation-only updates:
    the masks must be able to travel as far as they do in a run that reaches its target."""
    init, total = 1e-7, 0.0
    for t in range(distill + 1, updates + 1):
        total += init + t * (lr - init) / warmup if t < warmup else lr * math.sqrt(warmup / t)
    return max(base, GATE_BUDGET / max(total, 1e-12))
