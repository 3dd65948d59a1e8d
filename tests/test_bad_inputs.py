"""The bad-input sweep (issue 25): cases that once gave silently wrong output, one test each.

A command that reads text reads it as fairseq does: one item per ``\\n`` (a trailing ``\\r``
removed), so that output line i is always the translation of input line i; U+2028, U+0085,
form feed or a lone CR inside a line stay in that line. New commands add their cases here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

__all__: list[str] = []

import harness
from harness import SOURCES

# (input text, the lines fairseq sees)
LINE_CASES = [
    ("a b\u2028c\nd\n", ["a b\u2028c", "d"]),  # line separator
    ("a\u0085b\nc\n", ["a\u0085b", "c"]),  # next line (NEL)
    ("a\x0cb\nc\n", ["a\x0cb", "c"]),  # form feed
    ("a\rb\nc\n", ["a\rb", "c"]),  # lone CR
    ("a\r\nb\r\n", ["a", "b"]),  # CRLF: the \r removed
    ("a\n\nb\n", ["a", "", "b"]),  # an empty line keeps its place
    ("a\nb", ["a", "b"]),  # no final newline
    ("", []),
    ("\n", [""]),
]


@pytest.mark.parametrize("text, lines", LINE_CASES)
def test_both_readers_split_at_newline_only(text, lines):
    from lightcompress.io import split_lines
    from lightcompress_runtime import split_lines as torch_free

    assert split_lines(text) == lines
    assert torch_free(text) == lines  # the copy that ships in every ONNX export


def _translate_cli(*args, stdin: bytes):
    return harness.run(
        [
            sys.executable,
            "-c",
            "from lightcompress.deploy.torch_translator import cli_main; cli_main()",
            *args,
        ],
        input=stdin,
        capture_output=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"),
    )


def test_translate_gives_one_output_line_per_input_line(tiny_data, tiny_transformer):
    from lightcompress.deploy import Translator

    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    with open(os.path.join(os.path.dirname(tiny_data), "raw", "test.de"), encoding="utf-8") as f:
        src = [line.strip() for line in f][:4]
    # separators inside lines: fairseq keeps them in the line (its tokenizer splits at them)
    text = f"{src[0]}\u2028{src[1]}\n{src[1]}\x0c{src[2]}\n{src[2]}\r{src[3]}\n\n{src[3]}\u0085\r\n"
    proc = _translate_cli(
        "--path", ckpt, "--data", tiny_data, "--beam", "2", stdin=text.encode("utf-8")
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == 5, out
    same = Translator(ckpt, tiny_data, beam=2).translate(
        [f"{src[0]} {src[1]}", f"{src[1]} {src[2]}", f"{src[2]} {src[3]}", "", src[3]]
    )
    assert out[:-1] == same


def test_translate_refuses_non_utf8_input_with_one_line(tiny_data, tiny_transformer):
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    proc = _translate_cli("--path", ckpt, "--data", tiny_data, stdin=b"abc \xff\n")
    assert proc.returncode == 2
    err = proc.stderr.decode().strip().splitlines()
    assert err == [err[-1]] and "not UTF-8" in err[-1]
    assert proc.stdout == b""


# ------------------------------------------------------------------ NaN-aware numeric checks


def test_dawid_fusion_check_refuses_a_model_that_outputs_nan():
    import torch
    from test_wid import _pruned_student

    from lightcompress.convert.core import ConversionError
    from lightcompress.convert.wid import _check_equivalence
    from lightcompress.wid.fused_model import fuse_model

    targs, _, student = _pruned_student()
    fused, _, _ = fuse_model(student, targs)
    assert _check_equivalence(student, fused) < 1e-4  # the sound pair passes
    with torch.no_grad():
        student.decoder.output_projection.weight.fill_(float("nan"))
    with pytest.raises(ConversionError, match="training model gives non-finite outputs"):
        _check_equivalence(student, fused)


# ------------------------------------------------------------------ ranks without a bound


def test_a_cp_rank_beyond_the_largest_possible_rank_is_refused_before_fitting(
    tiny_transformer, tmp_path
):
    import harness

    from lightcompress.modules.cp import CPLinear

    with pytest.raises(ValueError, match="exceeds the largest possible rank 512"):
        CPLinear(512, 512, 5000, 4)  # (512, 4, 128): at most 4 x 128
    CPLinear(32, 32, 32, 2)  # the bound itself is allowed (32 x 2 x 16: 2 x 16)
    out = tmp_path / "sm.pt"
    flags = [str(a) for a in harness.tiny_arch_args("smartformer_iwslt_de_en")]
    proc = harness.run(
        [
            sys.executable,
            "-m",
            "lightcompress.convert.cli",
            "-i",
            os.path.join(tiny_transformer, "checkpoint_best.pt"),
            "-o",
            str(out),
            *flags,
            "--sm-rank",
            "5000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "exceeds the largest possible rank 32" in err[0], err
    assert not out.exists()


# ------------------------------------------------------------------ exporters prove their output


def test_ct2_export_of_a_model_it_cannot_express_is_refused_before_writing(tiny_data, tmp_path):
    import harness

    from lightcompress.deploy.ct2 import ExportError, check_export, export_ctranslate2

    flags = [str(a) for a in harness.tiny_arch_args("transformer")]
    plain, crossself = tmp_path / "plain", tmp_path / "crossself"
    harness.train_many(  # (fairseq-train's code for both, in one process)
        [
            harness.train_args(tiny_data, str(plain), flags, max_update=3),
            harness.train_args(
                tiny_data, str(crossself), flags + ["--cross-self-attention"], max_update=3
            ),
        ]
    )
    out = tmp_path / "ct2"
    # CTranslate2 ignores cross self-attention: the export would be another model
    with pytest.raises(ExportError, match="computes another model"):
        export_ctranslate2(str(crossself / "checkpoint_last.pt"), tiny_data, str(out))
    assert not out.exists() and not list(tmp_path.glob("*.tmp*"))
    # the plain model exports, proven to rounding
    export_ctranslate2(str(plain / "checkpoint_last.pt"), tiny_data, str(out))
    import json

    check = json.loads((out / "check.json").read_text())
    assert check["quantization"] == "float32" and check["max_abs_logprob_difference"] < 1e-4
    from lightcompress.checkpoint import load_checkpoint

    model, task, _ = load_checkpoint(str(plain / "checkpoint_last.pt"), tiny_data)
    assert check_export(model, task, str(out)) == check["max_abs_logprob_difference"]


# ------------------------------------------------------------------ the library is not a command


def test_a_config_error_in_a_python_shell_or_program_keeps_the_interpreter_alive(tmp_path):
    code = (
        "import atexit, lightcompress.plugin\n"  # (a program's own registration, issue 58)
        "from lightcompress.modules.spec import CompressionSpec\n"
        "atexit.register(lambda: print('atexit ran'))\n"
    )
    # interactive shell: the error is reported and the shell goes on
    proc = subprocess.run(
        [sys.executable, "-i", "-q"],
        input=code + "CompressionSpec.parse('x = nokind()')\nprint('still alive')\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )
    assert "still alive" in proc.stdout and "atexit ran" in proc.stdout, proc.stderr
    assert "Traceback" in proc.stderr
    # a user's program: a traceback, exit status 1, its atexit handlers run
    script = tmp_path / "program.py"
    script.write_text(code + "CompressionSpec.parse('x = nokind()')\n")
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 1 and "atexit ran" in proc.stdout and "Traceback" in proc.stderr
    # a command keeps its one line and exit status 2
    proc = harness.run(
        [sys.executable, "-c", code + "CompressionSpec.parse('x = nokind()')"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 2 and proc.stderr.startswith("lightcompress: error:"), proc.stderr


def test_every_plugin_architecture_is_listed_and_has_help():
    env = dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore")
    run = lambda *a: harness.run(
        [sys.executable, "-m", "lightcompress", *a],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    listed = {line.split()[0] for line in run("--list-archs").stdout.splitlines() if line.strip()}
    assert {"dawid", "dawid_fused", "dawid_roberta", "dawid_roberta_fused"} <= listed
    assert "lightformer_iwslt_de_en" in listed
    proc = run("--arch-help", "dawid")
    assert (
        proc.returncode == 0 and "--dawid-teacher" in proc.stdout and "--dawid-masks" in proc.stdout
    )
    proc = run("--arch-help", "dawid_nonexistent")
    assert proc.returncode == 2 and "dawid" in proc.stderr


def test_params_counts_a_hypoformer_checkpoint(tiny_data, tmp_path):
    # (its HTT table has neither .weight nor .u: the vocabulary is read from its dense part)
    from test_deploy import FAMILIES, make_checkpoint

    from lightcompress.checkpoint import load_checkpoint
    from lightcompress.measure.params import checkpoint_report
    from lightcompress.modules.counting import count_parameters

    arch, flags = FAMILIES["hypoformer"]
    path = make_checkpoint(tiny_data, str(tmp_path / "hypo.pt"), arch, flags)
    report = checkpoint_report(path)
    model, _, _ = load_checkpoint(path, tiny_data)
    assert report["arch"] == arch and report["total"] == count_parameters(model)["total"]


@pytest.mark.parametrize(
    "arch, flags, message",
    [
        ("hypoformer_iwslt_de_en", ["--cross-self-attention"], "does not support --cross-self"),
        (
            "subformer",
            ["--subformer-sharing", "all", "--subformer-sandwich-dim", "48"],
            "need --subformer-sharing sandwich",
        ),
    ],
)
def test_model_configuration_errors_are_config_errors(tiny_data, arch, flags, message):
    # (a plain ValueError gave a traceback through fairseq instead of the one-line error)
    from fairseq import tasks

    from lightcompress.build import parse_model_args
    from lightcompress.errors import ConfigError

    args = parse_model_args(arch, ["-s", "de", "-t", "en", *flags], data=tiny_data)
    with pytest.raises(ConfigError, match=message):
        tasks.setup_task(args).build_model(args)


def test_roberta_fusion_refuses_fused_weights_without_a_place(monkeypatch):
    import torch
    from test_wid import _roberta, _student_of

    import lightcompress.wid.fuse as fuse_mod
    from lightcompress.wid.roberta import DAWIDRobertaModel as Model
    from lightcompress.wid.roberta import fuse_roberta

    targs, teacher = _roberta(seed=1, classes=3)
    student = _student_of(Model, targs, teacher)
    student.set_num_updates(1)
    student.eval()
    real = fuse_mod.fuse_state

    def with_an_orphan(model):
        shapes, tensors, folds = real(model)
        tensors["encoder.sentence_encoder.layers.0.orphan"] = torch.zeros(1)
        return shapes, tensors, folds

    monkeypatch.setattr(fuse_mod, "fuse_state", with_an_orphan)
    with pytest.raises(RuntimeError, match="without a place"):
        fuse_roberta(student, targs)


def test_a_model_shipped_with_its_dictionaries_only_is_translated_with_s_and_t(
    tiny_data, tiny_transformer, tmp_path
):
    import shutil

    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in ("dict.de.txt", "dict.en.txt"):
        shutil.copy(os.path.join(tiny_data, name), shipped / name)
    with open(os.path.join(os.path.dirname(tiny_data), "raw", "test.de"), encoding="utf-8") as f:
        text = "".join(f.readline() for _ in range(3))
    full = _translate_cli("--path", ckpt, "--data", tiny_data, stdin=text.encode())
    assert full.returncode == 0, full.stderr.decode()
    # the checkpoint was trained with the languages inferred from the file names: with only
    # the dictionaries, one line says what to give
    proc = _translate_cli("--path", ckpt, "--data", str(shipped), stdin=text.encode())
    assert proc.returncode == 2
    err = proc.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "-s SRC -t TGT" in err[0] and "dict.de.txt" in err[0], err
    proc = _translate_cli(
        "--path", ckpt, "--data", str(shipped), "-s", "de", "-t", "en", stdin=text.encode()
    )
    assert proc.returncode == 0 and proc.stdout == full.stdout


def _tiny_onnx_export(out) -> None:
    import torch

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model

    torch.manual_seed(0)
    model, task, _ = build_random_model(
        "transformer",
        40,
        [
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
        ],
        True,
        return_task=True,
    )
    model.eval()
    export_onnx(model, task, str(out))


@pytest.mark.parametrize("edit", ["config", "dictionary"])
def test_an_edited_onnx_export_is_refused_with_one_line(tmp_path, edit):
    import json

    from lightcompress_runtime import OnnxError, OnnxGenerator

    out = tmp_path / "onnx"
    old = os.umask(0o022)
    try:
        _tiny_onnx_export(out)
    finally:
        os.umask(old)
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)  # the umask's mode, not mkdtemp's 0700
    OnnxGenerator(str(out))  # as written: loads
    if edit == "config":  # (a changed EOS id or maximum length changed every translation)
        config = json.loads((out / "config.json").read_text())
        config["eos"] = config["eos"] + 1
        (out / "config.json").write_text(json.dumps(config))
        name = "config.json"
    else:  # two symbols swapped: the right size, the wrong words
        lines = (out / "dict.tgt.txt").read_text().splitlines(keepends=True)
        lines[0], lines[1] = lines[1], lines[0]
        (out / "dict.tgt.txt").write_text("".join(lines))
        name = "dict.tgt.txt"
    with pytest.raises(OnnxError, match=f"{name} in .* was changed after the export"):
        OnnxGenerator(str(out))


def test_every_script_with_a_shebang_is_executable():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found, not_executable = 0, []
    for top in ("examples", "scripts", "bench"):
        for root, _, files in os.walk(os.path.join(repo, top)):
            for name in files:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    if f.read(2) != b"#!":
                        continue
                found += 1
                if not os.access(path, os.X_OK):
                    not_executable.append(os.path.relpath(path, repo))
    assert found > 20 and not_executable == []


def test_translate_py_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(
    tmp_path, monkeypatch, capsys
):
    import errno

    from lightcompress_runtime import translator

    out = tmp_path / "onnx"
    _tiny_onnx_export(out)
    src = tmp_path / "in.txt"
    src.write_text("5 6 7\n")

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(translator.os, "replace", full)
    target = tmp_path / "result" / "out.txt"
    target.parent.mkdir()
    assert translator.main([str(out), "-i", str(src), "-o", str(target), "--tokenized"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0]
    assert os.listdir(target.parent) == []


def test_ct2_export_refuses_what_it_cannot_express_with_one_line_not_an_attribute_error(tmp_path):
    import types

    from test_wid import _pruned_student

    from lightcompress.deploy.ct2 import ExportError, export_model
    from lightcompress.measure.specs import build_random_model
    from lightcompress.wid.fused_model import fuse_model

    targs, _, student = _pruned_student()
    fused, fargs, _ = fuse_model(student, targs)
    task = types.SimpleNamespace(
        source_dictionary=fused.encoder.dictionary, target_dictionary=fused.decoder.dictionary
    )
    cases = [(fused, fargs, "FusedEncoderLayer"), (student, targs, "WIDEncoderLayer")]
    small = [
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
        "--decoder-output-dim",
        "8",
    ]
    model, odim_task, odim_args = build_random_model(
        "transformer", 40, small, True, return_task=True
    )
    for i, (m, args, message) in enumerate(cases):
        with pytest.raises(ExportError, match=message):
            export_model(m, task, args, str(tmp_path / f"ct2-{i}"))
    with pytest.raises(ExportError, match="project out dim"):
        export_model(model, odim_task, odim_args, str(tmp_path / "ct2-odim"))
    assert os.listdir(tmp_path) == []


def test_a_teacher_with_nan_weights_is_one_line_in_the_converter(tiny_transformer, tmp_path):
    import harness
    import torch

    import lightcompress.plugin  # noqa: F401  (the allow-list of fairseq checkpoints' types)

    state = torch.load(os.path.join(tiny_transformer, "checkpoint_best.pt"), weights_only=True)
    key = next(k for k in state["model"] if k.endswith("fc1.weight"))
    state["model"][key][0, 0] = float("nan")
    bad = tmp_path / "nan.pt"
    torch.save(state, bad)
    out = tmp_path / "lf.pt"
    flags = [str(a) for a in harness.tiny_arch_args("lightformer_iwslt_de_en")]
    proc = harness.run(
        [
            sys.executable,
            "-m",
            "lightcompress.convert.cli",
            "-i",
            str(bad),
            "-o",
            str(out),
            *flags,
            "--lc-rank",
            "4",
            "--lc-encoder-groups",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore"),
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr[-800:]
    assert f"{key} holds NaN or Inf" in err[0] and not out.exists()


def test_rank_search_settings_are_checked_before_training(tiny_data, tmp_path):
    import harness

    from lightcompress.errors import ConfigError
    from lightcompress.search import SearchConfig

    for bad in (-1.0, 0.0, float("nan")):
        with pytest.raises(ConfigError, match="--sm-search-lr must be a number > 0"):
            SearchConfig(ranks=[4], lr=bad).check()
    model = [*harness.tiny_arch_args("smartformer_iwslt_de_en"), "--sm-rank", "8"]
    search = [
        "--task",
        "translation_smartformer",
        "--sm-search",
        "--sm-search-ranks",
        "2,4",
        "--sm-search-log",
        str(tmp_path / "missing" / "search.jsonl"),
    ]
    proc = harness.train(
        tiny_data, str(tmp_path / "ckpt"), model, extra=search, max_update=4, check=False
    )
    assert proc.returncode != 0
    assert "--sm-search-log" in proc.stderr and "not a file in an existing directory" in proc.stderr
    assert "Traceback" not in proc.stderr and "num_updates" not in proc.stderr


def test_a_full_disk_is_one_line_for_every_writing_deploy_command(
    tiny_data, tiny_transformer, tmp_path, monkeypatch, capsys
):
    import errno

    import lightcompress.io as lio
    from lightcompress.deploy import ct2, onnx_export
    from lightcompress.deploy import torch_translator as translate

    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    src = tmp_path / "in.txt"
    src.write_text("5 6 7\n")

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lio.os, "replace", full)  # every atomic write's last step
    monkeypatch.setattr(onnx_export.os, "replace", full)
    cases = [
        (
            translate.main,
            [
                "--path",
                ckpt,
                "--data",
                tiny_data,
                "-i",
                str(src),
                "-o",
                str(tmp_path / "out" / "t.txt"),
            ],
        ),
        (
            onnx_export.main,
            ["--path", ckpt, "--data", tiny_data, "-o", str(tmp_path / "out" / "onnx")],
        ),
        (ct2.main, ["--path", ckpt, "--data", tiny_data, "-o", str(tmp_path / "out" / "ct2")]),
    ]
    (tmp_path / "out").mkdir()
    for main, argv in cases:
        capsys.readouterr()
        assert main(argv) == 2, main.__module__
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "No space left on device" in err[0], (main.__module__, err)
        assert os.listdir(tmp_path / "out") == [], main.__module__


def test_a_line_longer_than_the_models_positions_is_one_line(
    tiny_data, tiny_transformer, tmp_path, capsys
):
    from lightcompress_runtime import translator

    long_line = " ".join(["5"] * 1100)
    text = f"5 6\n{long_line}\n"
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    proc = _translate_cli("--path", ckpt, "--data", tiny_data, stdin=text.encode())
    err = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and proc.stdout == b""
    assert "input line 2 has 1101 tokens, more than the model's 1024" in err[0]
    out = tmp_path / "onnx"
    _tiny_onnx_export(out)
    src = tmp_path / "in.txt"
    src.write_text(text)
    capsys.readouterr()
    argv = [str(out), "-i", str(src), "-o", str(tmp_path / "o.txt"), "--tokenized"]
    assert translator.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "input line 2 has 1101 tokens" in err[0]
    assert not (tmp_path / "o.txt").exists()


def test_each_cause_of_a_missing_language_pair_has_its_own_message(
    tiny_data, tiny_transformer, tmp_path
):
    from lightcompress.checkpoint import CheckpointError, load_checkpoint

    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        ((str(tmp_path / "nowhere"), None, None), "is not a directory"),
        ((str(empty), None, None), "holds no dictionaries"),
        ((tiny_data, "fr", "en"), "has no dict.fr.txt"),
        ((tiny_data, "de", None), "give both the source and the target language"),
    ]
    for (data, s, t), message in cases:
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(ckpt, data, s, t)


def test_the_onnx_exporters_comparison_is_nan_aware():
    import numpy as np

    from lightcompress.deploy.onnx_graphs import max_abs_error
    from lightcompress.deploy.onnx_tools import relative_error

    ref = np.array([[0.5, -np.inf], [1.0, 2.0]], dtype=np.float32)
    assert max_abs_error(ref.copy(), ref) == 0.0  # -inf where both have it: masked entries
    both_nan = np.full((2, 2), np.nan, dtype=np.float32)
    assert max_abs_error(both_nan, both_nan) == float("inf")
    one_nan = ref.copy()
    one_nan[1, 1] = np.nan
    assert max_abs_error(one_nan, ref) == float("inf")
    # the int8 deviation the export records
    assert relative_error(ref.copy(), ref) == 0.0
    assert relative_error(both_nan, both_nan) == float("inf")
    assert relative_error(one_nan, ref) == float("inf")


def test_the_exports_translate_py_refuses_non_utf8_input_with_one_line(tmp_path, capsys):
    from lightcompress_runtime import translator

    out = tmp_path / "onnx"
    _tiny_onnx_export(out)
    src = tmp_path / "in.txt"
    src.write_bytes(b"5 6 \xff 7\n")
    capsys.readouterr()
    argv = [str(out), "-i", str(src), "-o", str(tmp_path / "o.txt"), "--tokenized"]
    assert translator.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not UTF-8" in err[0] and not (tmp_path / "o.txt").exists()


def _tiny_model(extra=()):
    import torch

    from lightcompress.measure.specs import build_random_model

    torch.manual_seed(0)
    model, task, _ = build_random_model(
        "transformer",
        40,
        [
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
            *extra,
        ],
        True,
        return_task=True,
    )
    return model.eval(), task


# faults of the shipped runtime (translate.py) that the graph check cannot see:
RUNTIME_FAULTS = {
    # issue 25's export that could not run: the runtime fed "pos" to a graph without positions
    "cannot_run": (
        ["--no-token-positional-embeddings"],
        'self._pos_input = next((n for n in ("pos_emb", "pos") if n in self._dec_inputs), None)',
        'self._pos_input = "pos"',
        "does not run with its translate.py",
    ),
    # a runtime that runs but answers with another hypothesis than the best
    "other_translation": (
        [],
        'out[i] = [int(t) for t in hyps[0]["tokens"] if t != eos]',
        'out[i] = [int(t) for t in hyps[-1]["tokens"] if t != eos][::-1] + [4]',
        "does not translate like the model",
    ),
}


@pytest.mark.parametrize("fault", list(RUNTIME_FAULTS))
def test_an_onnx_export_whose_runtime_fails_or_translates_otherwise_is_never_written(
    tmp_path, monkeypatch, fault
):
    """The exporter runs the export's own translate.py on probe sentences and compares with
    fairseq's beam search before anything is written (issue 25: an export of a model without
    positions printed 'wrote ...' and could not translate)."""
    import shutil

    from lightcompress.deploy import onnx_export
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.onnx_graphs import ExportError

    flags, good, bad, message = RUNTIME_FAULTS[fault]
    model, task = _tiny_model(flags)
    copy = shutil.copyfile
    faulty = []

    def faulty_copy(src, dst, *a, **k):
        if os.path.basename(os.path.dirname(dst)) == "runtime":  # (the export's runtime/)
            with open(src, encoding="utf-8") as f:
                text = f.read()
            if good in text:
                faulty.append(os.path.basename(dst))
                text = text.replace(good, bad)
            with open(dst, "w", encoding="utf-8") as f:
                f.write(text)
            return dst
        return copy(src, dst, *a, **k)

    monkeypatch.setattr(onnx_export.shutil, "copyfile", faulty_copy)
    out = tmp_path / "onnx"
    with pytest.raises(ExportError, match=message):
        export_onnx(model, task, str(out))
    assert len(faulty) == 1, faulty  # (the fault landed in the shipped runtime, once)
    assert not out.exists() and os.listdir(tmp_path) == []  # nothing written, no temporary left
    monkeypatch.setattr(onnx_export.shutil, "copyfile", copy)
    config = export_onnx(model, task, str(out))  # the real runtime: proven and written
    assert (out / "translate.py").is_file() and "int8_probe_agreement" not in config


def test_an_int8_onnx_export_records_how_many_probe_translations_it_kept(tmp_path):
    import json

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.deploy.onnx_proof import PROBE_LENGTHS

    model, task = _tiny_model()
    config = export_onnx(model, task, str(tmp_path / "onnx"), int8="all")
    agreement = config["int8_probe_agreement"]
    assert 0.0 <= agreement <= 1.0
    assert round(agreement * len(PROBE_LENGTHS)) == pytest.approx(agreement * len(PROBE_LENGTHS))
    written = json.loads((tmp_path / "onnx" / "config.json").read_text())
    assert written["int8_probe_agreement"] == agreement
    from lightcompress_runtime import OnnxGenerator

    OnnxGenerator(str(tmp_path / "onnx"))  # the manifest was rewritten with the config


@pytest.mark.parametrize("quantization", ["int8", "int16"])
def test_a_quantized_ct2_export_leaves_the_model_it_exported_unchanged(tmp_path, quantization):
    """CTranslate2's converter reads the parameters as numpy views and quantizes them in place:
    measure_speed --ct2 then timed (and ONNX-exported) a model whose weights had been scaled by
    127 / max per row, and translated garbage. The exporter converts a copy."""
    import json

    import torch

    from lightcompress.deploy.ct2 import export_model
    from lightcompress.measure.specs import build_random_model

    torch.manual_seed(0)
    small = [
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
    model, task, args = build_random_model("transformer", 40, small, True, return_task=True)
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_model(model, task, args, str(tmp_path / "ct2"), quantization)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    check = json.loads((tmp_path / "ct2" / "check.json").read_text())
    # the recorded deviation is the quantized export's against the model as it was
    assert 0.0 < check["max_abs_logprob_difference"] < 0.5, check
