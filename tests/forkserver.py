"""A fork server for the tests' console-script runs (``harness.run_cli``): torch and what
fairseq imports loaded once, each command a fork of that process.

Every fairseq command of the suite is a fresh interpreter that spends about 3 s importing torch,
fairseq and what fairseq imports (scikit-learn and scipy for one of its criteria) before it does
a tiny model's work in a second. This server imports torch and those libraries once (about 2 s
of the 3) and forks per command, so each command is still a process of its own (its own pid,
arguments, working directory, environment, standard streams, exit status and signals, its own
imports of fairseq, of fairseq's command-line module and of the plugin), only without those
imports. Nothing that keeps state a command sets up itself (logging, fairseq's registries) is
imported before the fork: fairseq-train configures logging before it imports fairseq, and
fairseq configures it when it is imported first.

Protocol (one JSON line each way, one command at a time): the test sends ``{"argv": [...],
"entry": "console:NAME" | "python", "cwd", "env", "stdin", "stdout", "stderr"}`` (the streams as
file paths; stderr the stdout path: one file for both); the server forks, answers ``{"pid": PID}``, waits for the child and answers
``{"status": STATUS}`` (``os.waitpid``'s). Run as ``python tests/forkserver.py`` with the
environment every command shares; ``harness.run_cli`` sends only commands whose environment
differs from it only in keys a process does not read at start-up (see ``harness._fixed``).
"""

import json
import os
import sys


def _child(req: dict) -> None:
    """In the forked process: become the command and run it to its exit (never returns)."""
    os.setsid()  # (its own process group, as the test's timeout ends it whole)
    for fd, path, mode in (
        (0, req["stdin"], os.O_RDONLY),
        (1, req["stdout"], os.O_WRONLY | os.O_TRUNC | os.O_CREAT),
        (2, req["stderr"], os.O_WRONLY | os.O_TRUNC | os.O_CREAT),
    ):
        if fd == 2 and path == req["stdout"]:  # (one file for both, as stderr=STDOUT)
            os.dup2(1, 2)
            continue
        f = os.open(path, mode, 0o600)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    argv = req["argv"]
    entry = req["entry"]
    if entry == "python":  # python -c CODE ARGS / python -m MODULE ARGS / python FILE ARGS
        import runpy

        if argv[1] == "-c":
            sys.argv = ["-c", *argv[3:]]
            sys.path[0] = ""
            main = _fresh_main(None)
            exec(compile(argv[2], "<string>", "exec"), main.__dict__)  # noqa: S102  (python -c)
        elif argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv[1:]
            sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
            runpy.run_path(argv[1], run_name="__main__")
        sys.exit(0)
    # a console script: what its wrapper in the venv's bin/ does
    from importlib.metadata import entry_points

    name = entry.split(":", 1)[1]
    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == name]
    sys.argv = [argv[0], *argv[1:]]
    sys.path[0] = os.path.dirname(argv[0])
    _fresh_main(argv[0])
    sys.exit(ep.load()())


def _fresh_main(path):
    """A new ``__main__`` module (the server's own is this file)."""
    import types

    main = types.ModuleType("__main__")
    if path is not None:
        main.__file__ = path
    sys.modules["__main__"] = main
    return main


def main() -> None:
    # what every fairseq command imports, and nothing that sets up state a command sets up
    # first: fairseq itself is imported by the command (fairseq-train configures logging before
    # it imports fairseq, whose wav2vec2 module calls logging.basicConfig)
    import hydra  # noqa: F401
    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import scipy.stats  # noqa: F401  (fairseq's sentence_prediction criterion)
    import sklearn.metrics  # noqa: F401  (the same)
    import torch
    import torch.nn.functional  # noqa: F401

    # a fork copies only the thread that forks: a library that started a thread when imported
    # (onnxruntime does) may hold a lock the command then waits for forever (seen here: a
    # command hung). One thread, or no server (the tests then start fresh interpreters).
    if len(os.listdir("/proc/self/task")) != 1:
        sys.exit("forkserver: more than one thread after the imports; not forking")

    requests, replies = sys.stdin, sys.stdout
    for line in requests:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:  # (the server's pipes are replaced by the command's files: fds 0-2)
            _child(req)  # (its exit, or its exception's traceback and status 1, as a process's)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": status}) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
