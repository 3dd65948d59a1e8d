"""End-to-end helpers in the style of fairseq's tests/test_binaries.py.

Everything happens in a temporary directory: a tiny synthetic parallel corpus, binarized with
``fairseq-preprocess``; a short ``fairseq-train`` run through ``--user-dir``; ``fairseq-generate``
with BLEU. Each command is a process of its own running fairseq's (or the plugin's) console
script, so the tests exercise exactly what users run; :func:`run_cli` forks it from a server
that has imported torch and fairseq once (``tests/forkserver.py``: about 3 s less a command),
or starts a fresh interpreter where the command's environment differs in what a process reads
at start-up (``LC_TEST_NO_FORK=1``: always).
"""

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys

__all__ = [
    "REPO_ROOT",
    "SOURCES",
    "USER_DIR",
    "build_without_data",
    "decode_incrementally",
    "generate",
    "interactive",
    "make_parallel_corpus",
    "preprocess",
    "run",
    "run_cli",
    "tiny_arch_args",
    "train",
    "train_args",
    "train_many",
]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO_ROOT, "lightcompress")
# The checkout's sources, as PYTHONPATH: the plugin and its runtime (its own distribution,
# runtime/), so that tests and their subprocesses run this checkout, not an installed copy.
# Every subprocess gets the checkout's runtime; the plugin only where a test asks for it
# (one test runs the installed plugin by its bare name).
RUNTIME_ROOT = os.path.join(REPO_ROOT, "runtime")
SOURCES = os.pathsep.join((REPO_ROOT, RUNTIME_ROOT))
for _path in (RUNTIME_ROOT, REPO_ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)
_PATHS = os.environ.get("PYTHONPATH", "").split(os.pathsep)
if RUNTIME_ROOT not in _PATHS:  # (xdist's workers inherit it from the controller)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (RUNTIME_ROOT, *_PATHS) if p)

_BIN = os.path.dirname(sys.executable)

# fairseq-train / fairseq-generate prefetch batches in a daemon thread (BufferedIterator's
# BackgroundConsumer) that runs torch code. When the interpreter finalizes while that thread is
# inside a torch op, the thread is torn down through a C++ frame and the process aborts
# ("terminate called without an active exception", exit -6) after all its work is done: seen
# here in a few percent of runs. Tests turn the prefetch thread off (no effect on results).
NO_PREFETCH = ["--data-buffer-size", "0"]

# A toy "translation": every source word maps to one target word, order kept,
# so a tiny model learns something measurable within a few hundred updates.
_SRC_WORDS = [f"s{i}" for i in range(24)]
_TGT_WORDS = [f"t{i}" for i in range(24)]


def make_parallel_corpus(
    directory, n_train=1000, n_valid=40, n_test=40, seed=1, src="de", tgt="en"
):
    """Write train/valid/test.{src,tgt} of a deterministic toy task into ``directory``."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        with (
            open(os.path.join(directory, f"{split}.{src}"), "w") as fs,
            open(os.path.join(directory, f"{split}.{tgt}"), "w") as ft,
        ):
            for _ in range(n):
                length = rng.randint(3, 9)
                ids = [rng.randrange(len(_SRC_WORDS)) for _ in range(length)]
                fs.write(" ".join(_SRC_WORDS[i] for i in ids) + "\n")
                ft.write(" ".join(_TGT_WORDS[i] for i in ids) + "\n")
    return directory


def run_cli(name, args, cwd=None, env=None, check=True, timeout=900):
    """Run a console script of the venv (``fairseq-train``...) and return the CompletedProcess.

    The command runs as a process of its own either way: forked from the worker's fork server
    (:mod:`forkserver`: torch and what fairseq imports already loaded, about 2 s less a command)
    when its environment allows (:func:`run`), else as a fresh interpreter."""
    exe = os.path.join(_BIN, name)
    if not os.path.exists(exe):
        exe = name
    full_env = _cli_env()
    if env:
        full_env.update(env)
    proc = run([exe, *args], cwd=cwd, env=full_env, timeout=timeout, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{name} failed with exit code {proc.returncode}\n"
            f"args: {args}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def run(
    argv, input=None, cwd=None, env=None, timeout=None, text=False, capture_output=True, check=False
):
    """``subprocess.run(argv, capture_output=True, check=False, ...)`` for a command of a
    test: forked from the worker's fork server like :func:`run_cli`'s commands where it is
    ``python -c CODE`` / ``python -m MODULE`` of this interpreter or a fairseq / plugin console
    script of the venv and its environment (``env``, else the test's) allows, else a fresh
    interpreter."""
    assert capture_output and not check, "harness.run captures the output; check it yourself"
    argv = [str(a) for a in argv]
    name = None
    if argv[0] == sys.executable:
        name = sys.executable
    elif os.path.dirname(argv[0]) == _BIN:
        name = os.path.basename(argv[0])
    full_env = dict(os.environ if env is None else env)
    proc = None
    if name is not None:
        proc = _FORKS.run(argv, name, cwd, full_env, timeout, input=input, text=text)
    if proc is None:
        proc = subprocess.run(  # noqa: PLW1510  (the caller checks the return code)
            argv,
            input=input,
            capture_output=True,
            text=text,
            cwd=cwd,
            env=env,
            timeout=timeout,
        )
    return proc


def _cli_env():
    """The environment of :func:`run_cli`'s commands (before a call's own ``env``)."""
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env["PYTHONWARNINGS"] = "ignore"
    # console scripts of the plugin (lightcompress-convert, ...) import the checkout under test
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p
    )
    return full_env


# Environment variables a process reads while it starts or imports torch and fairseq (the fork
# server's are fixed when it starts): a command whose value differs runs as a fresh interpreter.
FORK_FIXED_ENV = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "LD_", "TORCH", "PYTORCH")
FORK_FIXED_ENV_NAMES = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "TMPDIR")
# ... except those set in a worker's environment while it runs, at a time that depends on which
# test ran first, and not read at start-up: PYTHON (the interpreter the recipes' scripts run,
# which lightcompress-compress's main sets when a test calls it in-process), scikit-learn's
# (set on import with setdefault; the fork server imports it, so its forks have them as every
# fairseq command does), torch's inductor's (read when it compiles, after a command has its
# environment). Compared, a worker whose tests set them after its fork server started ran every
# later command as a fresh interpreter.
FORK_SET_WHILE_RUNNING = (
    "PYTHON",
    "KMP_DUPLICATE_LIB_OK",
    "KMP_INIT_AT_FORK",
    "TORCHINDUCTOR_CACHE_DIR",
)


def _fixed(key):
    if key in FORK_SET_WHILE_RUNNING:
        return False
    return key.startswith(FORK_FIXED_ENV) or key in FORK_FIXED_ENV_NAMES


class _ForkServer:
    """The worker's fork server (:mod:`forkserver`), started at its first command; commands one
    at a time. ``LC_TEST_NO_FORK=1``: every command a fresh interpreter."""

    def __init__(self):
        import threading

        self.proc = None
        self.env = None
        self.broken = os.environ.get("LC_TEST_NO_FORK") == "1"
        self.lock = threading.Lock()

    def _start(self):
        self.env = _cli_env()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(REPO_ROOT, "tests", "forkserver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            cwd=REPO_ROOT,
            bufsize=0,
        )
        self.pending = b""  # (what the server wrote after the last line read)

    def _forkable(self, argv, name, env):
        if self.broken:
            return False
        if name == sys.executable:  # (python -c CODE / -m MODULE only)
            if len(argv) < 3 or argv[1] not in ("-c", "-m"):
                return False
        elif name not in _CONSOLE:
            return False
        base = self.env if self.proc is not None else _cli_env()
        keys = set(base) | set(env)
        diff = [
            (k, base.get(k), env.get(k)) for k in keys if _fixed(k) and base.get(k) != env.get(k)
        ]
        if diff and os.environ.get("LC_TEST_FORK_LOG"):  # (why a command ran fresh: a file)
            with open(os.environ["LC_TEST_FORK_LOG"], "a", encoding="utf-8") as f:
                f.write(f"{os.environ.get('PYTEST_CURRENT_TEST')}\t{argv[:3]}\t{diff}\n")
        return not diff

    def run(self, argv, name, cwd, env, timeout, input=None, text=True):
        """The command's CompletedProcess, or None where it must run as a fresh interpreter.
        ``input``: its standard input (else /dev/null); ``text``: str in and out, else bytes."""
        import tempfile

        with self.lock:
            if not self._forkable(argv, name, env):
                return None
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            entry = "python" if name == sys.executable else f"console:{name}"
            with tempfile.TemporaryDirectory(prefix="lc-fork-") as tmp:
                out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
                stdin = os.devnull
                if input is not None:
                    stdin = os.path.join(tmp, "stdin")
                    with open(stdin, "wb") as f:
                        f.write(input.encode(_ENCODING) if isinstance(input, str) else input)
                req = {"argv": argv, "entry": entry, "cwd": os.path.abspath(cwd or os.getcwd())}
                req.update(env=env, stdin=stdin, stdout=out, stderr=err)
                try:
                    self.proc.stdin.write((json.dumps(req) + "\n").encode())
                    pid = self._reply(None)["pid"]
                except (OSError, ValueError, KeyError):
                    self.broken = True  # (the server is gone: fresh interpreters from now on)
                    return None
                status = self._wait(pid, timeout)
                stdout, stderr = _read(out, text), _read(err, text)
            if status is None:
                raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
            return subprocess.CompletedProcess(
                argv, os.waitstatus_to_exitcode(status), stdout, stderr
            )

    def _wait(self, pid, timeout):
        """The command's wait status; None (the command's process group killed) on a timeout."""
        reply = self._reply(timeout)
        if reply is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reply(None)
            return None
        return reply["status"]

    def _reply(self, timeout):
        """The server's next line as JSON (None after ``timeout`` seconds without one). The
        pipe is read unbuffered, so that a line already received is never waited for."""
        import select
        import time

        end = None if timeout is None else time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            left = None if end is None else max(0.0, end - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise OSError("the fork server ended")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)


def _read(path, text):
    """A command's output file as subprocess.run gives it (text: universal newlines)."""
    if not text:
        with open(path, "rb") as f:
            return f.read()
    with open(path, encoding=_ENCODING) as f:
        return f.read()


def _console_scripts():
    """fairseq's and the plugin's console scripts (what :func:`run_cli` is given by name)."""
    from importlib.metadata import entry_points

    return frozenset(
        e.name
        for e in entry_points(group="console_scripts")
        if e.name.startswith(("fairseq-", "lightcompress-"))
    )


_CONSOLE = _console_scripts()
_ENCODING = __import__("locale").getpreferredencoding(False)
_FORKS = _ForkServer()


def preprocess(raw_dir, dest_dir, src="de", tgt="en", joined=True):
    """Binarize ``raw_dir`` with fairseq-preprocess into ``dest_dir``."""
    args = [
        "--source-lang",
        src,
        "--target-lang",
        tgt,
        "--trainpref",
        os.path.join(raw_dir, "train"),
        "--validpref",
        os.path.join(raw_dir, "valid"),
        "--testpref",
        os.path.join(raw_dir, "test"),
        "--destdir",
        dest_dir,
        "--workers",
        "1",
    ]
    if joined:
        args.append("--joined-dictionary")
    run_cli("fairseq-preprocess", args)
    return dest_dir


def tiny_arch_args(arch="transformer", layers=(2, 2), dim=32, ffn=64, heads=2):
    """Model flags of a tiny model (a few 10k parameters)."""
    return [
        "--arch",
        arch,
        "--encoder-layers",
        layers[0],
        "--decoder-layers",
        layers[1],
        "--encoder-embed-dim",
        dim,
        "--decoder-embed-dim",
        dim,
        "--encoder-ffn-embed-dim",
        ffn,
        "--decoder-ffn-embed-dim",
        ffn,
        "--encoder-attention-heads",
        heads,
        "--decoder-attention-heads",
        heads,
        "--share-all-embeddings",
    ]


def train(
    data_bin,
    save_dir,
    model_args,
    extra=(),
    max_epoch=1,
    max_update=None,
    user_dir=USER_DIR,
    cwd=None,
    check=True,
):
    """Train with fairseq-train on CPU; returns the CompletedProcess (log in stdout/stderr)."""
    args = train_args(data_bin, save_dir, model_args, extra, max_epoch, max_update, user_dir)
    return run_cli("fairseq-train", args, cwd=cwd, check=check)


# fairseq-train's own entry point (the console script's cli_main) for several command lines,
# one after the other in one interpreter, as fairseq's tests/test_binaries.py trains in-process.
# fairseq keeps a run's best validation loss on two functions (the best checkpoint's and
# --patience's); they are cleared before each run, as a new process starts without them.
_TRAIN_MANY = r"""
import json, sys
from fairseq import checkpoint_utils
from fairseq_cli import train
for argv in json.loads(sys.argv[1]):
    for f, name in ((checkpoint_utils.save_checkpoint, "best"),
                    (train.should_stop_early, "best"), (train.should_stop_early, "num_runs")):
        if hasattr(f, name):
            delattr(f, name)
    sys.argv = ["fairseq-train", *argv]
    train.cli_main()
"""


def train_many(jobs, cwd=None):
    """Several trainings (argument lists of :func:`train_args`) in one Python process, one after
    the other: the same fairseq-train code without a new interpreter importing torch and fairseq
    for each (about 4 s each). Returns the CompletedProcess (every run's log)."""
    import json

    jobs = json.dumps([[str(a) for a in job] for job in jobs])
    return run_cli(sys.executable, ["-c", _TRAIN_MANY, jobs], cwd=cwd)


def train_args(
    data_bin, save_dir, model_args, extra=(), max_epoch=1, max_update=None, user_dir=USER_DIR
):
    """fairseq-train's arguments for :func:`train` (CPU, Adam, the tiny runs' schedule)."""
    args = [
        data_bin,
        "--user-dir",
        user_dir,
        "--cpu",
        "--task",
        "translation",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        "0.003",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "20",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--dropout",
        "0.0",
        "--max-tokens",
        "300",
        "--save-dir",
        save_dir,
        "--no-progress-bar",
        "--log-format",
        "simple",
        "--log-interval",
        "5",
        "--seed",
        "1",
        "--num-workers",
        "0",
        "--no-epoch-checkpoints",
        *NO_PREFETCH,
    ]
    args += list(model_args)
    if max_epoch is not None:
        args += ["--max-epoch", max_epoch]
    if max_update is not None:
        args += ["--max-update", max_update]
    args += list(extra)
    return args


_BLEU_RE = re.compile(r"BLEU4? = ([0-9.]+)")


def generate(data_bin, checkpoint, extra=(), user_dir=USER_DIR, gen_subset="test", beam=2):
    """Run fairseq-generate; returns (bleu, hypotheses ordered by sentence id, CompletedProcess)."""
    args = [
        data_bin,
        "--user-dir",
        user_dir,
        "--cpu",
        "--path",
        checkpoint,
        "--gen-subset",
        gen_subset,
        "--beam",
        beam,
        "--batch-size",
        "16",
        "--num-workers",
        "0",
        *NO_PREFETCH,
    ]
    args += list(extra)
    proc = run_cli("fairseq-generate", args)
    return parse_generate_output(proc.stdout) + (proc,)


def parse_generate_output(text):
    """(BLEU score or None, list of hypotheses ordered by sentence id) from generate output."""
    hyps = {}
    for line in text.splitlines():
        if line.startswith("H-"):
            sid, _score, hyp = (line.split("\t") + ["", ""])[:3]
            hyps[int(sid[2:])] = hyp
    m = _BLEU_RE.search(text)
    bleu = float(m.group(1)) if m else None
    return bleu, [hyps[k] for k in sorted(hyps)]


def interactive(data_bin, checkpoint, lines, extra=(), user_dir=USER_DIR, beam=2):
    """Feed ``lines`` to fairseq-interactive; returns the hypotheses in input order."""
    exe = os.path.join(_BIN, "fairseq-interactive")
    args = [
        exe,
        data_bin,
        "--user-dir",
        user_dir,
        "--cpu",
        "--path",
        checkpoint,
        "--beam",
        str(beam),
    ]
    args += [str(a) for a in extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        args,
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"fairseq-interactive failed:\n{proc.stderr[-6000:]}")
    hyps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("H-"):
            sid, _score, hyp = (line.split("\t") + ["", ""])[:3]
            hyps[int(sid[2:])] = hyp
    return [hyps[k] for k in sorted(hyps)]


def build_without_data(
    arch, vocab, flags=(), task="translation", tgt_vocab=None, device=None, **build_kwargs
):
    """A model of ``arch`` with random weights and no data: ``lightcompress.build`` (the
    package's one way), with the model flags parsed by fairseq's training parser. ``vocab`` /
    ``tgt_vocab`` are dictionary sizes (or dictionaries); ``device`` e.g. ``"meta"`` builds
    without memory."""
    import torch

    from lightcompress.build import build_model_without_data, parse_model_args

    args = parse_model_args(arch, [str(a) for a in flags], task=task)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        return build_model_without_data(args, vocab, tgt_vocab, **build_kwargs)


def decode_incrementally(decoder, prev, state=None, **kwargs):
    """The outputs of ``decoder`` on ``prev`` ``[B x T]`` computed one step at a time with
    fairseq's incremental state (as beam search does), concatenated over time; ``kwargs`` go to
    every call (``encoder_out``, ``features_only``...). ``state`` is filled in place."""
    import torch

    state = {} if state is None else state
    steps = [
        decoder(prev[:, : t + 1], incremental_state=state, **kwargs)[0] for t in range(prev.size(1))
    ]
    return torch.cat(steps, 1)
