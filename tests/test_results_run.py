"""examples/translation/results/run.sh: resume and skip logic, and collect.py's table.

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
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "examples" / "translation" / "results" / "run.sh"

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
echo "2026-01-01 00:00:01 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.5 | nll_loss 5 | num_updates 10"
echo "2026-01-01 00:00:02 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 6.1 | nll_loss 5 | num_updates 20"
printf best > "$save/checkpoint_best.pt"
printf last > "$save/checkpoint_last.pt"
if [[ "${SLOW_TRAIN:-}" == "$name" ]]; then exec sleep 60; fi
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
    for name, text in (("fairseq-train", FAKE_TRAIN), ("fairseq-generate", FAKE_GENERATE),
                       ("lightcompress-convert", FAKE_CONVERT),
                       ("lightcompress-params", FAKE_PARAMS),
                       ("python", FAKE_PYTHON.replace("{python}", sys.executable))):  # fmt: skip
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
    return subprocess.run(["bash", str(RUN)], env={**env, **extra}, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


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
    assert _calls(calls) == ["train lightformer_random fresh", "train subformer fresh",
                             "train smartformer fresh", "train dawid_teacher fresh",
                             "train dawid fresh", "convert fused.pt", "params dawid fused.pt",
                             "train teacher fresh"]  # fmt: skip
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
    models = ["teacher", "lightformer_svd", "lightformer_random", "hypoformer_kd", "subformer",
              "smartformer", "dawid_teacher", "dawid"]  # fmt: skip
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
    for extra in ({"TIME_BUDGET": "soon"}, {"STUDENT_UPDATES": "0"}):
        proc = _run(env, **extra)
        assert proc.returncode == 1
        assert "must be" in proc.stderr
    assert _calls(calls) == []


def _collect():
    spec = importlib.util.spec_from_file_location(
        "results_collect", ROOT / "examples" / "translation" / "results" / "collect.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_collect_findings_state_shortfalls():
    col = _collect()
    recs = [
        {"label": "teacher", "method": "T", "bleu": 30.0, "params": 36e6},
        {"label": "lightformer_svd", "method": "LF svd", "bleu": 29.5, "bleu_vs_teacher": -0.5,
         "compression": 4.3, "updates": 3000},
        {"label": "lightformer_random", "method": "LF rnd", "bleu": 29.9, "bleu_vs_teacher": -0.1,
         "compression": 4.3, "updates": 3000},
        {"label": "smartformer", "method": "SM", "bleu": 27.0, "bleu_vs_teacher": -3.0,
         "compression": 1.5},
    ]  # fmt: skip
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
    argv = ["--save-root", str(tmp_path), "--ref", str(ref), "--out", str(out),
            "--json", str(tmp_path / "r.json")]  # fmt: skip
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
    [("1", 0.8, 600, 800, 256, 150), ("0", 0.77, 2500, 3000, 512, 50)],
)
def test_dry_run_shows_the_dawid_chain_and_fairseq_accepts_its_flags(
    bench, capsys, small, sparsity, updates, teacher_updates, width, gate_scale
):
    env, calls, save = bench
    commands = _dry_run_commands(env, SMALL=small)
    assert _calls(calls) == []  # printed, nothing run
    teacher = _fairseq_parses(_train_command(commands, "dawid_teacher"), capsys)
    assert teacher.arch == "transformer" and teacher.max_update == teacher_updates
    assert not teacher.encoder_normalize_before and not teacher.decoder_normalize_before
    assert teacher.encoder_embed_dim == width and teacher.share_all_embeddings
    assert teacher.patience == 8  # early stopping, as the other teacher
    student = _fairseq_parses(_train_command(commands, "dawid"), capsys)
    assert student.arch == "dawid" and student.criterion == "dawid"
    assert student.dawid_teacher == f"{save}/dawid_teacher/checkpoint_best.pt"
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
    generate = [c for c in commands if c[0] == "fairseq-generate"]
    assert [c[c.index("--path") + 1] for c in generate][-2:] == [
        f"{save}/dawid_teacher/checkpoint_best.pt",
        f"{save}/dawid/fused.pt",
    ]


def test_measure_speed_times_the_fused_dawid_model(bench):
    env, _, save = bench
    commands = _dry_run_commands(env, MEASURE_SPEED="1")
    speed = [c for c in commands if "scripts/measure_speed.sh" in c]
    assert len(speed) == 1
    paths = speed[0][speed[0].index("--path") + 1].split(",")
    assert paths[-2:] == [f"dawid_teacher={save}/dawid_teacher/checkpoint_best.pt",
                          f"dawid={save}/dawid/fused.pt"]  # fmt: skip


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
    argv = ["--save-root", str(tmp_path), "--ref", str(ref), "--out", str(tmp_path / "r.md"),
            "--json", str(tmp_path / "r.json")]  # fmt: skip
    assert col.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "params.json: not lightcompress-params output" in err[0]
    assert not (tmp_path / "r.md").exists()
