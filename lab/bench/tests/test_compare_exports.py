"""lab/bench/compare_exports.py: ONNX exports side by side (tokens/s, speed, equal outputs)."""

from __future__ import annotations

import json
import os
import sys
from typing import ClassVar

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import compare_exports

FLAGS = [
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "16",
    "--decoder-embed-dim",
    "16",
    "--encoder-ffn-embed-dim",
    "32",
    "--decoder-ffn-embed-dim",
    "32",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
]


def _export(path, vocab: int = 30, int8=None) -> str:
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model

    torch.manual_seed(0)
    model, task, _ = build_random_model("transformer", vocab, FLAGS, True, return_task=True)
    export_onnx(model.eval(), task, str(path), int8=int8)
    return str(path)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    float32, int8 = _export(root / "float32"), _export(root / "int8", int8="all")
    with open(os.path.join(float32, "dict.src.txt"), encoding="utf-8") as f:
        symbols = [line.split()[0] for line in f if line.strip()]
    words = [s for s in symbols if not s.startswith("<") and s != "</s>"]
    text = root / "input.txt"
    text.write_text("".join(" ".join(words[i : i + 3 + i % 4]) + "\n" for i in range(12)) + "\n")
    return {"root": root, "float32": float32, "int8": int8, "input": str(text)}


def test_compare_exports_times_each_export_against_the_first(exports, capsys):
    out = exports["root"] / "rows.json"
    argv = [
        exports["float32"],
        exports["int8"],
        exports["float32"],
        "--input",
        exports["input"],
        "--num-sentences",
        "6",
        "--runs",
        "2",
        "--max-len-b",
        "4",
        "--json",
        str(out),
        "--tokenized",
    ]
    assert compare_exports.main(argv) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [r["export"] for r in rows] == [exports["float32"], exports["int8"], exports["float32"]]
    assert all(r["sentences"] == 6 and r["tokens"] >= 6 and r["tokens_per_s"] > 0 for r in rows)
    assert rows[0]["speed"] == 1.0 and rows[0]["same_output"] == 6
    # the same export again translates the same; its speed is its own against the first run's
    assert rows[2]["same_output"] == 6 and rows[2]["tokens"] == rows[0]["tokens"]
    assert 0 <= rows[1]["same_output"] <= 6
    for r in rows:
        assert f"{r['export']}: {r['tokens_per_s']:.1f} tokens/s" in printed


def test_compare_exports_bad_input_is_one_line(exports, tmp_path, capsys):
    other = _export(tmp_path / "other", vocab=20)  # (other dictionaries: not the same ids)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    cases = [
        ([exports["float32"]], "at least two exports"),
        ([exports["float32"], str(tmp_path / "missing")], "model directory not found"),
        ([exports["float32"], other], "different source dictionaries"),
        ([exports["float32"], exports["int8"], "--runs", "0"], "--runs must be >= 1"),
    ]
    for exps, message in cases:
        assert compare_exports.main([*exps, "--input", exports["input"], "--tokenized"]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    argv = [exports["float32"], exports["int8"], "--input", str(empty)]
    assert compare_exports.main(argv) == 2
    assert "has no sentences" in capsys.readouterr().err
    # an export without a tokenizer refuses raw text (one line): --tokenized gives its tokens
    argv = [exports["float32"], exports["int8"], "--input", exports["input"]]
    assert compare_exports.main(argv) == 2
    err = capsys.readouterr().err
    assert "has no tokenizer" in err and "--tokenized" in err and len(err.strip().splitlines()) == 1


class _FakeTranslator:
    """An export that translates in a set time with outputs of a set length."""

    clock: ClassVar[list] = [0.0]
    plans: ClassVar[dict] = {"slow": (1.0, 2), "fast-and-long": (1.5, 6)}  # (seconds, tokens)

    text_error = None  # (tokens in, as an export without a tokenizer takes them)

    def __init__(self, path, **_):
        self.seconds, self.length = self.plans[os.path.basename(path)]
        self.src_symbols = ["<s>", "<pad>", "</s>", "<unk>", "a"]

    def encode(self, line):
        return [4, 2]

    def translate_ids(self, sources):
        self.clock[0] += self.seconds
        return [[4] * (self.length - 1) for _ in sources]


def test_compare_exports_speed_is_a_speed_ratio(tmp_path, monkeypatch, capsys):
    """The speed column was the time ratio: an export that gives 3x the tokens in 1.5x the
    time (twice the tokens/s) read 0.667x."""
    monkeypatch.setattr(compare_exports.runtime, "OnnxTranslator", _FakeTranslator)
    monkeypatch.setattr(compare_exports.time, "perf_counter", lambda: _FakeTranslator.clock[0])
    text = tmp_path / "in.txt"
    text.write_text("a\n" * 4)
    out = tmp_path / "rows.json"
    argv = [
        str(tmp_path / "slow"),
        str(tmp_path / "fast-and-long"),
        "--input",
        str(text),
        "--num-sentences",
        "4",
        "--runs",
        "1",
        "--json",
        str(out),
    ]
    assert compare_exports.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["tokens_per_s"] for r in rows] == [8.0, 16.0]
    assert [r["speed"] for r in rows] == [1.0, 2.0]
    assert "2.000x the first's tokens/s" in capsys.readouterr().out
