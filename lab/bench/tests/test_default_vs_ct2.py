"""lab/bench/default_vs_ct2.py: the default student against CTranslate2 int8 on its teacher (issue
55), on a toy teacher and its LightFormer student with a sentencepiece model and a shortlist.
No test asserts a timing: the figures are checked to be there, positive and consistent with
the files they come from."""

import json
import os
import subprocess
import sys

import pytest
from harness import REPO_ROOT, make_parallel_corpus
from test_deploy import TINY, _binarize, _sentencepiece, make_checkpoint

SCRIPT = os.path.join(REPO_ROOT, "lab", "bench", "default_vs_ct2.py")


def _run(*args):
    return subprocess.run(
        [sys.executable, SCRIPT, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"),
    )


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from lightcompress.convert.cli import main as convert
    from lightcompress.deploy.shortlist_build import main as shortlist

    root = tmp_path_factory.mktemp("default_vs_ct2")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=30)
    spm, pieces = _sentencepiece(raw, root)
    data = _binarize(pieces, str(root / "bin"))
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=30)
    student = str(root / "student.pt")
    # (the default compress shape: the teacher's encoder, one decoder layer, every map low rank)
    assert (
        convert(
            [
                "-i",
                teacher,
                "-o",
                student,
                "-a",
                "lightformer",
                *TINY,
                "--decoder-layers",
                "1",
                "--lc-rank",
                "8",
                "--lc-embed-rank",
                "8",
                "--lc-encoder-groups",
                "0",
                "--lc-decoder-groups",
                "0",
                "--decoder-layers-from",
                "0",
            ]
        )
        == 0
    )
    sl = str(root / "shortlist.txt")
    assert shortlist(["--data", data, "-o", sl]) == 0
    return {"data": data, "raw": raw, "spm": spm, "teacher": teacher, "student": student, "sl": sl}


def test_the_default_export_against_ct2_int8_at_batch_1_and_32(toy, tmp_path):
    out = tmp_path / "res" / "default-vs-ct2.json"
    work = tmp_path / "work"
    proc = _run(
        "--teacher",
        toy["teacher"],
        "--student",
        toy["student"],
        "--data",
        toy["data"],
        "--spm",
        toy["spm"],
        "--shortlist",
        toy["sl"],
        "--batch1-sentences",
        "4",
        "--batch32-sentences",
        "8",
        "--runs",
        "1",
        "--work",
        work,
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    for key in (
        "machine",
        "commit",
        "date",
        "b1",
        "b32",
        "b1_vmap",
        "b32_vmap",
        "size_vs_ct2_int8",
        "bleu_delta_vs_float32",
    ):
        assert key in doc, key
    assert all(doc[k] > 0 for k in ("b1", "b32", "b1_vmap", "b32_vmap", "size_vs_ct2_int8"))
    # the ratios are the rows' tokens/s, as measure_speed wrote them
    for batch in (1, 32):
        rates = doc["tokens_per_s"][f"b{batch}"]
        mine = rates["student onnxruntime+shortlist int8"]
        assert doc[f"b{batch}"] == pytest.approx(mine / rates["teacher ctranslate2 int8"], 1e-2)
        assert doc[f"b{batch}_vmap"] == pytest.approx(
            mine / rates["teacher ctranslate2+shortlist int8"], 1e-2
        )
        # the student's own shape on CTranslate2 (its factors multiplied out) is timed too
        assert rates["student ctranslate2+shortlist int8"] > 0
        assert doc[f"b{batch}_student_dense_ct2_vmap"] > 0
    # the size: the default export's graphs and weights against the teacher's model.bin
    bin_size = os.path.getsize(work / "teacher-ct2" / "model.bin")
    assert doc["teacher_ct2_int8_model_bin_bytes"] == bin_size
    assert doc["size_vs_ct2_int8"] == pytest.approx(
        doc["student_export_model_bytes"] / bin_size, 1e-2
    )
    config = json.loads((work / "default" / "config.json").read_text())
    assert config["int8"] == "all" and config["shortlist"]
    # BLEU of both exports on the whole test split; the delta is theirs
    assert doc["default"]["sentences"] == doc["float32"]["sentences"] == 30
    delta = doc["default"]["bleu"] - doc["float32"]["bleu"]
    assert doc["bleu_delta_vs_float32"] == pytest.approx(delta, abs=0.01)
    a = doc["arithmetic"]
    assert a["macs_per_step"] > a["weights_macs_per_hypothesis"] > 0 and a["graph_nodes"] > 10
    assert a["gemm_macs_per_s"] > 0 and a["ort_seconds_per_node"] > 0
    assert a["time_over_arithmetic"] > 0


def test_bad_input_is_one_line(toy, tmp_path):
    proc = _run(
        "--teacher",
        tmp_path / "missing.pt",
        "--student",
        toy["student"],
        "--data",
        toy["data"],
        "--spm",
        toy["spm"],
        "--shortlist",
        toy["sl"],
        "--out",
        tmp_path / "x.json",
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--teacher" in proc.stderr and "not found" in proc.stderr
    assert not (tmp_path / "x.json").exists()
