"""The recipes' plan on a machine without a GPU, SMALL=1, and the result.json of evaluate.

examples/common/lib.sh:

- with no GPU visible (NUM_GPUS=0, the override; by default nvidia-smi's count limited by
  CUDA_VISIBLE_DEVICES) every training step first warns with its planned updates and a rough
  wall-clock estimate, and points to SMALL=1; with a GPU it says nothing;
- SMALL=1 rewrites the plan (at most SMALL_MAX_UPDATE updates of SMALL_MAX_TOKENS tokens,
  update-freq 1, schedule intervals scaled), moves the default SAVE_ROOT / KD_BIN to ``-small``
  and lets averaging take the checkpoints there are;
- DRY_RUN=1 prints all of it and runs nothing (every check here is a dry run, except the last,
  which runs evaluate with a stub fairseq-generate and the real sacrebleu);
- evaluate prints sacreBLEU with its signature and writes result.json, which speed_column
  completes with tokens/s and scripts/plot_frontier.py plots.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "examples", "common", "lib.sh")
EX = os.path.join(ROOT, "examples")
LF_ROW = os.path.join(EX, "translation", "lightformer", "table2-iwslt14-lightformer.sh")
SF_BASE = os.path.join(EX, "translation", "subformer", "table3-wmt14ende-subformer-base.sh")
SF_LM = os.path.join(EX, "language_model", "subformer", "table5-subformer.sh")
HYPO_KD = os.path.join(EX, "translation", "hypoformer", "table4-r6-htt-emb.sh")
KD = os.path.join(EX, "translation", "kd", "run_iwslt14_kd.sh")
CLEAN = (
    "MAX_TOKENS",
    "UPDATE_FREQ",
    "MAX_UPDATE",
    "LR",
    "WARMUP",
    "SAVE_ROOT",
    "DATA_BIN",
    "KD_BIN",
    "SMALL",
    "SMALL_MAX_UPDATE",
    "SMALL_MAX_TOKENS",
    "CPU_WPS",
    "INIT",
    "TEACHER",
    "CUDA_VISIBLE_DEVICES",
    "NUM_GPUS",
    "MEASURE_SPEED",
)


def env_for(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(DRY_RUN="1", USER_DIR="/fake/user_dir", PYTHON=sys.executable, HOME=str(tmp_path))
    env.update(extra)
    return env


def dry_run(script, tmp_path, **extra):
    """(printed commands as argv lists, every output line in order, stderr lines)"""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    proc = subprocess.run(  # stderr into stdout: the warning's place among the commands counts
        ["bash", script],
        cwd=work,
        env=env_for(tmp_path, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    assert list(work.iterdir()) == [], "a dry run wrote something"
    lines = proc.stdout.splitlines()
    cmds = [shlex.split(ln[2:]) for ln in lines if ln.startswith("+ ")]
    return cmds, lines


def trains(cmds):
    return [c for c in cmds if c[0] == "fairseq-train"]


def flag(cmd, name):
    return cmd[len(cmd) - 1 - cmd[::-1].index(name) + 1]


def warnings_before_training(lines):
    """The CPU warnings, each checked to come right before a fairseq-train command."""
    out = []
    for i, line in enumerate(lines):
        if "warning: no GPU visible" in line:
            following = [ln for ln in lines[i + 1 :] if ln.startswith("+ ")]
            assert following and following[0].startswith("+ fairseq-train "), lines
            out.append(line)
    return out


# --------------------------------------------------------------------------------------------
# the warning
# --------------------------------------------------------------------------------------------


def test_no_gpu_warns_before_each_training_step_with_the_plan_and_a_time(tmp_path):
    cmds, lines = dry_run(LF_ROW, tmp_path, NUM_GPUS="0")
    warns = warnings_before_training(lines)
    assert len(warns) == len(trains(cmds)) == 2  # the 18-3 teacher, then the LightFormer
    for w in warns:
        # 50k updates x 4096 tokens, 70 % target tokens = 143M at 1,300-1,900 tokens/s
        assert "50000 updates x 4096 tokens x update-freq 1" in w
        assert "about 143M target tokens" in w and "roughly 21-31 hours" in w
        assert "1300-1900 target tokens/s" in w and "3-3 256-wide Transformer" in w
    assert any("SMALL=1 runs a plan a CPU finishes" in ln for ln in lines)
    assert all("--cpu" in c for c in trains(cmds))


def test_subformer_base_on_a_cpu_is_months(tmp_path):
    _, lines = dry_run(SF_BASE, tmp_path, NUM_GPUS="0")
    (w,) = warnings_before_training(lines)
    assert "200000 updates x 8192 tokens x update-freq 16" in w and "days" in w


def test_cpu_throughput_assumption_can_be_overridden(tmp_path):
    _, lines = dry_run(LF_ROW, tmp_path, NUM_GPUS="0", CPU_WPS="14300")
    assert (
        "roughly 2.8-2.8 hours or more at 14300 target tokens/s"
        in warnings_before_training(lines)[0]
    )


def test_with_a_gpu_there_is_no_warning(tmp_path):
    cmds, lines = dry_run(LF_ROW, tmp_path, NUM_GPUS="1")
    assert not [ln for ln in lines if "warning" in ln or "SMALL=1" in ln]
    assert all("--fp16" in c for c in trains(cmds))


def source_lib(code, tmp_path, path, **extra):
    env = env_for(tmp_path, PATH=path, **extra)
    return subprocess.run(
        [shutil.which("bash"), "-c", f"set -euo pipefail\nsource {shlex.quote(LIB)}\n{code}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "visible, gpus",
    [
        (None, "2"),
        ("", "0"),
        ("-1", "0"),
        ("1", "1"),
        ("0,1", "2"),
        ("0,1,2,3", "2"),
        ("1,-1,0", "1"),
        ("GPU-8a1b", "1"),
    ],
)
def test_gpu_count_follows_nvidia_smi_and_cuda_visible_devices(tmp_path, visible, gpus):
    stubs = tmp_path / "stub-bin"
    stubs.mkdir()
    (stubs / "nvidia-smi").write_text(
        "#!/usr/bin/env bash\necho 'GPU 0: H100 (UUID: GPU-a)'\necho 'GPU 1: H100 (UUID: GPU-b)'\n"
    )
    (stubs / "nvidia-smi").chmod(0o755)
    extra = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    proc = source_lib('echo "$NUM_GPUS"', tmp_path, f"{stubs}:/usr/bin:/bin", **extra)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == gpus


def test_without_nvidia_smi_no_gpu_is_visible(tmp_path):
    bin_dir = tmp_path / "bin"  # bash and the basic tools only: no nvidia-smi
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "grep", "sed", "cat", "awk"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    proc = source_lib('echo "$NUM_GPUS"', tmp_path, str(bin_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


# --------------------------------------------------------------------------------------------
# SMALL=1
# --------------------------------------------------------------------------------------------


def test_small_scales_the_lightformer_plan(tmp_path):
    full, _ = dry_run(LF_ROW, tmp_path, NUM_GPUS="0")
    small, lines = dry_run(LF_ROW, tmp_path, NUM_GPUS="0", SMALL="1")
    assert len(trains(small)) == len(trains(full)) == 2
    for f, s in zip(trains(full), trains(small)):
        assert flag(f, "--max-update") == "50000" and flag(s, "--max-update") == "2000"
        assert flag(f, "--max-tokens") == "4096" and flag(s, "--max-tokens") == "2048"
        assert flag(s, "--update-freq") == "1"
        assert flag(f, "--warmup-updates") == "4000" and flag(s, "--warmup-updates") == "160"
        assert flag(s, "--save-dir").startswith("checkpoints/lightformer-small/iwslt14/")
        # nothing else changes
        assert len(s) == len(f)
        changed = {f[i - 1] for i in range(1, len(f)) if f[i] != s[i]}
        assert changed <= {
            "--max-update",
            "--max-tokens",
            "--warmup-updates",
            "--save-dir",
            "--finetune-from-model",
        }
    # the warning shows the small plan; averaging takes what there is
    warns = warnings_before_training(lines)
    assert len(warns) == 2
    w1 = warns[0]
    assert "2000 updates x 2048 tokens x update-freq 1" in w1 and "min" in w1
    assert not any("SMALL=1 runs a plan" in ln for ln in lines)
    assert any(ln.startswith("[lightformer] SMALL=1: ") for ln in lines)
    averages = [c for c in small if any(a.endswith("average_checkpoints.py") for a in c)]
    assert len(averages) == 2 and all("--allow-fewer" in c for c in averages)
    convert = next(c for c in small if c[0] == "lightcompress-convert")
    assert "lightformer-small" in flag(convert, "--input")


def test_small_keeps_a_save_root_the_user_set_and_the_gpu_plan_otherwise(tmp_path):
    cmds, lines = dry_run(LF_ROW, tmp_path, NUM_GPUS="1", SMALL="1", SAVE_ROOT="mine")
    for c in trains(cmds):
        assert flag(c, "--save-dir").startswith("mine/") and flag(c, "--max-update") == "2000"
    assert not [ln for ln in lines if "warning" in ln]


def test_small_subformer_and_language_model_schedules(tmp_path):
    cmds, _ = dry_run(SF_BASE, tmp_path, NUM_GPUS="0", SMALL="1")
    (train,) = trains(cmds)
    assert flag(train, "--update-freq") == "1" and flag(train, "--warmup-updates") == "100"
    cmds, _ = dry_run(SF_LM, tmp_path, NUM_GPUS="0", SMALL="1")
    (lm,) = trains(cmds)
    assert flag(lm, "--max-update") == "2000" and flag(lm, "--max-tokens") == "1536"
    # 286k updates with a 270k-update cosine period and 16k warmup, scaled by 2000/286000
    assert flag(lm, "--lr-period-updates") == "1888" and flag(lm, "--warmup-updates") == "111"


@pytest.mark.parametrize("script, default", [(HYPO_KD, "hypoformer-skd-12-2"), (KD, "kd-12-2")])
def test_small_distilled_data_goes_next_to_the_full_one(tmp_path, script, default):
    cmds, _ = dry_run(script, tmp_path, NUM_GPUS="0", SMALL="1")
    distill = next(c for c in cmds if c[0].endswith("distill_data.sh"))
    assert flag(distill, "--out-dir").endswith(f".{default}-small")
    student = trains(cmds)[-1]
    assert flag(student, "--kd-distilled-data").endswith(f".{default}-small")
    assert "-small/" in flag(student, "--save-dir")


# --------------------------------------------------------------------------------------------
# evaluate: sacreBLEU's signature and result.json, read by plot_frontier
# --------------------------------------------------------------------------------------------

STUB_GENERATE = r"""#!/usr/bin/env bash
printf 'S-1\tzwei\nT-1\tthe second sentence is here\nH-1\t-0.3\tthe second sentence is here\n'
printf 'S-0\teins\nT-0\tthe first one , it is\nH-0\t-0.2\tthe first one , it was\n'
echo 'Generate test with beam=5: BLEU4 = 61.00, 80.0/70.0/60.0/50.0 (BP=1.000)'
"""
SPEED_JSON = {
    "protocol": {"tokens": "generated target tokens of the best hypothesis, EOS excluded"},
    "models": [
        {
            "label": "transformer",
            "precision": "float32",
            "params": 36_000_000,
            "tokens_per_s": 50.0,
            "tokens_per_s_std": 1.0,
            "speed_ratio": 1.0,
        },
        {
            "label": "model",
            "precision": "float32",
            "params": 7_000_000,
            "tokens_per_s": 110.0,
            "tokens_per_s_std": 2.0,
            "speed_ratio": 2.2,
        },
    ],
}


def test_evaluate_prints_the_signature_and_writes_a_result_plot_frontier_reads(tmp_path):
    assert shutil.which("sacrebleu"), "sacrebleu is installed with the project"
    stubs = tmp_path / "stub-bin"
    stubs.mkdir()
    for name, text in (("fairseq-generate", STUB_GENERATE), ("sacremoses", "#!/bin/sh\ncat\n")):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    save = tmp_path / "ckpt" / "iwslt14" / "lightformer-18-3-g6-svd"
    save.mkdir(parents=True)
    (save / "train.log").write_text(
        "2024-01-01 | INFO | fairseq_cli.train | num. shared model params: 7,647,232 "
        "(num. trained: 7,647,232)\n"
    )
    (save / "speed.json").write_text(json.dumps(SPEED_JSON))
    common = os.path.join(EX, "translation", "lightformer", "common.sh")
    code = f"""set -euo pipefail
source {shlex.quote(common)}
use_dataset iwslt14
DATA_BIN={shlex.quote(str(tmp_path / "bin"))}
evaluate {shlex.quote(str(save))} {shlex.quote(str(save / "checkpoint_avg.pt"))}
cp {shlex.quote(str(save / "result.json"))} {shlex.quote(str(tmp_path / "without-speed.json"))}
write_result {shlex.quote(str(save))} {shlex.quote(str(save / "checkpoint_avg.pt"))} \
  {shlex.quote(str(save / "speed.json"))}
"""
    env = env_for(
        tmp_path,
        DRY_RUN="0",
        NUM_GPUS="0",
        MOSES_DIR="",
        PATH=f"{stubs}:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
    )
    proc = subprocess.run(
        ["bash", "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    # the human-readable result carries sacreBLEU's signature
    sacre = next(ln for ln in proc.stdout.splitlines() if ln.startswith("sacreBLEU"))
    assert "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in sacre
    assert sacre == next(
        ln for ln in (save / "results.txt").read_text().splitlines() if ln.startswith("sacreBLEU")
    )
    before = json.loads((tmp_path / "without-speed.json").read_text())["models"][0]
    assert before["tokens_per_s"] is None and before["params"] == 7_647_232
    (rec,) = json.loads((save / "result.json").read_text())["models"]
    assert rec["label"] == "lightformer-18-3-g6-svd" and rec["dataset"] == "iwslt14"
    assert rec["bleu_signature"].startswith("nrefs:1|case:mixed") and 0 < rec["bleu"] <= 100
    assert rec["bleu_tokenized"] == 61.0 and rec["plan"] == "paper"
    assert rec["params"] == 7_647_232 and rec["tokens_per_s"] == 110.0
    assert rec["speed_ratio"] == 2.2 and rec["speed_baseline"] == "transformer"

    png = tmp_path / "frontier.png"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "plot_frontier.py"),
            str(save / "result.json"),
            str(tmp_path / "without-speed.json"),
            "--out",
            str(png),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 points" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_tools_reports_too_little_disk_space_before_training(tmp_path):
    """A run of days must not die on a full disk at its first checkpoint: check_tools compares
    the free space where SAVE_ROOT lies with MIN_FREE_GB before the first training step."""
    script = os.path.join(
        ROOT, "examples", "translation", "lightformer", "table2-iwslt14-lightformer.sh"
    )
    _, lines = dry_run(script, tmp_path, MIN_FREE_GB="100000000")
    disk = [i for i, ln in enumerate(lines) if "disk space:" in ln and "MIN_FREE_GB" in ln]
    first_train = next(i for i, ln in enumerate(lines) if ln.startswith("+ fairseq-train "))
    assert disk and disk[0] < first_train, "\n".join(lines)
    _, lines = dry_run(script, tmp_path, MIN_FREE_GB="0")
    assert not any("disk space:" in ln for ln in lines)
