"""``make demo`` (examples/translation/demo.sh): with DRY_RUN=1 it prints its exact commands
(the corpus build, the shipped teacher's check, the one compress command, the export's
translation) and writes nothing; it reuses the corpus's data-bin only when the build made the
teacher's own vocabulary, else it encodes the raw splits with the teacher's; bad settings are
one line. (The full run downloads the corpus and trains for minutes: docs/demo.md has one run's
output.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "translation" / "demo.sh"
TEACHER = ROOT / "examples" / "translation" / "results" / "teacher"


def _demo(tmp_path, data_dir, **env):
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    if not shutil.which("lightcompress-compress", path=path):  # (the checkout, not installed)
        shim = tmp_path / "bin"
        shim.mkdir(exist_ok=True)
        (shim / "lightcompress-compress").write_text(
            f'#!/bin/sh\nexec {sys.executable} -m lightcompress.compress "$@"\n'
        )
        (shim / "lightcompress-compress").chmod(0o755)
        path = os.pathsep.join([str(shim), path])
    full = {
        **os.environ,
        "PATH": path,
        "OUT": str(tmp_path / "out"),
        "DATA_DIR": str(data_dir),
        "DRY_RUN": "1",
        **env,
    }
    return subprocess.run(
        ["bash", str(DEMO)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def _commands(stdout: str) -> list[str]:
    return [line[2:] for line in stdout.splitlines() if line.startswith("+ ")]


def _listing(root: Path) -> list[tuple[str, int, float]]:
    return sorted(
        (str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime) for p in root.rglob("*")
    )


def test_the_dry_run_prints_every_command_and_writes_nothing(tmp_path):
    data = tmp_path / "data"  # (no corpus yet: the build's vocabulary is unknown)
    before = _listing(ROOT / "examples")
    proc = _demo(tmp_path, data)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cmds = _commands(proc.stdout)
    out = tmp_path / "out"
    assert cmds[0] == (
        f"python examples/translation/l10n_corpus.py --permissive-only --out {data} "
        f"--cache {data}/downloads --workers 2"
    )
    assert "sha256sum -c SHA256SUMS" in cmds[1]
    # the raw splits in the teacher's sentencepiece pieces, binarized with its dictionaries
    encodes = [c for c in cmds if c.startswith("python -c ")]
    assert len(encodes) == 6 and all(
        str(TEACHER.relative_to(ROOT)) + "/spm.model" in c for c in encodes
    )
    pre = next(c for c in cmds if c.startswith("fairseq-preprocess "))
    for flag in (
        f"--srcdict {TEACHER.relative_to(ROOT)}/dict.de.txt",
        f"--tgtdict {TEACHER.relative_to(ROOT)}/dict.en.txt",
        f"--destdir {out}/bin",
    ):
        assert flag in pre, (flag, pre)
    compress = next(c for c in cmds if c.startswith("lightcompress-compress "))
    assert compress == (
        f"lightcompress-compress {TEACHER.relative_to(ROOT)}/checkpoint.pt --data {out}/bin "
        f"--spm {TEACHER.relative_to(ROOT)}/spm.model --ref {data}/raw/test.en --save-dir "
        f"{out}/compressed --no-kd --max-update 1000 --cpu"
    )
    assert cmds[-1].endswith(
        f"python {out}/compressed/student-onnx-int8/translate.py "
        f"{out}/compressed/student-onnx-int8 --beam 5"
    )
    assert not out.exists() and not data.exists() and _listing(ROOT / "examples") == before
    # the compress command it prints is one compress takes (its own dry run checks every flag
    # against the real teacher; a toy data-bin with the teacher's dictionaries stands in)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(TEACHER / "spm.model"))
    text = {"de": ["Datei öffnen", "Einstellungen speichern"], "en": ["Open file", "Save settings"]}
    for side, lines in text.items():
        (tmp_path / f"toy.{side}").write_text(
            "".join(" ".join(sp.encode(x, out_type=str)) + "\n" for x in lines)
        )
    toy = tmp_path / "bin"
    pref = str(tmp_path / "toy")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.preprocess",
            "-s",
            "de",
            "-t",
            "en",
            "--trainpref",
            pref,
            "--validpref",
            pref,
            "--testpref",
            pref,
            "--srcdict",
            str(TEACHER / "dict.de.txt"),
            "--tgtdict",
            str(TEACHER / "dict.en.txt"),
            "--destdir",
            str(toy),
            "--workers",
            "1",
        ],
        capture_output=True,
        check=True,
        timeout=300,
    )
    argv = compress.split()[1:]
    argv[argv.index("--data") + 1] = str(toy)
    argv[argv.index("--ref") + 1] = str(TEACHER / "SHA256SUMS")  # (any file: not read in a dry run)
    run = subprocess.run(
        [sys.executable, "-m", "lightcompress.compress", *argv, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "4.06x fewer than the teacher" in run.stdout and "--max-update 1000" in run.stdout
    assert not (out / "compressed").exists()


def test_a_corpus_built_with_the_teachers_vocabulary_is_used_as_it_is(tmp_path):
    data = tmp_path / "data"
    (data / "spm").mkdir(parents=True)
    (data / "bin").mkdir()
    shutil.copyfile(TEACHER / "spm.model", data / "spm" / "spm.model")
    for side in ("de", "en"):
        shutil.copyfile(TEACHER / f"dict.{side}.txt", data / "bin" / f"dict.{side}.txt")
    proc = _demo(tmp_path, data)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cmds = _commands(proc.stdout)
    assert not any(c.startswith(("python -c ", "fairseq-preprocess ")) for c in cmds), cmds
    assert f"--data {data}/bin " in next(c for c in cmds if c.startswith("lightcompress-compress"))
    # another vocabulary (one dictionary differs): the raw splits are encoded anew
    with open(data / "bin" / "dict.en.txt", "a") as f:
        f.write("extra 1\n")
    cmds = _commands(_demo(tmp_path, data).stdout)
    assert sum(c.startswith("python -c ") for c in cmds) == 6
    assert f"--data {tmp_path}/out/bin " in next(
        c for c in cmds if c.startswith("lightcompress-compress")
    )


@pytest.mark.parametrize("name,value", [("UPDATES", "0"), ("THREADS", "two"), ("SENTENCES", "-1")])
def test_a_bad_setting_is_one_line(tmp_path, name, value):
    proc = _demo(tmp_path, tmp_path / "data", DRY_RUN="0", **{name: value})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"demo.sh: {name} must be a positive integer, not '{value}'\n"
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()
