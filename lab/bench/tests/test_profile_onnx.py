"""lab/bench/profile_onnx.py: where an ONNX export's translation time goes (encoder, decoder graph,
numpy beam search; the decoder graph's kernels), on a toy model with a sentencepiece model. No
test asserts a timing."""

import json
import os
import subprocess
import sys

import pytest
from harness import REPO_ROOT, make_parallel_corpus
from test_deploy import TINY, _binarize, _sentencepiece, make_checkpoint


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("profile")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=30)
    spm, pieces = _sentencepiece(raw, root)
    data = _binarize(pieces, str(root / "bin"))
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=30)
    return {"data": data, "raw": raw, "spm": spm, "teacher": teacher}


def test_profile_onnx_script_splits_the_time_and_lists_the_decoder_kernels(toy, tmp_path):
    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.onnx_export import export_onnx

    model, task, _ = load_checkpoint(toy["teacher"], toy["data"])
    export = str(tmp_path / "onnx")
    export_onnx(model, task, export, spm=toy["spm"])
    script = os.path.join(REPO_ROOT, "lab", "bench", "profile_onnx.py")
    out = tmp_path / "profile.json"
    proc = subprocess.run(
        [
            sys.executable,
            script,
            export,
            "--input",
            os.path.join(toy["raw"], "test.de"),
            "--num-sentences",
            "8",
            "--batch-size",
            "4",
            "--runs",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    wall, kernels = doc["wall"], doc["kernels"]
    assert doc["num_sentences"] == 8 and wall["tokens"] > 0 and wall["steps"] > 0
    assert sum(wall["share"].values()) == pytest.approx(1.0)
    assert 0 < wall["share"]["decoder"] < 1 and wall["share"]["encoder"] > 0
    assert kernels["steps"] == wall["steps"]  # (the same translations, profiled)
    ops = {row["op"] for row in kernels["by_op"]}
    assert "TopK" in ops and ops & {"MatMul", "Gemm", "FusedMatMul", "FusedGemm"}
    assert sum(row["share"] for row in kernels["by_op"]) == pytest.approx(1.0)
    assert len(kernels["top_nodes"]) == 12 and "decoder kernels" in proc.stdout
    bad = subprocess.run(
        [sys.executable, script, export, "--input", str(tmp_path / "missing.txt")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "cannot read" in bad.stderr
