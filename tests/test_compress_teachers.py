"""lightcompress-compress takes the fairseq Transformers users have (issue 39).

Tiny teachers trained here by fairseq-train with fairseq's own architectures and options (the
IWSLT'14 recipe's separate dictionaries and tied decoder output, pre-LN with and without
sharing, transformer_vaswani_wmt_en_de_big without sharing, the WMT recipe's shared joined
tables, pre-LN transformer_wmt_en_de_big_t2t, learned positions with --layernorm-embedding,
--no-scale-embedding and gelu, a 3-1 teacher with unequal heads and FFN sizes) x every method,
in dry run: each runs, or refuses with a way out that this test then follows successfully.
End to end (tiny, short): the IWSLT-style teacher (separate dictionaries, tied decoder output,
Moses + subword-nmt BPE) and a pre-LN teacher without any sharing, each ending in an export
that translates raw text.
"""

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import harness
import pytest
from test_compress import CMD, FAST, _env

import lightcompress.plugin  # noqa: F401  (the checkpoint allow-list)
from lightcompress.compress.cli import main as compress_main


def _base(arch="transformer", layers=(2, 2), ffn=(64, 64), heads=(2, 2)):
    return [
        "--arch",
        arch,
        "--encoder-layers",
        layers[0],
        "--decoder-layers",
        layers[1],
        "--encoder-embed-dim",
        32,
        "--decoder-embed-dim",
        32,
        "--encoder-ffn-embed-dim",
        ffn[0],
        "--decoder-ffn-embed-dim",
        ffn[1],
        "--encoder-attention-heads",
        heads[0],
        "--decoder-attention-heads",
        heads[1],
    ]


PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before"]
# name -> (joined dictionary, fairseq-train model flags)
TEACHERS = {
    "iwslt": (False, _base("transformer_iwslt_de_en") + ["--share-decoder-input-output-embed"]),
    "pre-ln-tied": (False, _base() + ["--share-decoder-input-output-embed", *PRE_LN]),
    "pre-ln-unshared": (False, _base() + PRE_LN),
    "vaswani-unshared": (True, _base("transformer_vaswani_wmt_en_de_big")),
    "wmt-shared": (True, _base() + ["--share-all-embeddings"]),
    "t2t": (True, _base("transformer_wmt_en_de_big_t2t") + ["--share-all-embeddings"]),
    # (a position table proportionate to the tiny width, as 1,024 positions are to d 512: with
    # 1,024 rows of d 32 the dense position tables alone would be 60 % of the model)
    "learned-pos": (
        True,
        _base()
        + [
            "--share-all-embeddings",
            "--encoder-learned-pos",
            "--decoder-learned-pos",
            "--layernorm-embedding",
            "--no-scale-embedding",
            "--activation-fn",
            "gelu",
            "--max-source-positions",
            "64",
            "--max-target-positions",
            "64",
        ],
    ),
    "3-1-unequal": (
        True,
        _base(layers=(3, 1), ffn=(64, 48), heads=(4, 2)) + ["--share-all-embeddings"],
    ),
}
METHODS = ["lightformer", "hypoformer", "smartformer", "dawid"]


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    root = tmp_path_factory.mktemp("teachers")
    raw = harness.make_parallel_corpus(str(root / "raw"))
    data = {
        j: harness.preprocess(raw, str(root / ("joined" if j else "separate")), joined=j)
        for j in (True, False)
    }
    out, jobs = {}, []
    for name, (joined, flags) in TEACHERS.items():
        save = str(root / name)
        jobs.append(harness.train_args(data[joined], save, flags, max_update=20))
        out[name] = (os.path.join(save, "checkpoint_best.pt"), data[joined])
    harness.train_many(jobs)  # (fairseq-train's code, in one process: one import of fairseq)
    return out


def _dry_run(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = compress_main([str(a) for a in args] + ["--dry-run"])
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", list(TEACHERS))
def test_every_teacher_and_method_runs_or_refuses_with_a_way_out_that_works(
    teachers, name, method, tmp_path
):
    teacher, data = teachers[name]
    args = [teacher, "--data", data, "-o", tmp_path / "out", "--method", method]
    rc, out, err = _dry_run(args)
    if rc != 0:
        assert rc == 2 and err.startswith("lightcompress-compress: error: "), (out, err)
        assert err.count("\n") == 1, err
        way = re.search(r"--method (\w+)|--ratio ([0-9.]+)", err)
        assert way, f"no way out in: {err}"
        if way.group(1):  # another method: it must take this teacher
            args[-1] = way.group(1)
        else:  # a reachable target: exactly the flag and value the message names
            args += ["--ratio", way.group(2)]
        rc, out, err = _dry_run(args)
        assert rc == 0, f"the way out failed: {args}\n{err}"
    assert not (tmp_path / "out").exists()
    commands = [line for line in out.splitlines() if line.startswith("+ ")]
    train = next(c for c in commands if "fairseq-train" in c)
    shared = "--share-all-embeddings" in TEACHERS[name][1]
    tied = shared or "--share-decoder-input-output-embed" in TEACHERS[name][1]
    if args[args.index("--method") + 1] != "dawid":
        # the student keeps the teacher's sharing, and is deep-encoder / shallow-decoder
        assert ("--share-all-embeddings" in train) == shared, train
        assert ("--no-share-all-embeddings" in train) == (not shared), train
        assert ("--share-decoder-input-output-embed" in train) == tied, train
        assert "--decoder-layers 1 " in train, train
        assert "student shape: " in out and "-1 (deep encoder, shallow decoder" in out


def test_keep_depth_and_explicit_depths(teachers, tmp_path):
    teacher, data = teachers["wmt-shared"]
    base = [teacher, "--data", data, "-o", tmp_path / "out"]
    rc, out, _ = _dry_run([*base, "--keep-depth"])
    assert rc == 0 and "student shape: 2-2 (the teacher's depth (--keep-depth))" in out
    assert "--decoder-layers-from" not in out
    rc, out, _ = _dry_run([*base, "--decoder-layers", "1", "--decoder-layers-from", "1"])
    assert rc == 0 and "--decoder-layers-from 1" in out
    for bad, want in (
        (["--decoder-layers", "3"], "--decoder-layers 2 or fewer"),
        (["--decoder-layers-from", "5"], "between 0 and 1"),
        (["--keep-depth", "--decoder-layers", "1"], "--keep-depth keeps"),
        (["--method", "dawid", "--decoder-layers", "1"], "DA-WID keeps"),
    ):
        rc, _, err = _dry_run([*base, *bad])
        assert rc == 2 and want in err, (bad, err)


@pytest.fixture(scope="module")
def bpe_teachers(tmp_path_factory, bpe_toy):
    """The IWSLT-style BPE toy (conftest's ``bpe_toy``, test_deploy_text's preparation: Moses,
    lowercasing, subword-nmt, separate dictionaries) with two teachers: tied decoder output
    (post-LN) and pre-LN without any sharing."""
    from test_deploy import make_checkpoint
    from test_deploy_text import IWSLT

    root = tmp_path_factory.mktemp("bpe_teachers")
    out = dict(bpe_toy)
    out["iwslt"] = make_checkpoint(
        out["data"], str(root / "iwslt.pt"), "transformer", IWSLT, updates=150
    )
    unshared = [f for f in IWSLT if f != "--share-decoder-input-output-embed"] + PRE_LN
    out["pre-ln-unshared"] = make_checkpoint(
        out["data"], str(root / "preln.pt"), "transformer", unshared, updates=150
    )
    return out


@pytest.mark.parametrize("name", ["iwslt", "pre-ln-unshared"])
def test_end_to_end_from_a_bpe_teacher_to_an_export_that_takes_raw_text(
    bpe_teachers, name, tmp_path
):
    save = tmp_path / "c"
    proc = harness.run(
        [
            *CMD,
            bpe_teachers[name],
            "--data",
            bpe_teachers["data"],
            "-o",
            str(save),
            "--bpe-codes",
            bpe_teachers["codes"],
            "--max-update",
            "12",
            "--validate-every",
            "6",
            "--cpu",
            *FAST,
        ],
        text=True,
        env=_env(),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((save / "report.json").read_text())
    teacher, student = doc["models"]["teacher"], doc["models"]["student"]
    assert student["params"] < teacher["params"]
    assert "-1 (deep encoder, shallow decoder" in doc["plan"]["student"]["shape"]
    # the report says what it measured roughly (FAST: 3 sentences, one run)
    assert (
        "Rough speed: every engine was timed on 3 sentences in 1 run(s)"
        in (save / "report.md").read_text()
    )
    raw = (bpe_teachers["raw"] / "test.de").read_text().splitlines()[:4]
    run = subprocess.run(
        [sys.executable, str(save / "student-onnx" / "translate.py"), str(save / "student-onnx")],
        input="\n".join(raw) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    got = run.stdout.splitlines()
    assert len(got) == 4 and not any("@@" in g or "&quot;" in g for g in got), got


def test_the_report_says_which_engine_row_is_missing_and_why(tmp_path):
    from lightcompress.compress.report import left_out, read_speed

    doc = {
        "protocol": {"runs": 5, "num_sentences": 40},
        "notes": ["teacher: CTranslate2 cannot convert it (unequal encoder and decoder heads)"],
        "models": [{"label": "teacher", "engine": "fairseq", "precision": "float32", "runs": []}],
    }
    (tmp_path / "speed.json").write_text(json.dumps(doc))
    speed = read_speed(str(tmp_path / "speed.json"))
    lines = left_out(str(tmp_path), speed, speed)
    assert len(lines) == 2 and all("unequal encoder and decoder heads" in x for x in lines)
    assert lines[0].startswith("No CTranslate2 int8 row for the teacher: ")
    assert not any(x.startswith("Rough speed") for x in lines)


def test_progress_lines_skip_library_output():
    from lightcompress.compress.steps import _informative

    for noise in (
        "  super().__init__(loader)",
        "DEBUG:matplotlib:data path",
        "",
        "/x/dataloader.py:1102: UserWarning: 'pin_memory' argument",
    ):
        assert not _informative(noise), noise
    assert _informative("[distill] shard 1 (2/4): 9,405/19,405 sentences (48%)")
