"""lab/bench/web_page.py: the page's measurements as docs/deployment.md's block (synthetic
figures) and its refusals."""

import importlib.util
import os
import subprocess
import sys

from harness import REPO_ROOT

spec = importlib.util.spec_from_file_location(
    "web_page", os.path.join(REPO_ROOT, "lab", "bench", "web_page.py")
)
web_page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(web_page)


def _measured():
    return {
        "date": "2026-11-29",
        "machine": "AMD EPYC, 2 cores",
        "commit": "abc1234",
        "chromium": "Chromium 156",
        "engine": {"onnxruntime-web": "1.30.0"},
        "shortlist": True,
        "sizes": {"model": 3_170_000, "engine": 15_090_000, "page": 39_000},
        "load_ms": 2500.0,
        "speed": [
            {
                "beam": 5,
                "sentences": 200,
                "page_sent_per_s": 10.0,
                "page_ms_per_sent": 100.0,
                "python_sent_per_s": 25.0,
                "python_ms_per_sent": 40.0,
            },
            {
                "beam": 1,
                "sentences": 200,
                "page_sent_per_s": 20.0,
                "page_ms_per_sent": 50.0,
                "python_sent_per_s": 50.0,
                "python_ms_per_sent": 20.0,
            },
        ],
        "quality": {
            "sentences": 1952,
            "identical": 1940,
            "page": {"bleu": 40.1, "chrf": 58.0},
            "python": {"bleu": 40.2, "chrf": 58.1},
            "bleu_signature": "nrefs:1|x",
        },
    }


def test_the_block_names_when_where_and_what_and_sets_the_sizes_by_the_anchors():
    text = web_page.markdown(_measured())
    assert text.startswith("Measured 2026-11-29 on AMD EPYC, 2 cores, commit abc1234")
    assert "| the page's model files (everything but the engine) | 3.17 MB |" in text
    assert "| Bergamot de-en tiny (Firefox Translations): model files | 23 MB |" in text
    assert (
        "| 5 | 10.0 | 100.0 | 25.0 | 40.0 |" in text and "| 1 | 20.0 | 50.0 | 50.0 | 20.0 |" in text
    )
    assert "for 1940; BLEU 40.1 (page) and 40.2 (Python runtime)" in text


def test_bad_input_is_one_line(tmp_path):
    cases = [
        ([str(tmp_path / "none"), "--onnx", str(tmp_path), "--src", "x"], "not a folder"),
        ([str(tmp_path), "--onnx", str(tmp_path), "--src", str(tmp_path / "x")], "cannot read"),
        ([str(tmp_path), "--onnx", str(tmp_path), "--src", "x", "--repeat", "0"], ">= 1"),
    ]
    for args, expected in cases:
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO_ROOT, "lab", "bench", "web_page.py"), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and expected in err[0], proc.stderr
