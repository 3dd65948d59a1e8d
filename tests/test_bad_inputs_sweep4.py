"""The bad-input sweep of issue 56 (sweep 4): inputs that do not fit the model are refused before
any work, in one line with a non-zero exit and nothing written.

1. BPE codes (or a sentencepiece model) that do not fit the model's dictionary, and ``--spm``
   with ``--bpe-codes``: ``lightcompress-export-onnx``, ``lightcompress-translate`` and
   ``lightcompress-compress --dry-run``;
2. compress on a Moses + BPE (or sentencepiece) data-bin without its tokenizer names the flag;
3. what compress can check it checks before its first step: ``--continue-from`` a checkpoint of
   another model, unusable ``--bpe-codes``, fairseq flags after ``--`` (fairseq-train's own
   parser); and a run that failed on its settings can be rerun with corrected ones;
4. non-finite weights: both loaders of a checkpoint for translation name them;
5. a changed copy of the shipped teacher (its SHA256SUMS beside it) is refused by every loader;
6. ``configs/`` with ``fairseq-hydra-train``: in tests/test_bad_inputs_hydra.py;
7. the smaller ones: codes with only a version line, a byte-order mark, DA-WID's size advice.

The models are tiny and mostly untrained (random weights: only the refusals are looked at);
the data are a Moses + BPE toy made as fairseq's IWSLT'14 recipe makes its data (in this
process) and a sentencepiece toy.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil

import pytest
from harness import make_parallel_corpus
from test_compress import _teacher
from test_deploy import TINY, _binarize, _sentencepiece, make_checkpoint
from test_deploy_text import IWSLT, _sentence

import lightcompress.plugin  # noqa: F401  (the checkpoint allow-list)


def _moses_bpe(root) -> dict:
    """fairseq's IWSLT'14 recipe in this process: Moses tokenizer, lowercasing, subword-nmt
    learn-bpe / apply-bpe, separate dictionaries."""
    from fairseq import options
    from fairseq_cli import preprocess
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    rng = random.Random(3)
    raw, bpe = root / "raw", root / "bpe"
    raw.mkdir()
    bpe.mkdir()
    tok = {lang: MosesTokenizer(lang=lang) for lang in ("de", "en")}
    tokenized = {}
    for split, n in (("train", 200), ("valid", 8), ("test", 8)):
        pairs = [_sentence(rng) for _ in range(n)]
        for i, lang in enumerate(("de", "en")):
            (raw / f"{split}.{lang}").write_text("".join(p[i] + "\n" for p in pairs))
            tokenized[split, lang] = [
                tok[lang].tokenize(p[i], return_str=True).lower() for p in pairs
            ]
    codes = root / "code"
    with open(codes, "w", encoding="utf-8") as out:
        learn_bpe(tokenized["train", "de"] + tokenized["train", "en"], out, 40)
    with open(codes, encoding="utf-8") as f:
        apply = BPE(f)
    for (split, lang), lines in tokenized.items():
        (bpe / f"{split}.{lang}").write_text("".join(apply.process_line(x) + "\n" for x in lines))
    args = options.get_preprocessing_parser().parse_args(
        [
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--workers",
            "1",
            "--trainpref",
            f"{bpe}/train",
            "--validpref",
            f"{bpe}/valid",
            "--testpref",
            f"{bpe}/test",
            "--destdir",
            str(root / "bpe-bin"),
        ]
    )
    preprocess.main(args)
    return {"raw": raw, "codes": str(codes), "data": str(root / "bpe-bin")}


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """``bpe``: a Moses + BPE data-bin, its codes and an (untrained) teacher; ``spm``: a
    sentencepiece data-bin, its model and a teacher; ``other``: BPE codes of another corpus."""
    from subword_nmt.learn_bpe import learn_bpe

    root = tmp_path_factory.mktemp("sweep4")
    bpe = _moses_bpe(root)
    bpe["teacher"] = make_checkpoint(bpe["data"], str(root / "bpe.pt"), "transformer", IWSLT)
    raw = make_parallel_corpus(str(root / "toy"), n_train=200, n_valid=10, n_test=10)
    model, pieces = _sentencepiece(raw, root)
    data = _binarize(pieces, str(root / "spm-bin"))
    spm = {
        "raw": raw,
        "spm": model,
        "data": data,
        "teacher": make_checkpoint(data, str(root / "spm.pt"), "transformer", TINY),
    }
    other = root / "other.code"  # (learned on the toy's words: s0 ... t23)
    with open(os.path.join(raw, "train.de"), encoding="utf-8") as f, open(other, "w") as out:
        learn_bpe(f.readlines(), out, 30)
    return {"bpe": bpe, "spm": spm, "other": str(other), "root": root}


def _call(main, argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([str(a) for a in argv])
        except SystemExit as exc:  # (argparse)
            status = exc.code
    return status, out.getvalue(), err.getvalue()


def _refused(result, *words) -> str:
    """One line on stderr holding ``words``, exit status 2."""
    status, _out, err = result
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, (status, err)
    assert ": error: " in lines[0] and all(w in lines[0] for w in words), lines[0]
    return lines[0]


def _export(argv):
    from lightcompress.deploy.onnx_export import main

    return _call(main, argv)


def _translate(argv):
    from lightcompress.deploy.torch_translator import main

    return _call(main, argv)


def _compress(argv):
    from lightcompress.compress.cli import main

    return _call(main, argv)


# ----------------------------------------------------------------------------------- item 1

# (model, tokenizer flag, which tokenizer) -> what the line says
MISFITS = {
    "bpe model, codes of another corpus": (
        "bpe",
        "--bpe-codes",
        "other",
        ["do not fit", "subword units cannot be made"],
    ),
    "sentencepiece model, codes of another corpus": (
        "spm",
        "--bpe-codes",
        "other",
        ["do not fit", "give the model's --spm"],
    ),
    "bpe model, a sentencepiece model": (
        "bpe",
        "--spm",
        "spm:spm",
        ["does not fit", "give the model's --bpe-codes"],
    ),
    "--spm with --bpe-codes": ("bpe", "--spm", "spm:spm+codes", ["not both"]),
}
TOOLS = ["lightcompress-export-onnx", "lightcompress-translate", "lightcompress-compress"]


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("case", list(MISFITS))
def test_1_a_tokenizer_that_does_not_fit_the_dictionary_is_refused(texts, case, tool, tmp_path):
    model, flag, which, words = MISFITS[case]
    m = texts[model]
    given = [flag, texts["other"] if which == "other" else texts["spm"]["spm"]]
    if which.endswith("+codes"):
        given += ["--bpe-codes", texts["bpe"]["codes"]]
    out = tmp_path / "out"
    if tool == "lightcompress-export-onnx":
        result = _export(["--path", m["teacher"], "--data", m["data"], "-o", out, *given])
    elif tool == "lightcompress-translate":
        src = tmp_path / "in.txt"
        src.write_text("Das Haus.\n")
        result = _translate(
            ["--path", m["teacher"], "--data", m["data"], "-i", src, "-o", out, *given]
        )
    else:
        result = _compress(
            [m["teacher"], "--data", m["data"], "-o", out, "--rank", "4", *given, "--dry-run"]
        )
    _refused(result, *words)
    assert not out.exists()


def test_1_the_codes_the_data_was_made_with_fit(texts, tmp_path):
    from lightcompress.deploy.text_fit import check_codes_fit, read_symbols

    for lang in ("de", "en"):  # (every unit of the dictionary: 0 missing)
        check_codes_fit(
            texts["bpe"]["codes"], read_symbols(f"{texts['bpe']['data']}/dict.{lang}.txt")
        )
    status, _, err = _compress(
        [
            texts["bpe"]["teacher"],
            "--data",
            texts["bpe"]["data"],
            "-o",
            tmp_path / "out",
            "--rank",
            "4",
            "--bpe-codes",
            texts["bpe"]["codes"],
            "--dry-run",
        ]
    )
    assert status == 0, err


# ----------------------------------------------------------------------------------- item 2


def test_2_a_subword_data_bin_without_its_tokenizer_names_the_flag(texts, tmp_path):
    for model, flag in (("bpe", "--bpe-codes FILE"), ("spm", "--spm FILE")):
        m = texts[model]
        base = [m["teacher"], "--data", m["data"], "-o", tmp_path / "out", "--rank", "4"]
        _refused(_compress([*base, "--dry-run"]), flag, "--tokenized")
        # --tokenized: the units as they are (BLEU on them, an export that takes them)
        status, out, err = _compress([*base, "--tokenized", "--dry-run"])
        assert status == 0, err
        export = next(x for x in out.splitlines() if "export-onnx" in x)
        assert "--spm" not in export and "--bpe-codes" not in export
        assert "--post-process" not in next(x for x in out.splitlines() if "--gen-subset" in x)
        _refused(
            _compress([*base, "--tokenized", "--spm", texts["spm"]["spm"], "--dry-run"]),
            "--tokenized takes the data's subword units as they are",
        )
    assert not (tmp_path / "out").exists()
    # the recipe's copy of the codes in the data-bin (as the exporter and translator take it)
    data = tmp_path / "bin"
    shutil.copytree(texts["bpe"]["data"], data)
    shutil.copyfile(texts["bpe"]["codes"], data / "bpe.code")
    status, out, err = _compress(
        [
            texts["bpe"]["teacher"],
            "--data",
            data,
            "-o",
            tmp_path / "out",
            "--rank",
            "4",
            "--dry-run",
        ]
    )
    assert status == 0, err
    assert f"BPE codes: {data}/bpe.code (the data-bin's" in out
    assert f"--bpe-codes {data}/bpe.code --shortlist" in next(
        x for x in out.splitlines() if "export-onnx" in x
    )
    assert "--post-process subword_nmt" in next(x for x in out.splitlines() if "--gen-subset" in x)


# ----------------------------------------------------------------------------------- item 4


def _nan_checkpoint(tiny_transformer, tmp_path, value) -> tuple[str, str]:
    import torch

    state = torch.load(_teacher(tiny_transformer), weights_only=True)
    key = next(k for k in state["model"] if k.endswith("fc1.weight"))
    state["model"][key][0, 0] = value
    path = tmp_path / "bad.pt"
    torch.save(state, path)
    return str(path), key


@pytest.mark.parametrize("value", ["nan", "inf"])
@pytest.mark.parametrize("tool", TOOLS[:2])
def test_4_non_finite_weights_are_named_in_one_line(
    tiny_data, tiny_transformer, tmp_path, tool, value
):
    path, key = _nan_checkpoint(tiny_transformer, tmp_path, float(value))
    out = tmp_path / "out"
    if tool == "lightcompress-export-onnx":
        result = _export(["--path", path, "--data", tiny_data, "-o", out])
    else:
        src = tmp_path / "in.txt"
        src.write_text("s1 s2 s3\n")
        result = _translate(["--path", path, "--data", tiny_data, "-i", src, "-o", out])
    _refused(result, "non-finite weights", key)
    assert not out.exists()


# ----------------------------------------------------------------------------------- item 3


def _train_line(out: str) -> list[str]:
    """The fine-tuning command of a dry run, as arguments of fairseq-train."""
    import shlex

    line = next(x for x in out.splitlines() if x.startswith("+ ") and "fairseq-train" in x)
    argv = shlex.split(line[2:])
    return argv[next(i for i, a in enumerate(argv) if a.endswith("fairseq-train")) + 1 :]


@pytest.fixture(scope="module")
def students(tiny_data, tiny_transformer, tmp_path_factory):
    """Training checkpoints (with optimizer state, 5 updates) of the student that ``--rank 8``
    trains from the tiny teacher: its own weights, one tensor of another shape, and the same
    student of another vocabulary (a checkpoint of another model and data)."""
    import torch

    from lightcompress.build import build_model_without_data
    from lightcompress.compress.checks import check_train_args

    root = tmp_path_factory.mktemp("students")
    status, out, err = _compress(
        [
            _teacher(tiny_transformer),
            "--data",
            tiny_data,
            "-o",
            root / "x",
            "--rank",
            "8",
            "--dry-run",
        ]
    )
    assert status == 0, err
    args = check_train_args(_train_line(out), [])
    from lightcompress.deploy.text_fit import read_symbols

    size = len(read_symbols(os.path.join(tiny_data, "dict.de.txt"))) + 4
    paths = {}
    for name, vocab in (("same", size), ("reshaped", size), ("other data", size + 8)):
        sd = build_model_without_data(args, vocab, vocab).state_dict()
        if name == "reshaped":
            key = next(k for k in sd if k.endswith("fc1.weight") or "fc1" in k)
            sd[key] = torch.zeros(*[d + 1 for d in sd[key].shape])
        paths[name] = root / f"{name.replace(' ', '-')}.pt"
        torch.save(
            {
                "args": args,
                "model": sd,
                "optimizer_history": [{"num_updates": 5}],
                "last_optimizer_state": {"state": {}},
            },
            paths[name],
        )
    return paths


def _codes_file(tmp_path, texts, kind) -> str:
    path = tmp_path / f"{kind}.codes"
    if kind == "sentencepiece model":
        return texts["spm"]["spm"]
    path.write_text({"empty": "", "version line only": "#version: 0.2\n"}[kind])
    return str(path)


# case -> (arguments after the teacher, data and save dir; what the line says)
BEFORE = {
    "mistyped fairseq flag": (
        ["--", "--max-upd", "5"],
        ["unrecognized arguments: --max-upd 5", "given after `--`: --max-upd 5"],
    ),
    "bad fairseq value": (["--", "--clip-norm", "abc"], ["--clip-norm: invalid", "abc"]),
    "empty codes": (["--bpe-codes", "empty"], ["holds no BPE merges"]),
    "version line only codes": (["--bpe-codes", "version line only"], ["holds no BPE merges"]),
    "sentencepiece model as codes": (
        ["--bpe-codes", "sentencepiece model"],
        ["is not subword-nmt BPE codes", "--spm"],
    ),
    "continue from one tensor of another shape": (
        ["--continue-from", "reshaped"],
        ["does not fit the student this command trains"],
    ),
    "continue from another model": (
        ["--continue-from", "other data"],
        ["does not fit the student this command trains", "its encoder.embed_tokens"],
    ),
}


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("case", list(BEFORE))
def test_3_what_can_be_checked_is_checked_before_any_work(
    case, dry, tiny_data, tiny_transformer, students, texts, tmp_path
):
    args, words = BEFORE[case]
    args = list(args)
    if args[0] == "--bpe-codes":
        args[1] = _codes_file(tmp_path, texts, args[1])
    elif args[0] == "--continue-from":
        args[1] = students[args[1]]
    out = tmp_path / "out"
    base = [_teacher(tiny_transformer), "--data", tiny_data, "-o", out, "--rank", "8"]
    if "--" in args:
        i = args.index("--")
        args = [*args[:i], *(["--dry-run"] if dry else []), *args[i:]]
    elif dry:
        args.append("--dry-run")
    _refused(_compress([*base, *args]), *words)
    assert not out.exists()  # (nothing written, no step run)


def test_3_the_right_checkpoint_is_continued(tiny_data, tiny_transformer, students, tmp_path):
    status, out, err = _compress(
        [
            _teacher(tiny_transformer),
            "--data",
            tiny_data,
            "-o",
            tmp_path / "out",
            "--rank",
            "8",
            "--max-update",
            "20",
            "--continue-from",
            students["same"],
            "--dry-run",
        ]
    )
    assert status == 0 and f"--continue-once {students['same']}" in out, err


def test_3_a_run_that_failed_on_its_settings_is_rerun_with_corrected_ones(
    tiny_data, tiny_transformer, tmp_path
):
    """A run whose fine-tuning failed on a setting fairseq-train's parser takes (a validation
    subset the data-bin lacks) left its transfer's output and an empty training folder: the
    corrected command keeps the transfer and is accepted; once the training has written a
    checkpoint, a command with other settings is refused (the outputs are the other run's)."""
    import json

    from lightcompress.compress.cli import get_parser
    from lightcompress.compress.plan import build_plan

    out = tmp_path / "out"
    base = [_teacher(tiny_transformer), "--data", tiny_data, "-o", str(out), "--rank", "8"]
    steps, plan = build_plan(
        get_parser().parse_args(base), ["--valid-subset", "nosuch"], log=lambda msg: None
    )
    out.mkdir()
    (out / "plan.json").write_text(json.dumps(plan))  # what the failed run left
    for path in steps[0].outputs:  # (the transfer: done)
        open(path, "wb").close()
    (out / "student").mkdir()  # (fairseq-train's check of its save directory)
    status, text, err = _compress([*base, "--dry-run"])
    assert status == 0, err
    assert "step 1/" in text and "transfer" in text and "(done before: would be skipped)" in text
    (out / "student" / "checkpoint_last.pt").write_bytes(b"")
    _refused(_compress([*base, "--dry-run"]), "holds a run with other settings")


# ----------------------------------------------------------------------------------- item 7


@pytest.mark.parametrize("tool", TOOLS[:2])
def test_7_codes_with_only_a_version_line_are_one_line(texts, tool, tmp_path):
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\n")
    m, out = texts["bpe"], tmp_path / "out"
    if tool == "lightcompress-export-onnx":
        result = _export(
            ["--path", m["teacher"], "--data", m["data"], "-o", out, "--bpe-codes", codes]
        )
    else:
        src = tmp_path / "in.txt"
        src.write_text("Das Haus.\n")
        result = _translate(
            [
                "--path",
                m["teacher"],
                "--data",
                m["data"],
                "-i",
                src,
                "-o",
                out,
                "--bpe-codes",
                codes,
            ]
        )
    line = _refused(result, "holds no BPE merges")
    assert "cannot load the BPE codes" not in line
    assert not out.exists()


def test_7_a_byte_order_mark_does_not_change_the_first_translation(texts, tmp_path):
    """Both translators encode raw text with MosesBPE (the export's translate.py through its
    copy of :mod:`lightcompress_runtime.tokenizers`)."""
    from lightcompress_runtime.tokenizers import MosesBPE

    bpe = MosesBPE(texts["bpe"]["codes"], "de", "en", lowercase=True)
    assert bpe.encode("\ufeffDas Haus.") == bpe.encode("Das Haus.")
    m = texts["bpe"]
    text = "Das rote Haus.\nDie Katze.\n"
    got = []
    for i, prefix in enumerate(("", "\ufeff")):
        src, out = tmp_path / f"in{i}.txt", tmp_path / f"out{i}.txt"
        src.write_text(prefix + text, encoding="utf-8")
        status, _, err = _translate(
            [
                "--path",
                m["teacher"],
                "--data",
                m["data"],
                "-i",
                src,
                "-o",
                out,
                "--bpe-codes",
                m["codes"],
                "--beam",
                "1",
            ]
        )
        assert status == 0, err
        got.append(out.read_text(encoding="utf-8"))
    assert got[0] == got[1]


def test_7_dawids_fusion_error_names_what_compress_takes():
    from lightcompress.wid.fuse import FusionError, check_shapes

    layer = [{"kind": "self_attn", "out": 4, "v": 0}, {"kind": "ffn", "out": 4, "ffn": 0}]
    with pytest.raises(FusionError) as info:
        check_shapes({"encoder": {"embed_dim": 4, "layers": [layer]}})
    msg = str(info.value)
    assert "--dawid-target-sparsity" in msg and "lightcompress-compress" in msg
    assert "--sparsity" in msg.split("lightcompress-compress")[1] and "--ratio" in msg


# ----------------------------------------------------------------------------------- item 5

SHIPPED = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "examples",
    "translation",
    "results",
    "teacher",
)


@pytest.fixture(scope="module")
def changed_teacher(tmp_path_factory):
    """A copy of the shipped teacher's folder whose checkpoint has one fc1 weight scaled (its
    SHA256SUMS, copied with it, lists the original)."""
    import torch

    folder = tmp_path_factory.mktemp("changed") / "teacher"
    shutil.copytree(SHIPPED, folder)
    state = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=True)
    key = next(k for k in state["model"] if k.endswith("fc1.weight"))
    state["model"][key][0, 0] *= 1.5
    torch.save(state, folder / "checkpoint.pt")
    return folder


SUM_TOOLS = [*TOOLS, "lightcompress-export-ct2", "lightcompress-convert"]


@pytest.mark.parametrize("tool", SUM_TOOLS)
def test_5_a_changed_copy_of_the_shipped_teacher_is_refused_by_every_loader(
    changed_teacher, tool, tiny_data, tmp_path
):
    ckpt, data, out = changed_teacher / "checkpoint.pt", changed_teacher, tmp_path / "out"
    if tool == "lightcompress-export-onnx":
        result = _export(["--path", ckpt, "--data", data, "-o", out])
    elif tool == "lightcompress-translate":
        src = tmp_path / "in.txt"
        src.write_text("Das Haus.\n")
        result = _translate(
            ["--path", ckpt, "--data", data, "-i", src, "-o", out, "--spm", data / "spm.model"]
        )
    elif tool == "lightcompress-compress":
        result = _compress([ckpt, "--data", tiny_data, "-o", out, "--dry-run"])
    elif tool == "lightcompress-export-ct2":
        from lightcompress.deploy.ct2 import main

        result = _call(main, ["--path", ckpt, "--data", data, "-o", out])
    else:
        from lightcompress.convert.cli import main

        result = _call(main, ["-i", ckpt, "-o", out, "-a", "lightformer", "--lc-rank", "4"])
    _refused(result, "does not match its sum in", "SHA256SUMS")
    assert not out.exists()


def test_5_the_shipped_teacher_and_unlisted_files_pass(changed_teacher, tmp_path):
    from lightcompress.checkpoint import verify_sums

    verify_sums(os.path.join(SHIPPED, "checkpoint.pt"))  # (as shipped)
    moved = tmp_path / "mine.pt"  # (a model of one's own, in a folder without SHA256SUMS)
    shutil.copyfile(changed_teacher / "checkpoint.pt", moved)
    verify_sums(str(moved))
