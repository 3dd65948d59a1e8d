"""Data-parallel training on CPU workers: ``scripts/train_distributed.sh`` with
``DEVICE=cpu`` and ``lightcompress/distributed.py``.

Claims checked on a tiny LightFormer with cross-layer sharing (4 encoder layers in 2 groups):

- two gloo workers end with identical parameters, and equal to one worker with
  ``--update-freq 2`` (same seed, same batches: rank ``r`` gets batches ``r, r+2, ...``; one
  worker accumulates the same pairs);
- the encoder layers tied in a group are still tied after training: the checkpoint holds equal
  tensors for them, the reloaded model shares the Parameter objects, and its unique parameter
  count equals the single-worker model's;
- a rank that dies makes the launcher stop the others and fail within seconds, naming the
  rank; running the same command again resumes from the last checkpoint;
- ``scripts/train_distributed.sh --help`` prints the script's and the launcher's help and starts
  no rank (``DEVICE=gpu``: the script's help, then fairseq-train's);
- the ranks die with the launcher: after a ``kill -9`` of the launcher mid-training they are
  gone within seconds (``prctl(PR_SET_PDEATHSIG)``, and a parent-pid watchdog where that is
  missing), and the same command resumes, taking over the dead run's lock with a warning;
- one run per ``--save-dir``: a second launch while one is live is refused with one line;
- a ``PORT`` in use is refused before any rank starts, naming ``PORT`` / ``--port``; a port the
  launcher picked that is taken meanwhile is replaced by another.

Faults are injected by the test-only rank entry ``tests/faults.py`` (selected with
``LC_DIST_WORKER``), which wraps the production one; the launcher holds no fault hook.

Only 127.0.0.1, ports picked by the OS, every subprocess under a timeout.
"""

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import harness
import pytest
import torch

SCRIPT = os.path.join(harness.REPO_ROOT, "scripts", "train_distributed.sh")
LAUNCHER = os.path.join(harness.REPO_ROOT, "lightcompress", "distributed.py")
FAULTS = os.path.join(harness.REPO_ROOT, "tests", "faults.py")  # the test-only rank entry
HOOK_VARS = (
    "LC_DIST_WORKER",
    "LC_DIST_DUMP_DIR",
    "LC_DIST_KILL_RANK",
    "LC_DIST_KILL_AFTER_UPDATES",
    "LC_DIST_UPDATE_DELAY",
    "LC_DIST_LAUNCHER_PID",
    "PORT",
)
RUN_TIMEOUT = 120  # seconds, per fairseq run (a run here takes about 10 s)
MAX_UPDATE = 8

MODEL = [
    "--arch", "lightformer",
    "--encoder-layers", 4, "--lc-encoder-groups", 2, "--decoder-layers", 1,
    "--encoder-embed-dim", 32, "--decoder-embed-dim", 32,
    "--encoder-ffn-embed-dim", 64, "--decoder-ffn-embed-dim", 64,
    "--encoder-attention-heads", 2, "--decoder-attention-heads", 2,
    "--share-all-embeddings", "--lc-rank", 8, "--lc-embed-rank", 8,
]  # fmt: skip


def train_args(data_bin, save_dir, max_update):
    """fairseq-train flags shared by the one- and two-worker runs (no distributed flags)."""
    args = [
        data_bin, "--user-dir", harness.USER_DIR, "--task", "translation",
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.003",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--dropout", "0.0", "--max-tokens", "300", "--seed", "1", "--num-workers", "0",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--max-update", max_update,
        "--no-progress-bar", "--log-format", "simple", "--log-interval", "1",
        *harness.NO_PREFETCH,
    ]  # fmt: skip
    return [str(a) for a in args + MODEL]


def run_script(args, extra_env=None, nproc=2):
    env = dict(os.environ, PYTHON=sys.executable, NPROC=str(nproc), DEVICE="cpu")
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TIMEOUT=str(RUN_TIMEOUT - 10))
    for var in HOOK_VARS:
        env.pop(var, None)
    env.update(extra_env or {})
    return subprocess.run(
        ["bash", SCRIPT, *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def load_state(path):
    """The model state_dict of a fairseq checkpoint (needs the plugin's allow-list)."""
    import lightcompress  # noqa: F401

    return torch.load(path)["model"]


def max_abs_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def train_losses(log):
    """Per-update training losses logged by rank 0 (``--log-interval 1``)."""
    return [float(x) for x in re.findall(r"train_inner \|.*? loss=([0-9.]+)", log)]


@pytest.fixture(scope="module")
def runs(tiny_data, tmp_path_factory):
    """Three fairseq runs shared by the tests (fairseq start-up dominates their time):

    - ``failed``: two CPU workers, checkpoint every 3 updates; rank 1 kills itself (SIGKILL)
      after 5 updates (``tests/faults.py``);
    - ``resumed``: the same command again, up to 8 updates; every rank dumps its final model;
    - ``one``: one worker with ``--update-freq 2``, 8 updates without interruption.
    """
    root = tmp_path_factory.mktemp("distributed")
    two, one, dump = str(root / "two"), str(root / "one"), str(root / "dump")
    args = train_args(tiny_data, two, MAX_UPDATE) + ["--save-interval-updates", "3"]
    kill = {"LC_DIST_WORKER": FAULTS, "LC_DIST_KILL_RANK": "1", "LC_DIST_KILL_AFTER_UPDATES": "5"}
    start = time.monotonic()
    failed = run_script(args, kill)
    failed_seconds = time.monotonic() - start
    resumed = run_script(args, {"LC_DIST_WORKER": FAULTS, "LC_DIST_DUMP_DIR": dump})
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    single = harness.run_cli(
        "fairseq-train",
        train_args(tiny_data, one, MAX_UPDATE) + ["--cpu", "--update-freq", "2"],
        timeout=RUN_TIMEOUT,
    )
    return {
        "failed": failed,
        "failed_seconds": failed_seconds,
        "resumed": resumed,
        "two": os.path.join(two, "checkpoint_last.pt"),
        "one": os.path.join(one, "checkpoint_last.pt"),
        "dump": dump,
        "log1": single.stdout + single.stderr,
    }


def test_update_freq_keeps_the_reference_effective_batch():
    from lightcompress.distributed import update_freq

    # the WMT recipes' reference (examples/translation/lightformer): 8 GPUs x 4096 tokens
    assert update_freq(8, 4096, reference_gpus=8) == 1
    assert update_freq(2, 4096, reference_gpus=8) == 4
    assert update_freq(1, 4096, reference_gpus=8, reference_max_tokens=4096) == 8
    assert update_freq(3, 4096, effective_tokens=8 * 4096) == 3  # ceil(8/3): 36864 >= 32768
    # fairseq's scaling-NMT recipe: 8 GPUs x 3584 tokens x update-freq 16
    assert update_freq(1, 3584, reference_gpus=8, reference_update_freq=16) == 128
    with pytest.raises(ValueError):
        update_freq(2, 4096)


def test_script_adds_update_freq_from_reference_gpus(tmp_path):
    """The script computes --update-freq from REFERENCE_GPUS and passes it to fairseq-train."""
    fake = tmp_path / "fake-train"
    fake.write_text('#!/bin/sh\necho "ARGS: $*"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=sys.executable, DEVICE="gpu", NPROC="2", REFERENCE_GPUS="8")
    env["FAIRSEQ_TRAIN"] = str(fake)
    proc = subprocess.run(
        ["bash", SCRIPT, "DATA", "--max-tokens", "4096"],
        check=False, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "--update-freq 4" in proc.stdout and "--distributed-world-size 2" in proc.stdout
    assert "32768 tokens per update" in proc.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_script_help_prints_the_launchers_usage_and_starts_no_rank(flag):
    """``train_distributed.sh --help`` reaches the launcher after ``--``: it answers with its
    own usage (exit 0) instead of starting ranks that each print fairseq-train's help."""
    env = dict(os.environ, PYTHON=sys.executable, DEVICE="cpu", NPROC="2")
    for var in HOOK_VARS:
        env.pop(var, None)
    proc = subprocess.run(
        ["bash", SCRIPT, flag],
        check=False, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m lightcompress.distributed launch" in proc.stdout
    assert "--nproc" in proc.stdout and "fairseq-train --help" in proc.stdout
    assert "[rank" not in proc.stdout + proc.stderr and "[launcher]" not in proc.stdout
    # after fairseq-train arguments too, and without the launcher's required options
    proc = subprocess.run(
        [sys.executable, LAUNCHER, "launch", "--", "DATA", "--arch", "transformer", flag],
        check=False, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "usage:" in proc.stdout and "[rank" not in proc.stdout


def test_launcher_help_exits_0(capsys):
    from lightcompress.distributed import main

    assert main(["launch", "--nproc", "2", "--", "--help"]) == 0
    assert "--nproc NPROC" in capsys.readouterr().out
    for argv in (["--help"], ["launch", "-h"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        assert "usage: python -m lightcompress.distributed" in capsys.readouterr().out


def test_fault_injection_is_not_in_the_production_launcher():
    with open(LAUNCHER, encoding="utf-8") as f:
        source = f.read()
    assert "LC_DIST_KILL" not in source and "LC_DIST_UPDATE_DELAY" not in source
    assert "signal.SIGKILL" not in source  # its only self-signal: SIGTERM when orphaned
    with open(FAULTS, encoding="utf-8") as f:
        faults = f.read()
    assert "LC_DIST_KILL_RANK" in faults and "LC_DIST_UPDATE_DELAY" in faults


def test_two_workers_end_with_identical_parameters(runs):
    rank0 = torch.load(os.path.join(runs["dump"], "rank0.pt"))
    rank1 = torch.load(os.path.join(runs["dump"], "rank1.pt"))
    assert rank0["num_updates"] == rank1["num_updates"] == MAX_UPDATE
    assert max_abs_diff(rank0["model"], rank1["model"]) == 0.0
    # rank 0's checkpoint is what rank 0 held (and so what rank 1 held)
    assert max_abs_diff(load_state(runs["two"]), rank0["model"]) == 0.0


def test_two_workers_equal_one_worker_with_update_freq_2(runs):
    """Also across the crash and resume: updates 1-3 before it, 4-8 after it."""
    losses2 = train_losses(runs["failed"].stdout)[:3] + train_losses(runs["resumed"].stdout)
    losses1 = train_losses(runs["log1"])
    assert len(losses2) == len(losses1) == MAX_UPDATE
    # the same batches: the logged per-update losses (over the pair of batches) agree
    assert losses2 == pytest.approx(losses1, abs=1e-3)
    assert losses1[-1] < losses1[0] - 0.5  # and they trained (not two untouched inits)
    assert max_abs_diff(load_state(runs["two"]), load_state(runs["one"])) < 1e-5


def _load_model(path):
    from fairseq import checkpoint_utils

    import lightcompress  # noqa: F401

    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([path])
    return models[0]


def test_tied_encoder_layers_stay_tied_after_distributed_training(runs):
    from lightcompress.modules.sharing import count_unique_params

    state = load_state(runs["two"])
    layer_keys = [k for k in state if k.startswith("encoder.layers.0.")]
    assert layer_keys
    for first, second in ((0, 1), (2, 3)):
        for key in layer_keys:
            other = key.replace("encoder.layers.0.", f"encoder.layers.{second}.", 1)
            mine = key.replace("encoder.layers.0.", f"encoder.layers.{first}.", 1)
            assert torch.equal(state[mine], state[other]), other
    # the two groups are two different sets of parameters
    proj = next(k for k in layer_keys if "proj" in k)
    assert not torch.equal(state[proj], state[proj.replace("layers.0.", "layers.2.", 1)])

    model2, model1 = _load_model(runs["two"]), _load_model(runs["one"])
    layers = model2.encoder.layers
    for a, b in ((0, 1), (2, 3)):
        for (name, p), (_, q) in zip(
            layers[a].named_parameters(), layers[b].named_parameters(), strict=True
        ):
            assert p is q, f"encoder layers {a} and {b} do not share {name}"
    total = sum(p.numel() for _, p in model2.named_parameters(remove_duplicate=False))
    unique = count_unique_params(model2)
    assert unique == count_unique_params(model1)
    assert unique < total  # sharing is real: two of the four encoder layers are copies


def test_dead_rank_stops_the_others_with_a_clear_error(runs):
    failed = runs["failed"]
    assert failed.returncode != 0
    assert "rank 1" in failed.stderr and "SIGKILL" in failed.stderr, failed.stderr[-3000:]
    assert "resume" in failed.stderr
    # stopped at once, not after gloo's 30-minute collective timeout (start-up included)
    assert runs["failed_seconds"] < RUN_TIMEOUT - 30
    assert "num_updates=8," not in failed.stdout


def test_restart_resumes_from_the_last_checkpoint(runs):
    log = runs["resumed"].stdout
    loaded = r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ 3 updates\)"
    assert re.search(loaded, log), log[-4000:]
    assert "num_updates=4," in log and "num_updates=8," in log
    assert "num_updates=1," not in log  # continued, did not start over
    import lightcompress  # noqa: F401

    final = torch.load(runs["two"])
    assert final["optimizer_history"][-1]["num_updates"] == MAX_UPDATE


def test_script_help_with_device_gpu_prints_the_scripts_help_then_fairseq_trains(tmp_path):
    fake = tmp_path / "fake-train"
    fake.write_text('#!/bin/sh\necho "FAIRSEQ-TRAIN HELP: $*"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=sys.executable, DEVICE="gpu", FAIRSEQ_TRAIN=str(fake))
    env.pop("NPROC", None)  # the GPU count is not needed (no torch import) for --help
    for flag in ("--help", "-h"):
        proc = subprocess.run(
            ["bash", SCRIPT, "DATA", "--arch", "transformer", flag],
            check=False, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        assert out.startswith("Data-parallel fairseq-train on N workers")
        for name in ("DEVICE=gpu", "NPROC", "EFFECTIVE_TOKENS", "REFERENCE_GPUS", "PORT"):
            assert name in out
        assert f"FAIRSEQ-TRAIN HELP: DATA --arch transformer {flag}" in out
        assert out.index("EFFECTIVE_TOKENS") < out.index("FAIRSEQ-TRAIN HELP")
        assert "--distributed-world-size" not in out  # help only, nothing launched


# --- ranks die with the launcher; one run per save directory; ports -------------------------

_CHILD = """
import os, sys, time
sys.path.insert(0, os.path.dirname({launcher!r}))
import distributed
if {no_prctl}:
    sys.platform = "darwin"  # the parent-pid watchdog alone
assert distributed.die_with_launcher(interval=0.2)
assert "LC_DIST_LAUNCHER_PID" not in os.environ  # not passed on to what the rank starts
print("ready", flush=True)
time.sleep(120)
"""

_PARENT = """
import os, subprocess, sys, time
env = dict(os.environ, LC_DIST_LAUNCHER_PID=str(os.getpid()))
# the child's output goes to this process only, as a rank's goes to the launcher: once this
# process is killed, writing it fails (broken pipe)
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
assert child.stdout.readline() == "ready\\n"
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid):
    """No such process, or a zombie nobody has reaped yet (it runs no code)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def _wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.05)
    return all(_gone(p) for p in pids)


@pytest.mark.parametrize("no_prctl", [False, True], ids=["prctl", "watchdog"])
def test_a_rank_dies_when_its_launcher_is_killed(no_prctl):
    """die_with_launcher (called by the rank entry before fairseq starts): SIGKILL the parent,
    the child ends within seconds; with PR_SET_PDEATHSIG and with the watchdog thread alone."""
    child_code = _CHILD.format(launcher=LAUNCHER, no_prctl=no_prctl)
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, child_code], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone([child], 5), f"rank {child} outlived its launcher"
    finally:
        parent.kill()
        parent.wait()


def test_save_dir_lock_refuses_a_live_run_and_takes_over_a_dead_ones(tmp_path):
    from lightcompress.distributed import LOCK_NAME, LaunchRefused, SaveDirLock

    save = str(tmp_path / "ckpt")
    first = SaveDirLock(save).acquire(command=["first"])
    with pytest.raises(LaunchRefused, match=rf"--save-dir {save} is in use .*pid {os.getpid()}"):
        SaveDirLock(save).acquire()
    first.release()
    assert os.listdir(save) == []  # the lock file goes with the run
    # a lock left by a run that was killed: its pid is gone; taken over with a warning
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open(os.path.join(save, LOCK_NAME), "w") as f:
        json.dump({"pid": dead.pid, "host": socket.gethostname(), "ranks": []}, f)
    warnings = io.StringIO()
    with SaveDirLock(save).acquire(out=warnings) as lock:
        assert "taking over the lock of an earlier run" in warnings.getvalue()
        assert f"pid {dead.pid}" in warnings.getvalue()
        with open(lock.path) as f:
            assert json.load(f)["pid"] == os.getpid()
    # a file system without a working flock: the pids in the file decide (os.kill(pid, 0))
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(os.path.join(save, LOCK_NAME), "w") as f:
            json.dump({"pid": 1, "host": "elsewhere", "ranks": []}, f)  # another host: no say
        SaveDirLock(save).acquire(out=io.StringIO()).release()
        with open(os.path.join(save, LOCK_NAME), "w") as f:
            json.dump({"pid": dead.pid, "ranks": [[alive.pid, None]]}, f)
        with pytest.raises(LaunchRefused, match=rf"still run \(pids {alive.pid};"):
            SaveDirLock(save).acquire(wait=0.3)
    finally:
        alive.kill()
        alive.wait()


_FAKE_RANK = """
import socket, sys
args = sys.argv[1:]
rank = int(args[args.index("--distributed-rank") + 1])
host, port = args[args.index("--distributed-init-method") + 1][len("tcp://"):].split(":")
open(sys.argv[0] + ".ports", "a").write(f"{rank} {port}\\n")
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, int(port)))
    except OSError:
        print("DistNetworkError: ... code: -98, name: EADDRINUSE, message: address already in use")
        sys.exit(1)
print("trained")
"""


def _busy_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_a_port_in_use_is_refused_before_any_rank_starts(tmp_path):
    sock, port = _busy_port()
    with sock:
        save = tmp_path / "ckpt"
        env = {"PORT": str(port), "LC_DIST_WORKER": str(tmp_path / "never.py")}
        (tmp_path / "never.py").write_text("raise SystemExit('a rank was started')\n")
        proc = run_script(["DATA", "--save-dir", str(save)], env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    expected = (
        f"[launcher] error: port {port} on 127.0.0.1 is in use (another training run's "
        "rendezvous?): free it, or choose another port: PORT=N for "
        "scripts/train_distributed.sh, --port N for the launcher (leave both unset and the "
        "launcher picks a free one)"
    )
    assert proc.stderr.splitlines() == [expected]
    assert "[rank" not in proc.stdout and "Restart the same command" not in proc.stderr
    assert not save.exists()  # nothing written


def test_a_picked_port_taken_meanwhile_is_replaced(tmp_path, monkeypatch):
    """The launcher's own port was taken before rank 0 listened on it: it starts the ranks
    again on another free port instead of advising a rerun that could fail the same way."""
    import lightcompress.distributed as dist

    worker = tmp_path / "rank.py"
    worker.write_text(_FAKE_RANK)
    sock, busy = _busy_port()
    free = iter([busy])
    real = dist.find_free_port
    monkeypatch.setattr(dist, "find_free_port", lambda host: next(free, None) or real(host))
    out = io.StringIO()
    with sock:
        dist.launch(["--save-dir", str(tmp_path / "ckpt")], 2, worker=str(worker), out=out)
    ports = (tmp_path / "rank.py.ports").read_text().split()
    assert ports[1] == str(busy) and ports[-1] != str(busy)
    assert f"port {busy} was taken before rank 0 could listen on it" in out.getvalue()
    assert "[rank 0] trained" in out.getvalue()
    assert os.listdir(tmp_path / "ckpt") == []  # lock released


@pytest.fixture(scope="module")
def crash(tiny_data, tmp_path_factory):
    """A slow two-worker run (``LC_DIST_UPDATE_DELAY``, checkpoint every 3 updates); a second
    launch on its save directory while it runs; ``kill -9`` of its launcher after update 4;
    the same command again (without the delay)."""
    save = str(tmp_path_factory.mktemp("crash") / "ckpt")
    args = train_args(tiny_data, save, MAX_UPDATE) + ["--save-interval-updates", "3"]
    env = dict(os.environ, PYTHON=sys.executable, NPROC="2", DEVICE="cpu", OMP_NUM_THREADS="1")
    env.update(PYTHONWARNINGS="ignore", TIMEOUT=str(RUN_TIMEOUT - 10))
    for var in HOOK_VARS:
        env.pop(var, None)
    env.update(LC_DIST_WORKER=FAULTS, LC_DIST_UPDATE_DELAY="1")
    first = subprocess.Popen(
        ["bash", SCRIPT, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    result = {"save": save, "log": []}
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        for line in first.stdout:
            result["log"].append(line)
            if line.startswith("[launcher]") and " pids " in line:
                result["ranks"] = [int(p) for p in line.split(" pids ")[1].split()]
                result["second"] = run_script(args)  # same save dir, while the first runs
            if "num_updates=4," in line or time.monotonic() > deadline:
                break
        os.kill(first.pid, signal.SIGKILL)  # the launcher (the script exec's it)
        first.wait(timeout=30)
        killed = time.monotonic()
        result["ranks_gone"] = _wait_gone(result["ranks"], 10)
        result["gone_seconds"] = time.monotonic() - killed
        time.sleep(1)
        result["lock_left"] = os.path.exists(os.path.join(save, ".lightcompress-train.lock"))
        result["rerun"] = run_script(args)
    finally:
        if first.poll() is None:
            first.kill()
        first.wait()
        for pid in result.get("ranks", []):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    return result


def test_a_second_run_on_the_same_save_dir_is_refused(crash):
    second = crash["second"]
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    (line,) = second.stderr.splitlines()
    assert line.startswith(f"[launcher] error: --save-dir {crash['save']} is in use by another ")
    assert "kill " in line and "another --save-dir" in line
    assert "[rank" not in second.stdout  # it started nothing


def test_killing_the_launcher_ends_the_ranks_and_the_rerun_resumes(crash):
    assert crash["ranks_gone"], f"ranks {crash['ranks']} still ran after the launcher's kill -9"
    assert crash["gone_seconds"] < 5
    assert crash["lock_left"]  # the killed launcher could not remove it ...
    rerun = crash["rerun"]
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "taking over the lock of an earlier run" in rerun.stderr  # ... the rerun takes it
    loaded = r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ 3 updates\)"
    assert re.search(loaded, rerun.stdout), rerun.stdout[-4000:]
    assert "num_updates=4," in rerun.stdout and f"num_updates={MAX_UPDATE}," in rerun.stdout
    import lightcompress  # noqa: F401

    final = torch.load(os.path.join(crash["save"], "checkpoint_last.pt"))
    assert final["optimizer_history"][-1]["num_updates"] == MAX_UPDATE
    leftovers = [n for n in os.listdir(crash["save"]) if n.endswith(".tmp") or "lock" in n]
    assert leftovers == []
