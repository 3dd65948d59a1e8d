"""Running the steps of ``lightcompress-compress``: plain progress lines (step n/N, elapsed time)
whether or not stdout is a terminal, each command's whole output in ``SAVE_DIR/logs/``, a step
skipped when its outputs exist, one run per save directory (a lock naming the live pid), and
commands that end with the command, their own children included (each runs under
:mod:`lightcompress.compress.guard`: a process group of its own, ended whole when the command
is stopped by a signal or killed, through Linux's parent-death signal).
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lightcompress.compress.teacher import CompressError

__all__ = [
    "FileArg",
    "Interrupted",
    "Runner",
    "Step",
    "StepFailed",
    "acquire_lock",
    "remove_stale_temp",
    "render",
]


class StepFailed(Exception):
    """A command of a step ended with a non-zero status (its log names why)."""


class Interrupted(BaseException):
    """The command was stopped by a signal (its children were ended). A BaseException, as
    KeyboardInterrupt is: a step called in this process that catches ``Exception`` (a checkpoint
    loader's) does not take it for its own error."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@dataclass(frozen=True)
class FileArg:
    """An argument that is the content of a file a previous step writes (a converter's
    per-matrix spec): printed as ``"$(cat PATH)"``, read when the command runs."""

    path: str

    def value(self) -> str:
        with open(self.path, encoding="utf-8") as f:
            return f.read().strip()


def render(cmd) -> str:
    """The command as one shell line (exactly what runs)."""
    return " ".join(
        f'"$(cat {shlex.quote(a.path)})"' if isinstance(a, FileArg) else shlex.quote(str(a))
        for a in cmd
    )


@dataclass
class Step:
    """One step: commands run in order (or ``func`` in-process), complete when every path of
    ``outputs`` exists. ``stdout_to[i]``: command i's standard output goes to that file
    (written atomically); ``marker``: a file written after success (for outputs that cannot
    prove themselves complete, such as a training directory). ``call``: the package's own
    ``main(argv) -> int`` of the step's one command (``python -m MODULE ARGS`` or a console
    script ``lightcompress-... ARGS``), called in this process with ``ARGS``, its output going
    to the step's log (the command is what the plan shows, and what a user can run by hand):
    no new interpreter importing torch and fairseq (about 3 s a step)."""

    name: str
    what: str
    commands: list[list] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    stdout_to: list[str | None] = field(default_factory=list)
    marker: str | None = None
    func: Callable[[], None] | None = None
    call: Callable[[list[str]], int] | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None

    def complete(self) -> bool:
        paths = self.outputs + ([self.marker] if self.marker else [])
        return bool(paths) and all(os.path.exists(p) for p in paths)

    def written(self) -> list[str]:
        """What the step has written so far: its outputs, marker and working folder's files."""
        paths = [
            p for p in self.outputs + ([self.marker] if self.marker else []) if os.path.exists(p)
        ]
        if self.workdir and os.path.isdir(self.workdir):
            paths += [os.path.join(self.workdir, n) for n in sorted(os.listdir(self.workdir))]
        return paths


GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.py")


def guarded(argv: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` run through :mod:`lightcompress.compress.guard` (its own process group, ended
    whole when this process ends, even by SIGKILL), and the ``preexec_fn`` that asks Linux for
    the guard's parent-death signal."""
    if not sys.platform.startswith("linux"):
        return argv, None
    from lightcompress.compress.guard import die_with_parent

    me = os.getpid()
    return [sys.executable, GUARD, *argv], lambda: die_with_parent(me)


def acquire_lock(save_dir: str) -> int:
    """Hold ``save_dir``'s lock for the life of this process (a second run is refused with
    the live one's pid). Returns the lock's file descriptor."""
    os.makedirs(save_dir, exist_ok=True)
    fd = os.open(os.path.join(save_dir, ".compress.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            with open(os.path.join(save_dir, ".compress.pid"), encoding="utf-8") as f:
                pid = f.read().strip() or "?"
        except OSError:
            pid = "?"
        raise CompressError(
            f"another lightcompress-compress (pid {pid}) is working in {save_dir}; stop it "
            "first or wait for it"
        ) from None
    with open(os.path.join(save_dir, ".compress.pid"), "w", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    return fd


STALE_DIRS = (
    "",
    "eval",
    "kd-bin",
    os.path.join("kd-bin", "distill-work"),
    "student",
    "student-onnx",
    "student-onnx-int8",
)


# the ONNX exporter's working folder (lightcompress.deploy.onnx_export: tempfile.mkdtemp), in
# the export's parent folder
ONNX_TEMP = ".onnx-export-"


def remove_stale_temp(save: str) -> list[str]:
    """Temporary files (``*.tmp``, the ONNX exporter's ``.onnx-export-*`` folders) a killed run
    left in the save directory's own folders (a kill -9 runs no clean-up): removed, under the
    lock, before the steps run again. Only in a directory that holds a compress run
    (``plan.json``). Returns the removed paths."""
    import shutil

    if not os.path.isfile(os.path.join(save, "plan.json")):
        return []
    removed = []
    for sub in STALE_DIRS:
        folder = os.path.join(save, sub)
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            temp = name.endswith(".tmp") or ".tmp." in name or name.startswith(ONNX_TEMP)
            if not temp or os.path.islink(path):
                continue
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
            removed.append(path)
    return removed


_TRAIN = re.compile(
    r"\| (train_inner|valid|train) \|.*?\bloss[= ]([0-9.]+).*?\bnum_updates[= ](\d+)"
)


_NOISE = re.compile(
    r"^\s|Warning\b|warnings\.warn|^(DEBUG|WARNING):|DeprecationWarning|^Traceback|^\S+\.py:\d+: "
)


def _informative(line: str) -> bool:
    """A line worth showing as a step's progress: not a library's warning, its source line
    (indented) or a debug message."""
    return bool(line.strip()) and not _NOISE.search(line)


def train_progress(max_update: int | None):
    """fairseq-train's log lines (simple format) as short progress messages."""

    def parse(line: str) -> str | None:
        m = _TRAIN.search(line)
        if not m:
            return None
        kind, loss, upd = m.groups()
        of = f"/{max_update}" if max_update else ""
        what = "validation loss" if kind == "valid" else "loss"
        return f"update {upd}{of}, {what} {loss}"

    return parse


def _last_informative(path: str) -> str:
    """The last informative line of a log's last command (in its last 8 KB; a progress bar's
    ``\\r`` parts as lines), or ''."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = re.split(r"[\r\n]", text)
    starts = [i for i, ln in enumerate(lines) if ln.startswith("$ ")]  # (a command's first line)
    lines = [ln.rstrip() for ln in lines[starts[-1] + 1 if starts else 0 :] if _informative(ln)]
    return lines[-1] if lines else ""


def _program(argv: list[str]) -> tuple[str, list[str]]:
    """A command's program and arguments: ``python -m MODULE ARGS`` -> ``(MODULE, ARGS)``, a
    console script ``PATH ARGS`` -> ``(its name, ARGS)``."""
    if len(argv) > 2 and argv[1] == "-m":
        return argv[2], argv[3:]
    return os.path.basename(argv[0]), argv[1:]


def _process_state():
    """The process-wide settings a called step may change: torch's (when it is imported)
    threads, gradient mode, default dtype and random state, numpy's and Python's random
    state."""
    import random

    torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
    return {
        "torch": (
            torch.get_num_threads(),
            torch.is_grad_enabled(),
            torch.get_default_dtype(),
            torch.get_rng_state(),
        )
        if torch is not None
        else None,
        "numpy": np.random.get_state() if np is not None else None,
        "random": random.getstate(),
    }


def _process_restore(state) -> None:
    import random

    torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
    if state["torch"] is not None and torch is not None:
        threads, grad, dtype, rng = state["torch"]
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
        torch.set_rng_state(rng)
    if state["numpy"] is not None and np is not None:
        np.random.set_state(state["numpy"])
    random.setstate(state["random"])


class Runner:
    """Runs steps in order, printing ``[compress n/N name +h:mm:ss] message`` lines."""

    def __init__(self, steps: list[Step], log_dir: str, out=None, heartbeat: float = 30.0):
        self.steps = steps
        self.log_dir = log_dir
        self.out = out or sys.stdout
        self.heartbeat = heartbeat
        self.start = time.monotonic()
        self.child: subprocess.Popen | None = None
        self.stopped: int | None = None  # the signal that stopped the run
        self.parsers: dict[str, Callable[[str], str | None]] = {}

    def elapsed(self) -> str:
        s = int(time.monotonic() - self.start)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    def say(self, n: int, step: Step, msg: str) -> None:
        print(
            f"[compress {n}/{len(self.steps)} {step.name} +{self.elapsed()}] {msg}",
            file=self.out,
            flush=True,
        )

    def run(self) -> None:
        for n, step in enumerate(self.steps, 1):
            if step.complete():
                self.say(n, step, f"done before ({', '.join(step.outputs)}): skipped")
                continue
            self.say(n, step, step.what)
            t0 = time.monotonic()
            if step.func is not None:
                step.func()
            for i, cmd in enumerate(step.commands):
                target = step.stdout_to[i] if i < len(step.stdout_to) else None
                self._command(n, step, i, cmd, target)
            if step.marker:
                with open(step.marker, "w", encoding="utf-8") as f:
                    f.write(time.strftime("%Y-%m-%d %H:%M:%S\n"))
            self.say(n, step, f"done in {time.monotonic() - t0:.0f} s")

    def _call(
        self, n: int, step: Step, argv: list[str], log_path: str, stdout_path: str | None = None
    ) -> None:
        """``step.call`` with the command's arguments (after ``python -m MODULE`` or the console
        script's name), in this process, its standard error and logging records in the log, its
        standard output too, or in ``stdout_path`` (written atomically, as a command's). A
        non-zero status, or an exception (its traceback in the log, as a command's), is
        :class:`StepFailed`. What a call may change of the process and a new interpreter would
        not have kept (the environment of ``step.env``, ``sys.argv``, the logging handlers,
        torch's threads, gradient mode, default dtype and random state, numpy's and Python's
        random state, the working directory) is put back."""
        import contextlib
        import logging
        import traceback

        self.say(n, step, f"  (in this process; log: {log_path})")
        prog, args = _program(argv)
        saved = {k: os.environ.get(k) for k in step.env}
        os.environ.update(step.env)
        # the logging records too (fairseq's INFO lines): a handler made before the call holds
        # the real standard error, which redirect_stderr does not change
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        cwd, sys_argv, state = os.getcwd(), sys.argv[:], _process_state()
        tmp = stdout_path + ".tmp" if stdout_path else None
        rc = 1
        # the heartbeat of a command's step: its last informative line every `heartbeat` s
        # (the log is line-buffered, so that its lines are on disk to read)
        stopped = threading.Event()

        def beat():
            while not stopped.wait(self.heartbeat):
                line = _last_informative(log_path)
                if line:
                    self.say(n, step, f"running: {line[-160:]}")

        beating = threading.Thread(target=beat, daemon=True)
        try:
            with open(log_path, "a", encoding="utf-8", buffering=1) as log:
                log.write(f"$ {render(argv)}\n")
                log.flush()
                to_log = logging.StreamHandler(log)
                to_log.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
                root.handlers = [to_log]
                beating.start()
                with contextlib.ExitStack() as stack:
                    out = stack.enter_context(open(tmp, "w", encoding="utf-8")) if tmp else log
                    stack.enter_context(contextlib.redirect_stdout(out))
                    stack.enter_context(contextlib.redirect_stderr(log))
                    try:
                        rc = step.call(args)
                    except SystemExit as exc:  # (argparse)
                        rc = exc.code if isinstance(exc.code, int) else 1
                    except Exception:  # noqa: BLE001  (a bug: its traceback in the log)
                        traceback.print_exc()
                        rc = 1
            if tmp and not rc and self.stopped is None:
                os.replace(tmp, stdout_path)
        finally:
            stopped.set()
            if beating.is_alive():
                beating.join()
            if tmp and os.path.exists(tmp):  # (failed or stopped: no half-written output)
                os.remove(tmp)
            root.handlers, root.level = handlers, level
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if os.getcwd() != cwd:
                os.chdir(cwd)
            sys.argv[:] = sys_argv
            _process_restore(state)
        if self.stopped is not None:  # (a signal the call took for an error of its own)
            raise Interrupted(self.stopped)
        if rc:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                lines = [ln.rstrip() for ln in f if _informative(ln)]
            tail = lines[-1][-200:] if lines else "(no output)"
            raise StepFailed(f"{step.name}: {prog} failed (exit {rc}): {tail}; see {log_path}")

    def _command(self, n: int, step: Step, i: int, cmd: list, stdout_path: str | None) -> None:
        argv = [a.value() if isinstance(a, FileArg) else str(a) for a in cmd]
        if step.call is not None:
            os.makedirs(self.log_dir, exist_ok=True)
            log_path = os.path.join(self.log_dir, f"{n:02d}-{step.name}.log")
            self.say(n, step, f"+ {render(cmd)}")
            return self._call(n, step, argv, log_path, stdout_path)
        run_argv, preexec = guarded(argv)
        os.makedirs(self.log_dir, exist_ok=True)
        log_path = os.path.join(self.log_dir, f"{n:02d}-{step.name}{f'-{i + 1}' if i else ''}.log")
        self.say(n, step, f"+ {render(cmd)}")
        self.say(n, step, f"  (log: {log_path})")
        parse = self.parsers.get(step.name)
        tmp = stdout_path + ".tmp" if stdout_path else None
        last = [""]
        failed: list[OSError] = []  # the log thread's write error
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {render(cmd)}\n")
            log.flush()
            out_file = open(tmp, "w", encoding="utf-8") if tmp else None  # noqa: SIM115
            try:
                self.child = subprocess.Popen(
                    run_argv,
                    stdout=out_file if out_file else subprocess.PIPE,
                    stderr=subprocess.PIPE if out_file else subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    env={**os.environ, **step.env},
                    preexec_fn=preexec,  # noqa: PLW1509
                )
            except OSError as exc:
                raise StepFailed(f"{step.name}: cannot run {argv[0]}: {exc.strerror}") from None
            stream = self.child.stderr if out_file else self.child.stdout

            def pump():
                for line in stream:
                    if not failed:  # (a full disk: the output is still read, not kept)
                        try:
                            log.write(line)
                            log.flush()
                        except OSError as exc:
                            failed.append(exc)
                    if _informative(line):
                        last[0] = line.rstrip()
                    msg = parse(line) if parse else None
                    if msg:
                        self.say(n, step, msg)

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                while True:
                    try:
                        rc = self.child.wait(timeout=self.heartbeat)
                        break
                    except subprocess.TimeoutExpired:
                        if last[0]:
                            self.say(n, step, f"running: {last[0][-160:]}")
            except BaseException:  # stopped (Interrupted): no half-written output left
                if out_file:
                    out_file.close()
                    os.remove(tmp)
                raise
            reader.join(timeout=5)
            self.child = None
            if out_file:
                out_file.close()
            if failed and rc == 0:
                failed[0].filename = failed[0].filename or log_path
                raise failed[0]
        if rc != 0:
            if tmp and os.path.exists(tmp):
                os.remove(tmp)
            tail = last[0][-200:] if last[0] else "(no output)"
            raise StepFailed(f"{step.name}: {argv[0]} failed (exit {rc}): {tail}; see {log_path}")
        if tmp:
            os.replace(tmp, stdout_path)

    def stop(self, signum: int) -> None:
        """A signal handler's work: end the running child, then raise :class:`Interrupted`."""
        self.stopped = signum
        child = self.child
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
        raise Interrupted(signum)
