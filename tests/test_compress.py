"""lightcompress-compress end to end on the tiny teacher: a dry run prints the exact commands
and writes nothing; a run stopped during fine-tuning resumes with the finished steps skipped
and ends with a report (student smaller, export translates); Hypoformer from the post-LN
teacher; teachers the method cannot take are refused in one line before anything is written.
"""

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import harness
import pytest
import torch

import lightcompress.plugin  # noqa: F401  (the checkpoint allow-list)

FAST = ["--speed-runs", "1", "--speed-sentences", "3"]
STEPS = [
    "transfer",
    "fine-tune",
    "shortlist",
    "export",
    "int8",
    "ct2",
    "test-teacher",
    "test-student",
    "speed",
    "speed-b32",
    "report",
]


def _env():
    # (the fairseq commands' environment, one thread: what the fork server runs with)
    return dict(harness._cli_env(), OMP_NUM_THREADS="1")


# the command as `python -m` (what setup.py's console script lightcompress-compress runs), so
# that the checkout under test runs whether or not it is installed
CMD = [sys.executable, "-m", "lightcompress.compress"]


def _compress(args, check=True):
    # (forked from the worker's fork server: harness.run; a process of its own either way)
    proc = harness.run([*CMD, *map(str, args)], text=True, env=_env(), timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def _compress_here(args):
    """``_compress`` in this process (``main`` of ``python -m lightcompress.compress``), for runs
    that end before any step runs (dry runs, refusals): the same code, stdout, stderr and exit
    status without a new interpreter importing torch and fairseq (about 4 s each)."""
    from lightcompress.compress.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's refusals
            rc = exc.code
    return subprocess.CompletedProcess([*CMD, *args], rc, out.getvalue(), err.getvalue())


def _skipped(out, n, name):
    return (
        re.search(rf"^\[compress {n}/\d+ {name} \+[0-9:]+\] done before", out, re.MULTILINE)
        is not None
    )


def test_setup_declares_the_console_script():
    setup = Path(harness.REPO_ROOT, "setup.py").read_text(encoding="utf-8")
    assert '"lightcompress-compress=lightcompress.compress:cli_main"' in setup


def _teacher(tiny_transformer):
    return os.path.join(tiny_transformer, "checkpoint_best.pt")


def _one_line_error(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("lightcompress-compress: error: ") and "\n" not in err, err
    return err


def test_dry_run_reads_the_shape_chooses_ranks_and_prints_the_exact_commands(
    tiny_data, tiny_transformer, tmp_path
):
    save = tmp_path / "out"
    proc = _compress(
        [_teacher(tiny_transformer), "--data", tiny_data, "-o", save, "--ratio", "3", "--dry-run"]
    )
    assert not save.exists()  # nothing written
    out = proc.stdout
    convert = next(line for line in out.splitlines() if "lightcompress-convert" in line)
    # the student's shape comes from the teacher (2-2, d 32, FFN 64, 2 heads, shared), with
    # the default deep-encoder / shallow-decoder depth: 2-1, from the teacher's first decoder layer
    for flag in (
        "--encoder-layers 2",
        "--decoder-layers 1",
        "--encoder-embed-dim 32",
        "--encoder-ffn-embed-dim 64",
        "--decoder-attention-heads 2",
        "--share-all-embeddings",
        "--decoder-layers-from 0",
    ):
        assert flag in convert, convert
    assert "--encoder-layers-from" not in convert
    assert "student shape: 2-1 (deep encoder, shallow decoder" in out
    # the chosen rank is said, and it is the largest within the target (lightcompress-params)
    rank = int(convert.split("--lc-rank ")[1].split()[0])
    assert f"rank of every attention / FFN map {rank}" in out
    from lightcompress.compress.methods import METHODS, count_params
    from lightcompress.compress.teacher import read_teacher

    t = read_teacher(_teacher(tiny_transformer))
    lf = METHODS["lightformer"]
    shallow = t.shape_flags()
    shallow[shallow.index("--decoder-layers") + 1] = "1"
    counts = count_params(
        {f"r{r}": ("lightformer", shallow + lf.flags(r, None, t)) for r in (rank, rank + 1)}
        | {"t": ("transformer", t.shape_flags())},
        t.src_vocab,
    )
    assert counts["t"] / counts[f"r{rank}"] >= 3 > counts["t"] / counts[f"r{rank + 1}"]
    # every step's command, in order, exactly as run
    # (sequence-level KD is on by default for LightFormer: its data is made before fine-tuning)
    steps = [line.split(":")[0] for line in out.splitlines() if line.startswith("step ")]
    assert steps == [
        f"step {i}/12 {n}" for i, n in enumerate(["transfer", "kd-data", *STEPS[1:]], 1)
    ]
    train = next(line for line in out.splitlines() if "fairseq-train" in line)
    assert "--task translation_seqkd --kd-data-mode both" in train
    for flag in (
        "--finetune-from-model",
        "--optimizer adam",
        "--lr 0.0015",
        ("--criterion label_smoothed_cross_entropy"),
        f"--lc-rank {rank}",
        "--max-update 4000",
        "--warmup-updates 400",
        "--validate-interval-updates 500",
        "--patience 4",
    ):
        assert flag in train, train
    assert "--scoring sacrebleu" in out and "--ct2" in out and "--onnx" in out
    # every engine in one interleaved run (issue 40 item 10), at batch 1 and at batch 32
    speed, b32 = [line for line in out.splitlines() if "measure" in line and "--json" in line]
    for run in (speed, b32):
        assert "--onnx" in run and "--ct2" in run and "student=" in run
    assert "--timing-batch-size" not in speed and "--timing-batch-size 32" in b32
    # the shortlist of the training split, shipped in both exports and timed (CTranslate2: its
    # vocabulary map, like for like)
    (build,) = [line for line in out.splitlines() if "lightcompress-shortlist" in line]
    listed = f"--shortlist {save / 'shortlist.txt'}"
    assert f"-o {save / 'shortlist.txt'}" in build and "--data" in build
    (export,) = [line for line in out.splitlines() if "lightcompress-export-onnx" in line]
    assert listed in export and listed in speed and listed in b32
    # the student's int8 export (every map by default) is translated and timed too
    (int8,) = [line for line in out.splitlines() if "lightcompress.compress.int8" in line]
    assert "--int8 all" in int8 and "--eval" in int8 and "--compare-int8" in speed
    assert listed in int8
    # the student's shape on CTranslate2: its factors multiplied out, int8, the same list
    (ct2,) = [line for line in out.splitlines() if "lightcompress-export-ct2" in line]
    assert f"-o {save / 'student-ct2'}" in ct2 and "--quantization int8" in ct2 and listed in ct2


def _trainers(save) -> list[int]:
    """The pids of the fairseq-train processes training into ``save``."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "fairseq-train" in cmdline and str(save) in cmdline:
            pids.append(int(pid))
    return pids


def test_a_run_stopped_during_fine_tuning_resumes_and_reports(
    tiny_data, tiny_transformer, tmp_path
):
    save = tmp_path / "lf"
    args = [
        _teacher(tiny_transformer),
        "--data",
        tiny_data,
        "-o",
        save,
        "--rank",
        "8",
        "--no-kd",
        "--max-update",
        "16",
        "--validate-every",
        "4",
        *FAST,
    ]
    first = subprocess.Popen(
        [*CMD, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    last = save / "student" / "checkpoint_last.pt"
    deadline = time.monotonic() + 300
    while not last.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # (the tiny run has 12 updates left after this first checkpoint)
    assert last.exists(), first.communicate()
    # its fairseq-train is frozen, so that the stop below always lands during fine-tuning
    # (a tiny run can otherwise finish its 16 updates while the second run is refused)
    trainers = _trainers(save)
    assert trainers, "no fairseq-train of the first run"
    for pid in trainers:
        os.kill(pid, signal.SIGSTOP)
    # a second run on the same directory is refused with the live one's pid
    second = _compress_here(args)  # (refused before its first step: run in this process)
    assert f"pid {first.pid}" in _one_line_error(second)
    first.send_signal(signal.SIGTERM)
    time.sleep(1)  # (its stop handler signals the frozen child, which then takes it at once)
    for pid in trainers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 128 + signal.SIGTERM, out + err
    assert "rerun the same command to resume" in err
    assert not (save / "student" / "train.done").exists() and not (save / "report.md").exists()
    assert _trainers(save) == []  # its fairseq-train ended with it

    proc = _compress(args)
    assert _skipped(proc.stdout, 1, "transfer") and not _skipped(proc.stdout, 2, "fine-tune")
    log = (save / "logs" / "02-fine-tune.log").read_text()
    assert log.count("$ ") == 2 and "Loaded checkpoint" in log.split("$ ")[2]  # resumed
    for name in ("report.md", "report.png", "report.json", "student-onnx/MANIFEST.sha256"):
        assert (save / name).exists(), name
    rows = json.loads((save / "report.json").read_text())["models"]
    assert rows["student"]["params"] < rows["teacher"]["params"]
    assert rows["student"]["onnx_size_bytes"] < rows["teacher"]["onnx_size_bytes"]
    for who in ("teacher", "student"):
        assert rows[who]["bleu_signature"].startswith("nrefs:1|case:mixed")
        assert rows[who]["tokens_per_s"]["onnxruntime"] > 0
    assert rows["teacher"]["tokens_per_s"]["ctranslate2-int8"] > 0
    assert rows["teacher"]["bleu"] > 20  # the teacher's own test translation
    report = (save / "report.md").read_text()
    assert "| parameters |" in report and "CTranslate2 int8" in report
    # the default int8 export (every map, the shortlist shipped and used) is translated and
    # scored, beside the float32 student
    q = rows["student"]["int8"]
    assert q["precision"] == "int8" and q["bleu"] >= 0 and (save / "student-onnx-int8").is_dir()
    config = json.loads((save / "student-onnx-int8" / "config.json").read_text())
    assert config["int8"] == "all" and config["shortlist"]
    assert "against the student in float32 (fairseq)" in report
    # against what the user has: the teacher in CTranslate2 int8, without and with the
    # shortlist as its vocabulary map, at batch 1 and 32, and the bytes on disk
    vs = rows["student"]["vs_ct2_int8"]
    assert vs["engine"] == "onnxruntime+shortlist int8"
    for key in ("b1", "b32", "b1_vmap", "b32_vmap", "size_vs_ct2_int8"):
        assert vs[key] > 0, key
    assert "Against what you have now, the teacher in CTranslate2 int8" in report
    # the student's own shape on CTranslate2 (its factors multiplied out): exported, timed
    assert (save / "student-ct2" / "model.bin").exists()
    assert vs["b1_vmap_student_ct2"] > 0 and vs["b32_student_ct2"] > 0
    assert "the student's own shape in CTranslate2 int8" in report
    # the export translates the data's tokens with its own runtime (no torch needed; the toy
    # data has no tokenizer, so raw text is refused)
    src = Path(tiny_data).parent.joinpath("raw", "test.de").read_text().splitlines()[:3]
    run = subprocess.run(
        [
            sys.executable,
            str(save / "student-onnx" / "translate.py"),
            str(save / "student-onnx"),
            "--tokenized",
        ],
        input="\n".join(src) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(run.stdout.splitlines()) == 3 and all(run.stdout.splitlines())
    # a third run finds every step done
    again = _compress(args)
    assert all(_skipped(again.stdout, n, name) for n, name in enumerate(STEPS, 1))


def test_hypoformer_from_the_post_ln_teacher(tiny_data, tiny_transformer, tmp_path):
    save = tmp_path / "hypo"
    proc = _compress(
        [
            _teacher(tiny_transformer),
            "--data",
            tiny_data,
            "-o",
            save,
            "--method",
            "hypoformer",
            "--rank",
            "8",
            "--max-update",
            "6",
            "--int8",
            "all",
            *FAST,
        ]
    )
    assert "TT-SVD weight transfer" in proc.stdout
    doc = json.loads((save / "report.json").read_text())
    # --int8 all: the student's int8 export translated the test split, scored as the float32
    # models are (same references), and was timed beside them
    q = doc["models"]["student"]["int8"]
    src = Path(tiny_data).parent.joinpath("raw", "test.de").read_text().splitlines()
    assert q["precision"] == "int8" and q["sentences"] == len(src) and 0 <= q["bleu"] <= 100
    assert q["bleu_signature"] == doc["models"]["student"]["bleu_signature"]
    assert doc["models"]["student"]["tokens_per_s"]["onnxruntime-int8"] > 0
    hyps = [
        line
        for line in (save / "eval" / "student-int8.txt").read_text().splitlines()
        if line.startswith("H-")
    ]
    assert len(hyps) == len(src) and all(len(h.split("\t")) == 3 for h in hyps)
    report = (save / "report.md").read_text()
    assert "| BLEU, student's ONNX Runtime int8, every map + shortlist |" in report
    assert "vs the student's onnxruntime int8 (every map) |" in report
    assert (save / "student-onnx-int8" / "MANIFEST.sha256").exists()
    # the int8 step's translation loop, run on the float32 export scoring every token (the
    # export ships the shortlist, used by default), gives fairseq-generate's hypotheses and
    # references exactly
    from lightcompress.compress.int8 import translate_split
    from lightcompress.compress.report import read_generate

    rows = translate_split(
        str(save / "student-onnx"),
        tiny_data,
        "de",
        "en",
        beam=5,
        max_len_a=1.2,
        max_len_b=10,
        shortlist=False,
    )
    want_hyps, want_refs = read_generate(save / "eval" / "student.txt")
    assert [r[3] for r in rows] == want_hyps and [r[1] for r in rows] == want_refs
    assert doc["plan"]["method"] == "hypoformer"
    assert doc["models"]["student"]["params"] < doc["models"]["teacher"]["params"]
    assert (save / "student-onnx" / "MANIFEST.sha256").exists()
    state = torch.load(save / "student" / "checkpoint_best.pt", map_location="cpu")
    assert (
        state["cfg"]["model"].arch == "hypoformer" and state["cfg"]["model"].encoder_embed_dim == 32
    )


@pytest.mark.parametrize("case", ["pre-ln", "truncated", "compressed", "subformer"])
def test_a_teacher_the_method_cannot_take_is_refused_before_any_work(
    case, tiny_data, tiny_transformer, tmp_path
):
    teacher = _teacher(tiny_transformer)
    method = "hypoformer"
    if case == "pre-ln":  # DA-WID's compactors need post-LN; the way out takes pre-LN
        method = "dawid"
        state = torch.load(teacher, map_location="cpu")
        state["cfg"]["model"].encoder_normalize_before = True
        teacher = tmp_path / "pre-ln.pt"
        torch.save(state, teacher)
        want = "use --method lightformer (the default), hypoformer or smartformer"
    elif case == "truncated":
        data = Path(teacher).read_bytes()
        teacher = tmp_path / "truncated.pt"
        teacher.write_bytes(data[: len(data) // 2])
        want = "is the file complete?"
    elif case == "compressed":
        teacher = tmp_path / "lf.pt"
        harness.run_cli(
            "lightcompress-convert",
            [
                "-i",
                _teacher(tiny_transformer),
                "-o",
                teacher,
                "-a",
                "lightformer",
                *harness.tiny_arch_args("x")[2:],
                "--lc-encoder-groups",
                "0",
                "--lc-rank",
                "4",
                "--lc-embed-rank",
                "4",
            ],
        )
        want = "not a dense fairseq Transformer"
    else:
        method, want = "subformer", "train it from scratch"
    save = tmp_path / "out"
    err = _one_line_error(
        _compress_here([teacher, "--data", tiny_data, "-o", save, "--method", method])
    )
    assert want in err and ("--method" in err or "complete" in err or "input" in err), err
    assert not save.exists()


def test_kd_defaults_and_the_smartformer_rank_search(tiny_data, tiny_transformer, tmp_path):
    base = [_teacher(tiny_transformer), "--data", tiny_data, "-o", tmp_path / "out", "--dry-run"]

    def steps(*args):
        proc = _compress_here([*base, *args])
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        return [
            line.split(":")[0].split()[-1] for line in out.splitlines() if line.startswith("step ")
        ], out

    # KD on by default where it was measured to help (LightFormer, Hypoformer), off for
    # Smartformer and DA-WID; --kd / --no-kd say otherwise
    names, out = steps()
    assert "kd-data" in names and "kd-data" not in steps("--no-kd")[0]
    # the KD data's engine: the teacher's ONNX Runtime export on the CPU, fairseq-generate on a
    # GPU or where the teacher does not export (distill decides: tests/test_kd.py)
    (kd,) = [line for line in out.splitlines() if "lightcompress.kd.distill" in line]
    assert "--engine auto" in kd, kd
    assert "kd-data" in steps("--method", "hypoformer", "--ratio", "1.5")[0]
    assert "kd-data" not in steps("--method", "smartformer")[0]
    assert "kd-data" in steps("--method", "smartformer", "--kd")[0]
    # the rank search: the student starts at the largest rank, the agent picks among them
    names, out = steps("--method", "smartformer", "--search-ranks", "4,2,8")
    assert names == STEPS
    train = next(line for line in out.splitlines() if "fairseq-train" in line)
    assert "--task translation_smartformer --sm-search --sm-search-ranks 2,4,8" in train
    assert "--sm-rank 8" in train and "searched among 2,4,8 (starts at 8)" in out
    for bad, why in (
        (["--method", "smartformer", "--search-ranks", "4,8", "--kd"], "give --no-kd"),
        (["--search-ranks", "4,8"], "not lightformer's"),
        (["--method", "smartformer", "--search-ranks", "4,x"], "ranks like 32,64,128"),
        (["--method", "smartformer", "--search-ranks", "4", "--rank", "2"], "give no --ratio"),
        (["--method", "smartformer", "--search-ranks", "4,64"], "above the largest useful"),
    ):
        assert why in _one_line_error(_compress_here([*base, *bad])), bad
