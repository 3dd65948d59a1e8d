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

Safety around a run:

- **ranks die with the launcher.** Every rank learns the launcher's pid (``LC_DIST_LAUNCHER_PID``)
  and, before fairseq starts, asks the kernel for SIGTERM when its parent dies
  (``prctl(PR_SET_PDEATHSIG)`` on Linux) and starts a watchdog thread that ends the rank when its
  parent pid changes (everywhere else, and as a fallback). A ``kill -9`` of the launcher therefore
  leaves no orphaned rank that goes on training and writing checkpoints.
- **one run per save directory.** The launcher holds ``SAVE_DIR/.lightcompress-train.lock``
  (an ``flock`` plus the launcher's and the ranks' pids). A second launch on the same
  ``--save-dir`` while one is live is refused with one line naming the pid; a lock left by a run
  that was killed (its pids are not running) is taken over with a warning.
- **ports.** A ``--port`` in use is refused before any rank starts, naming the flag and the
  variable that set it; a port the launcher picked itself that is taken before rank 0 listens on
  it is replaced by another free one (up to 3 tries).

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
import contextlib
import ctypes
import ctypes.util
import datetime
import errno
import json
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
    "LAUNCHER_PID_VAR",
    "LOCK_NAME",
    "LaunchRefused",
    "SaveDirLock",
    "WorkerFailed",
    "check_port",
    "cpu_rank_args",
    "die_with_launcher",
    "find_free_port",
    "launch",
    "main",
    "run_worker",
    "save_dir_of",
    "update_freq",
]

_TAIL_LINES = 25
_HELP_FLAGS = {"-h", "--help"}
LAUNCHER_PID_VAR = "LC_DIST_LAUNCHER_PID"  # set by the launcher for its ranks
LOCK_NAME = ".lightcompress-train.lock"
_PORT_TRIES = 3  # launcher-picked ports: tries before giving up
_PORT_IN_USE = ("EADDRINUSE", "address already in use", "Address already in use")
_PORT_HELP = (
    "free it, or choose another port: PORT=N for scripts/train_distributed.sh, --port N for "
    "the launcher (leave both unset and the launcher picks a free one)"
)


class WorkerFailed(RuntimeError):
    """A rank exited with an error; the other ranks were stopped."""

    def __init__(self, rank: int, returncode: int, message: str):
        super().__init__(message)
        self.rank = rank
        self.returncode = returncode


class LaunchRefused(RuntimeError):
    """Nothing was started: the save directory is in use, the port is taken, ... (one line)."""


class _PortTaken(Exception):
    def __init__(self, failure: WorkerFailed):
        super().__init__(str(failure))
        self.failure = failure


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


def check_port(port: int, host: str = "127.0.0.1") -> None:
    """Raise :class:`LaunchRefused` when ``port`` cannot be listened on at ``host`` (as the
    rendezvous store of rank 0 will, with ``SO_REUSEADDR``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise LaunchRefused(
                    f"port {port} on {host} is in use (another training run's rendezvous?): "
                    + _PORT_HELP
                ) from exc
            raise LaunchRefused(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


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


# --- one run per save directory --------------------------------------------------------


def save_dir_of(train_args: list[str]) -> str | None:
    """The ``--save-dir`` fairseq-train will write to (its default ``checkpoints``), or None
    with ``--no-save``."""
    save_dir = "checkpoints"
    for i, arg in enumerate(train_args):
        if arg == "--no-save":
            return None
        if arg == "--save-dir" and i + 1 < len(train_args):
            save_dir = train_args[i + 1]
        elif arg.startswith("--save-dir="):
            save_dir = arg.split("=", 1)[1]
    return save_dir


def _start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (Linux ``/proc``), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _is_running(pid: int, start: str | None = None) -> bool:
    """Whether ``pid`` is a live process (``os.kill(pid, 0)``), not a zombie, and, when its
    start time was recorded, still the same process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        if stat[stat.rfind(")") + 2 :].split()[0] in ("Z", "X"):
            return False  # a zombie of a rank no one has reaped yet: it writes nothing
    except (OSError, IndexError):
        pass
    now = _start_time(pid)
    return start is None or now is None or now == start


class SaveDirLock:
    """``SAVE_DIR/.lightcompress-train.lock``: one launcher per save directory.

    The file holds the launcher's pid, host, start time and command, and the ranks' pids
    once they run, as JSON. The launcher holds an exclusive ``flock`` on it for the whole run
    (the kernel drops it when the launcher dies, ``kill -9`` included) and removes the file
    when it ends. Acquiring:

    - the ``flock`` is held by someone else: a live run, refused (:class:`LaunchRefused`);
    - the file is free but names pids that still run (a file system without working
      ``flock``, or ranks that outlived their launcher): wait up to ``wait`` seconds for them
      to end (ranks die with their launcher), then refuse naming them;
    - the file names pids that are gone: a run that was killed; taken over with a warning.
    """

    def __init__(self, save_dir: str):
        self.save_dir = save_dir
        self.path = os.path.join(save_dir, LOCK_NAME)
        self._fd: int | None = None
        self._info: dict = {}

    # the lock file's content
    def _read(self, fd: int) -> dict:
        os.lseek(fd, 0, os.SEEK_SET)
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
        try:
            info = json.loads(data.decode("utf-8") or "{}")
        except (UnicodeDecodeError, ValueError):
            return {"unreadable": data[:200].decode("utf-8", "replace")}
        return info if isinstance(info, dict) else {}

    def _write(self) -> None:
        data = (json.dumps(self._info) + "\n").encode("utf-8")
        os.lseek(self._fd, 0, os.SEEK_SET)
        os.ftruncate(self._fd, 0)
        os.write(self._fd, data)
        os.fsync(self._fd)

    def _describe(self, info: dict) -> str:
        parts = [f"launcher pid {info.get('pid', '?')}"]
        if info.get("host") and info["host"] != socket.gethostname():
            parts.append(f"on {info['host']}")
        if info.get("started"):
            parts.append(f"started {info['started']}")
        return ", ".join(parts)

    def _live_pids(self, info: dict) -> list[int]:
        if info.get("host") and info["host"] != socket.gethostname():
            return []  # pids of another machine say nothing here
        procs = [(info.get("pid"), info.get("start"))] + [tuple(r) for r in info.get("ranks", [])]
        return [
            int(pid)
            for pid, start in procs
            if isinstance(pid, int) and pid != os.getpid() and _is_running(pid, start)
        ]

    def _open_locked(self) -> tuple[int, bool]:
        """Open the lock file and try the flock; (fd, True) when it is ours."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return fd, False
            except (ImportError, OSError):  # no flock here: the pids decide alone
                return fd, True
            try:  # the file we locked may have been removed by its last owner meanwhile
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd, True
            os.close(fd)

    def acquire(self, out=None, command: list[str] | None = None, wait: float = 10.0):
        """Take the lock or raise :class:`LaunchRefused`; warnings go to ``out``."""
        out = out or sys.stderr
        try:
            os.makedirs(self.save_dir, exist_ok=True)
            fd, ours = self._open_locked()
        except OSError as exc:
            raise LaunchRefused(
                f"--save-dir {self.save_dir}: cannot create the lock file {self.path}: "
                f"{exc.strerror or exc}"
            ) from exc
        old = self._read(fd)
        if not ours:
            os.close(fd)
            raise LaunchRefused(
                f"--save-dir {self.save_dir} is in use by another training run "
                f"({self._describe(old)}; lock {self.path}): wait for it to end, stop it "
                f"(kill {old.get('pid', 'PID')}), or train into another --save-dir"
            )
        deadline = time.monotonic() + wait
        while (live := self._live_pids(old)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if live:
            os.close(fd)
            raise LaunchRefused(
                f"--save-dir {self.save_dir}: processes of an earlier run still run (pids "
                f"{' '.join(map(str, live))}; {self._describe(old)}; lock {self.path}): wait for "
                f"them to end or stop them (kill {' '.join(map(str, live))}), or train into "
                "another --save-dir"
            )
        if old:
            out.write(
                f"[launcher] warning: taking over the lock of an earlier run on --save-dir "
                f"{self.save_dir} that ended without removing it ({self._describe(old)}; not "
                f"running any more): {self.path}\n"
            )
            out.flush()
        self._fd = fd
        self._info = {
            "pid": os.getpid(),
            "start": _start_time(os.getpid()),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": list(command or []),
            "ranks": [],
        }
        self._write()
        return self

    def set_ranks(self, pids: list[int]) -> None:
        """Record the ranks' pids (a takeover waits for them too)."""
        if self._fd is not None:
            self._info["ranks"] = [[pid, _start_time(pid)] for pid in pids]
            self._write()

    def release(self) -> None:
        """Remove the file (still holding the flock, so no one takes a file being removed)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if self._read(self._fd).get("pid") == os.getpid():
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.release()


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
    lock: bool = True,
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
        Rendezvous port on ``host``; refused at once when in use. When None a free one is
        picked, and picked again (up to 3 tries) if it is taken before rank 0 listens on it.
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
    lock : bool
        Hold ``SAVE_DIR/.lightcompress-train.lock`` for the run (:class:`SaveDirLock`).

    Raises
    ------
    LaunchRefused
        Nothing was started: the save directory is in use by a live run, or the port is.
    WorkerFailed
        When a rank exits non-zero or is killed (the others are stopped first), or on timeout.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    out = out or sys.stdout
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
    full_env[LAUNCHER_PID_VAR] = str(os.getpid())  # the ranks end when this process does

    save_dir = save_dir_of(train_args) if lock else None
    save_lock = SaveDirLock(save_dir) if save_dir else None
    started = time.monotonic()
    if port is not None:
        check_port(port, host)
    if save_lock is not None:
        save_lock.acquire(command=["launch", "--nproc", str(nproc), "--", *train_args])
    try:
        for attempt in range(1 if port is not None else _PORT_TRIES):
            rendezvous = port if port is not None else find_free_port(host)
            try:
                _run_ranks(
                    train_args + extra, nproc, rendezvous, host, timeout, started, python,
                    full_env, out, grace, worker, save_lock,
                )  # fmt: skip
                return
            except _PortTaken as taken:
                failure = taken.failure
                if port is not None:
                    raise WorkerFailed(
                        failure.rank,
                        failure.returncode,
                        f"rank {failure.rank} could not listen on port {port} of {host}: the "
                        f"port is in use; {_PORT_HELP}",
                    ) from None
                if attempt + 1 == _PORT_TRIES:
                    raise WorkerFailed(
                        failure.rank,
                        failure.returncode,
                        f"port {rendezvous} of {host} was taken before rank 0 could listen on "
                        f"it, {_PORT_TRIES} times in a row (ports picked by the launcher); "
                        "pass a port you know is free with --port / PORT",
                    ) from None
                out.write(
                    f"[launcher] port {rendezvous} was taken before rank 0 could listen on it; "
                    "starting the ranks again on another free port\n"
                )
                out.flush()
    finally:
        if save_lock is not None:
            save_lock.release()


def _run_ranks(
    args, nproc, port, host, timeout, started, python, env, out, grace, worker, save_lock
) -> None:
    """Start the ranks on ``port``, watch them, stop them all when one fails (see launch)."""
    procs: list[subprocess.Popen] = []
    tails: list[collections.deque] = []
    pumps: list[threading.Thread] = []
    exits: queue.Queue = queue.Queue()
    try:
        for rank in range(nproc):
            # by file, not ``-m lightcompress...``: the rank must not import the package
            # before fairseq imports it from --user-dir (another copy would clash)
            if worker:
                cmd = [python, os.path.abspath(worker)]
            else:
                cmd = [python, os.path.abspath(__file__), "worker"]
            cmd += list(args) + cpu_rank_args(rank, nproc, port, host)
            proc = subprocess.Popen(
                cmd,
                env=env,
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
        if save_lock is not None:
            save_lock.set_ranks([p.pid for p in procs])
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
                failure = WorkerFailed(
                    rank,
                    code,
                    f"rank {rank} (pid {procs[rank].pid}) {_describe_exit(code)} first; "
                    f"stopped the others ({', '.join(others) or 'none left'})"
                    + f". Last lines of rank {rank}:\n    "
                    + "\n    ".join(tails[rank])
                    + "\nRestart the same command to resume from the last checkpoint "
                    "(checkpoint_last.pt in --save-dir).",
                )
                if any(word in line for line in tails[rank] for word in _PORT_IN_USE):
                    raise _PortTaken(failure)
                raise failure
    finally:
        _stop(procs, grace)  # also on KeyboardInterrupt: leave no orphaned rank behind
    for pump in pumps:
        pump.join(timeout=2)


# --- one rank ----------------------------------------------------------------------------


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_watching_launcher = False


def _watch_parent(launcher: int, interval: float) -> None:
    while True:
        time.sleep(interval)
        if os.getppid() != launcher:
            _end_orphan(launcher)


def _end_orphan(launcher: int) -> None:
    try:  # the rank's output went to the launcher, which is gone: the pipe may be broken
        sys.stderr.write(f"[rank] the launcher (pid {launcher}) is gone; ending this rank\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    os._exit(128 + signal.SIGTERM)  # a SIGTERM handler that did not end the process


def die_with_launcher(env=None, interval: float = 1.0) -> bool:
    """In a rank started by :func:`launch`: end this process when the launcher dies.

    The launcher passes its pid in ``LC_DIST_LAUNCHER_PID``. On Linux the kernel is asked
    for SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)``, through ctypes); everywhere,
    a daemon thread checks every ``interval`` seconds that the parent is still the launcher
    and sends this process SIGTERM when it is not (re-parented after a ``kill -9``). Without the
    variable (a rank not started by the launcher) nothing is done. Returns whether it watches.
    Call it before fairseq starts; calling it again does nothing.
    """
    global _watching_launcher
    env = os.environ if env is None else env
    value = env.pop(LAUNCHER_PID_VAR, None)  # not inherited by what the rank starts
    if _watching_launcher:
        return True
    if not value:
        return False
    try:
        launcher = int(value)
    except ValueError:
        return False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog thread below still ends the rank
    if os.getppid() != launcher:  # the launcher died before the request took effect
        _end_orphan(launcher)
    threading.Thread(
        target=_watch_parent, args=(launcher, interval), daemon=True, name="lc-launcher-watch"
    ).start()
    _watching_launcher = True
    return True


def run_worker(argv: list[str]) -> None:
    """One rank: ``fairseq-train ARGV`` in this process (``fairseq_cli.train.cli_main``),
    ended when the launcher that started it dies (:func:`die_with_launcher`)."""
    die_with_launcher()
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
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="rendezvous port; refused at once when in use (default: a free one, picked by the "
        "launcher)",
    )
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
    if args.nproc < 1:
        parser.error(f"--nproc must be >= 1, got {args.nproc}")
    if args.port is not None and not 1 <= args.port <= 65535:
        parser.error(f"--port must be a TCP port (1-65535), got {args.port}")
    if args.worker and not os.path.isfile(args.worker):
        parser.error(f"--worker: no such file: {args.worker}")

    def _on_sigterm(signum, frame):  # e.g. a scheduler's kill, a closed terminal: stop the ranks
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_sigterm)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _on_sigterm)
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
    except LaunchRefused as exc:
        print(f"[launcher] error: {exc}", file=sys.stderr, flush=True)
        return 2
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
