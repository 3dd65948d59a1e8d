"""DA-WID end to end with fairseq's own commands on tiny generated data: a post-LN teacher,
``fairseq-train --arch dawid --criterion dawid`` with all mask levels and the multi-stage schedule,
``lightcompress-convert dawid-fuse``, ``fairseq-generate`` on the fused checkpoint and
``lightcompress-params`` counting it; and the command-line errors for bad input (one line, exit
status 2, nothing written)."""

import json
import os

import harness
import pytest
import torch

import lightcompress.plugin  # noqa: F401  (allow-lists fairseq checkpoints for torch.load)

SCHEDULE = [
    "--dawid-calib-tokens",
    "256",
    "--dawid-target-sparsity",
    "0.3",
    "--dawid-distill-updates",
    "3",
    "--dawid-sparsity-warmup",
    "6",
    "--dawid-structure-updates",
    "3",
]


def _dawid_train(data, teacher, save_dir, extra=(), check=True, max_update=12):
    args = [
        data,
        "--user-dir",
        harness.USER_DIR,
        "--cpu",
        "--task",
        "translation",
        "--arch",
        "dawid",
        "--dawid-teacher",
        teacher,
        "--criterion",
        "dawid",
        "--optimizer",
        "adam",
        "--lr",
        "0.02",
        "--max-tokens",
        "400",
        "--max-update",
        str(max_update),
        "--save-dir",
        save_dir,
        "--no-progress-bar",
        "--log-format",
        "simple",
        "--log-interval",
        "4",
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--no-epoch-checkpoints",
        *harness.NO_PREFETCH,
    ]
    return harness.run_cli("fairseq-train", args + SCHEDULE + list(extra), check=check)


@pytest.fixture(scope="module")
def wid_data(tmp_path_factory):
    """A small toy corpus, binarized in this process (fairseq-preprocess's own main)."""
    from fairseq import options
    from fairseq_cli.preprocess import main

    root = tmp_path_factory.mktemp("wid_corpus")
    raw = harness.make_parallel_corpus(str(root / "raw"), n_train=300, n_valid=20, n_test=40)
    main(
        options.get_preprocessing_parser().parse_args(
            [
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--trainpref",
                f"{raw}/train",
                "--validpref",
                f"{raw}/valid",
                "--testpref",
                f"{raw}/test",
                "--destdir",
                str(root / "bin"),
                "--workers",
                "1",
                "--joined-dictionary",
            ]
        )
    )
    return str(root / "bin")


@pytest.fixture(scope="module")
def wid_teacher(wid_data, tmp_path_factory):
    """A tiny post-LN fairseq Transformer checkpoint on the corpus's dictionary (random weights:
    its quality does not matter here, and training one would only cost time)."""
    from fairseq.data import Dictionary

    from lightcompress.build import build_model_without_data, parse_model_args

    torch.manual_seed(0)
    args = parse_model_args(
        "transformer", [str(a) for a in harness.tiny_arch_args("transformer")[2:]]
    )
    dictionary = Dictionary.load(os.path.join(wid_data, "dict.de.txt"))
    model = build_model_without_data(args, dictionary)
    path = str(tmp_path_factory.mktemp("wid_teacher") / "teacher.pt")
    torch.save({"args": None, "cfg": {"model": args}, "model": model.state_dict()}, path)
    return path


@pytest.fixture(scope="module")
def wid_student(wid_data, wid_teacher, tmp_path_factory):
    save_dir = str(tmp_path_factory.mktemp("wid_student"))
    proc = _dawid_train(wid_data, wid_teacher, save_dir)
    return save_dir, proc


def test_dawid_trains_with_the_schedule_and_never_saves_the_teacher(wid_teacher, wid_student):
    save_dir, proc = wid_student
    log = proc.stdout + proc.stderr
    assert "expected_sparsity" in log and "target_sparsity" in log and "kl" in log
    state = torch.load(os.path.join(save_dir, "checkpoint_last.pt"), map_location="cpu")
    teacher_state = torch.load(wid_teacher, map_location="cpu")
    keys = set(state["model"])
    # the schedule position of the last forward pass (fairseq sets it before each update)
    assert "wid_teacher_config" in keys and int(state["model"]["wid_num_updates"]) == 11
    # the teacher's own modules are not in the student's checkpoint (only the student's copies,
    # renamed into its compactor blocks, and the embeddings it shares)
    assert not any(k.startswith("teacher") for k in keys)
    assert not {k for k in teacher_state["model"] if ".layers." in k} & keys
    # the compactors and gates were trained, the teacher's matrices kept frozen (the paper)
    from lightcompress.wid.model import DAWIDModel

    student, _ = DAWIDModel.rebuild(state)
    site = student.encoder.layers[0].blocks[0].site
    assert not torch.allclose(
        site.c_in @ site.c_in.T, torch.eye(32), atol=1e-3
    )  # moved from the SVD init
    assert torch.equal(
        student.encoder.layers[0].blocks[1].sub.fc1.weight,
        teacher_state["model"]["encoder.layers.0.fc1.weight"],
    )
    assert all(g.active for g in student.gates())  # update 12: every level on


def test_fuse_generate_and_count_the_fused_model(wid_data, wid_student, tmp_path, capsys):
    from fairseq import checkpoint_utils

    from lightcompress.convert.cli import cli_main as convert_main
    from lightcompress.measure.params import count_parameters
    from lightcompress.measure.params import main as params_main

    save_dir, _ = wid_student
    out = str(tmp_path / "fused.pt")
    # lightcompress-convert's entry point, in this process (the console script is this function)
    assert (
        convert_main(["dawid-fuse", "-i", os.path.join(save_dir, "checkpoint_last.pt"), "-o", out])
        == 0
    )
    report = capsys.readouterr().out
    assert "fusion check: max relative logit difference" in report
    assert os.path.isfile(out) and os.path.isfile(out + ".shapes.json")
    bleu, hyps, generated = harness.generate(
        wid_data, out, extra=["--max-len-b", "12"]
    )  # fairseq-generate loads the fused model
    assert bleu is not None and len(hyps) == 40  # every test sentence translated
    # the fused checkpoint deploys: lightcompress-export-onnx (its proof: fairseq's beam search
    # on probe sentences), and the export's torch-free runtime translates the test sources as
    # fairseq-generate did
    from lightcompress.deploy.onnx_export import main as export_main
    from lightcompress_runtime import OnnxTranslator

    onnx_dir = str(tmp_path / "onnx")
    assert export_main(["--path", out, "--data", wid_data, "-o", onnx_dir]) == 0
    sources = {}
    for line in generated.stdout.splitlines():
        if line.startswith("S-"):
            sid, text = line.split("\t", 1)
            sources[int(sid[2:])] = text
    onnx = OnnxTranslator(onnx_dir, beam=2, max_len_b=12, batch_size=16, tokenized=True)
    assert onnx.translate([sources[i] for i in sorted(sources)]) == hyps
    with open(out + ".shapes.json") as f:
        shapes = f.read().strip()
    from fairseq.data import Dictionary

    vocab = len(Dictionary.load(os.path.join(wid_data, "dict.de.txt")))
    assert (
        params_main(["--arch", "dawid_fused", "--vocab-size", str(vocab), "--dawid-shapes", shapes])
        == 0
    )
    counted = json.loads(capsys.readouterr().out)
    models, _ = checkpoint_utils.load_model_ensemble([out])
    assert type(models[0]).__name__ == "DAWIDFusedModel"
    assert counted == {**counted, **count_parameters(models[0])}
    assert f"{counted['non_embedding']:,} non-embedding parameters" in report
    assert f"{counted['total']:,} in total" in report
    assert counted["non_embedding"] == counted["total"] - counted["embedding"] > 0
    # the fused checkpoint itself (lightcompress-params --path) counts the same
    assert params_main(["--path", out]) == 0
    from_path = json.loads(capsys.readouterr().out)
    assert from_path["arch"] == "dawid_fused" and from_path["vocab_size"] == vocab
    keys = ("total", "embedding", "encoder", "decoder", "other", "non_embedding")
    assert {k: from_path[k] for k in keys} == {k: counted[k] for k in keys}
    # the training checkpoint is not a model to count: one line pointing at the fusion
    train_ckpt = os.path.join(save_dir, "checkpoint_last.pt")
    assert params_main(["--path", train_ckpt]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DA-WID training checkpoint" in err[0] and "dawid-fuse" in err[0]


# ------------------------------------------------------------------ bad input


def _one_error_line(proc, *needles):
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_a_pre_ln_teacher_is_refused_with_one_line(wid_data, wid_teacher, tmp_path):
    state = torch.load(wid_teacher, map_location="cpu")
    cfg_model = state["cfg"]["model"]
    cfg_model.encoder_normalize_before = True
    bad = str(tmp_path / "preln.pt")
    torch.save(state, bad)
    proc = _dawid_train(wid_data, bad, str(tmp_path / "ckpt"), check=False)
    _one_error_line(proc, "pre-LN", "post-LN")
    assert not os.path.exists(tmp_path / "ckpt") or not os.listdir(tmp_path / "ckpt")


def _lightformer_teacher(wid_data, path):
    from fairseq.data import Dictionary

    from lightcompress.build import build_model_without_data, parse_model_args

    flags = [str(a) for a in harness.tiny_arch_args("transformer")[2:]] + [
        "--lc-rank",
        "4",
        "--lc-embed-rank",
        "8",
        "--lc-encoder-groups",
        "1",
        "--lc-decoder-groups",
        "1",
    ]
    args = parse_model_args("lightformer", flags)
    model = build_model_without_data(args, Dictionary.load(os.path.join(wid_data, "dict.de.txt")))
    torch.save({"args": None, "cfg": {"model": args}, "model": model.state_dict()}, path)
    return path


@pytest.mark.parametrize(
    "case, needles",
    [
        ("sparsity 1", ["--dawid-target-sparsity must be in [0, 1), got 1.0"]),
        ("sparsity -0.2", ["--dawid-target-sparsity must be in [0, 1), got -0.2"]),
        ("calibration > data", ["--dawid-calib-tokens 100000: the train data has only"]),
        ("calibration < width", ["--dawid-calib-tokens 16 is smaller than the model width 32"]),
        ("lightformer teacher", ["the teacher is a lightformer model", "--arch dawid compresses"]),
    ],
)
def test_fairseq_train_refuses_bad_dawid_input_with_one_line(
    wid_data, wid_teacher, tmp_path, case, needles
):
    teacher, extra = wid_teacher, []
    if case.startswith("sparsity"):
        extra = ["--dawid-target-sparsity", case.split()[1]]
    elif case == "calibration > data":
        extra = ["--dawid-calib-tokens", "100000"]
    elif case == "calibration < width":
        extra = ["--dawid-calib-tokens", "16"]
    else:
        teacher = _lightformer_teacher(wid_data, str(tmp_path / "lightformer.pt"))
    save_dir = tmp_path / "ckpt"
    proc = _dawid_train(wid_data, teacher, str(save_dir), extra=extra, check=False, max_update=2)
    _one_error_line(proc, *needles)
    assert not save_dir.exists() or not os.listdir(save_dir)  # nothing written


def test_dawid_fuse_refuses_other_checkpoints_and_empty_models_writing_nothing(
    wid_teacher, wid_student, tmp_path, capsys
):
    from lightcompress.convert.cli import cli_main

    out = str(tmp_path / "fused.pt")
    assert cli_main(["dawid-fuse", "-i", wid_teacher, "-o", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a DA-WID training checkpoint" in err[0]
    # masks that remove every encoder self-attention head
    save_dir, _ = wid_student
    state = torch.load(os.path.join(save_dir, "checkpoint_last.pt"), map_location="cpu")
    for key in state["model"]:
        if key.startswith("encoder.layers.") and key.endswith("gate_head.log_alpha_scaled"):
            scale = state["model"][key.replace("log_alpha_scaled", "scale")]
            state["model"][key].fill_(-10.0 / float(scale))
    bad = str(tmp_path / "headless.pt")
    torch.save(state, bad)
    assert cli_main(["dawid-fuse", "-i", bad, "-o", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every encoder self-attention head" in err[0], err
    assert os.listdir(tmp_path) == ["headless.pt"] or sorted(os.listdir(tmp_path)) == [
        "headless.pt"
    ]


@pytest.mark.parametrize("damage", ["no update count", "teacher config", "a compactor"])
def test_dawid_fuse_refuses_a_damaged_training_checkpoint_with_one_line(
    wid_student, tmp_path, capsys, damage
):
    from lightcompress.convert.cli import cli_main

    save_dir, _ = wid_student
    state = torch.load(os.path.join(save_dir, "checkpoint_last.pt"), map_location="cpu")
    sd = state["model"]
    if damage == "no update count":
        del sd["wid_num_updates"]
        needle = "wid_num_updates"
    elif damage == "teacher config":
        sd["wid_teacher_config"] = torch.tensor(list(b"{not json"), dtype=torch.uint8)
        needle = "a damaged DA-WID training checkpoint (JSONDecodeError"
    else:
        del sd["encoder.layers.0.blocks.0.site.c_in"]
        needle = "encoder.layers.0.blocks.0.site.c_in"
    bad = str(tmp_path / "damaged.pt")
    torch.save(state, bad)
    out = str(tmp_path / "fused.pt")
    assert cli_main(["dawid-fuse", "-i", bad, "-o", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lightcompress-convert dawid-fuse: error:"), err
    assert needle in err[0], err[0]
    assert sorted(os.listdir(tmp_path)) == ["damaged.pt"]


def test_too_few_calibration_tokens_for_the_width_are_refused_before_any_data_is_read():
    import argparse

    from lightcompress.errors import ConfigError
    from lightcompress.wid.data_aware import calibration_batches

    teacher = harness.build_without_data(
        "transformer", 56, harness.tiny_arch_args("transformer")[2:]
    )
    with pytest.raises(
        ConfigError, match="--dawid-calib-tokens 16 is smaller than the model width 32"
    ):
        calibration_batches(
            None, argparse.Namespace(dawid_calib_tokens=16, dawid_calib_seed=1), teacher
        )


def test_a_dawid_training_checkpoint_is_not_translated_but_named_for_fusion(
    wid_data, wid_student, tmp_path
):
    # (issue 25's sweep: lightcompress-translate and lightcompress-export-ct2 on the training
    # checkpoint gave AttributeErrors)
    import subprocess
    import sys

    ckpt = os.path.join(wid_student[0], "checkpoint_last.pt")
    env = dict(os.environ, PYTHONPATH=harness.SOURCES, PYTHONWARNINGS="ignore")
    for module, extra in (
        ("lightcompress.deploy.torch_translator", []),
        ("lightcompress.deploy.ct2", ["-o", str(tmp_path / "ct2")]),
    ):
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from {module} import cli_main; cli_main()",
                "--path",
                ckpt,
                "--data",
                wid_data,
                *extra,
            ],
            input="5 6 7\n",
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
        )
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1, (module, proc.stderr[-800:])
        assert "dawid" in err[0].lower() and "Error" not in err[0].split(":")[0], err
    assert not (tmp_path / "ct2").exists()
