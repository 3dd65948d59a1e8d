"""The foundation under every command: one error base class, one way to report it, one loader."""

from __future__ import annotations

import importlib

import pytest

from lightcompress import cli
from lightcompress.errors import CheckpointError, ConfigError, LightcompressError, SpecError

# every user-facing error of the package, by the module users import it from
ERRORS = [
    ("lightcompress.errors", "ConfigError"),
    ("lightcompress.errors", "SpecError"),
    ("lightcompress.modules", "SpecError"),
    ("lightcompress.checkpoint", "CheckpointError"),
    ("lightcompress.convert.core", "ConversionError"),
    ("lightcompress.measure.candidates", "SpeedError"),
    ("lightcompress.measure.specs", "ParamsError"),
    ("lightcompress.deploy.ct2", "ExportError"),
    ("lightcompress.deploy.densify", "DensifyError"),
    ("lightcompress.deploy.probes", "ProbeMismatch"),
    ("lightcompress.deploy.onnx_export", "ExportError"),
    ("lightcompress.deploy.torch_translator", "TranslateError"),
    ("lightcompress.kd.distill", "DistillError"),
    ("lightcompress.tasks.translation_seqkd", "KDDataError"),
    ("lightcompress.wid.fuse", "FusionError"),
]


@pytest.mark.parametrize("module, name", ERRORS)
def test_every_error_of_the_package_is_a_lightcompress_error(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, LightcompressError)


def test_a_configuration_error_is_a_value_error():
    assert issubclass(SpecError, ConfigError) and issubclass(ConfigError, ValueError)


def test_run_reports_an_error_as_one_line_with_its_exit_status(capsys):
    from lightcompress.kd.distill import DistillError, UsageError

    def fails(error):
        def body(argv):
            raise error("why")

        return body

    assert cli.run(fails(CheckpointError), [], "prog") == 2
    assert capsys.readouterr().err == "prog: error: why\n"
    assert cli.run(fails(DistillError), [], "distill_data") == 1  # a run that cannot go on
    assert cli.run(fails(UsageError), [], "distill_data") == 2  # a bad argument
    assert cli.run(lambda argv: 3, [], "prog") == 3
    assert cli.run(lambda argv: ("a model", []), [], "prog") == 0
    capsys.readouterr()
    with pytest.raises(KeyError):  # a bug keeps its traceback
        cli.run(lambda argv: {}["x"], [], "prog")


def test_the_one_line_parser_reports_without_usage(capsys):
    parser = cli.OneLineParser(prog="lightcompress-params")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--n", "x"])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr().err
        == "lightcompress-params: error: argument --n: invalid int value: 'x'\n"
    )


def test_entry_points_exit_or_return_as_their_commands_always_did():
    calls = []

    def main(argv):
        calls.append(argv)
        return 2

    with pytest.raises(SystemExit) as exit_:
        cli.entry_point(main)(["a"])
    assert exit_.value.code == 2
    assert cli.entry_point(main, exits=False)(["b"]) == 2
    assert calls == [["a"], ["b"]]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "checkpoint not found"),
        (b"not a checkpoint\n", "is not a checkpoint (no zip or pickle header"),
        (b"PK\x03\x04 truncated", "is the file complete?"),
    ],
)
def test_the_one_checkpoint_loader_names_the_file_and_the_cause(tmp_path, content, message):
    from lightcompress.checkpoint import read_checkpoint

    path = tmp_path / "model.pt"
    if content is not None:
        path.write_bytes(content)
    for upgrade in (False, True):
        with pytest.raises(CheckpointError, match="") as error:
            read_checkpoint(str(path), upgrade=upgrade)
        assert message in str(error.value) and str(path) in str(error.value)
        assert "\n" not in str(error.value)


def test_the_checkpoint_loader_refuses_a_state_without_a_model(tmp_path):
    import torch

    from lightcompress.checkpoint import model_config, read_checkpoint

    path = tmp_path / "weights.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match=r"is not a fairseq checkpoint \(no 'model' entry\)"):
        read_checkpoint(str(path))
    with pytest.raises(CheckpointError, match="holds no model configuration"):
        model_config({"model": {}})
