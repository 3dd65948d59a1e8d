"""The DA-WID GLUE recipe's data preparation (examples/classification/dawid/), offline on tiny
hand-made files: gpt2_bpe_encode.py against fairseq's GPT-2 BPE (``--bpe gpt2``) and against ids
worked out by hand from a tiny encoder.json / vocab.bpe; format_mrpc.py's GLUE split; and
prepare-glue.sh MRPC end to end (BPE, fairseq-preprocess with RoBERTa's dictionary layout) with
every file in place, where nothing is downloaded."""

import argparse
import json
import os
import subprocess
import sys

import pytest
from harness import REPO_ROOT

GLUE = os.path.join(REPO_ROOT, "examples", "classification", "dawid")
ENCODE = os.path.join(GLUE, "gpt2_bpe_encode.py")
FORMAT_MRPC = os.path.join(GLUE, "format_mrpc.py")

# merges of the tiny vocabulary, in rank order; each adds the next id from 256 on
MERGES = [
    ("h", "e"),
    ("l", "l"),
    ("Ġ", "t"),
    ("Ġt", "he"),
    ("he", "ll"),
    ("hell", "o"),
    ("Ġ", "c"),
    ("a", "t"),
    ("Ġc", "at"),
]
HELLO, THE, CAT = 261, 259, 264  # "hello", "Ġthe", "Ġcat"

LINES = [
    "hello the cat",  # whole words merged
    "  hello!  ",  # surrounding white space stripped; "!" is byte 33
    "",  # empty lines kept
    "Thé cat",  # byte-level: "é" is the bytes 0xc3 0xa9
    "the\rcat\t",  # a carriage return inside the line does not end it
    "hellohello 12",
]
# worked out by hand from MERGES (a single byte's id is the byte's value)
EXPECTED = [
    f"{HELLO} {THE} {CAT}",
    f"{HELLO} 33",
    "",
    f"84 104 195 169 {CAT}",
    "116 256 13 99 263",  # "the" (no leading space: t + he), "\r", "cat" (c + at)
    f"{HELLO} {HELLO} 32 49 50",  # "hellohello": two "hello"; " 12": space, "1", "2"
]
# the other sentences of the MRPC fixture
MORE = {"the cat": f"116 256 {CAT}", "hello": f"{HELLO}", "cat": "99 263"}


def _gpt2_files(root):
    """A tiny GPT-2 BPE: encoder.json (the 256 byte symbols with their byte values as ids,
    then one id per merge), vocab.bpe (a version line, the merges, a final newline) and RoBERTa's
    dict.txt layout ("<id> <count>")."""
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    byte_symbol = bytes_to_unicode()
    encoder = {byte_symbol[b]: b for b in range(256)}
    for a, b in MERGES:
        encoder[a + b] = len(encoder)
    os.makedirs(root, exist_ok=True)
    paths = {k: os.path.join(root, k) for k in ("encoder.json", "vocab.bpe", "dict.txt")}
    with open(paths["encoder.json"], "w", encoding="utf-8") as f:
        json.dump(encoder, f)
    with open(paths["vocab.bpe"], "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in MERGES))
    with open(paths["dict.txt"], "w", encoding="utf-8") as f:
        f.writelines(f"{i} {1000 - i}\n" for i in range(len(encoder)))
    return paths


def _encode(paths, inp, out):
    cmd = [
        sys.executable,
        ENCODE,
        "--encoder-json",
        paths["encoder.json"],
        "--vocab-bpe",
        paths["vocab.bpe"],
        "--input",
        str(inp),
        "--output",
        str(out),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)


def test_the_hand_made_vocabulary_is_what_the_expected_ids_assume():
    assert (HELLO, THE, CAT) == (256 + 5, 256 + 3, 256 + 8)


def test_gpt2_bpe_encode_gives_fairseqs_gpt2_bpe_ids_line_by_line(tmp_path):
    from fairseq.data.encoders import build_bpe

    paths = _gpt2_files(str(tmp_path / "gpt2"))
    inp, out = tmp_path / "train.raw.input0", tmp_path / "train.input0"
    inp.write_bytes("".join(line + "\n" for line in LINES).encode("utf-8"))
    proc = _encode(paths, inp, out)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    got = out.read_bytes().decode("utf-8").split("\n")
    assert got[-1] == "" and got[:-1] == EXPECTED  # one line out per line in
    # fairseq's registered GPT-2 BPE (what --bpe gpt2 and RobertaHubInterface.encode use) on
    # the same files gives the same ids, and decodes them back to the stripped lines
    bpe = build_bpe(
        argparse.Namespace(
            bpe="gpt2", gpt2_encoder_json=paths["encoder.json"], gpt2_vocab_bpe=paths["vocab.bpe"]
        )
    )
    assert [bpe.encode(line.strip()) for line in LINES] == EXPECTED
    assert [bpe.decode(ids) for ids in EXPECTED] == [line.strip() for line in LINES]
    assert not os.path.exists(str(out) + ".tmp")


def _bad_encoder_json(paths):
    with open(paths["encoder.json"], "w") as f:
        f.write('{"a": 1,')


def _encoder_without_e_acute(paths):
    with open(paths["encoder.json"], encoding="utf-8") as f:
        encoder = json.load(f)
    del encoder["Ã"]  # byte 0xc3, the first byte of "é"
    with open(paths["encoder.json"], "w", encoding="utf-8") as f:
        json.dump(encoder, f)


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing input", "not found"),
        ("not utf-8", "raw.txt:2: not UTF-8 text"),
        ("bad encoder.json", "cannot read"),
        ("symbol missing", "raw.txt:2: symbol 'Ã' is not in the encoder.json"),
        ("no output folder", "does not exist"),
        ("output is input", "same file"),
    ],
)
def test_gpt2_bpe_encode_bad_input_is_one_line_and_writes_nothing(tmp_path, case, message):
    paths = _gpt2_files(str(tmp_path / "gpt2"))
    inp, out = tmp_path / "raw.txt", tmp_path / "out.txt"
    inp.write_bytes("hello the cat\nThé cat\n".encode())
    if case == "missing input":
        inp.unlink()
    elif case == "not utf-8":
        inp.write_bytes(b"hello\nTh\xe9 cat\n")  # Latin-1
    elif case == "bad encoder.json":
        _bad_encoder_json(paths)
    elif case == "symbol missing":
        _encoder_without_e_acute(paths)
    elif case == "no output folder":
        out = tmp_path / "missing" / "out.txt"
    elif case == "output is input":
        out = inp
    before = sorted(os.listdir(tmp_path))
    proc = _encode(paths, inp, out)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpt2_bpe_encode: error:"), proc.stderr
    assert message in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == before  # nothing written, no .tmp left


# ------------------------------------------------------------------ MRPC

MSR_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
MSR_ROWS = [
    ("1", "101", "102", "hello the cat", "the cat"),
    ("0", "103", "104", "Thé cat", "hello"),
    ("0", "105", "106", "the cat", "hello the cat"),
    ("1", "107", "108", "hellohello 12", "cat"),
]
DEV_IDS = [("103", "104"), ("107", "108")]


def _mrpc_files(root):
    os.makedirs(root, exist_ok=True)
    train = os.path.join(root, "msr_paraphrase_train.txt")
    with open(train, "w", encoding="utf-8", newline="\r\n") as f:  # the corpus file's CRLF
        f.write(MSR_HEADER + "".join("\t".join(r) + "\n" for r in MSR_ROWS))
    dev_ids = os.path.join(root, "dev_ids.tsv")
    with open(dev_ids, "w", encoding="utf-8") as f:
        f.writelines("\t".join(pair) + "\n" for pair in DEV_IDS)
    return train, dev_ids


def _format(train, dev_ids, out_dir):
    cmd = [
        sys.executable,
        FORMAT_MRPC,
        "--train",
        train,
        "--dev-ids",
        dev_ids,
        "--out-dir",
        out_dir,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)


def test_format_mrpc_splits_as_glues_download_script(tmp_path):
    train, dev_ids = _mrpc_files(str(tmp_path / "raw"))
    proc = _format(train, dev_ids, str(tmp_path / "MRPC"))
    assert proc.returncode == 0, proc.stderr
    header = MSR_HEADER.lstrip("\ufeff")
    rows = {
        name: (tmp_path / "MRPC" / f"{name}.tsv").read_text(encoding="utf-8")
        for name in ("train", "dev")
    }
    assert rows["train"] == header + "".join("\t".join(r) + "\n" for r in MSR_ROWS[0::2])
    assert rows["dev"] == header + "".join("\t".join(r) + "\n" for r in MSR_ROWS[1::2])


@pytest.mark.parametrize("case", ["short row", "dev pair missing", "missing file"])
def test_format_mrpc_bad_input_is_one_line_and_writes_nothing(tmp_path, case):
    train, dev_ids = _mrpc_files(str(tmp_path / "raw"))
    if case == "short row":
        with open(train, "a", encoding="utf-8") as f:
            f.write("1\t109\t110\tonly one sentence\n")
        message = "msr_paraphrase_train.txt:6: expected 5 tab-separated fields"
    elif case == "dev pair missing":
        with open(dev_ids, "a", encoding="utf-8") as f:
            f.write("998\t999\n")
        message = "holds 2 of the 3 dev pairs"
    else:
        os.remove(dev_ids)
        message = "dev_ids.tsv not found"
    proc = _format(train, dev_ids, str(tmp_path / "MRPC"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("format_mrpc: error:") and message in lines[0]
    assert not (tmp_path / "MRPC").exists() or not os.listdir(tmp_path / "MRPC")


# ------------------------------------------------------------------ prepare-glue.sh MRPC

DOWNLOADER = """#!/usr/bin/env bash
echo "$0 $*" >> "$DOWNLOAD_LOG"
exit 1
"""


def _prepare_env(tmp_path):
    stub_bin = tmp_path / "stub-bin"
    stub_bin.mkdir()
    for name in ("curl", "wget", "gdown"):  # any download is recorded (and fails)
        (stub_bin / name).write_text(DOWNLOADER)
        (stub_bin / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "DATA_BIN", "GLUE_RAW")}
    env.update(
        PATH=f"{stub_bin}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        DOWNLOAD_LOG=str(tmp_path / "downloads.log"),
        GLUE_RAW=str(tmp_path / "glue"),
        DATA_ROOT=str(tmp_path / "data-bin"),
    )
    return env


def _prepare(env, *tasks):
    return subprocess.run(
        ["bash", os.path.join(GLUE, "prepare-glue.sh"), *tasks],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_prepare_glue_dry_run_only_prints_the_downloads(tmp_path):
    env = dict(_prepare_env(tmp_path), DRY_RUN="1")
    proc = _prepare(env, "MRPC")
    assert proc.returncode == 0, proc.stderr
    assert "https://dl.fbaipublicfiles.com/glue/data/mrpc_dev_ids.tsv" in proc.stdout
    assert "format_mrpc.py" in proc.stdout and "gpt2_bpe_encode.py" in proc.stdout
    assert not os.path.exists(env["DOWNLOAD_LOG"])  # printed, never run
    assert not os.path.exists(env["GLUE_RAW"]) and not os.path.exists(env["DATA_ROOT"])


def test_prepare_glue_mrpc_offline_binarizes_the_bpe_ids_without_downloading(tmp_path):
    from fairseq.data import Dictionary, data_utils

    env = _prepare_env(tmp_path)
    _gpt2_files(os.path.join(env["GLUE_RAW"], "gpt2_bpe"))
    _mrpc_files(os.path.join(env["GLUE_RAW"], "MRPC"))
    proc = _prepare(env, "MRPC")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not os.path.exists(env["DOWNLOAD_LOG"])  # every file was in place
    bin_dir = os.path.join(env["DATA_ROOT"], "glue", "MRPC-bin")
    by_line = {**dict(zip(LINES, EXPECTED)), **MORE}
    for i, column in ((0, 3), (1, 4)):
        d = Dictionary.load(os.path.join(bin_dir, f"input{i}", "dict.txt"))
        for split, rows in (("train", MSR_ROWS[0::2]), ("valid", MSR_ROWS[1::2])):
            data = data_utils.load_indexed_dataset(
                os.path.join(bin_dir, f"input{i}", split), d, "mmap"
            )
            got = [d.string(data[k]) for k in range(len(data))]
            assert got == [by_line[r[column]] for r in rows], (i, split)
    labels = Dictionary.load(os.path.join(bin_dir, "label", "dict.txt"))
    data = data_utils.load_indexed_dataset(os.path.join(bin_dir, "label", "valid"), labels, "mmap")
    assert [labels.string(data[k]) for k in range(len(data))] == ["0", "1"]
