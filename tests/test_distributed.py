"""Data-parallel training on CPU workers: ``scripts/train_distributed.sh`` with ``DEVICE=cpu``,
torchrun, and the rank entry ``lightcompress/distributed.py``.

Claims checked on a tiny LightFormer with cross-layer sharing (4 encoder layers in 2 groups):

- two gloo workers started by torchrun end with identical parameters, and equal to one worker
  with ``--update-freq 2`` (same seed, same batches: rank ``r`` gets batches ``r, r+2, ...``;
  one worker accumulates the same pairs);
- the encoder layers tied in a group are still tied after training: the checkpoint holds equal
  tensors for them, the reloaded model shares the Parameter objects, and its unique parameter
  count equals the single-worker model's;
- a rank that dies makes torchrun stop the others and fail within seconds; its summary names
  the rank that died first, the surviving rank says why it stops, and running the same command
  again resumes from the last checkpoint;
- ``scripts/train_distributed.sh --help`` prints the script's help, then fairseq-train's, and
  starts no rank;
- the ranks die with torchrun: after a ``kill -9`` of torchrun mid-training they are gone within
  seconds (``prctl(PR_SET_PDEATHSIG)``, and a parent-pid watchdog where that is missing), and the
  same command resumes, taking over the dead run's lock with a warning;
- one run per ``--save-dir`` (rank 0 holds a lock in the directory, whatever its name): a second
  run while one is live is refused with one line;
- a ``PORT`` in use is refused before any rank starts;
- the multi-node command (torchrun's c10d rendezvous): printed by a dry run, and two torchrun
  "machines" on this one form one world.

Faults are injected by the test-only rank entry ``tests/faults.py`` (selected with
``LC_DIST_WORKER``), which wraps the production one; the rank entry holds no fault hook.

Only 127.0.0.1, ports picked by the OS or torchrun, every subprocess under a timeout.
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
ENTRY = os.path.join(harness.REPO_ROOT, "lightcompress", "distributed.py")
FAULTS = os.path.join(harness.REPO_ROOT, "tests", "faults.py")  # the test-only rank entry
HOOK_VARS = (
    "LC_DIST_WORKER",
    "LC_DIST_DUMP_DIR",
    "LC_DIST_KILL_RANK",
    "LC_DIST_KILL_AFTER_UPDATES",
    "LC_DIST_UPDATE_DELAY",
    "LC_DIST_HOLD_AFTER_UPDATES",
    "LC_DIST_TIMEOUT",
    "PORT",
    "NNODES",
    "RDZV_ENDPOINT",
    "RDZV_ID",
    "RANK",
    "WORLD_SIZE",
)
RUN_TIMEOUT = 120  # seconds, per fairseq run (a run here takes about 10 s)
MAX_UPDATE = 8

MODEL = [
    "--arch",
    "lightformer",
    "--encoder-layers",
    4,
    "--lc-encoder-groups",
    2,
    "--decoder-layers",
    1,
    "--encoder-embed-dim",
    32,
    "--decoder-embed-dim",
    32,
    "--encoder-ffn-embed-dim",
    64,
    "--decoder-ffn-embed-dim",
    64,
    "--encoder-attention-heads",
    2,
    "--decoder-attention-heads",
    2,
    "--share-all-embeddings",
    "--lc-rank",
    8,
    "--lc-embed-rank",
    8,
]


def train_args(data_bin, save_dir, max_update):
    """fairseq-train flags shared by the one- and two-worker runs (no distributed flags)."""
    args = [
        data_bin,
        "--user-dir",
        harness.USER_DIR,
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
        "4",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--dropout",
        "0.0",
        "--max-tokens",
        "300",
        "--seed",
        "1",
        "--num-workers",
        "0",
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--max-update",
        max_update,
        "--no-progress-bar",
        "--log-format",
        "simple",
        "--log-interval",
        "1",
        *harness.NO_PREFETCH,
    ]
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
    import lightcompress.plugin  # noqa: F401

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
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--update-freq 4" in proc.stdout and "--distributed-world-size 2" in proc.stdout
    assert "32768 tokens per update" in proc.stderr


def test_help_exits_0_and_starts_no_rank(capsys):
    from lightcompress.distributed import main

    for argv in (["--help"], ["update-freq", "-h"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        assert "usage: python -m lightcompress.distributed" in capsys.readouterr().out


def test_the_rank_entry_outside_torchrun_says_how_to_start_it():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run(
        [sys.executable, ENTRY, "DATA", "--arch", "transformer"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("[rank ?] error: not started by torchrun (RANK / WORLD_SIZE unset)")
    assert "scripts/train_distributed.sh" in line and "torchrun --standalone" in line


def test_fault_injection_is_not_in_the_production_rank_entry():
    with open(ENTRY, encoding="utf-8") as f:
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

    import lightcompress.plugin  # noqa: F401

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


def root_cause(log):
    """(rank, exitcode) of torchrun's summary "Root Cause (first observed failure)"."""
    found = re.search(
        r"Root Cause \(first observed failure\):.*?rank\s*: (\d+) .*?exitcode\s*: (-?\d+)",
        log,
        re.DOTALL,
    )
    assert found, log[-3000:]
    return int(found[1]), int(found[2])


def test_dead_rank_stops_the_others_with_a_clear_error(runs):
    failed = runs["failed"]
    assert failed.returncode != 0
    log = failed.stderr
    assert root_cause(log) == (1, -signal.SIGKILL)  # torchrun names the rank that died first
    assert "(SIGKILL)" in log and "LC_DIST_KILL_RANK: rank 1 kills itself" in failed.stdout
    # the survivor, when gloo told it before torchrun stopped it, says why it stops and how
    # to go on (and waits, so that torchrun records rank 1 first)
    for line in [x for x in log.splitlines() if x.startswith("[rank 0] ")]:
        assert line.startswith("[rank 0] stopping: another rank ended first (")
        assert "Root Cause" in line and "rerun the same command to resume" in line
    # stopped at once, not after gloo's 30-minute collective timeout (start-up included)
    assert runs["failed_seconds"] < RUN_TIMEOUT - 30
    assert "num_updates=8," not in failed.stdout


def test_restart_resumes_from_the_last_checkpoint(runs):
    log = runs["resumed"].stdout
    loaded = r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ 3 updates\)"
    assert re.search(loaded, log), log[-4000:]
    assert "num_updates=4," in log and "num_updates=8," in log
    assert "num_updates=1," not in log  # continued, did not start over
    import lightcompress.plugin  # noqa: F401

    final = torch.load(runs["two"])
    assert final["optimizer_history"][-1]["num_updates"] == MAX_UPDATE


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_script_help_prints_the_scripts_help_then_fairseq_trains(tmp_path, device):
    """``--help`` anywhere among the arguments: the script's help (its variables), then
    fairseq-train's for the same arguments; no torchrun, no rank, no GPU count."""
    fake = tmp_path / "fake-train"
    fake.write_text('#!/bin/sh\necho "FAIRSEQ-TRAIN HELP: $*"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=sys.executable, DEVICE=device, FAIRSEQ_TRAIN=str(fake))
    env.pop("NPROC", None)  # the GPU count is not needed (no torch import) for --help
    for flag in ("--help", "-h"):
        proc = subprocess.run(
            ["bash", SCRIPT, "DATA", "--arch", "transformer", flag],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        assert out.startswith("Data-parallel fairseq-train on N workers")
        for name in ("DEVICE=gpu", "NPROC", "NNODES", "EFFECTIVE_TOKENS", "REFERENCE_GPUS", "PORT"):
            assert name in out
        assert f"FAIRSEQ-TRAIN HELP: DATA --arch transformer {flag}" in out
        assert out.index("EFFECTIVE_TOKENS") < out.index("FAIRSEQ-TRAIN HELP")
        assert "--distributed-world-size" not in out and "[rank" not in out + proc.stderr


# --- ranks die with torchrun; one run per save directory; ports; several machines -----------

_CHILD = """
import os, sys, time
sys.path.insert(0, os.path.dirname({entry!r}))
import distributed
if {no_prctl}:
    sys.platform = "darwin"  # the parent-pid watchdog alone
assert distributed.die_with_launcher(interval=0.2)
print("ready", flush=True)
time.sleep(120)
"""

_PARENT = """
import subprocess, sys, time
# the child's output goes to this process only, as a rank's goes to torchrun: once this
# process is killed, writing it fails (broken pipe)
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
    """die_with_launcher (called by the rank entry before fairseq starts): SIGKILL the parent
    (which started the child in its own session, as torchrun does), the child ends within
    seconds; with PR_SET_PDEATHSIG and with the watchdog thread alone."""
    child_code = _CHILD.format(entry=ENTRY, no_prctl=no_prctl)
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, child_code], stdout=subprocess.PIPE, text=True
    )
    child = None
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone([child], 5), f"rank {child} outlived its launcher"
    finally:
        parent.kill()
        parent.wait()
        if child and not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_save_dir_of_reads_every_form_of_the_flag():
    from lightcompress.distributed import save_dir_of

    assert save_dir_of(["DATA"]) == "checkpoints"  # fairseq's default
    assert save_dir_of(["DATA", "--save-dir", "a"]) == "a"
    assert save_dir_of(["--save-dir=b/", "DATA"]) == "b/"
    assert save_dir_of(["--save-dir", "a", "--save-dir=c"]) == "c"  # the last one, as argparse
    assert save_dir_of(["--save-dir", "a", "--no-save"]) is None


def test_save_dir_lock_refuses_a_live_run_by_any_name_and_takes_over_a_dead_ones(
    tmp_path, monkeypatch
):
    from lightcompress.distributed import LOCK_NAME, LaunchRefused, SaveDirLock

    save = str(tmp_path / "ckpt")
    first = SaveDirLock(save).acquire(command=["first"])
    with pytest.raises(LaunchRefused, match=rf"--save-dir {save} is in use .*pid {os.getpid()}"):
        SaveDirLock(save).acquire()
    # the same directory by other names: relative with a trailing slash, through a symlink
    os.symlink(save, tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    for name in ("ckpt/", "./ckpt", "link", str(tmp_path / "link" / ".")):
        with pytest.raises(LaunchRefused, match="is in use by another training run"):
            SaveDirLock(name).acquire()
    first.release()
    assert os.listdir(save) == []  # the lock file goes with the run
    # a file left by a run that was killed (no flock on it any more): taken over with a warning
    with open(os.path.join(save, LOCK_NAME), "w") as f:
        json.dump({"pid": 4242, "started": "earlier", "host": socket.gethostname()}, f)
    warnings = io.StringIO()
    with SaveDirLock("ckpt").acquire(out=warnings) as lock:
        assert "taking over the lock of an earlier run" in warnings.getvalue()
        assert "rank 0 pid 4242" in warnings.getvalue()
        with open(lock.path) as f:
            assert json.load(f)["pid"] == os.getpid()
    assert os.listdir(save) == []


def test_a_failing_rank_prints_one_line_naming_itself(monkeypatch, capsys):
    """The rank entry's report: a peer's death (gloo's message) is named as such, after a
    wait for torchrun to stop this rank; the plugin's own errors in one line (exit 2); others
    with the traceback, then one line with the way to resume."""
    import lightcompress.distributed as dist
    from lightcompress.errors import ConfigError

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(dist, "_PEER_WAIT", 0.0)
    cases = [
        (RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:1"), 1, "stopping"),
        (ConfigError("--lc-rank must be positive"), 2, "error: --lc-rank must be positive"),
        (KeyError("bad batch"), 1, "error: KeyError: 'bad batch'; rerun the same command"),
    ]
    for (exc, code, says), traced in zip(cases, (False, False, True), strict=True):

        def fail(argv, exc=exc):
            raise exc

        monkeypatch.setattr(dist, "run_worker", fail)
        assert dist.main(["DATA"]) == code
        err = capsys.readouterr().err
        assert err.splitlines()[-1].startswith(f"[rank 1] {says}"), err
        assert ("Traceback" in err) == traced


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
        f"train_distributed.sh: error: PORT {port} on 127.0.0.1 is in use (another training "
        "run's rendezvous?): free it, or choose another PORT (leave it unset and torchrun picks "
        "a free one)"
    )
    assert proc.stderr.splitlines() == [expected]
    assert proc.stdout == ""
    assert not save.exists()  # nothing written


_FAKE_RANK = """
import os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
total = torch.tensor([float(os.environ["RANK"]) + 1])
dist.all_reduce(total)
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}: sum {total.item():g} "
      f"timeout {os.environ.get('LC_DIST_TIMEOUT')} args {' '.join(sys.argv[1:])}", flush=True)
dist.barrier()
dist.destroy_process_group()  # not left to the interpreter's exit (gloo may abort there)
"""


def test_the_multi_node_command_in_a_dry_run():
    """NNODES > 1: torchrun's c10d rendezvous at RDZV_ENDPOINT, the same command on each
    machine; --update-freq counts the workers of every machine."""
    env = dict(os.environ, PYTHON=sys.executable, DEVICE="cpu", DRY_RUN="1", NNODES="2")
    env.update(NPROC="2", RDZV_ENDPOINT="node0.example:29400", RDZV_ID="job7", REFERENCE_GPUS="8")
    env.pop("PORT", None)
    args = ["DATA", "--max-tokens", "4096", "--save-dir", "ckpt/x"]
    proc = subprocess.run(
        ["bash", SCRIPT, *args], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    expected = [
        "+",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "0",
        "--nnodes",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "node0.example:29400",
        "--rdzv-id",
        "job7",
        ENTRY,
        *args,
        "--update-freq",
        "2",
        "--heartbeat-timeout",
        "300",
    ]
    assert line.split() == expected
    assert "4 workers x 4096 tokens x --update-freq 2 = 32768 tokens per update" in proc.stderr
    for bad, says in (
        ({"RDZV_ENDPOINT": ""}, "NNODES=2 needs RDZV_ENDPOINT=HOST:PORT"),
        ({"PORT": "29500"}, "PORT is for one machine"),
        ({"NNODES": "two"}, "NNODES must be a positive integer"),
    ):
        proc = subprocess.run(
            ["bash", SCRIPT, *args],
            check=False,
            env={**env, **bad},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and proc.stdout == ""
        (err,) = proc.stderr.splitlines()
        assert err.startswith("train_distributed.sh: error: ") and says in err


def test_two_machines_form_one_world(tmp_path):
    """The multi-node command run twice on this machine (two torchrun agents, one rank each,
    one c10d rendezvous): one world of 2 ranks, whose all-reduce sums both."""
    worker = tmp_path / "rank.py"
    worker.write_text(_FAKE_RANK)
    sock, port = _busy_port()
    sock.close()  # a port free right now, for the rendezvous store
    env = dict(os.environ, PYTHON=sys.executable, DEVICE="cpu", NNODES="2", NPROC="1")
    env.update(RDZV_ENDPOINT=f"127.0.0.1:{port}", RDZV_ID="t", LC_DIST_WORKER=str(worker))
    env.update(TIMEOUT="60", HEARTBEAT_TIMEOUT="0")
    env.pop("PORT", None)
    cmd = ["bash", SCRIPT, "DATA", "--save-dir", "x"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    nodes = [subprocess.Popen(cmd, env=env, **pipes) for _ in range(2)]
    outs = []
    try:
        for node in nodes:
            out, err = node.communicate(timeout=RUN_TIMEOUT)
            assert node.returncode == 0, err[-3000:]
            outs.append(out)
    finally:
        for node in nodes:
            node.kill()
            node.wait()
    lines = sorted(line for out in outs for line in out.splitlines())
    expected = [f"rank {r} of 2: sum 3 timeout 60 args DATA --save-dir x" for r in (0, 1)]
    assert lines == expected, outs


@pytest.fixture(scope="module")
def crash(tiny_data, tmp_path_factory):
    """A two-worker run (checkpoint every 3 updates) whose ranks wait after update 4 until they
    are killed (``LC_DIST_HOLD_AFTER_UPDATES``: the kill comes after update 4 however long the
    rest takes on a loaded machine); a second run on its save directory, named differently,
    while it runs; ``kill -9`` of its torchrun after update 4; the same command again (without
    the hold)."""
    root = tmp_path_factory.mktemp("crash")
    save = str(root / "ckpt")
    args = train_args(tiny_data, save, MAX_UPDATE) + ["--save-interval-updates", "3"]
    other_name = [a if a != save else f"--save-dir={root}/./ckpt/" for a in args]
    other_name.remove("--save-dir")
    env = dict(os.environ, PYTHON=sys.executable, NPROC="2", DEVICE="cpu", OMP_NUM_THREADS="1")
    env.update(PYTHONWARNINGS="ignore", TIMEOUT=str(RUN_TIMEOUT - 10))
    for var in HOOK_VARS:
        env.pop(var, None)
    env.update(LC_DIST_WORKER=FAULTS, LC_DIST_HOLD_AFTER_UPDATES="4")
    first = subprocess.Popen(
        ["bash", SCRIPT, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    result = {"save": save, "log": [], "ranks": []}
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        for line in first.stdout:
            result["log"].append(line)
            result["ranks"] += [int(p) for p in re.findall(r"\[rank \d\] pid (\d+) ", line)]
            if "num_updates=2," in line and "second" not in result:
                result["second"] = run_script(other_name)  # the same directory, while it runs
            if "num_updates=4," in line or time.monotonic() > deadline:
                break
        os.kill(first.pid, signal.SIGKILL)  # torchrun (the script exec's it)
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
        for pid in result["ranks"]:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    return result


def test_a_second_run_on_the_same_save_dir_is_refused(crash):
    second = crash["second"]
    assert second.returncode != 0, second.stdout[-2000:] + second.stderr[-2000:]
    (line,) = [x for x in second.stderr.splitlines() if x.startswith("[rank 0] ")]
    assert line.startswith(f"[rank 0] error: --save-dir {os.path.dirname(crash['save'])}/./ckpt/")
    assert "is in use by another training run" in line
    assert "kill " in line and "another --save-dir" in line
    assert root_cause(second.stderr) == (0, 2)
    assert "num_updates" not in second.stdout  # it trained nothing


def test_killing_torchrun_ends_the_ranks_and_the_rerun_resumes(crash):
    assert len(crash["ranks"]) == 2, crash["log"]
    assert crash["ranks_gone"], f"ranks {crash['ranks']} still ran after torchrun's kill -9"
    assert crash["gone_seconds"] < 5
    assert crash["lock_left"]  # the killed rank 0 could not remove it ...
    rerun = crash["rerun"]
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "taking over the lock of an earlier run" in rerun.stderr  # ... the rerun takes it
    loaded = r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 1 @ 3 updates\)"
    assert re.search(loaded, rerun.stdout), rerun.stdout[-4000:]
    assert "num_updates=4," in rerun.stdout and f"num_updates={MAX_UPDATE}," in rerun.stdout
    import lightcompress.plugin  # noqa: F401

    final = torch.load(os.path.join(crash["save"], "checkpoint_last.pt"))
    assert final["optimizer_history"][-1]["num_updates"] == MAX_UPDATE
    leftovers = [n for n in os.listdir(crash["save"]) if n.endswith(".tmp") or "lock" in n]
    assert leftovers == []
