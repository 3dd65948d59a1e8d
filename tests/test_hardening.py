"""Bad input and silent failures found by the bad-input sweep: each gives one clear error (or
now does the right thing), and nothing is half-written."""

import subprocess
import sys

import pytest
import torch
from fairseq import options

import lightcompress
from lightcompress.build import build_model_without_data, parse_model_args
from lightcompress.convert.cli import cli_main
from lightcompress.convert.core import build_fairseq_model

TINY = [
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
    "--dropout",
    "0",
]


LF = [*TINY, "--lc-rank", "8", "--lc-embed-rank", "8", "--lc-encoder-groups", "0"]


def _build(arch, flags):
    return build_model_without_data(parse_model_args(arch, ["--share-all-embeddings", *flags]), 40)


def _teacher(tmp_path, extra=()):
    argv = [
        "/tmp/none",
        "--task",
        "translation",
        "--arch",
        "transformer",
        "-s",
        "de",
        "-t",
        "en",
        "--share-all-embeddings",
        *TINY,
        *extra,
    ]
    targs = options.parse_args_and_arch(options.get_training_parser(), argv)
    torch.manual_seed(0)
    teacher = build_fairseq_model(targs, 50).eval()
    path = tmp_path / "teacher.pt"
    torch.save({"args": targs, "model": teacher.state_dict(), "optimizer_history": []}, path)
    return path, teacher


def _batch():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 50, (2, 7), generator=g)
    src[:, -1] = 2
    prev = torch.randint(4, 50, (2, 5), generator=g)
    prev[:, 0] = 2
    return src, torch.full((2,), 7), prev


FULL_RANK = ["--rank", "32", "--embed-rank", "32", *TINY, "--lc-encoder-groups", "0"]


def test_converter_carries_the_teachers_activation_and_embedding_scale(tmp_path):
    """A gelu teacher without embedding scaling used to convert into a relu, scaled student."""
    path, teacher = _teacher(tmp_path, ["--activation-fn", "gelu", "--no-scale-embedding"])
    out = tmp_path / "student.pt"
    assert (
        cli_main(["-i", str(path), "-o", str(out), "-a", "lightformer", "--quiet", *FULL_RANK]) == 0
    )
    state = torch.load(out)
    sargs = state["args"]
    assert sargs.activation_fn == "gelu" and sargs.no_scale_embedding
    student = build_fairseq_model(sargs, 50).eval()
    student.load_state_dict(state["model"], strict=True)
    src, lengths, prev = _batch()
    with torch.no_grad():
        torch.testing.assert_close(
            student(src, lengths, prev)[0], teacher(src, lengths, prev)[0], atol=1e-4, rtol=1e-4
        )


def test_converter_refuses_a_student_flag_that_contradicts_the_teacher(tmp_path, capsys):
    path, _ = _teacher(tmp_path, ["--activation-fn", "gelu"])
    out = tmp_path / "student.pt"
    code = cli_main(
        [
            "-i",
            str(path),
            "-o",
            str(out),
            "-a",
            "lightformer",
            "--quiet",
            *FULL_RANK,
            "--activation-fn",
            "relu",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--activation-fn 'relu' differs from the teacher's 'gelu'" in err
    assert err.count("\n") == 1 and not out.exists()


def test_converter_refuses_a_directory_as_output_and_too_many_groups(tmp_path, capsys):
    path, _ = _teacher(tmp_path)
    (tmp_path / "outdir").mkdir()
    assert (
        cli_main(["-i", str(path), "-o", str(tmp_path / "outdir"), "-a", "lightformer", *FULL_RANK])
        == 2
    )
    assert "is a directory" in capsys.readouterr().err
    out = tmp_path / "s.pt"
    assert (
        cli_main(
            [
                "-i",
                str(path),
                "-o",
                str(out),
                "-a",
                "lightformer",
                *FULL_RANK,
                "--lc-encoder-groups",
                "5",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "groups" in err and err.count("\n") == 1 and not out.exists()


def test_energy_flag_names_are_real_flags(tmp_path, capsys):
    path, _ = _teacher(tmp_path)
    out = tmp_path / "s.pt"
    assert (
        cli_main(
            [
                "-i",
                str(path),
                "-o",
                str(out),
                "-a",
                "lightformer",
                *TINY,
                "--rank",
                "4",
                "--energy",
                "0.9",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--rank, --rank-ratio, --energy" in err and "--rank-energy" not in err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--lc-encoder-groups", "-2"], "--lc-encoder-groups must be >= 0"),
        (["--lc-decoder-groups", "3"], "--lc-decoder-groups 3 is larger than --decoder-layers 2"),
        (["--lc-rank", "-1"], "--lc-rank must be >= 1"),
        (["--lc-spec", ";;"], "--lc-spec ';;' has no rules"),
        (["--lc-spec", "*.fc9 = lowrank(rank=2)"], "matches no module"),
        (["--admin-init", "closed-form", "--encoder-normalize-before"], "post-LN"),
    ],
)
def test_bad_plugin_flags_are_config_errors_before_anything_is_built(flags, message):
    from lightcompress.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace("*", "\\*").replace("+", "\\+")):
        _build("lightformer", [*LF, *flags])


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--safe-dim", "64"], "--safe-dim 64 must be smaller than the model width 32"),
        (["--safe-dim", "16", "--safe-heads", "3"], "--safe-heads 3 must divide --safe-dim 16"),
        (["--subformer-sandwich-dim", "-8"], "--subformer-sandwich-dim must be >= 1"),
    ],
)
def test_bad_subformer_flags_are_config_errors(flags, message):
    from lightcompress.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        _build("subformer", [*TINY, *flags])


def test_a_bad_flag_inside_fairseq_train_is_one_line_not_a_traceback(tmp_path):
    """fairseq-train builds the model after reading the data: the plugin's configuration
    errors end the command with one line (the plugin's excepthook), exit status 2."""
    code = (
        "import sys, fairseq, lightcompress\n"  # (the order of fairseq-train --user-dir)
        "from lightcompress.errors import ConfigError\n"
        "raise ConfigError('--lc-rank must be >= 1, got -1')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("error: --lc-rank must be >= 1, got -1")
    assert "Traceback" not in proc.stderr


def test_loading_different_values_into_one_shared_group_is_refused():
    """Averaging a shared run with an unshared one, or restoring an unshared checkpoint into a
    grouped model, used to keep one layer's values and drop the others without a word."""
    shared = _build("lightformer", [*LF, "--lc-encoder-groups", "1"])
    unshared = _build("lightformer", LF)
    with pytest.raises(ValueError, match="share parameters"):
        shared.load_state_dict(unshared.state_dict())
    shared.load_state_dict(shared.state_dict())  # consistent values load


def test_arch_help_lists_the_plugin_flags_with_preset_values(capsys):
    """fairseq-train --arch X --help cannot list model flags; python -m lightcompress can."""
    from lightcompress.__main__ import main

    assert main(["--arch-help", "lightformer_iwslt_de_en"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("--lc-rank "))
    assert "80" in line and "rank of every factorized attention and FFN map" in line
    assert "--lc-spec" in out and "--encoder-layers" in out
    assert main(["--arch-help", "lightformer_nope"]) == 2
    assert "not an architecture of the plugin" in capsys.readouterr().err
    assert main(["--list-archs"]) == 0
    assert "hypoformer_wmt_en_ro_row13" in capsys.readouterr().out


def test_hub_interface_with_sentencepiece_as_the_readme_shows(
    tiny_data, tiny_transformer, tmp_path
):
    """docs/installing.md's loading of checkpoints: from_pretrained with the plugin as user dir
    and a sentencepiece model encodes, translates and decodes raw text."""
    import os

    import sentencepiece as spm
    from fairseq.models.transformer import TransformerModel

    text = tmp_path / "text.txt"
    text.write_text(
        "\n".join(" ".join(f"s{(i * 7 + j) % 30}" for j in range(6)) for i in range(200))
    )
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(tmp_path / "spm"),
        vocab_size=30,
        model_type="word",
        minloglevel=2,
    )
    hub = TransformerModel.from_pretrained(
        tiny_transformer,
        checkpoint_file="checkpoint_best.pt",
        data_name_or_path=tiny_data,
        user_dir=lightcompress.__path__[0],
        bpe="sentencepiece",
        sentencepiece_model=os.path.join(tmp_path, "spm.model"),
    )
    out = hub.translate("s1 s2 s3", beam=2)
    assert isinstance(out, str) and out.strip() and "▁" not in out


def test_the_factorization_library_imports_without_fairseq():
    """lightcompress.modules is plain PyTorch: it works where fairseq is not installed."""
    code = (
        "import sys\n"
        "sys.modules['fairseq'] = None  # as if fairseq were not installed\n"
        "import torch\n"
        "from lightcompress.modules import CompressionSpec, LowRankLinear\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 8))\n"
        "CompressionSpec.parse('0 = lowrank(rank=2)').apply(m)\n"
        "assert isinstance(m[0], LowRankLinear)\n"
        "try:\n"
        "    import lightcompress.models\n"
        "except ImportError:\n"
        "    print('models need fairseq')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "models need fairseq" in proc.stdout


def test_fairseq_shared_parameter_lines_are_summarised(caplog):
    import logging

    with caplog.at_level(logging.INFO):
        logging.getLogger("fairseq.trainer").info("detected shared parameter: a <- b")
        _build("lightformer", [*LF, "--lc-encoder-groups", "1"])
    assert "detected shared parameter" not in caplog.text
    assert "encoder: 2 layers in 1 sharing groups" in caplog.text


def test_a_misspelled_student_flag_is_one_line_not_fairseqs_usage(tmp_path, capsys):
    path, _ = _teacher(tmp_path)
    code = cli_main(
        [
            "-i",
            str(path),
            "-o",
            str(tmp_path / "s.pt"),
            "-a",
            "lightformer",
            *FULL_RANK,
            "--lc-rnak",
            "4",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--lc-rnak" in err, err


def test_a_corrupt_admin_profile_is_one_clear_error(tmp_path):
    from lightcompress.errors import ConfigError

    bad = tmp_path / "profile.json"
    bad.write_text('{"encoder.layers.0.self_attn": 1.0')  # truncated
    with pytest.raises(ConfigError, match="cannot read the Admin profile"):
        _build("lightformer", [*LF, "--admin-init", "profile", "--admin-profile-file", str(bad)])


def test_energy_hint_repeats_the_student_flags_so_the_spec_rebuilds(tmp_path, capfd):
    """The fine-tuning hint after an energy conversion used to leave out the student's widths
    and depths, so the suggested command built another model and failed to tie."""
    import shlex

    path, _ = _teacher(tmp_path)
    out = tmp_path / "s.pt"
    flags = [*TINY, "--lc-encoder-groups", "1"]
    assert (
        cli_main(
            [
                "-i",
                str(path),
                "-o",
                str(out),
                "-a",
                "lightformer",
                "--quiet",
                "--energy",
                "0.9",
                "--embed-energy",
                "0.9",
                *flags,
            ]
        )
        == 0
    )
    hint = next(ln for ln in capfd.readouterr().out.splitlines() if "fine-tune with" in ln)
    argv = shlex.split(
        hint.split("fine-tune with the same model flags: ", 1)[1].replace(
            f'"$(cat {out}.spec)"', shlex.quote((tmp_path / "s.pt.spec").read_text().strip())
        )
    )
    assert argv[:2] == ["--arch", "lightformer"]
    # the hinted flags rebuild the converted model (the teacher's vocabulary: 50)
    model = build_model_without_data(
        parse_model_args("lightformer", ["--share-all-embeddings", *argv[2:]]), 50
    )
    state = torch.load(out)
    model.load_state_dict(state["model"], strict=True)
