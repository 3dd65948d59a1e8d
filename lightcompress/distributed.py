"""Data-parallel ``fairseq-train`` on several CPU workers, with a watchdog.

fairseq's own multi-process path counts CUDA devices, so on CPU it starts nothing. What works
(see ``docs/distributed.md``) is one ``fairseq-train`` process per rank with the gloo backend::

    --cpu --distributed-backend gloo --distributed-world-size N --distributed-rank R
    --distributed-no-spawn --distributed-init-method tcp://127.0.0.1:PORT --ddp-backend legacy_ddp

:func:`launch` starts those ``N`` processes and watches them: when one rank exits with an
error (or is killed), the others are terminated at once, the launcher names the rank, how it
ended and the last lines it printed, and exits non-zero. Without it a surviving rank waits in
a collective until gloo's timeout (30 minutes by default). ``--heartbeat-timeout`` (fairseq's
own watchdog inside each rank) is passed as well, for a rank that hangs without exiting.

Command line::

    python -m lightcompress.distributed launch --nproc 2 -- DATA_BIN --user-dir ... --arch ...
    python -m lightcompress.distributed update-freq --gpus 2 --max-tokens 4096 \\
        --reference-gpus 8 --reference-max-tokens 4096          # prints 4

Each rank runs ``python .../lightcompress/distributed.py worker ARGS``, which is
``fairseq_cli.train.cli_main`` (:func:`run_worker`). Another rank entry can be given as a Python
file (``launch --worker FILE``, or the environment variable ``LC_DIST_WORKER`` when the launcher
is started by ``scripts/train_distributed.sh``): each rank then runs ``python FILE ARGS``. The
tests use that to wrap :func:`run_worker` with fault injection (``tests/faults.py``); nothing
of it lives here.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = [
    "WorkerFailed",
    "cpu_rank_args",
    "find_free_port",
    "launch",
    "main",
    "run_worker",
    "update_freq",
]

_TAIL_LINES = 25
_HELP_FLAGS = {"-h", "--help"}


class WorkerFailed(RuntimeError):
    """A rank exited with an error; the other ranks were stopped."""

    def __init__(self, rank: int, returncode: int, message: str):
        super().__init__(message)
        self.rank = rank
        self.returncode = returncode


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


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def cpu_rank_args(rank: int, world_size: int, port: int, host: str = "127.0.0.1") -> list[str]:
    """The ``fairseq-train`` flags of one CPU rank (gloo, one process per rank)."""
    return [
        "--cpu",
        "--distributed-backend", "gloo",
        "--distributed-world-size", str(world_size),
        "--distributed-rank", str(rank),
        "--distributed-no-spawn",
        "--distributed-init-method", f"tcp://{host}:{port}",
        "--ddp-backend", "legacy_ddp",
    ]  # fmt: skip


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def _pump(stream, rank: int, tail: collections.deque, out) -> None:
    for line in iter(stream.readline, ""):
        tail.append(line.rstrip("\n"))
        out.write(f"[rank {rank}] {line}")
        out.flush()
    stream.close()


def _stop(procs: list[subprocess.Popen], grace: float) -> None:
    """SIGTERM every live rank, then SIGKILL those still alive after ``grace`` seconds."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        if p.poll() is None:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def launch(
    train_args: list[str],
    nproc: int,
    port: int | None = None,
    host: str = "127.0.0.1",
    timeout: float | None = None,
    heartbeat_timeout: int | None = 300,
    python: str = sys.executable,
    env: dict | None = None,
    out=None,
    grace: float = 10.0,
    worker: str | None = None,
) -> None:
    """Run ``fairseq-train TRAIN_ARGS`` on ``nproc`` CPU ranks and wait for all of them.

    Parameters
    ----------
    train_args : list of str
        ``fairseq-train`` arguments (data, ``--user-dir``, ``--arch``, ...), without the
        distributed flags, which are added per rank (:func:`cpu_rank_args`).
    nproc : int
        Number of ranks (processes) on this machine.
    port : int, optional
        Rendezvous port on ``host``; a free one is picked when None.
    timeout : float, optional
        Wall-clock limit of the whole run in seconds; all ranks are stopped when it passes.
    heartbeat_timeout : int, optional
        fairseq's ``--heartbeat-timeout`` for every rank (seconds without a forward pass
        before a rank kills itself), unless ``train_args`` sets it; None leaves it unset.
    out : text stream, optional
        Where the ranks' output goes, one ``[rank R]`` prefix per line (default stdout).
    worker : str, optional
        A Python file each rank runs as ``python WORKER ARGS`` instead of this module's
        ``worker`` command (:func:`run_worker`), e.g. a wrapper that instruments it.

    Raises
    ------
    WorkerFailed
        When a rank exits non-zero or is killed (the others are stopped first), or on timeout.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    out = out or sys.stdout
    port = port or find_free_port(host)
    extra: list[str] = []
    if heartbeat_timeout and "--heartbeat-timeout" not in train_args:
        extra = ["--heartbeat-timeout", str(heartbeat_timeout)]
    if "--load-checkpoint-on-all-dp-ranks" not in train_args:
        # every rank reads checkpoint_last.pt itself: fairseq otherwise broadcasts rank 0's
        # loaded state, and the receiving torch.load (weights_only on torch >= 2.6) rejects
        # the omegaconf objects in it, so resuming would fail on every rank but 0
        extra.append("--load-checkpoint-on-all-dp-ranks")
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env["PYTHONUNBUFFERED"] = "1"

    procs: list[subprocess.Popen] = []
    tails: list[collections.deque] = []
    pumps: list[threading.Thread] = []
    exits: queue.Queue = queue.Queue()
    started = time.monotonic()
    try:
        for rank in range(nproc):
            # by file, not ``-m lightcompress...``: the rank must not import the package
            # before fairseq imports it from --user-dir (another copy would clash)
            if worker:
                cmd = [python, os.path.abspath(worker)]
            else:
                cmd = [python, os.path.abspath(__file__), "worker"]
            cmd += list(train_args) + extra + cpu_rank_args(rank, nproc, port, host)
            proc = subprocess.Popen(
                cmd,
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            tail: collections.deque = collections.deque(maxlen=_TAIL_LINES)
            pump = threading.Thread(target=_pump, args=(proc.stdout, rank, tail, out), daemon=True)
            pump.start()
            threading.Thread(
                target=lambda r=rank, p=proc: exits.put((r, p.wait())), daemon=True
            ).start()
            procs.append(proc)
            tails.append(tail)
            pumps.append(pump)
        out.write(
            f"[launcher] {nproc} ranks on tcp://{host}:{port}, pids "
            f"{' '.join(str(p.pid) for p in procs)}\n"
        )
        out.flush()

        # one waiter thread per rank: exits arrive in the order the ranks ended, so the
        # rank that died first is named, not a survivor that failed because of it
        codes: list[int | None] = [None] * nproc
        while any(c is None for c in codes):
            remaining = None if timeout is None else timeout - (time.monotonic() - started)
            if remaining is not None and remaining <= 0:
                running = [r for r, c in enumerate(codes) if c is None]
                _stop(procs, grace)
                raise WorkerFailed(
                    running[0],
                    124,
                    f"timeout: rank(s) {running} still running after {timeout:.0f} s; "
                    "stopped all ranks",
                )
            try:
                rank, code = exits.get(timeout=remaining)
            except queue.Empty:
                continue
            codes[rank] = code
            if code != 0:
                _stop(procs, grace)
                for pump in pumps:
                    pump.join(timeout=2)
                others = [
                    f"rank {r} {_describe_exit(p.returncode)}"
                    for r, p in enumerate(procs)
                    if r != rank and codes[r] is None
                ]
                msg = (
                    f"rank {rank} (pid {procs[rank].pid}) {_describe_exit(code)} first; "
                    f"stopped the others ({', '.join(others) or 'none left'})"
                    + f". Last lines of rank {rank}:\n    "
                    + "\n    ".join(tails[rank])
                    + "\nRestart the same command to resume from the last checkpoint "
                    "(checkpoint_last.pt in --save-dir)."
                )
                raise WorkerFailed(rank, code, msg)
    finally:
        _stop(procs, grace)  # also on KeyboardInterrupt: leave no orphaned rank behind
    for pump in pumps:
        pump.join(timeout=2)


# --- one rank ----------------------------------------------------------------------------


def run_worker(argv: list[str]) -> None:
    """One rank: ``fairseq-train ARGV`` in this process (``fairseq_cli.train.cli_main``)."""
    from fairseq_cli import train as fairseq_train

    sys.argv = ["fairseq-train"] + list(argv)
    fairseq_train.cli_main()


# --- command line ------------------------------------------------------------------------


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        run_worker(argv[1:])
        return 0

    parser = argparse.ArgumentParser(
        prog="python -m lightcompress.distributed",
        description="Data-parallel fairseq-train on CPU workers (gloo), with a watchdog; "
        "and the --update-freq that keeps a reference effective batch.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "launch",
        help="run fairseq-train on N CPU ranks: launch --nproc N -- FAIRSEQ_TRAIN_ARGS",
    )
    p.add_argument("--nproc", type=int, required=True, help="number of ranks")
    p.add_argument("--port", type=int, default=None, help="rendezvous port (default: a free one)")
    p.add_argument("--host", default="127.0.0.1", help="rendezvous host (default: %(default)s)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="stop all ranks after this many seconds (default: no limit)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=int,
        default=300,
        help="fairseq --heartbeat-timeout for every rank; 0 leaves it unset (default: %(default)s)",
    )
    p.add_argument(
        "--worker",
        default=os.environ.get("LC_DIST_WORKER") or None,
        metavar="FILE",
        help="Python file each rank runs as 'python FILE FAIRSEQ_TRAIN_ARGS' instead of "
        "fairseq-train (default: $LC_DIST_WORKER, else fairseq-train)",
    )
    q = sub.add_parser(
        "update-freq",
        help="print the --update-freq that keeps a reference number of tokens per update",
    )
    q.add_argument("--gpus", type=int, required=True, help="workers you have")
    q.add_argument("--max-tokens", type=int, required=True, help="your --max-tokens")
    q.add_argument("--effective-tokens", type=int, help="reference tokens per update")
    q.add_argument("--reference-gpus", type=int, help="workers of the reference setup")
    q.add_argument(
        "--reference-max-tokens",
        type=int,
        help="--max-tokens of the reference (default: yours)",
    )
    q.add_argument(
        "--reference-update-freq",
        type=int,
        default=1,
        help="--update-freq of the reference (default: %(default)s)",
    )

    own, passthrough = _split_passthrough(argv)
    if own[:1] == ["launch"] and _HELP_FLAGS & set(passthrough):
        # ``scripts/train_distributed.sh --help`` passes --help on to fairseq-train: answer it
        # here, instead of starting ranks that would each print fairseq-train's help
        p.print_help()
        print(
            "\nfairseq-train's own options: fairseq-train --help (or fairseq-train --arch ARCH "
            "--help for a model's flags)."
        )
        return 0
    args = parser.parse_args(own)
    if args.command == "update-freq":
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
    if not passthrough:
        parser.error("give the fairseq-train arguments after --")
    if args.worker and not os.path.isfile(args.worker):
        parser.error(f"--worker: no such file: {args.worker}")

    def _on_sigterm(signum, frame):  # e.g. a scheduler's kill: stop the ranks too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        launch(
            passthrough,
            args.nproc,
            port=args.port,
            host=args.host,
            timeout=args.timeout,
            heartbeat_timeout=args.heartbeat_timeout or None,
            worker=args.worker,
        )
    except WorkerFailed as exc:
        print(f"[launcher] ERROR: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("[launcher] interrupted; stopped all ranks", file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    # run as a file: its own directory (the package) must not shadow top-level modules
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    sys.exit(main())
