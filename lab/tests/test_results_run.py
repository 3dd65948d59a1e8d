"""lab/results/run.sh: resume and skip logic, and collect.py's table.

run.sh runs here with stand-ins for the programs that train, convert, distill and decode
(fairseq-train, fairseq-generate, lightcompress-convert, lightcompress-params on PATH; PYTHON is
a wrapper that fakes
scripts/distill_data.py and hands everything else, collect.py and the plots included, to the
real interpreter). The stand-ins log every call, so the test sees what a second and a third run
of the same command do: a run stopped by TIME_BUDGET exits 3 and the next one resumes the
interrupted training (from checkpoint_best.pt when checkpoint_last.pt is damaged), and a run
after a finished one trains, converts, distills and decodes nothing. Its dry run is covered by
tests/test_dry_run.py with every other script; here, the DA-WID chain's commands in the dry run
are parsed by fairseq-train's own parser (flags fairseq would refuse fail here, not after the
teacher's training).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "lab" / "results" / "run.sh"

FAKE_TRAIN = r"""#!/usr/bin/env bash
save="" prev=""
for a in "$@"; do [[ "$prev" == --save-dir ]] && save="$a"; prev="$a"; done
name="$(basename "$save")"
state=fresh
if [[ -f "$save/checkpoint_last.pt" ]]; then state="resume:$(cat "$save/checkpoint_last.pt")"; fi
echo "train $name $state" >> "$CALLS"
if [[ -n "${WHEELS:-}" ]]; then "$PYTHON" -c "import lc_probe_mod" || exit 5; fi
mkdir -p "$save"
echo "2026-01-01 00:00:00 | INFO | fairseq_cli.train | num. shared model params: 2,000,000 (num. trained: 2,000,000)"
for u in 5 10; do echo "2026-01-01 00:00:01 | INFO | train_inner | epoch 001:  $u / 9 loss=7, wps=1000.0, ups=0.30, num_updates=$u"; done
echo "2026-01-01 00:00:01 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.5 | nll_loss 5 | num_updates 10"
echo "2026-01-01 00:00:02 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.1 | nll_loss 5 | num_updates 20"
printf best > "$save/checkpoint_best.pt"
printf last > "$save/checkpoint_last.pt"
if [[ "${SLOW_TRAIN:-}" == "$name" ]]; then echo $$ > "$save/train.pid"; exec sleep 60; fi
"""
FAKE_GENERATE = r"""#!/usr/bin/env bash
ckpt="" prev=""
for a in "$@"; do [[ "$prev" == --path ]] && ckpt="$a"; prev="$a"; done
echo "generate $(basename "$(dirname "$ckpt")") $(basename "$ckpt")" >> "$CALLS"
i=0
while IFS= read -r line; do
  if [[ "$ckpt" == */teacher/* ]]; then hyp="$line"; else hyp="${line% *}"; fi
  printf 'S-%d\tx\nH-%d\t-0.1\t%s\nD-%d\t-0.1\t%s\n' "$i" "$i" "$hyp" "$i" "$hyp"
  i=$((i + 1))
done < "$FAKE_REF"
"""
FAKE_CONVERT = r"""#!/usr/bin/env bash
out="" prev=""
for a in "$@"; do [[ "$prev" == -o ]] && out="$a"; prev="$a"; done
echo "convert $(basename "$out")" >> "$CALLS"
printf init > "$out"
"""
FAKE_PARAMS = r"""#!/usr/bin/env bash
ckpt="" prev=""
for a in "$@"; do [[ "$prev" == --path ]] && ckpt="$a"; prev="$a"; done
echo "params $(basename "$(dirname "$ckpt")") $(basename "$ckpt")" >> "$CALLS"
echo '{"path": "'"$ckpt"'", "arch": "dawid_fused", "total": 1500000, "non_embedding": 500000}'
"""
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [[ "${1:-}" == */distill_data.py ]]; then
  out="" prev=""
  for a in "$@"; do [[ "$prev" == --out-dir ]] && out="$a"; prev="$a"; done
  echo "distill $(basename "$out")" >> "$CALLS"
  if [[ -n "${FAIL_DISTILL:-}" ]]; then echo "distill_data: error: broken teacher" >&2; exit 2; fi
  mkdir -p "$out"
  exit 0
fi
exec "{python}" "$@"
"""
REFS = [
    "The file could not be read.",
    "Save the changes before closing the window.",
    "The printer is not available right now.",
    "Delete the selected user account.",
]


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel (a module lc_probe_mod that records its import)."""
    folder.mkdir()
    path = folder / "lc_probe_mod-0.1-py3-none-any.whl"
    di = "lc_probe_mod-0.1.dist-info"
    files = {
        "lc_probe_mod/__init__.py": "VALUE = 42\n",
        f"{di}/METADATA": "Metadata-Version: 2.1\nName: lc-probe-mod\nVersion: 0.1\n",
        f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{di}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{di}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return folder


@pytest.fixture
def bench(tmp_path):
    """(environment, calls file, save root) with the stand-ins first on PATH."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (
        ("fairseq-train", FAKE_TRAIN),
        ("fairseq-generate", FAKE_GENERATE),
        ("lightcompress-convert", FAKE_CONVERT),
        ("lightcompress-params", FAKE_PARAMS),
        ("python", FAKE_PYTHON.replace("{python}", sys.executable)),
    ):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    data = tmp_path / "data"
    (data / "bin").mkdir(parents=True)
    (data / "raw").mkdir()
    (data / "bin" / "dict.de.txt").write_text("Datei 3\n")
    (data / "raw" / "test.en").write_text("\n".join(REFS) + "\n")
    (data / "stats.json").write_text(json.dumps({"pairs": {"train": 9, "valid": 2, "test": 4}}))
    calls = tmp_path / "calls.txt"
    save = tmp_path / "runs"
    env = {
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHON": str(bin_ / "python"),
        "CALLS": str(calls),
        "FAKE_REF": str(data / "raw" / "test.en"),
        "DATA_DIR": str(data),
        "SAVE_ROOT": str(save),
        "NUM_GPUS": "0",
        "PARALLEL": "0",
        "MEASURE_SPEED": "0",
        "USER_DIR": str(ROOT / "lightcompress"),
        "MPLBACKEND": "Agg",
    }
    return env, calls, save


def _run(env, **extra):
    return subprocess.run(
        ["bash", str(RUN)],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_time_budget_stops_resume_continues_and_finished_work_is_skipped(bench):
    env, calls, save = bench
    # WHEELS: installed once into SAVE_ROOT/site, importable by every step
    env["WHEELS"] = str(_wheel(save.parent / "wheels"))
    # 1. the models that need no teacher train first; the teacher outlives the budget: exit 3,
    #    the teacher not marked done, what needs it waits
    first = _run(env, TIME_BUDGET="3", MIN_TRAIN_SECONDS="1", SLOW_TRAIN="teacher")
    assert first.returncode == 3, first.stderr
    assert "installing 1 wheels" in first.stderr
    assert (save / "site" / "lc_probe_mod" / "__init__.py").exists()
    assert "run the same command again" in first.stderr
    assert _calls(calls) == [
        "train lightformer_random fresh",
        "train subformer fresh",
        "train smartformer fresh",
        "train dawid_teacher fresh",
        "train dawid fresh",
        "convert fused.pt",
        "params dawid fused.pt",
        "train teacher fresh",
    ]
    assert not (save / "teacher" / "train.done").exists()
    assert (save / "smartformer" / "train.done").exists()
    assert (save / "teacher" / "checkpoint_last.pt").exists()
    assert not (save / "results.md").exists()

    # 2. the same command again: the teacher resumes (its damaged checkpoint_last.pt, from an
    #    interrupted save, is replaced by checkpoint_best.pt), the finished ones are skipped,
    #    what needs the teacher runs
    (save / "teacher" / "checkpoint_last.pt").write_text("half-written")
    before = len(_calls(calls))
    second = _run(env)
    assert second.returncode == 0, second.stderr
    new = _calls(calls)[before:]
    assert "installing" not in second.stderr
    assert "cannot be loaded" in second.stderr
    assert second.stderr.count("trained before") == 5
    assert new[0] == "train teacher resume:best"
    trained = [c.split()[1] for c in new if c.startswith("train ")]
    assert sorted(trained) == ["hypoformer_kd", "lightformer_svd", "teacher"]
    # the SVD student starts after the conversion, the KD student after the distillation
    assert new.index("convert lightformer_init.pt") < new.index("train lightformer_svd fresh")
    assert new.index("distill kd-bin") < new.index("train hypoformer_kd fresh")
    models = [
        "teacher",
        "lightformer_svd",
        "lightformer_random",
        "hypoformer_kd",
        "subformer",
        "smartformer",
        "dawid_teacher",
        "dawid",
    ]
    # every model's checkpoint_best.pt, DA-WID's fused model (nothing of it redone)
    assert [c for c in new if c.startswith("generate")] == [
        f"generate {m} {'fused.pt' if m == 'dawid' else 'checkpoint_best.pt'}" for m in models
    ]
    assert not any(c.startswith(("convert fused", "params")) for c in new)
    table = (save / "results.md").read_text()
    assert "NUM_GPUS=0)" in table.splitlines()[0]  # machine.txt: where the models trained
    assert "| Transformer (dense teacher) | 2.00M | 1.0 | 100.00 |" in table
    assert "Not (yet) evaluated" not in table
    doc = json.loads((save / "results.json").read_text())
    assert [r["label"] for r in doc["models"]] == models
    assert all(r["best_update"] == 20 for r in doc["models"])
    # params: fairseq-train's count, DA-WID's from lightcompress-params of its fused model
    assert [r["params"] for r in doc["models"]] == [2_000_000] * 7 + [1_500_000]
    assert "| DA-WID, fused | 1.50M | 1.3 |" in table
    assert "DA-WID against its own post-LN teacher" in table

    # 3. once more: nothing is trained, converted, distilled or decoded again
    before = len(_calls(calls))
    third = _run(env)
    assert third.returncode == 0, third.stderr
    assert _calls(calls)[before:] == []
    assert third.stderr.count("trained before") == 8
    assert "is up to date" in third.stderr

    # 4. SAVE_ROOT brought back from another machine without checkpoints and KD data (the
    #    device's results): nothing needs the teacher again; the table and plots are redone
    for f in [*save.glob("*/*.pt"), save / "lightformer_init.pt", save / "curves.png"]:
        f.unlink()
    shutil.rmtree(save / "kd-bin")
    before = len(_calls(calls))
    fourth = _run(env)
    assert fourth.returncode == 0, fourth.stderr
    assert _calls(calls)[before:] == []
    assert (save / "curves.png").exists()


def test_a_failed_distillation_stops_the_kd_student(bench):
    env, calls, save = bench
    proc = _run(env, FAIL_DISTILL="1")
    assert proc.returncode == 1
    assert "distill_data.sh failed" in proc.stderr
    assert "distill kd-bin" in _calls(calls)
    assert not any(c.startswith("train hypoformer_kd") for c in _calls(calls))
    assert not (save / "kd-bin" / ".done").exists()
    assert not (save / "results.md").exists()


def test_bad_settings_stop_before_anything_runs(bench, tmp_path):
    env, calls, _ = bench
    (tmp_path / "empty").mkdir()
    proc = _run(env, WHEELS=str(tmp_path / "empty"))
    assert proc.returncode == 1
    assert "holds no .whl file" in proc.stderr
    for extra in (
        {"TIME_BUDGET": "soon"},
        {"STUDENT_UPDATES": "0"},
        {"SMALL": "2"},
        {"PARALLEL": "yes"},
        {"NUM_GPUS": "-1"},
        {"LR": "fast"},
        {"LR": "0"},
        {"DAWID_LR": "-2e-4"},
        {"SEED": "x"},
        {"DROPOUT": "1.5"},
        {"WARMUP": "0"},
    ):
        proc = _run(env, **extra)
        assert proc.returncode == 1
        assert "must be" in proc.stderr
    assert _calls(calls) == []


def _collect():
    spec = importlib.util.spec_from_file_location(
        "results_collect", ROOT / "lab" / "results" / "collect.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_collect_findings_state_shortfalls():
    col = _collect()
    recs = [
        {"label": "teacher", "method": "T", "bleu": 30.0, "params": 36e6},
        {
            "label": "lightformer_svd",
            "method": "LF svd",
            "bleu": 29.5,
            "bleu_vs_teacher": -0.5,
            "compression": 4.3,
            "updates": 3000,
        },
        {
            "label": "lightformer_random",
            "method": "LF rnd",
            "bleu": 29.9,
            "bleu_vs_teacher": -0.1,
            "compression": 4.3,
            "updates": 3000,
        },
        {
            "label": "smartformer",
            "method": "SM",
            "bleu": 27.0,
            "bleu_vs_teacher": -3.0,
            "compression": 1.5,
        },
    ]
    text = "\n".join(col.findings(recs))
    assert "LF svd: 29.50 BLEU (-0.50 vs the teacher) at 4.3x fewer parameters: meets" in text
    assert "SM: 27.00 BLEU" in text and "falls short of" in text
    assert "3.00 BLEU below the teacher" in text and "1.5x fewer parameters, outside 3-7x" in text
    assert "SVD transfer does NOT help here" in text
    # an untrained teacher (a smoke run): no verdicts
    recs[0]["bleu"] = 0.3
    assert col.findings(recs) == [
        "The teacher scores 0.30 BLEU: far too little training for any comparison (a smoke run?)."
    ]


def test_collect_refuses_translations_of_another_test_set(tmp_path, capsys):
    col = _collect()
    (tmp_path / "teacher").mkdir()
    (tmp_path / "teacher" / "generate-test.txt").write_text("D-0\t-0.1\tone\n")
    ref = tmp_path / "test.en"
    ref.write_text("one\ntwo\n")
    out = tmp_path / "r.md"
    argv = [
        "--save-root",
        str(tmp_path),
        "--ref",
        str(ref),
        "--out",
        str(out),
        "--json",
        str(tmp_path / "r.json"),
    ]
    assert col.main(argv) == 2
    assert "1 translations for 2 references" in capsys.readouterr().err
    assert not out.exists()


# ------------------------------------------------------------------ DA-WID's chain


def _dry_run_commands(env, **extra) -> list[list[str]]:
    import shlex

    proc = _run(env, DRY_RUN="1", **extra)
    assert proc.returncode == 0, proc.stderr
    return [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]


def _train_command(commands, name):
    found = [
        c
        for c in commands
        if c[0] == "fairseq-train" and c[c.index("--save-dir") + 1].endswith(f"/{name}")
    ]
    assert len(found) == 1, [c[:6] for c in commands]
    return found[0]


def _fairseq_parses(argv, capsys):
    """fairseq-train's own parser on a printed command (the --user-dir plugin included)."""
    from fairseq import options

    try:
        return options.parse_args_and_arch(options.get_training_parser(), argv[1:])
    except SystemExit:
        pytest.fail(f"fairseq-train refuses {argv[:8]}...: {capsys.readouterr().err[-500:]}")


@pytest.mark.parametrize(
    "small, sparsity, updates, teacher_updates, width, gate_scale",
    [("1", 0.8, 350, 600, 256, 150), ("0", 0.77, 2500, 3000, 512, 50)],
)
def test_dry_run_shows_the_dawid_chain_and_fairseq_accepts_its_flags(
    bench, capsys, tmp_path, small, sparsity, updates, teacher_updates, width, gate_scale
):
    env, calls, save = bench
    commands = _dry_run_commands(env, SMALL=small, ROWS_DIR=str(tmp_path / "rows"))
    assert _calls(calls) == []  # printed, nothing run
    # the CPU plan's DA-WID starts from the one post-LN teacher every method shares (fixed
    # updates); the GPU plan's from its own post-LN teacher (early stopping)
    tname = "dawid_teacher"
    teacher = _fairseq_parses(_train_command(commands, tname), capsys)
    assert teacher.arch == "transformer" and teacher.max_update == teacher_updates
    assert not teacher.encoder_normalize_before and not teacher.decoder_normalize_before
    assert teacher.encoder_embed_dim == width and teacher.share_all_embeddings
    assert teacher.patience == (8 if small == "0" else -1)
    student = _fairseq_parses(_train_command(commands, "dawid"), capsys)
    assert student.arch == "dawid" and student.criterion == "dawid"
    assert student.dawid_teacher == f"{save}/{tname}/checkpoint_best.pt"
    assert student.dawid_target_sparsity == sparsity and student.dawid_masks == "dim,head,layer"
    assert student.max_update == updates and student.patience == -1  # as the LightFormers
    assert student.dawid_distill_updates == updates * 11 // 150
    assert student.dawid_sparsity_warmup == updates * 11 // 30
    assert student.dawid_structure_updates == updates * 11 // 50
    assert student.lr == [2e-4] and student.dawid_gate_lr_scale == gate_scale
    assert student.dawid_init == "data-aware" and student.dawid_calib_tokens == 4096
    # fused from the last checkpoint, counted, translated and timed as the fused model
    fuse = [c for c in commands if "dawid-fuse" in c]
    assert len(fuse) == 1 and fuse[0][fuse[0].index("-i") + 1] == f"{save}/dawid/checkpoint_last.pt"
    assert fuse[0][fuse[0].index("-o") + 1] == f"{save}/dawid/fused.pt"
    assert ["lightcompress-params", "--path", f"{save}/dawid/fused.pt"] in commands
    generate = [c[c.index("--path") + 1] for c in commands if c[0] == "fairseq-generate"]
    assert f"{save}/{tname}/checkpoint_best.pt" in generate
    assert f"{save}/dawid/fused.pt" in generate


def test_measure_speed_times_the_fused_dawid_model(bench):
    env, _, save = bench
    commands = _dry_run_commands(env, MEASURE_SPEED="1")
    speed = [c for c in commands if "scripts/measure_speed.sh" in c]
    assert len(speed) == 1
    paths = speed[0][speed[0].index("--path") + 1].split(",")
    assert paths[-2:] == [
        f"dawid_teacher={save}/dawid_teacher/checkpoint_best.pt",
        f"dawid={save}/dawid/fused.pt",
    ]


def test_dawid_resumes_at_its_first_unfinished_step(bench):
    env, calls, save = bench
    first = _run(env)
    assert first.returncode == 0, first.stderr
    # the fused model and its count lost (say, a disk cleaned), the translation not made yet:
    # fused and counted again, nothing trained again
    for f in ("fused.pt", "params.json", "generate-test.txt"):
        (save / "dawid" / f).unlink()
    before = len(_calls(calls))
    second = _run(env)
    assert second.returncode == 0, second.stderr
    assert _calls(calls)[before:] == [
        "convert fused.pt",
        "params dawid fused.pt",
        "generate dawid fused.pt",
    ]
    assert (
        "dawid: trained before" in second.stderr
        and "dawid_teacher: trained before" in second.stderr
    )


def test_a_failed_fusion_stops_before_the_table(bench):
    env, calls, save = bench
    fake = Path(env["PATH"].split(":")[0]) / "lightcompress-convert"
    fake.write_text(
        FAKE_CONVERT.replace('printf init > "$out"', 'echo "error: broken" >&2; exit 2')
    )
    proc = _run(env)
    assert proc.returncode == 1
    assert "dawid-fuse failed (exit 2)" in proc.stderr
    assert not any(c.startswith("params") for c in _calls(calls))
    assert not (save / "dawid" / "fused.pt").exists() and not (save / "results.md").exists()


def test_a_failed_parameter_count_stops_the_run_and_leaves_no_params_json(bench):
    # (run_to once hid the failure: inside `... || rc=$?` set -e does not act, so the output
    # was moved into place and the run went on to die in collect.py)
    env, _, save = bench
    fake = Path(env["PATH"].split(":")[0]) / "lightcompress-params"
    fake.write_text(FAKE_PARAMS.replace("echo '{", "echo 'error: no model' >&2; exit 2; echo '{"))
    proc = _run(env)
    assert proc.returncode == 1
    assert "lightcompress-params --path" in proc.stderr and "failed (exit 2)" in proc.stderr
    assert not (save / "dawid" / "params.json").exists()
    assert not (save / "dawid" / "params.json.tmp").exists()
    assert not (save / "results.md").exists()


@pytest.mark.parametrize("value", ["1", "0.8x", "-0.1"])
def test_a_bad_dawid_sparsity_stops_before_anything_runs(bench, value):
    env, calls, _ = bench
    proc = _run(env, DAWID_SPARSITY=value)
    assert proc.returncode == 1 and "DAWID_SPARSITY must be a number in [0, 1)" in proc.stderr
    assert _calls(calls) == []


def test_collect_counts_dawid_by_its_params_json_and_refuses_a_damaged_one(tmp_path, capsys):
    col = _collect()
    ref = tmp_path / "test.en"
    ref.write_text("one\ntwo\n")
    for name, hyps in (("dawid_teacher", "one\ntwo"), ("dawid", "one\nzwei")):
        d = tmp_path / name
        d.mkdir()
        lines = [f"D-{i}\t-0.1\t{h}" for i, h in enumerate(hyps.split("\n"))]
        (d / "generate-test.txt").write_text("\n".join(lines) + "\n")
        (d / "train.log").write_text("x | num. shared model params: 3,000,000 (num. trained: 1)\n")
    (tmp_path / "dawid" / "params.json").write_text(json.dumps({"total": 1_000_000}))
    result = col.collect(str(tmp_path), str(ref))
    by = {r["label"]: r for r in result["models"]}
    assert by["dawid"]["params"] == 1_000_000 and by["dawid_teacher"]["params"] == 3_000_000
    assert "teacher" in result["missing"]
    text = "\n".join(col.findings(result["models"]))
    assert "DA-WID against its own post-LN teacher (the one it inherits from)" in text
    assert "at 3.0x fewer parameters" in text
    (tmp_path / "dawid" / "params.json").write_text("{not json")
    argv = [
        "--save-root",
        str(tmp_path),
        "--ref",
        str(ref),
        "--out",
        str(tmp_path / "r.md"),
        "--json",
        str(tmp_path / "r.json"),
    ]
    assert col.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "params.json: not lightcompress-params output" in err[0]
    assert not (tmp_path / "r.md").exists()


# ---------------------------------------------------------------------------------------------
# The CPU plan (SMALL=1, cpu_plan.sh): rows in the repository, the table from them alone
# ---------------------------------------------------------------------------------------------

CPU_ROWS = [
    "teacher",
    "lightformer_svd",
    "lightformer_random",
    "hypoformer_kd",
    "hypoformer",
    "subformer",
    "smartformer_search",
    "smartformer",
    "dawid_teacher",
    "dawid",
]


def _cpu_env(env, tmp_path):
    return {**env, "SMALL": "1", "ROWS_DIR": str(tmp_path / "rows"), "PARALLEL": "1"}


def test_cpu_plan_dry_run_names_every_row_and_keeps_its_state_outside_the_checkout(bench, tmp_path):
    env, _, _ = bench
    env = {k: v for k, v in _cpu_env(env, tmp_path).items() if k not in ("SAVE_ROOT", "DATA_DIR")}
    proc = _run(env, DRY_RUN="1", MEASURE_SPEED="1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    cache = tmp_path / ".cache" / "lightcompress"  # HOME is tmp_path
    for name in CPU_ROWS:
        assert f"--save-dir {cache}/results-cpu/{name} " in out, name
        assert f"collect.py row {name} " in out, name
    assert f"--dawid-teacher {cache}/results-cpu/dawid_teacher/checkpoint_best.pt" in out
    assert "--task translation_smartformer --sm-search" in out
    assert "--task translation_seqkd" in out
    assert out.count("--timing-batch-size 1 ") == 1 and out.count("--timing-batch-size 32 ") == 1
    assert "collect.py table" in out
    # the teacher is pre-LN (the LightFormers with it), DA-WID's own teacher post-LN
    teacher_cmd = next(line for line in out.splitlines() if "results-cpu/teacher " in line)
    assert "--encoder-normalize-before" in teacher_cmd
    dawid_cmd = next(line for line in out.splitlines() if "results-cpu/dawid_teacher " in line)
    assert "normalize-before" not in dawid_cmd and "--max-update 600 " in dawid_cmd


def test_cpu_plan_interrupted_resumes_rows_only_when_finished_table_from_rows_alone(
    bench, tmp_path
):
    env, calls, save = bench
    env = _cpu_env(env, tmp_path)
    rows = tmp_path / "rows"
    # 1. the teacher outlives the budget: its lane stops there, the other lane finishes
    first = _run(env, TIME_BUDGET="4", MIN_TRAIN_SECONDS="1", SLOW_TRAIN="teacher")
    assert first.returncode == 3, first.stderr
    assert (save / "teacher" / "checkpoint_last.pt").exists()
    assert not (save / "teacher" / "train.done").exists()
    written = sorted(p.stem for p in rows.glob("*.json"))
    assert written == sorted(
        [
            "dawid_teacher",
            "dawid",
            "lightformer_random",
            "hypoformer",
            "smartformer_search",
            "smartformer",
        ]
    )
    rec = json.loads((rows / "hypoformer.json").read_text())
    assert rec["bleu"] < 100 and rec["params"] == 2_000_000 and rec["commit"]
    # the fixed-rank Smartformer trains at the searched size (no decision: the start rank)
    assert "smartformer: fixed CP rank 64" in first.stderr

    # 2. the same command: the teacher resumes from its checkpoint, the rest follows
    before = len(_calls(calls))
    second = _run(env)
    assert second.returncode == 0, second.stderr
    new = _calls(calls)[before:]
    assert new[0].startswith("train teacher resume:")  # (the stand-in checkpoint is no zip)
    assert sorted(c.split()[1] for c in new if c.startswith("train ")) == sorted(
        ["teacher", "lightformer_svd", "hypoformer_kd", "subformer"]
    )
    assert sorted(
        p.stem for p in rows.glob("*.json") if p.stem not in ("results", "corpus")
    ) == sorted(CPU_ROWS)
    table = (rows / "results.md").read_text()
    assert "| Transformer (dense teacher) | 2.00M | 1.00 |" in table
    assert "DA-WID against its own post-LN teacher" in table

    # 3. checkpoints and logs gone: the table is built from the rows alone
    shutil.rmtree(save)
    col = ROOT / "lab" / "results" / "collect.py"
    proc = subprocess.run(
        [
            sys.executable,
            str(col),
            "table",
            "--rows-dir",
            str(rows),
            "--corpus-stats",
            env["DATA_DIR"] + "/stats.json",
            "--out",
            str(tmp_path / "t.md"),
            "--json",
            str(tmp_path / "t.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "t.md").read_text() == table
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [r["label"] for r in doc["models"]] == CPU_ROWS
    assert "SVD transfer beats random initialisation" in table
    assert "KD helps Hypoformer" in table
    assert "searched ranks beat the fixed rank" in table
    assert "DA-WID beats the LightFormer" in table


@pytest.mark.parametrize("plan", ["cpu", "gpu"])
def test_a_second_run_is_refused_and_stopping_run_sh_ends_its_trainings(bench, tmp_path, plan):
    env, _, save = bench
    env = _cpu_env(env, tmp_path) if plan == "cpu" else {**env, "PARALLEL": "1"}
    first = subprocess.Popen(
        ["bash", str(RUN)],
        env={**env, "SLOW_TRAIN": "teacher"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # (in pytest's own process group: stopping run.sh must end its trainings, not its parent)
    try:
        pidfile = save / "teacher" / "train.pid"
        for _ in range(600):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.05)
        assert pidfile.exists()
        train_pid = int(pidfile.read_text())
        second = _run(env)
        assert second.returncode == 1
        assert f"another run.sh (pid {first.pid})" in second.stderr
        first.terminate()
        _, err = first.communicate(timeout=30)
        assert "ending the trainings" in err
        for _ in range(100):
            if not os.path.exists(f"/proc/{train_pid}"):
                break
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{train_pid}"), "the training outlived run.sh"
    finally:
        if first.poll() is None:
            first.kill()


def test_collect_row_and_speed_files(tmp_path, capsys):
    col = _collect()
    d = tmp_path / "runs" / "teacher"
    d.mkdir(parents=True)
    (tmp_path / "ref.txt").write_text("\n".join(REFS) + "\n")
    (d / "generate-test.txt").write_text("".join(f"D-{i}\t-0.1\t{r}\n" for i, r in enumerate(REFS)))
    (d / "train.log").write_text(
        "x | INFO | fairseq_cli.train | num. shared model params: 7,600,128 (num. trained: 7,600,128)\n"
        "x | INFO | train_inner | epoch 001:  5 / 9 loss=1, wps=1000.0, ups=0.3, num_updates=5\n"
        "x | INFO | train_inner | epoch 001:  9 / 9 loss=1, wps=1200.0, ups=0.3, num_updates=9\n"
    )
    (d / "train.seconds").write_text("60\n30\n")
    rec = col.write_row(
        str(tmp_path / "runs"),
        "teacher",
        str(tmp_path / "ref.txt"),
        str(tmp_path / "rows"),
        "abc123",
    )
    assert rec["bleu"] == 100.0 and rec["params"] == 7_600_128 and rec["updates"] == 9
    assert rec["train_wps"] == 1100.0 and rec["train_seconds"] == 90 and rec["commit"] == "abc123"
    assert json.loads((tmp_path / "rows" / "teacher.json").read_text()) == rec
    with pytest.raises(col.CollectError, match="not evaluated yet"):
        col.write_row(
            str(tmp_path / "runs"),
            "hypoformer",
            str(tmp_path / "ref.txt"),
            str(tmp_path / "rows"),
            "abc123",
        )
    assert not (tmp_path / "rows" / "hypoformer.json").exists()
    for b in (1, 32):
        (tmp_path / f"s{b}.json").write_text(
            json.dumps(
                {
                    "protocol": {"batch": b},
                    "models": [
                        {
                            "label": "teacher",
                            "engine": "fairseq",
                            "precision": "float32",
                            "tokens_per_s": 10.0 * b,
                            "size_bytes": 100,
                        },
                        {
                            "label": "teacher",
                            "engine": "onnxruntime",
                            "precision": "float32",
                            "tokens_per_s": 20.0 * b,
                            "size_bytes": 3 * 2**20,
                        },
                        {
                            "label": "teacher",
                            "engine": "ctranslate2",
                            "precision": "int8",
                            "tokens_per_s": 30.0 * b,
                            "size_bytes": 50,
                        },
                    ],
                }
            )
        )
    col.write_speed(
        str(tmp_path / "s1.json"), str(tmp_path / "s32.json"), str(tmp_path / "rows"), "abc"
    )
    res = col.table_from_rows(str(tmp_path / "rows"))
    t = res["models"][0]
    assert (t["onnx_b1"], t["onnx_b32"], t["fairseq_b1"], t["ct2_int8_b32"]) == (
        20.0,
        640.0,
        10.0,
        960.0,
    )
    md = col.render_cpu_markdown(res, None)
    assert "| 3.0 MiB | 100.00 |" in md and "CTranslate2 int8 on teacher" in md
    assert "void" not in md
    # a speed file of the code whose CTranslate2 export quantized the model in place: the
    # fairseq and ONNX figures of the models exported to CTranslate2 are void, the rest stand
    speed_file = tmp_path / "rows" / "speed.json"
    old = json.loads(speed_file.read_text())
    del old["ct2_exports_copy"]
    speed_file.write_text(json.dumps(old))
    void = col.table_from_rows(str(tmp_path / "rows"))["models"][0]
    assert void["speed_void"] and void["onnx_b1"] is None and void["fairseq_b32"] is None
    assert void["ct2_int8_b1"] == 30.0 and void["onnx_bytes"] == 3 * 2**20
    void_md = col.render_cpu_markdown(col.table_from_rows(str(tmp_path / "rows")), None)
    assert "| void | void | void | void |" in void_md and "Void: measured on a model" in void_md
    speed_file.write_text(json.dumps({**old, "ct2_exports_copy": True}))
    assert "Not (yet) finished: lightformer_svd" in md
    # the README block is replaced between its markers, and only there
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{col.START}\nold\n{col.END}\noutro\n")
    col.update_readme(str(readme), md)
    assert readme.read_text() == f"intro\n{col.START}\n{md}{col.END}\noutro\n"
    readme.write_text("no markers\n")
    with pytest.raises(col.CollectError, match="needs one"):
        col.update_readme(str(readme), md)
    assert readme.read_text() == "no markers\n"
    # the corpus's figures are kept with the rows: the table is rebuilt without the corpus
    stats = tmp_path / "stats.json"
    stats.write_text(
        json.dumps(
            {
                "pairs": {"train": 1234, "valid": 5, "test": 6},
                "fairseq_dict_size": 99,
                "sources": ["many"],
            }
        )
    )
    rows = str(tmp_path / "rows")
    assert col.corpus_stats(rows, str(stats))["pairs"]["train"] == 1234
    stats.unlink()
    kept = col.corpus_stats(rows, str(stats))
    assert kept == {"pairs": {"train": 1234, "valid": 5, "test": 6}, "fairseq_dict_size": 99}
    assert "Corpus: 1,234 / 5 / 6 sentence pairs" in col.render_cpu_markdown(res, kept)
    (tmp_path / "rows" / col.CORPUS_FILE).unlink()
    assert col.corpus_stats(rows, None) is None


def test_cpu_plan_measures_the_cost_of_every_model_before_sizing(bench, tmp_path):
    env, calls, save = bench
    proc = _run(_cpu_env(env, tmp_path), MEASURE_COSTS="10")
    assert proc.returncode == 0, proc.stderr
    trained = [c for c in _calls(calls) if c.startswith("train ")]
    assert sorted(trained) == sorted(
        f"train {m} fresh"
        for m in (
            "teacher",
            "lightformer",
            "hypoformer",
            "subformer",
            "smartformer",
            "smartformer_search",
        )
    )
    costs = json.loads((save / "costs.json").read_text())
    assert costs["teacher"] == {"params": 2_000_000, "tokens_per_s": 1000.0, "updates_per_s": 0.3}
    assert "smartformer_search" in proc.stdout and not (tmp_path / "rows").exists()


@pytest.mark.parametrize(
    "setting",
    [
        {"SMALL": "yes"},
        {"MEASURE_SPEED": "2"},
        {"SEED": "-1"},
        {"NUM_GPUS": "two"},
        {"SMALL_MAX_UPDATE": "0"},
        {"DRY_RUN": "true"},
    ],
)
def test_every_recipe_checks_the_shared_settings_before_anything_runs(bench, setting):
    # (examples/common/lib.sh, which every recipe sources)
    env, calls, _ = bench
    recipe = ROOT / "examples" / "translation" / "lightformer" / "iwslt14-transformer-6-6.sh"
    proc = subprocess.run(
        ["bash", str(recipe)],
        env={**env, **setting},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    name = next(iter(setting))
    assert proc.returncode == 1 and f"{name} must be" in proc.stderr, proc.stderr[-500:]
    assert _calls(calls) == []


def test_an_offline_download_names_what_to_fetch_by_hand(bench, tmp_path):
    env, _, _ = bench
    fake_curl = Path(env["PATH"].split(":")[0]) / "curl"
    fake_curl.write_text(
        "#!/usr/bin/env bash\necho 'curl: (6) Could not resolve host' >&2\nexit 6\n"
    )
    fake_curl.chmod(0o755)
    out = tmp_path / "dl" / "corpus.tgz"
    script = f"source {ROOT}/examples/common/lib.sh; fetch https://example.org/corpus.tgz {out}"
    proc = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 1
    assert "cannot download https://example.org/corpus.tgz" in proc.stderr
    assert f"fetch it by hand to {out}" in proc.stderr
    assert not out.exists() and not (tmp_path / "dl" / "corpus.tgz.part").exists()


def test_a_recipe_owns_its_save_directory_and_stopping_it_ends_its_training(tmp_path):
    # (examples/common/lib.sh's fit, the one training step of every recipe)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "fairseq-train").write_text(
        '#!/usr/bin/env bash\nsave="" prev=""\n'
        'for a in "$@"; do [[ "$prev" == --save-dir ]] && save="$a"; prev="$a"; done\n'
        'mkdir -p "$save"; echo $$ > "$save/fake.pid"; exec sleep 60\n'
    )
    (bin_ / "fairseq-train").chmod(0o755)
    data = tmp_path / "data" / "iwslt14.tokenized.de-en"
    data.mkdir(parents=True)
    (data / "dict.de.txt").write_text("Datei 3\n")
    (data / "dict.en.txt").write_text("file 3\n")
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "DATA_ROOT": str(tmp_path / "data"),
        "SAVE_ROOT": str(tmp_path / "save"),
        "NUM_GPUS": "1",
        "MEASURE_SPEED": "0",
    }
    recipe = ROOT / "examples" / "translation" / "lightformer" / "iwslt14-transformer-6-6.sh"
    save = tmp_path / "save" / "iwslt14" / "transformer-6-6"
    first = subprocess.Popen(
        ["bash", str(recipe)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 180  # (the recipe's python steps first: slow under load)
        while time.monotonic() < deadline and first.poll() is None:
            if (save / "fake.pid").exists() and (save / "fake.pid").read_text().strip():
                break
            time.sleep(0.05)
        if first.poll() is not None:
            raise AssertionError(
                f"the recipe ended (exit {first.returncode}): {first.stderr.read()[-2000:]}"
            )
        train_pid = int((save / "fake.pid").read_text())
        second = subprocess.run(
            ["bash", str(recipe)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=ROOT,
        )
        assert second.returncode == 1
        assert f"another training (pid {first.pid}) is running in {save}" in second.stderr
        first.terminate()
        _, err = first.communicate(timeout=30)
        assert "ending the training" in err
        for _ in range(100):
            if not os.path.exists(f"/proc/{train_pid}"):
                break
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{train_pid}"), "the training outlived the recipe"
        assert not (save / "train.done").exists()
    finally:
        if first.poll() is None:
            first.kill()


def test_collect_remeasure_states_the_engines_and_compressions_shares(tmp_path, capsys):
    """The re-measurement after the CTranslate2 fix: retrained models' timings (one run) and
    scores beside the table, as ratios: the engine's share (ONNX Runtime / fairseq on the
    teacher), compression's share (student / teacher on ONNX Runtime), CTranslate2 int8."""
    col = _collect()
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "teacher.json").write_text(
        json.dumps(
            {
                "label": "teacher",
                "method": "Transformer",
                "params": 100,
                "bleu": 20.0,
                "chrf": 30.0,
                "bleu_signature": "b",
                "chrf_signature": "c",
                "test_sentences": 2,
            }
        )
    )
    for b in (1, 32):
        (tmp_path / f"s{b}.json").write_text(
            json.dumps(
                {
                    "protocol": {"batch": b},
                    "models": [
                        {
                            "label": "teacher",
                            "engine": "fairseq",
                            "precision": "float32",
                            "tokens_per_s": 10.0 * b,
                        },
                        {
                            "label": "teacher",
                            "engine": "onnxruntime",
                            "precision": "float32",
                            "tokens_per_s": 40.0 * b,
                        },
                        {
                            "label": "teacher",
                            "engine": "ctranslate2",
                            "precision": "int8",
                            "tokens_per_s": 50.0 * b,
                        },
                        {
                            "label": "lightformer_svd",
                            "engine": "onnxruntime",
                            "precision": "float32",
                            "tokens_per_s": 100.0 * b,
                            "size_bytes": 2**20,
                        },
                        {
                            "label": "lightformer_svd",
                            "engine": "onnxruntime",
                            "precision": "int8-large",
                            "tokens_per_s": 125.0 * b,
                        },
                    ],
                }
            )
        )
    save = tmp_path / "again"
    refs = ["Die Datei.", "Der Ordner ist leer."]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    for name, hyps in (("teacher", ["Die Datei.", "Der Ordner."]), ("lightformer_svd", refs)):
        (save / name).mkdir(parents=True)
        (save / name / "generate-test.txt").write_text(
            "".join(f"D-{i}\t-0.1\t{h}\n" for i, h in enumerate(hyps))
        )
    assert (
        col.main(
            [
                "remeasure",
                "--b1",
                str(tmp_path / "s1.json"),
                "--b32",
                str(tmp_path / "s32.json"),
                "--save-root",
                str(save),
                "--ref",
                str(tmp_path / "ref.txt"),
                "--rows-dir",
                str(rows),
                "--commit",
                "abc",
            ]
        )
        == 0
    )
    md = col.render_cpu_markdown(col.table_from_rows(str(rows)), None)
    assert "lightformer_svd 100.00" in md and "(its row: 20.00)" in md
    assert (
        "the engine's share: the teacher on ONNX Runtime float32 against fairseq: 4.00x at batch 1, 4.00x at batch 32."
        in md
    )
    assert (
        "compression's share: lightformer_svd against the teacher, both on ONNX Runtime float32: 2.50x"
        in md
    )
    assert (
        "lightformer_svd on ONNX Runtime float32 against CTranslate2 int8 on the teacher: 2.00x"
        in md
    )
    assert (
        "lightformer_svd on ONNX Runtime int8-large against CTranslate2 int8 on the teacher: 2.50x"
        in md
    )
    assert "| lightformer_svd | onnxruntime | float32 | 100.0 | 3200.0 | 1.0 MiB |" in md
    # a model without its translations, or translations of another test set, is refused
    (save / "teacher" / "generate-test.txt").unlink()
    with pytest.raises(col.CollectError, match="not evaluated yet"):
        col.write_remeasure(
            str(tmp_path / "s1.json"),
            str(tmp_path / "s32.json"),
            str(save),
            str(tmp_path / "ref.txt"),
            str(tmp_path / "other"),
            "abc",
        )
    (save / "teacher" / "generate-test.txt").write_text("D-0\t-0.1\tDie Datei.\n")
    with pytest.raises(col.CollectError, match="another test set"):
        col.write_remeasure(
            str(tmp_path / "s1.json"),
            str(tmp_path / "s32.json"),
            str(save),
            str(tmp_path / "ref.txt"),
            str(tmp_path / "other"),
            "abc",
        )
    assert not (tmp_path / "other").exists()


def test_remeasure_runs_the_plans_own_commands(bench, tmp_path):
    """remeasure.sh (after the CTranslate2 fix) retrains the teacher and the SVD LightFormer
    with exactly the commands run.sh's CPU plan runs (it takes them from its dry run)."""
    env, calls, _ = bench
    env = {**env, "SAVE_ROOT": str(tmp_path / "again"), "DRY_RUN": "1"}
    again = subprocess.run(
        ["bash", str(ROOT / "lab/results/remeasure.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    plan = subprocess.run(
        ["bash", str(RUN)],
        env={**env, "SMALL": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    planned = {line for line in (plan.stdout + plan.stderr).splitlines() if line.startswith("+ ")}
    printed = [line for line in again.stdout.splitlines() if line.startswith("+ ")]
    trains = [line for line in printed if line.startswith("+ fairseq-train ")]
    assert len(trains) == 3 and all(line in planned for line in trains[:2])
    assert "--save-dir " + str(tmp_path / "again" / "teacher") in trains[0]
    assert "--finetune-from-model" in trains[1]
    assert any(line.startswith("+ lightcompress-convert ") and line in planned for line in printed)
    # the deep-encoder / shallow-decoder LightFormer: lightformer_svd's commands, only the
    # depths (and its own files) changed
    converts = [line for line in printed if line.startswith("+ lightcompress-convert ")]
    shallow = str(tmp_path / "again" / "lightformer_shallow")
    assert len(converts) == 2 and converts[1] == converts[0].replace(
        "--encoder-layers 3 --decoder-layers 3 ",
        "--encoder-layers 3 --encoder-layers-from 0,1,2 --decoder-layers 1 --decoder-layers-from 0 ",
    ).replace("lightformer_init.pt", "lightformer_shallow_init.pt")
    assert "--max-update 350 " in trains[1]
    assert trains[2] == trains[1].replace(
        "--encoder-layers 3 --decoder-layers 3 ", "--encoder-layers 3 --decoder-layers 1 "
    ).replace("lightformer_init.pt", "lightformer_shallow_init.pt").replace(
        str(tmp_path / "again" / "lightformer_svd"), shallow
    ).replace("--max-update 350 ", "--max-update 700 ")
    assert any(
        line.startswith("+ fairseq-generate ") and f"{shallow}/checkpoint_best.pt" in line
        for line in printed
    )
    assert sum("measure_speed.sh" in line and "--ct2" in line for line in printed) == 2
    assert "collect.py remeasure" in printed[-1]
    assert _calls(calls) == [] and not (tmp_path / "again").exists()
    # its updates are a setting, checked
    other = subprocess.run(
        ["bash", str(ROOT / "lab/results/remeasure.sh")],
        env={**env, "SHALLOW_UPDATES": "900"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert other.returncode == 0, other.stderr
    assert trains[2].replace("--max-update 700 ", "--max-update 900 ") in other.stdout
    bad = subprocess.run(
        ["bash", str(ROOT / "lab/results/remeasure.sh")],
        env={**env, "SHALLOW_UPDATES": "7e2"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "SHALLOW_UPDATES" in bad.stderr
    # OTHERS=1: the table's Hypoformer, Subformer and fixed-rank Smartformer, with the plan's
    # own commands; the Smartformer at SMARTFORMER_RANK in place of the dry run's SM_RANK
    others = subprocess.run(
        ["bash", str(ROOT / "lab/results/remeasure.sh")],
        env={**env, "OTHERS": "1", "SMARTFORMER_RANK": "41"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert others.returncode == 0, others.stderr
    extra = [line for line in others.stdout.splitlines() if line.startswith("+ ")][len(printed) :]
    assert [line.split(" --save-dir ")[1].split()[0] for line in extra[::2]] == [
        str(tmp_path / "again" / m) for m in ("hypoformer", "smartformer", "subformer")
    ]
    assert (
        extra[0] in planned and extra[4] in planned and "--arch hypoformer_iwslt_de_en" in extra[0]
    )
    assert extra[2] not in planned and extra[2].endswith(" --sm-rank 41 --share-all-embeddings")
    assert extra[2].replace(" --sm-rank 41 --share-all-embeddings", "") in {
        line.rsplit(" --sm-rank ", 1)[0] for line in planned
    }
    assert all(
        line.startswith("+ fairseq-generate ")
        and line.rsplit(" > ", 1)[0] in planned
        and line.endswith("/generate-test.txt")
        for line in extra[1::2]
    )
    assert _calls(calls) == [] and not (tmp_path / "again").exists()
    for name, value in (("OTHERS", "yes"), ("SMARTFORMER_RANK", "0")):
        bad = subprocess.run(
            ["bash", str(ROOT / "lab/results/remeasure.sh")],
            env={**env, "OTHERS": "1", name: value},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and name in bad.stderr
    # DAWID=1: DA-WID's chain, the plan's own commands in order (the teacher's training and
    # translations, the masked training, the fusion, the fused model's translations)
    dawid = subprocess.run(
        ["bash", str(ROOT / "lab/results/remeasure.sh")],
        env={**env, "DAWID": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dawid.returncode == 0, dawid.stderr
    extra = [line for line in dawid.stdout.splitlines() if line.startswith("+ ")][len(printed) :]
    root = str(tmp_path / "again")
    assert len(extra) == 5 and all(line.rsplit(" > ", 1)[0] in planned for line in extra)
    assert (
        extra[0].startswith("+ fairseq-train ") and f"--save-dir {root}/dawid_teacher " in extra[0]
    )
    assert (
        extra[1].startswith("+ fairseq-generate ")
        and f"{root}/dawid_teacher/checkpoint_best.pt" in extra[1]
    )
    assert f"--save-dir {root}/dawid " in extra[2] and "--arch dawid " in extra[2]
    assert (
        extra[3].startswith("+ lightcompress-convert dawid-fuse ")
        and f"-o {root}/dawid/fused.pt" in extra[3]
    )
    assert f"--path {root}/dawid/fused.pt " in extra[4] and extra[4].endswith(
        "dawid/generate-test.txt"
    )
    assert _calls(calls) == [] and not (tmp_path / "again").exists()
    for name, value in (("DAWID", "2"), ("DAWID_THREADS", "two")):
        bad = subprocess.run(
            ["bash", str(ROOT / "lab/results/remeasure.sh")],
            env={**env, "DAWID": "1", name: value},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and name in bad.stderr


def test_deploy_bench_measures_the_remeasured_models_at_natural_lengths_with_text(bench, tmp_path):
    """deploy_bench.sh: the shortlist from the plan's corpus, then batch 1 (BLEU, memory) and
    batch 32 over the remeasured teacher and LightFormer, every engine, precision and shortlist,
    model-only and from raw text; a dry run runs nothing; without the models: one line, exit 2."""
    env, calls, _ = bench
    script = str(ROOT / "lab/results/deploy_bench.sh")
    env = {**env, "SAVE_ROOT": str(tmp_path / "models"), "OUT": str(tmp_path / "out")}
    dry = subprocess.run(
        ["bash", script],
        env={**env, "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dry.returncode == 0, dry.stderr
    printed = [line for line in dry.stdout.splitlines() if line.startswith("+ ")]
    assert len(printed) == 4 and "shortlist_build" in printed[0]
    assert " --k 100 --frequent 100 -o " in printed[0]  # (Marian's usual list sizes)
    b1, b32, b32s = printed[1:]
    assert b32s == b32.replace(" --json", " --sort-batches --json").replace(
        "deploy-b32.json", "deploy-b32-sorted.json"
    )
    for line in (b1, b32):
        for flag in (
            "--natural",
            "--onnx",
            "--ct2",
            "--int8-large",
            "--compare-int8",
            "--shortlist",
            "--text",
            "--beam 5",
            "--threads 1",
        ):
            assert flag in line, (flag, line)
        for model in ("teacher", "lightformer_svd", "lightformer_shallow"):
            assert str(tmp_path / "models" / model / "checkpoint_best.pt") in line
    assert "--timing-batch-size 1 " in b1 and "--bleu" in b1 and "--memory" in b1
    assert "--timing-batch-size 32 " in b32 and "--bleu" not in b32
    assert _calls(calls) == [] and not (tmp_path / "out").exists()
    run = subprocess.run(
        ["bash", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "run remeasure.sh first" in run.stderr and not (tmp_path / "out").exists()
    # other models (remeasure.sh OTHERS=1) by MODELS; a bad name is refused in one line
    others = subprocess.run(
        ["bash", script],
        env={**env, "DRY_RUN": "1", "MODELS": "teacher hypoformer"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert others.returncode == 0, others.stderr
    b1 = [line for line in others.stdout.splitlines() if line.startswith("+ ")][1]
    assert "hypoformer=" + str(tmp_path / "models" / "hypoformer" / "checkpoint_best.pt") in b1
    assert "teacher=" in b1 and "lightformer" not in b1
    # DA-WID's fused model (remeasure.sh DAWID=1) is its fused.pt; SORTED=0 skips the sorted run
    dawid = subprocess.run(
        ["bash", script],
        env={**env, "DRY_RUN": "1", "SORTED": "0", "MODELS": "dawid_teacher dawid"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dawid.returncode == 0, dawid.stderr
    printed = [line for line in dawid.stdout.splitlines() if line.startswith("+ ")]
    assert len(printed) == 3 and "--sort-batches" not in dawid.stdout
    assert "dawid=" + str(tmp_path / "models" / "dawid" / "fused.pt") in printed[1]
    assert (
        "dawid_teacher=" + str(tmp_path / "models" / "dawid_teacher" / "checkpoint_best.pt")
        in printed[1]
    )
    # SHORTLIST_ARGS: other list sizes for lightcompress-shortlist
    sized = subprocess.run(
        ["bash", script],
        env={**env, "DRY_RUN": "1", "SHORTLIST_ARGS": "--k 20 --frequent 30"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert sized.returncode == 0, sized.stderr
    assert " --k 20 --frequent 30 -o " in sized.stdout.splitlines()[0]
    for name, value in (
        ("MODELS", "teacher ../x"),
        ("MODELS", " "),
        ("TAG", "a/b"),
        ("SORTED", "no"),
        ("SHORTLIST_ARGS", "--k 20; rm -rf /"),
        ("SHORTLIST_ARGS", "--k 0"),
    ):
        bad = subprocess.run(
            ["bash", script],
            env={**env, name: value},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and name in bad.stderr
    assert not (tmp_path / "out").exists()


def test_gpu_longer_trains_remeasures_models_longer_side_by_side(bench, tmp_path):
    """gpu_longer.sh runs remeasure.sh's own training commands (the teacher, both SVD
    LightFormers, Hypoformer, Subformer, Smartformer) with only the update caps and the
    validation interval raised and fairseq's --stop-time-hours added; the LightFormers start
    from the teacher's transfers, after it; bad settings are refused in one line."""
    env, calls, _ = bench
    script = str(ROOT / "lab/results/gpu_longer.sh")
    save = tmp_path / "longer"
    env = {**env, "SAVE_ROOT": str(save), "DRY_RUN": "1", "OTHERS": "1"}
    ref = subprocess.run(
        ["bash", str(ROOT / "lab/results/remeasure.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ref.returncode == 0, ref.stderr
    ref_lines = [line for line in ref.stdout.splitlines() if line.startswith("+ ")]

    def plan(**extra):
        run = subprocess.run(
            ["bash", script],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return run, [line for line in run.stdout.splitlines() if line.startswith("+ ")]

    run, printed = plan(MAX_UPDATE="9000", TEACHER_SECONDS="100", STUDENT_SECONDS="60")
    assert run.returncode == 0, run.stderr
    trains = [line for line in printed if " fairseq-train " in line]
    names = [line.split(" --save-dir ")[1].split()[0].rsplit("/", 1)[1] for line in trains]
    assert names == [
        "hypoformer",
        "subformer",
        "smartformer",
        "teacher",
        "lightformer_svd",
        "lightformer_shallow",
    ]
    seconds = {"teacher": 100, "lightformer_svd": 60, "lightformer_shallow": 60}
    for name, line in zip(names, trains):
        hours = f"{seconds.get(name, 160) / 3600:.6f}"
        assert line.startswith(
            f"+ timeout -s INT -k 30 {seconds.get(name, 160) + 120} fairseq-train "
        )
        assert line.endswith(f" --stop-time-hours {hours} > {save}/{name}/train.log")
        core = line.split(" fairseq-train ", 1)[1].rsplit(" --stop-time-hours ", 1)[0]
        (mine,) = [
            r
            for r in ref_lines
            if r.startswith("+ fairseq-train ") and f"--save-dir {save}/{name} " in r
        ]
        mine = re.sub(r"--max-update \d+ ", "--max-update 9000 ", mine[len("+ fairseq-train ") :])
        assert core == mine.replace("-interval-updates 150 ", "-interval-updates 500 ")
    converts = [line for line in printed if line.startswith("+ lightcompress-convert ")]
    assert converts == [r for r in ref_lines if r.startswith("+ lightcompress-convert ")]
    assert printed.index(converts[0]) > printed.index(trains[3]) < printed.index(trains[4])
    everything = "teacher lightformer_svd lightformer_shallow hypoformer subformer smartformer"
    assert printed[-1].endswith(f"half_checkpoint.py pack {save} {save}/out {everything}")
    # a subset, and other training flags appended to every command
    run, printed = plan(MODELS="subformer", EXTRA_ARGS="--lr 5e-4 --warmup-updates 1000")
    assert run.returncode == 0, run.stderr
    assert len(printed) == 2 and " --save-dir " + str(save / "subformer") in printed[0]
    assert " --lr 5e-4 --warmup-updates 1000 > " in printed[0]
    assert _calls(calls) == [] and not save.exists()
    for name, value in (
        ("MODELS", "teacher bogus"),
        ("MODELS", "lightformer_svd"),
        ("TEACHER_SECONDS", "0"),
        ("MAX_UPDATE", "1e4"),
        ("THREADS", "two"),
    ):
        bad, _ = plan(**{name: value})
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and name in bad.stderr, (
            bad.stderr
        )
    # a real run: no GPU visible, so the CPU is refused unless ALLOW_CPU=1; the stand-ins train
    # (teacher and the others first, then the transfers, then the LightFormers); packing their
    # fake checkpoints fails, with one line naming the file
    env = {**env, "DRY_RUN": "0"}
    cpu = subprocess.run(
        ["bash", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert cpu.returncode == 2 and "ALLOW_CPU=1" in cpu.stderr and _calls(calls) == []
    assert cpu.stderr.count("\n") == 1 and not save.exists()
    real = subprocess.run(
        ["bash", script],
        env={**env, "ALLOW_CPU": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    done = _calls(calls)
    assert sorted(done[:4]) == sorted(
        f"train {m} fresh" for m in ("teacher", "hypoformer", "subformer", "smartformer")
    )
    assert done[4:6] == ["convert lightformer_init.pt", "convert lightformer_shallow_init.pt"]
    assert sorted(done[6:]) == ["train lightformer_shallow fresh", "train lightformer_svd fresh"]
    assert (
        real.returncode == 1
        and "half_checkpoint.py: " in real.stderr
        and "is not a checkpoint" in real.stderr
    )
