"""Sequence-level KD data: translate a binarized training set with a teacher, in resumable shards.

Pipeline (``scripts/distill_data.py`` is the command line):

1. The train split of the teacher's data-bin (N pairs) is cut into ``num_shards`` contiguous line
   ranges. Each shard becomes a small data-bin (``WORK/shardK.data``, the same dictionaries) and is
   translated with ``fairseq-generate --gen-subset train`` (beam, length penalty, ``--max-tokens``,
   ``--user-dir``, ``--cpu`` as given). The shard's output is checked (one non-empty hypothesis per
   source line) and then renamed into place (``WORK/shardK.gen``), so an interrupted run leaves no
   half-written shard and a rerun translates only the missing shards. The line ranges depend only
   on N and ``num_shards`` (not on batching), so a rerun with other batch sizes resumes correctly;
   the generation settings are recorded in ``WORK/config.json`` and a rerun with different ones is
   refused.
2. The shards are merged in the original order (sentence ids of the ``S-``/``H-`` lines plus the
   shard's offset). Any source line without a hypothesis, or with an empty one, is an error naming
   the line numbers (1-based lines of the train split).
3. Source = the ``S-`` lines (the source tokens as the dictionary prints them: the same subword
   units as the training data, ``<unk>`` for unknown tokens), target = the ``H-`` lines. Both are
   binarized with the teacher's dictionaries (``fairseq-preprocess --srcdict --tgtdict``) into
   ``OUT`` as the train split, and the binarized source is checked to equal the original one token
   for token (which proves the order was restored).

``--engine onnx`` translates with the teacher's ONNX Runtime export instead (made once in
``WORK/teacher-onnx``; ``lightcompress.kd.onnx_generate``, fairseq's beam search in numpy,
writing fairseq-generate's format): the same translations in about 2.3x less time on the CPU. The rest of
the pipeline is the same.

Progress goes to stderr: a line when a shard starts, one every ``--progress-interval`` seconds
(default 30) while it is translated (``[distill] shard K (i/N): done/size sentences (p%), elapsed,
about ... left in this shard; run: sentences done/to do, elapsed``, counted from the ``H-`` lines
fairseq-generate has written so far) and one when it is done. Bad arguments (a missing data
directory or checkpoint, ``--shard-id`` out of range, ...) are refused with one line and exit
status 2 before anything is written.

By default nothing is post-processed: the student is trained on the teacher's subword output,
in the subword space of the training data. ``--post-process``/``--remove-bpe`` (fairseq-generate's
options) remove the subword marks instead; the result is then plain text that the teacher's
dictionaries cannot binarize faithfully, so the pipeline stops after writing
``WORK/train.{src,tgt}`` for the user to segment and binarize.
"""

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

from lightcompress import cli
from lightcompress.io import atomic_path
from lightcompress.kd import onnx_generate
from lightcompress.kd.shards import (
    DistillError,
    _atomic_write_text,
    _binarize,
    _load,
    _shard_bounds,
    _train_prefix,
    _verify_source,
    _write_shard_data,
    check_shard,
    parse_generate_output,
)

__all__ = [
    "DistillError",
    "UsageError",
    "check_shard",
    "cli_main",
    "main",
    "parse_generate_output",
]


class UsageError(DistillError):
    """A bad argument, found before anything is written (exit status 2)."""

    exit_status = 2


def _engine_name(args):
    return "fairseq-generate" if args.engine == "fairseq" else "lightcompress.kd.onnx_generate"


def _export_dir(args):
    return os.path.join(args.work_dir, "teacher-onnx")


def _export_teacher(args):
    try:
        onnx_generate.export_teacher(args, _export_dir(args), _progress)
    except onnx_generate.OnnxGenerateError as exc:
        raise DistillError(str(exc)) from None


def _generate_command(args, shard_dir):
    if args.engine == "onnx":
        return onnx_generate.command(args, shard_dir, _export_dir(args))
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.generate",
        shard_dir,
        "--path",
        args.path,
        "--gen-subset",
        "train",
        "--source-lang",
        args.source_lang,
        "--target-lang",
        args.target_lang,
        "--beam",
        str(args.beam),
        "--lenpen",
        str(args.lenpen),
        "--nbest",
        "1",
        "--max-tokens",
        str(args.max_tokens),
        "--seed",
        str(args.seed),
        "--num-workers",
        "0",
        "--no-progress-bar",
    ]
    # fairseq main (2024) drops the last batch when its size is not a multiple of
    # --required-batch-size-multiple (default 8): up to 7 sentences per shard would vanish.
    cmd += ["--required-batch-size-multiple", "1"]
    if args.batch_size:
        cmd += ["--batch-size", str(args.batch_size)]
    if args.user_dir:
        cmd += ["--user-dir", args.user_dir]
    if args.cpu:
        cmd.append("--cpu")
    if args.fp16:
        cmd.append("--fp16")
    if args.post_process:
        cmd += ["--post-process", args.post_process]
    return cmd + shlex.split(args.generate_args)


def _child_setup(parent):  # pragma: no cover - runs in the forked child
    """Linux: the child (fairseq-generate or the ONNX engine) gets SIGTERM when this process dies,
    even by SIGKILL, so that a killed run leaves no translation running with parent 1."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # died before the request
        os._exit(128 + signal.SIGTERM)


def _popen_kwargs():
    if not sys.platform.startswith("linux"):
        return {}
    me = os.getpid()
    return {"preexec_fn": lambda: _child_setup(me)}


def _terminated(signum, _frame):
    """SIGTERM / SIGHUP (compress stopped or killed: the parent-death signal) end the run like
    Ctrl-C: the running fairseq-generate is killed and the half-written shard removed."""
    raise SystemExit(128 + signum)


def _duration(seconds):
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _progress(message):
    print(f"[distill] {message}", file=sys.stderr, flush=True)


class _HypothesisCounter:
    """Counts the ``H-`` lines of a growing fairseq-generate output file (complete lines only)."""

    def __init__(self, path):
        self.path, self.offset, self.count, self._rest = path, 0, 0, b""

    def update(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.count
        self.offset += len(data)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()  # a line still being written
        self.count += sum(1 for line in lines if line.startswith(b"H-"))
        return self.count


def _report(k, num_shards, done, size, shard_start, run):
    """One progress line: shard k/N, sentences done, elapsed, and an estimate of what is left."""
    now = time.monotonic()
    elapsed = now - shard_start
    line = (
        f"shard {k} ({k + 1}/{num_shards}): {done:,}/{size:,} sentences "
        f"({100 * done // max(size, 1)}%), "
        f"{_duration(elapsed)} elapsed"
    )
    if 0 < done < size:
        line += f", about {_duration(elapsed * (size - done) / done)} left in this shard"
    total_done = run["done"] + done
    line += f"; run: {total_done:,}/{run['total']:,} sentences, {_duration(now - run['start'])}"
    _progress(line)


def _translate_shard(args, prefix, k, start, end, run):
    gen_file = os.path.join(args.work_dir, f"shard{k}.gen")
    shard_dir = os.path.join(args.work_dir, f"shard{k}.data")
    log_file = os.path.join(args.work_dir, f"shard{k}.log")
    size = end - start
    shard_start = time.monotonic()
    _progress(
        f"shard {k} ({k + 1}/{args.num_shards}): translating train lines {start + 1}-{end} "
        f"({size:,} sentences)"
    )
    _write_shard_data(args, prefix, start, end, shard_dir)
    cmd = _generate_command(args, shard_dir)
    print(f"[distill] shard {k}: lines {start + 1}-{end}: {shlex.join(cmd)}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # hypotheses reach the file as they are made
    # the output becomes shardK.gen only once it is complete and checked
    with atomic_path(gen_file) as tmp:
        with (
            open(tmp, "w", encoding="utf-8") as out,
            open(log_file, "w", encoding="utf-8") as err,
        ):
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, **_popen_kwargs())
            try:
                counter, last = _HypothesisCounter(tmp), time.monotonic()
                while True:
                    try:
                        rc = proc.wait(timeout=min(1.0, args.progress_interval or 1.0))
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if args.progress_interval and time.monotonic() - last >= args.progress_interval:
                        last = time.monotonic()
                        _report(k, args.num_shards, counter.update(), size, shard_start, run)
            except BaseException:  # Ctrl-C, SIGTERM as KeyboardInterrupt, ...: no orphan left
                proc.kill()
                proc.wait()
                raise
        if rc != 0:
            with open(log_file, encoding="utf-8") as f:
                tail = f.read()[-3000:]
            raise DistillError(
                f"{_engine_name(args)} failed on shard {k} (exit {rc}); {log_file}:\n{tail}"
            )
        check_shard(tmp, start, end - start, args.allow_empty)
    shutil.rmtree(shard_dir, ignore_errors=True)
    _report(k, args.num_shards, size, size, shard_start, run)
    run["done"] += size


def _check_config(args, n):
    """Record the settings that determine the shards' content; refuse to mix runs."""
    config = {
        "data": os.path.abspath(args.data),
        "path": os.path.abspath(args.path),
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
        "num_lines": n,
        "num_shards": args.num_shards,
        "beam": args.beam,
        "lenpen": args.lenpen,
        "seed": args.seed,
        "fp16": args.fp16,
        "post_process": args.post_process,
        "generate_args": args.generate_args,
    }
    if args.engine != "fairseq":  # (a work directory of before --engine: fairseq's)
        config["engine"] = args.engine
    path = os.path.join(args.work_dir, "config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        diff = {
            k: (old.get(k), config.get(k)) for k in {**old, **config} if old.get(k) != config.get(k)
        }
        if diff:
            detail = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
            raise DistillError(
                f"{args.work_dir} holds shards made with other settings ({detail}). "
                "Rerun with the same settings to resume, or delete the directory (or use another "
                "--work-dir) to start over"
            )
    else:
        _atomic_write_text(path, [json.dumps(config, indent=1)])


def build_parser():
    p = argparse.ArgumentParser(
        description="Sequence-level KD data: translate the train split of DATA with a teacher "
        "(fairseq-generate, resumable shards) and binarize (original source, teacher's "
        "hypotheses) with the teacher's dictionaries into --out-dir.",
    )
    p.add_argument("data", help="the teacher's data-bin (train split and dict.*.txt)")
    p.add_argument("--path", required=True, help="teacher checkpoint")
    p.add_argument("--out-dir", required=True, help="output data-bin (train split)")
    p.add_argument("--work-dir", help="shards and merged text (default OUT_DIR/distill-work)")
    p.add_argument("-s", "--source-lang", help="source language (default: inferred from DATA)")
    p.add_argument("-t", "--target-lang", help="target language (default: inferred from DATA)")
    p.add_argument("--beam", type=int, default=5, help="beam size (default 5)")
    p.add_argument("--lenpen", type=float, default=1.0, help="length penalty (default 1.0)")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per generation batch")
    p.add_argument("--batch-size", type=int, help="sentences per generation batch (optional)")
    p.add_argument(
        "--num-shards",
        type=int,
        default=0,
        help="shards (units of resumption); 0 = one per 20,000 lines",
    )
    p.add_argument(
        "--shard-id",
        type=int,
        help="translate only this shard and stop (e.g. one process per GPU); a later "
        "run without it translates what is missing and merges",
    )
    p.add_argument(
        "--engine",
        choices=["fairseq", "onnx", "auto"],
        default="fairseq",
        help="what translates: fairseq-generate (default; CPU or GPU); the "
        "teacher's ONNX Runtime export with fairseq's beam search "
        "(lightcompress.kd.onnx_generate: 2.3x fairseq-generate's speed on the CPU; "
        "batches of --batch-size sentences, default 64; --generate-args may hold "
        "--max-len-a, --max-len-b, --min-len, --unkpen); auto: onnx on the CPU "
        "where the settings allow it and the teacher exports, else fairseq",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="--engine onnx: ONNX Runtime threads (default 0: as torch, "
        "OMP_NUM_THREADS when it is set, else one per core)",
    )
    p.add_argument("--user-dir", help="--user-dir for fairseq-generate (the teacher's plugin)")
    p.add_argument("--cpu", action="store_true", help="generate on CPU")
    p.add_argument("--fp16", action="store_true", help="generate in fp16")
    p.add_argument("--seed", type=int, default=1, help="generation seed (default 1)")
    p.add_argument(
        "--post-process",
        help="fairseq-generate --post-process (e.g. sentencepiece, "
        "subword_nmt): remove subword marks and stop after writing text",
    )
    p.add_argument(
        "--remove-bpe",
        nargs="?",
        const="@@ ",
        dest="post_process",
        help="same as --post-process (fairseq's alias; bare flag = '@@ ')",
    )
    p.add_argument(
        "--generate-args",
        default="",
        help="more fairseq-generate arguments, one string (e.g. '--max-len-b 250')",
    )
    p.add_argument(
        "--allow-empty", action="store_true", help="keep empty hypotheses instead of refusing them"
    )
    p.add_argument("--workers", type=int, default=1, help="fairseq-preprocess workers")
    p.add_argument(
        "--progress-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="print progress (shard i/N, sentences done, elapsed) to stderr every this "
        "many seconds while a shard is translated; 0: only when a shard starts "
        "and ends (default %(default)s)",
    )
    return p


def _check_args(args):
    """Refuse bad arguments (:class:`UsageError`: one line and exit status 2 from the script)."""
    if not os.path.isdir(args.data):
        raise UsageError(f"data directory {args.data} not found")
    if not os.path.isfile(args.path):
        raise UsageError(f"--path: teacher checkpoint {args.path} not found")
    if args.user_dir and not os.path.isdir(args.user_dir) and "/" in args.user_dir:
        raise UsageError(f"--user-dir: directory {args.user_dir} not found")
    for name in ("beam", "max_tokens", "workers"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.num_shards < 0:
        raise UsageError(
            f"--num-shards must be >= 0 (0: one per 20,000 lines), got {args.num_shards}"
        )
    if args.progress_interval < 0:
        raise UsageError(f"--progress-interval must be >= 0, got {args.progress_interval}")
    if args.shard_id is not None and args.shard_id < 0:
        raise UsageError(f"--shard-id must be >= 0, got {args.shard_id}")
    if args.threads < 0:
        raise UsageError(f"--threads must be >= 0, got {args.threads}")
    if args.engine == "onnx":
        why = onnx_generate.refuses(args)
        if why:
            raise UsageError(why)


def _resolve_engine(args):
    onnx_generate.choose(args, lambda: _export_teacher(args), _progress)


def main(argv=None):
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    old = {sig: signal.signal(sig, _terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(argv)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _main(argv):
    args = build_parser().parse_args(argv)
    _check_args(args)  # (before importing fairseq: a bad argument is refused at once)
    from fairseq.data import data_utils

    import lightcompress.plugin  # noqa: F401  (plugin architectures; fairseq checkpoints load)

    if not args.source_lang or not args.target_lang:
        args.source_lang, args.target_lang = data_utils.infer_language_pair(args.data)
        if not args.source_lang:
            raise DistillError(f"cannot infer the language pair of {args.data}; pass -s and -t")
    src, tgt = args.source_lang, args.target_lang
    args.work_dir = args.work_dir or os.path.join(args.out_dir, "distill-work")

    prefix = _train_prefix(args.data, "train", src, tgt)
    n = len(_load(prefix, src))
    if args.num_shards <= 0:
        args.num_shards = max(1, math.ceil(n / 20000))
    args.num_shards = min(args.num_shards, max(n, 1))
    if args.shard_id is not None and args.shard_id >= args.num_shards:
        raise UsageError(
            f"--shard-id {args.shard_id}: there are {args.num_shards} shards (0 to "
            f"{args.num_shards - 1})"
        )
    os.makedirs(args.work_dir, exist_ok=True)  # only now: a refused run leaves nothing behind
    _resolve_engine(args)
    _check_config(args, n)
    bounds = _shard_bounds(n, args.num_shards)

    todo = range(args.num_shards) if args.shard_id is None else [args.shard_id]
    if args.engine == "onnx" and any(
        not os.path.exists(os.path.join(args.work_dir, f"shard{k}.gen")) for k in todo
    ):
        try:
            _export_teacher(args)
        except DistillError as exc:
            raise DistillError(
                f"{exc}; translate with fairseq-generate: --engine fairseq"
            ) from None
    kept = [k for k in todo if os.path.exists(os.path.join(args.work_dir, f"shard{k}.gen"))]
    missing = [k for k in todo if k not in kept]
    run = {
        "start": time.monotonic(),
        "done": 0,
        "total": sum(bounds[k][1] - bounds[k][0] for k in missing),
    }
    _progress(
        f"{n:,} train pairs in {args.num_shards} shards; {len(kept)} done before, "
        f"{len(missing)} to translate ({run['total']:,} sentences)"
    )
    for k in todo:
        start, end = bounds[k]
        gen_file = os.path.join(args.work_dir, f"shard{k}.gen")
        if k in kept:
            print(f"[distill] shard {k}: done, kept ({gen_file})", flush=True)
            continue
        _translate_shard(args, prefix, k, start, end, run)
    if args.shard_id is not None:
        return 0

    sources, hyps = [], []
    for k, (start, end) in enumerate(bounds):
        s, h = check_shard(
            os.path.join(args.work_dir, f"shard{k}.gen"),
            start,
            end - start,
            args.allow_empty,
        )
        sources += s
        hyps += h
    text_prefix = os.path.join(args.work_dir, "train")
    _atomic_write_text(f"{text_prefix}.{src}", sources)
    _atomic_write_text(f"{text_prefix}.{tgt}", hyps)
    print(f"[distill] merged {n} pairs into {text_prefix}.{{{src},{tgt}}}", flush=True)
    if args.post_process:
        print(
            f"[distill] --post-process {args.post_process!r}: the text is no longer in the "
            "dictionaries' subword space; segment and binarize it yourself (not binarized)",
            flush=True,
        )
        return 0

    _progress(f"binarizing {n:,} pairs into {args.out_dir}")
    _binarize(text_prefix, args, src, tgt)
    out_prefix = os.path.join(args.out_dir, f"train.{src}-{tgt}.")
    _verify_source(prefix, out_prefix, src)
    if len(_load(out_prefix, tgt)) != n:
        raise DistillError(f"binarized distilled target does not have {n} lines")
    print(f"[distill] wrote {args.out_dir}: {n} pairs (source verified against {args.data})")
    return 0


def cli_main(argv=None) -> int:
    """``scripts/distill_data.py``: :func:`main`'s exit status, a :class:`DistillError` as one
    line (status 2 for a bad argument, 1 for a run that cannot go on)."""
    return cli.run(main, argv, "distill_data")


if __name__ == "__main__":  # python -m lightcompress.kd.distill (lightcompress-compress's KD step)
    import sys

    sys.exit(cli_main())
