"""Data-parallel training on CPU workers (issue #7): ``scripts/train_distributed.sh`` with
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
- ``scripts/train_distributed.sh --help`` prints the launcher's help and starts no rank.

Faults are injected by the test-only rank entry ``tests/faults.py`` (selected with
``LC_DIST_WORKER``), which wraps the production one; the launcher holds no fault hook.

Only 127.0.0.1, ports picked by the OS, every subprocess under a timeout.
"""

import os
import re
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
    assert "LC_DIST_KILL" not in source and "os.kill(" not in source
    with open(FAULTS, encoding="utf-8") as f:
        assert "LC_DIST_KILL_RANK" in f.read()


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
