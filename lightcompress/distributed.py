"""Data-parallel ``fairseq-train`` on CPU workers through ``torchrun``: the rank entry.

torchrun (``python -m torch.distributed.run``) starts the processes, hosts the rendezvous, and
stops every rank when one fails. This file is the training script it runs on each rank::

    torchrun --standalone --nproc-per-node 2 --max-restarts 0 \\
        lightcompress/distributed.py DATA_BIN --user-dir lightcompress --arch ... --cpu ...
    torchrun --nnodes 2 --nproc-per-node 2 --max-restarts 0 --rdzv-backend c10d \\
        --rdzv-endpoint HOST0:29400 --rdzv-id RUN lightcompress/distributed.py ...  # each node

``scripts/train_distributed.sh`` builds these commands (``docs/distributed.md``). A rank reads
``RANK`` and ``WORLD_SIZE`` from torchrun's environment and runs ``fairseq_cli.train.cli_main``
with the flags of :func:`cpu_rank_args` (gloo, ``env://``: the store torchrun hosts at
``MASTER_ADDR:MASTER_PORT``; fairseq counts no CUDA device when the init method is given).

Written here because neither torchrun nor fairseq has them (each small):

- the rank ends when torchrun dies, ``kill -9`` included (:func:`die_with_launcher`: torchrun
  starts ranks in their own session and leaves them running when it is killed);
- global rank 0, the only one that writes checkpoints, holds ``SAVE_DIR/.lightcompress-train.lock``
  (:class:`SaveDirLock`): a second run on the same save directory is refused with one line;
- a failing rank prints one line naming itself and the cause; a rank that fails because
  another one died says so and waits for torchrun to stop it, so that torchrun's summary
  ("Root Cause") names the rank that died first;
- ``LC_DIST_TIMEOUT=S``: a rank still running after ``S`` seconds ends (torchrun then stops all).

Other command: ``python -m lightcompress.distributed update-freq ...`` (:func:`update_freq`).
This file imports nothing of the package: torchrun runs it by path, before fairseq imports the
package from ``--user-dir`` (a second copy of it would clash).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import datetime
import json
import math
import os
import signal
import socket
import sys
import threading
import time
import traceback

__all__ = [
    "LOCK_NAME",
    "LaunchRefused",
    "SaveDirLock",
    "cpu_rank_args",
    "die_with_launcher",
    "main",
    "run_worker",
    "save_dir_of",
    "update_freq",
]

LOCK_NAME = ".lightcompress-train.lock"
PROG = "python -m lightcompress.distributed"
ENTRY = os.path.abspath(__file__)
# what gloo says in a rank whose peer died: that rank is a consequence, not the cause
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
_PEER_WAIT = 10.0  # seconds such a rank waits for torchrun to stop it


def _say(line: str, stream=None) -> None:
    """Write one line in one call: the ranks share torchrun's output, and a line written in
    pieces (``print``'s text, then its newline) gets mixed with another rank's."""
    stream = stream or sys.stderr
    stream.write(line + "\n")
    stream.flush()


class LaunchRefused(RuntimeError):
    """Nothing was trained: not under torchrun, or the save directory is in use (one line)."""


def update_freq(
    gpus: int,
    max_tokens: int,
    effective_tokens: int | None = None,
    reference_gpus: int | None = None,
    reference_max_tokens: int | None = None,
    reference_update_freq: int = 1,
) -> int:
    """``--update-freq`` that keeps a reference setup's tokens per update on ``gpus`` workers.

    The reference is either ``effective_tokens`` (tokens per update) or
    ``reference_gpus x reference_max_tokens x reference_update_freq``
    (``reference_max_tokens`` defaults to ``max_tokens``). The result is
    ``ceil(reference / (gpus * max_tokens))``, at least 1: the effective batch is the
    reference's or slightly larger when it does not divide.

    >>> update_freq(2, 4096, reference_gpus=8)
    4
    >>> update_freq(1, 3584, reference_gpus=8, reference_update_freq=16)
    128
    """
    if gpus < 1 or max_tokens < 1:
        raise ValueError(f"gpus and max_tokens must be >= 1, got {gpus}, {max_tokens}")
    if effective_tokens is None:
        if reference_gpus is None:
            raise ValueError("give effective_tokens or reference_gpus")
        ref_tokens = reference_max_tokens or max_tokens
        effective_tokens = reference_gpus * ref_tokens * reference_update_freq
    if effective_tokens < 1:
        raise ValueError(f"effective tokens must be >= 1, got {effective_tokens}")
    return max(1, math.ceil(effective_tokens / (gpus * max_tokens)))


def cpu_rank_args(rank: int, world_size: int) -> list[str]:
    """The ``fairseq-train`` flags of one CPU rank under torchrun (gloo, ``env://``)."""
    return [
        "--cpu",
        "--distributed-backend",
        "gloo",
        "--distributed-world-size",
        str(world_size),
        "--distributed-rank",
        str(rank),
        "--distributed-no-spawn",
        "--distributed-init-method",
        "env://",
        "--ddp-backend",
        "legacy_ddp",
    ]


def save_dir_of(train_args: list[str]) -> str | None:
    """The ``--save-dir`` fairseq-train writes to (the last one given, else ``checkpoints``;
    ``--save-dir X`` or ``--save-dir=X``), or None with ``--no-save``."""
    save_dir = "checkpoints"
    for i, arg in enumerate(train_args):
        if arg == "--no-save":
            return None
        if arg == "--save-dir" and i + 1 < len(train_args):
            save_dir = train_args[i + 1]
        elif arg.startswith("--save-dir="):
            save_dir = arg.split("=", 1)[1]
    return save_dir


# --- one rank ----------------------------------------------------------------------------


class SaveDirLock:
    """``SAVE_DIR/.lightcompress-train.lock``: one training run per save directory.

    Global rank 0 holds an exclusive ``flock`` on it for the whole run (the kernel drops it when
    the process dies, ``kill -9`` included); the file names the holder (pid, torchrun's pid,
    host, start time, command) and is removed at the end. The file lives in the directory
    itself, so every name of the directory (relative, absolute, ``--save-dir=``, a symlink)
    meets the same lock. A file left by a killed run is not locked any more: taken over with a
    warning.
    """

    def __init__(self, save_dir: str):
        self.save_dir = save_dir
        self.path = os.path.join(save_dir, LOCK_NAME)
        self._fd: int | None = None

    def _read(self, fd: int) -> dict:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            info = json.loads(os.read(fd, 65536).decode("utf-8") or "{}")
        except (UnicodeDecodeError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def acquire(self, out=None, command: list[str] | None = None) -> SaveDirLock:
        """Take the lock or raise :class:`LaunchRefused`; a warning goes to ``out``."""
        import fcntl

        out = out or sys.stderr
        try:
            os.makedirs(self.save_dir, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    old = self._read(fd)
                    os.close(fd)
                    who = f"torchrun pid {old.get('launcher', '?')}, rank 0 pid {old.get('pid')}"
                    raise LaunchRefused(
                        f"--save-dir {self.save_dir} is in use by another training run ({who} "
                        f"on {old.get('host', '?')}, started {old.get('started', '?')}; lock "
                        f"{self.path}): wait for it to end, stop it (kill "
                        f"{old.get('launcher', 'PID')}), or train into another --save-dir"
                    ) from None
                with contextlib.suppress(FileNotFoundError):  # not removed by its last owner
                    if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                        break
                os.close(fd)
        except OSError as exc:
            raise LaunchRefused(
                f"--save-dir {self.save_dir}: cannot lock {self.path}: {exc.strerror or exc}"
            ) from exc
        old = self._read(fd)
        if old:
            out.write(
                f"warning: taking over the lock of an earlier run on --save-dir {self.save_dir} "
                f"that ended without removing it (rank 0 pid {old.get('pid')}, started "
                f"{old.get('started', '?')}): {self.path}\n"
            )
            out.flush()
        info = {
            "pid": os.getpid(),
            "launcher": os.getppid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": list(command or []),
        }
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(info) + "\n").encode("utf-8"))
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the file (still holding the flock, so no one takes a file being removed)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_watching = False


def die_with_launcher(interval: float = 1.0) -> bool:
    """End this process when its parent (torchrun) dies; returns whether it watches.

    On Linux the kernel is asked for SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)``
    through ctypes); everywhere, a daemon thread checks every ``interval`` seconds that the
    parent is still the one it started with. Call it before fairseq starts; again: no-op.
    """
    global _watching
    launcher = os.getppid()
    if _watching or launcher == 1:  # watching already; or started by init: nothing to watch
        return _watching
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # the thread below still watches
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(interval)
        with contextlib.suppress(OSError, ValueError):  # the output may have gone with torchrun
            _say(f"torchrun (pid {launcher}) is gone; ending this rank")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        os._exit(128 + signal.SIGTERM)  # a SIGTERM handler that did not end the process

    threading.Thread(target=watch, daemon=True, name="lc-launcher-watch").start()
    _watching = True
    return True


def _end_after(seconds: float, rank: int) -> None:
    def timeout() -> None:
        time.sleep(seconds)
        _say(
            f"[rank {rank}] error: timeout: still running after {seconds:g} s "
            "(LC_DIST_TIMEOUT / TIMEOUT); ending this rank, torchrun stops the others"
        )
        os._exit(124)

    threading.Thread(target=timeout, daemon=True, name="lc-timeout").start()


def run_worker(argv: list[str], env=None) -> None:
    """One rank: ``fairseq-train ARGV`` with :func:`cpu_rank_args`, in this process.

    Reads ``RANK`` / ``WORLD_SIZE`` (torchrun's), ends with torchrun, holds the save-directory
    lock on global rank 0, adds ``--load-checkpoint-on-all-dp-ranks`` (docs/distributed.md,
    "Failures and resuming").
    Raises :class:`LaunchRefused` before fairseq starts when it cannot run.
    """
    env = os.environ if env is None else env
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    except (KeyError, ValueError):
        raise LaunchRefused(
            "not started by torchrun (RANK / WORLD_SIZE unset): run NPROC=N "
            "scripts/train_distributed.sh ARGS, or torchrun --standalone --nproc-per-node N "
            f"--max-restarts 0 {ENTRY} ARGS"
        ) from None
    die_with_launcher()
    if env.get("LC_DIST_TIMEOUT"):
        try:
            _end_after(float(env["LC_DIST_TIMEOUT"]), rank)
        except ValueError:
            raise LaunchRefused(f"LC_DIST_TIMEOUT={env['LC_DIST_TIMEOUT']}: not seconds") from None
    save_dir = save_dir_of(argv) if rank == 0 else None
    lock = SaveDirLock(save_dir).acquire(command=argv) if save_dir else None
    _say(
        f"[rank {rank}] pid {os.getpid()} of {world} ranks, torchrun pid {os.getppid()}, "
        f"rendezvous {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}",
        sys.stdout,
    )
    extra = cpu_rank_args(rank, world)
    if "--load-checkpoint-on-all-dp-ranks" not in argv:
        # every rank reads checkpoint_last.pt itself: fairseq otherwise broadcasts rank 0's
        # loaded state, and the receiving torch.load (weights_only on torch >= 2.6) rejects
        # the omegaconf objects in it, so resuming would fail on every rank but 0
        extra.append("--load-checkpoint-on-all-dp-ranks")
    try:
        from fairseq_cli import train as fairseq_train

        sys.argv = ["fairseq-train", *argv, *extra]
        fairseq_train.cli_main()
        import torch.distributed as dist

        if dist.is_initialized():  # not left to the interpreter's exit, where gloo may abort
            dist.destroy_process_group()
    finally:
        if lock is not None:
            lock.release()


def _rank_main(argv: list[str]) -> int:
    rank = os.environ.get("RANK", "?")
    resume = (
        "rerun the same command to resume from the last checkpoint (checkpoint_last.pt in "
        "--save-dir)"
    )
    try:
        run_worker(argv)
    except LaunchRefused as exc:
        _say(f"[rank {rank}] error: {exc}")
        return 2
    except Exception as exc:  # noqa: BLE001 - one line naming the rank, then torchrun's summary
        cause = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if type(exc).__module__.startswith("lightcompress."):  # the plugin's own: one line
            _say(f"[rank {rank}] error: {exc}")
            return 2
        if any(s in str(exc) for s in _PEER_GONE):
            _say(
                f"[rank {rank}] stopping: another rank ended first ({cause}); torchrun's "
                f"summary below names it (Root Cause); {resume}"
            )
            time.sleep(_PEER_WAIT)  # torchrun records the dead rank first, then stops this one
        else:
            traceback.print_exc()
            _say(f"[rank {rank}] error: {cause}; {resume}")
        return 1
    return 0


# --- command line ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The --update-freq that keeps a reference effective batch; and the rank "
        "entry of data-parallel fairseq-train under torchrun: torchrun ... "
        "lightcompress/distributed.py FAIRSEQ_TRAIN_ARGS (docs/distributed.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("update-freq", help="print the --update-freq that keeps a reference batch")
    q.add_argument("--gpus", type=int, required=True, help="workers you have")
    q.add_argument("--max-tokens", type=int, required=True, help="your --max-tokens")
    q.add_argument("--effective-tokens", type=int, help="reference tokens per update")
    q.add_argument("--reference-gpus", type=int, help="workers of the reference setup")
    q.add_argument("--reference-max-tokens", type=int, help="of the reference (default: yours)")
    q.add_argument("--reference-update-freq", type=int, default=1, help="(default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] not in (["update-freq"], ["-h"], ["--help"]):
        return _rank_main(argv)  # a rank under torchrun: fairseq-train's arguments
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        print(
            update_freq(
                args.gpus,
                args.max_tokens,
                args.effective_tokens,
                args.reference_gpus,
                args.reference_max_tokens,
                args.reference_update_freq,
            )
        )
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    # run as a file: its own directory (the package) must not shadow top-level modules
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(ENTRY):
        sys.path.pop(0)
    sys.exit(main())
