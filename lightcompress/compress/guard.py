"""Runs one command of a ``lightcompress-compress`` step so that nothing it starts outlives the
command: ``python guard.py CMD ARGS...`` (run as a file: it imports only the standard library).

The guard dies with its parent (Linux's parent-death signal, SIGTERM, set by the step runner
before the guard starts, so it holds even when ``lightcompress-compress`` is killed with -9).
It starts CMD in a process group of its own and becomes the subreaper of CMD's descendants
(an orphan of the group is re-parented to the guard, not to init). On SIGTERM, SIGINT or SIGHUP
it sends SIGTERM to the group (the programs clean up their temporary files), then SIGKILL to
whatever is left after a grace period, orphans included, and exits with 128 + the signal.
When CMD ends by itself, anything it left running in its group is ended the same way and the
guard exits with CMD's status. Elsewhere than Linux it only starts the group.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

GRACE = 10.0  # seconds between SIGTERM and SIGKILL
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def die_with_parent(parent: int) -> None:  # pragma: no cover - runs in a forked child
    """In a child before exec: SIGTERM when ``parent`` dies (already dead: end now)."""
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:  # the parent died before the request was made
        os._exit(128 + signal.SIGTERM)


def _orphans() -> list[int]:
    """Processes re-parented to this one (descendants whose parent has died)."""
    me, found = str(os.getpid()), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == me and fields[0] != "Z":
            found.append(int(pid))
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_all(proc: subprocess.Popen, grace: float = GRACE) -> None:
    """SIGTERM to ``proc``'s group and to the orphans; SIGKILL to what is left after ``grace``."""
    linux = sys.platform.startswith("linux")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = _orphans() if linux else []
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in targets:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            _reap()
            alive = proc.poll() is None or (linux and _orphans())
            if not alive and not _group_alive(proc.pid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: guard.py CMD [ARGS...]", file=sys.stderr)
        return 2
    linux = sys.platform.startswith("linux")
    if linux:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    got: list[int] = []

    def on_signal(signum, _frame):
        got.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    me = os.getpid()
    try:
        proc = subprocess.Popen(
            argv,
            start_new_session=True,
            preexec_fn=(lambda: die_with_parent(me)) if linux else None,  # noqa: PLW1509
        )
    except OSError as exc:
        print(f"cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    while not got:
        try:
            rc = proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        end_all(proc)  # what it left behind
        return rc if rc >= 0 else 128 - rc
    end_all(proc)
    return 128 + got[0]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
