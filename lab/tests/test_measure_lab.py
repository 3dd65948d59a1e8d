"""The lab's ``measure_speed`` (lab/measure/measure_speed.py): ``--text`` (tokenization inside
the timed path), ``--fast`` (the PyTorch fast path, with the shortlist too), ``--memory`` (peak
resident memory of a fresh process per model) and the product's ``--natural`` (the split's
sentences at their own lengths), on the toy corpora with a sentencepiece model. No test asserts
a timing."""

import json
import os
import subprocess
import sys
from argparse import Namespace

import pytest
import torch
from harness import REPO_ROOT, make_parallel_corpus
from test_deploy import TINY, _binarize, _sentencepiece, make_checkpoint
from test_shortlist import BUILD, _cli

LAB_MEASURE = os.path.join(REPO_ROOT, "lab", "measure")
sys.path.insert(0, LAB_MEASURE)


def lab_measure(*args, **kw):
    """The lab's measure_speed, as a command."""
    return subprocess.run(
        [sys.executable, os.path.join(LAB_MEASURE, "measure_speed.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        **kw,
    )


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    raw = make_parallel_corpus(str(root / "raw"), n_train=400, n_valid=10, n_test=30)
    spm, pieces = _sentencepiece(raw, root)
    data = _binarize(pieces, str(root / "bin"))
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=30)
    return {"data": data, "raw": raw, "spm": spm, "teacher": teacher, "root": root}


def _sources(task):
    task.load_dataset("test")
    ds = task.dataset("test")
    return [ds.src[i].long() for i in range(len(ds))]


def test_text_runner_translates_raw_text_as_the_runner_translates_its_ids(toy):
    """From raw text, each engine gives the translations it gives from the binarized pieces
    (the text is what the pieces decode to), detokenized; tokens counted alike."""
    from speed_fast import FastRunner
    from speed_text import TextRunner, detokenize, load_spm

    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.deploy.ct2 import export_ctranslate2
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.engines import CT2Runner, OnnxRunner

    model, task, _ = load_checkpoint(toy["teacher"], toy["data"])
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    gen = Namespace(beam=3, lenpen=1.0, min_len=1, max_len_a=1.2, max_len_b=4)
    onnx_dir, ct2_dir = str(toy["root"] / "onnx"), str(toy["root"] / "ct2")
    export_onnx(model, task, onnx_dir)
    export_ctranslate2(toy["teacher"], toy["data"], ct2_dir)
    runners = [
        FastRunner(model, task, gen),
        OnnxRunner(onnx_dir, 1, src_dict.pad(), model.max_positions()),
        CT2Runner(
            ct2_dir,
            "float32",
            1,
            src_dict,
            tgt_dict,
            model.max_decoder_positions(),
            model.max_positions(),
        ),
    ]
    sources = _sources(task)
    with open(os.path.join(toy["raw"], "test.de"), encoding="utf-8") as f:
        raw = [line.rstrip("\n") for line in f]
    spm = load_spm(toy["spm"])
    for inner in runners:
        text = TextRunner(inner, spm, src_dict, tgt_dict)
        assert text.engine == inner.engine
        prepared = text.prepare(sources, gen, batch_size=4)
        assert [line for _g, lines in prepared for line in lines] == raw  # the raw test text
        ids = inner.translate(sources, gen, batch_size=4)
        assert text.translate(sources, gen, batch_size=4) == ids
        tokens = sum(text.run_one(p) for p in prepared[:1])
        assert tokens == sum(len(h) for h in ids[:4]) > 0
        expected = [detokenize(tgt_dict[i] for i in h) for h in ids[:4]]
        assert text.last_output == expected and all(expected)


def test_measure_speed_text_rows_follow_the_id_rows_with_bleu_and_natural_lengths(toy, tmp_path):
    out = tmp_path / "speed.json"
    proc = lab_measure(
        "--data",
        toy["data"],
        "--path",
        f"teacher={toy['teacher']}",
        "--fast",
        "--onnx",
        "--ct2",
        "--text",
        toy["spm"],
        "--natural",
        "--num-sentences",
        "10",
        "--bleu",
        "--memory",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--timing-batch-size",
        "4",
        "--sort-batches",
        "--quiet",
        "--json",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    order = [(r["engine"], r["precision"], bool(r.get("text"))) for r in result["models"]]
    assert order == [
        ("fairseq", "float32", False),
        ("lightcompress", "float32", False),
        ("lightcompress", "float32", True),
        ("onnxruntime", "float32", False),
        ("onnxruntime", "float32", True),
        ("ctranslate2", "float32", False),
        ("ctranslate2", "float32", True),
        ("ctranslate2", "int8", False),
        ("ctranslate2", "int8", True),
    ]
    rows = result["models"]
    for plain, text in zip(rows[1::2], rows[2::2]):
        assert text["tokens_per_run"] == plain["tokens_per_run"] > 0  # the same translations
        assert text["bleu"] == pytest.approx(plain["bleu"], abs=0.01)
        assert "peak_rss_kib" in plain and "peak_rss_kib" not in text
    assert "onnxruntime+text" in proc.stdout and "ctranslate2+text" in proc.stdout
    # --natural: every third sentence of the 30 in the test split, at their own lengths
    protocol = result["protocol"]
    assert protocol["natural"] and protocol["num_sentences"] == 10 and protocol["sorted_batches"]
    assert "natural lengths" in proc.stdout.splitlines()[0]
    assert "batch 4 (longest first)" in proc.stdout.splitlines()[0]
    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.measure.protocol import pick_sentences

    _model, task, _ = load_checkpoint(toy["teacher"], toy["data"])
    picked = pick_sentences(task, "test", 10, 6, natural=True)
    every_third = _sources(task)[::3]
    assert all(torch.equal(a, b) for a, b in zip(picked, every_third)) and len(picked) == 10
    assert protocol["mean_src_len"] == pytest.approx(sum(s.numel() - 1 for s in every_third) / 10)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--text", "SPM"], "--text needs --fast, --onnx or --ct2"),
        (["--onnx", "--text", "missing.model"], "--text missing.model: file not found"),
        (["--onnx", "--text", "NOT_SPM"], "not a sentencepiece model"),
    ],
)
def test_measure_speed_text_bad_input_is_one_line(toy, tmp_path, extra, message):
    bogus = tmp_path / "bogus.model"
    bogus.write_text("not a model\n")
    extra = [str(bogus) if x == "NOT_SPM" else toy["spm"] if x == "SPM" else x for x in extra]
    proc = lab_measure(
        "--data",
        toy["data"],
        "--path",
        toy["teacher"],
        "--num-sentences",
        "2",
        "--runs",
        "1",
        *extra,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_the_product_command_has_none_of_the_labs_options(toy):
    proc = subprocess.run(
        [
            os.path.join(REPO_ROOT, "scripts", "measure_speed.sh"),
            "--data",
            toy["data"],
            "--path",
            toy["teacher"],
            "--memory",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ, PYTHON=sys.executable, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 2 and "unrecognized arguments: --memory" in proc.stderr


def test_memory_of_ct2_and_onnx_next_to_fairseq(toy, tmp_path):
    """--memory: a fresh process per row; CTranslate2's and ONNX Runtime's hold no torch."""
    out = tmp_path / "speed.json"
    proc = lab_measure(
        "--data",
        toy["data"],
        "--path",
        f"teacher={toy['teacher']}",
        "--ct2",
        "--onnx",
        "--memory",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--num-sentences",
        "4",
        "--src-len",
        "6",
        "--quiet",
        "--json",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    rows = {(r["engine"], r["precision"]): r for r in result["models"]}
    for r in rows.values():
        assert r["peak_rss_kib"] >= r["baseline_rss_kib"] > 0
    ref = rows["fairseq", "float32"]["baseline_rss_kib"]
    assert rows["ctranslate2", "float32"]["baseline_rss_kib"] < ref
    assert rows["onnxruntime", "float32"]["baseline_rss_kib"] < ref / 2
    assert "memory" in result["protocol"]
    header = proc.stdout.splitlines()[2]
    for column in ("Engine", "Size", "Peak RSS", "+Model", "Tokens/s"):
        assert column in header


def test_the_fast_path_with_and_without_the_shortlist(toy, tmp_path):
    sl = tmp_path / "sl.txt"
    assert (
        _cli(BUILD, "--data", toy["data"], "--k", "2", "--frequent", "1", "-o", sl).returncode == 0
    )
    out = tmp_path / "speed.json"
    proc = lab_measure(
        "--data",
        toy["data"],
        "--path",
        f"teacher={toy['teacher']}",
        "--fast",
        "--onnx",
        "--shortlist",
        sl,
        "--bleu",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--num-sentences",
        "4",
        "--src-len",
        "6",
        "--quiet",
        "--json",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {(r["engine"], r.get("shortlist")): r for r in json.loads(out.read_text())["models"]}
    assert set(rows) == {
        ("fairseq", None),
        ("lightcompress", None),
        ("lightcompress", str(sl)),
        ("onnxruntime", None),
        ("onnxruntime", str(sl)),
    }
    # with the shortlist, both engines translate alike (their BLEU is the same)
    assert rows["onnxruntime", str(sl)]["bleu"] == pytest.approx(
        rows["lightcompress", str(sl)]["bleu"], abs=0.1
    )
    assert "lightcompress+shortlist" in proc.stdout
    for extra, message in (
        (["--shortlist", sl], "--shortlist needs --fast, --onnx or --ct2"),
        (["--fast", "--shortlist", tmp_path / "no"], "file not found"),
    ):
        proc = lab_measure("--data", toy["data"], "--path", toy["teacher"], *extra)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr
