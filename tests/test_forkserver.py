"""The tests' fork server (``tests/forkserver.py``, through ``harness.run``): a command runs as a
process of its own, forked from the server when its environment allows, else as a fresh
interpreter; what libraries set in a worker's environment while it runs does not turn the
forking off for the rest of the worker's commands."""

import os
import sys

import harness
import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("LC_TEST_NO_FORK") == "1", reason="LC_TEST_NO_FORK=1: no fork server"
)

# the command: its parent, its arguments, its standard input, its environment, its exit status
CODE = r"""
import os, sys
print(os.getppid(), sys.argv[1:], sys.stdin.read().strip(), os.environ.get("LC_PROBE"))
sys.exit(3)
"""


def _run(env=None):
    full = dict(harness._cli_env() if env is None else env)
    full["LC_PROBE"] = "probe"
    proc = harness.run(
        [sys.executable, "-c", CODE, "a", "b c"], input="in\n", env=full, text=True, timeout=120
    )
    assert proc.returncode == 3, proc.stderr
    ppid, rest = proc.stdout.split(" ", 1)
    assert rest.strip() == "['a', 'b c'] in probe", proc.stdout
    return int(ppid)


def _server():
    return harness._FORKS.proc.pid if harness._FORKS.proc is not None else None


def test_a_command_is_forked_from_the_server_with_its_arguments_input_and_status():
    assert _run() == _server() != os.getpid()


def test_what_libraries_set_in_the_workers_environment_keeps_the_commands_forked(monkeypatch):
    _run()  # (the server runs, with the worker's environment of now)
    # compress's main (called in-process by tests), scikit-learn's import (setdefault) and
    # torch's inductor set these in a worker as it goes
    monkeypatch.setenv("PYTHON", "/nonexistent/python")
    monkeypatch.setenv("KMP_DUPLICATE_LIB_OK", "TRUE")
    monkeypatch.setenv("KMP_INIT_AT_FORK", "FALSE")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/nonexistent/inductor")
    assert _run() == _server()


def test_a_command_with_other_start_up_settings_runs_as_a_fresh_interpreter():
    env = dict(harness._cli_env(), OMP_NUM_THREADS="7")
    assert _run(env) == os.getpid()  # (subprocess.run's child: this process's)
