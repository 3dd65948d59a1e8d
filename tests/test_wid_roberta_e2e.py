"""DA-WID on a fairseq RoBERTa with the ``sentence_prediction`` task, end to end on tiny generated
data: ``fairseq-train --arch dawid_roberta --criterion dawid`` from a RoBERTa teacher ->
``lightcompress-convert dawid-fuse`` -> ``fairseq-validate`` on the fused checkpoint, whose
accuracy equals the training model's last validation accuracy."""

import json
import os
import random
import re

import harness
import pytest
import torch

import lightcompress.plugin  # noqa: F401  (allow-lists fairseq checkpoints for torch.load)

GLUE_FLAGS = [
    "--task",
    "sentence_prediction",
    "--num-classes",
    "2",
    "--max-positions",
    "64",
    "--init-token",
    "0",
    "--separator-token",
    "2",
]


def _preprocess(raw, dest, field):
    """fairseq-preprocess --only-source, in this process (as GLUE's preprocessing does)."""
    from fairseq import options
    from fairseq_cli.preprocess import main

    args = options.get_preprocessing_parser().parse_args(
        [
            "--only-source",
            "--trainpref",
            f"{raw}/train.{field}",
            "--validpref",
            f"{raw}/valid.{field}",
            "--destdir",
            f"{dest}/{field}",
            "--workers",
            "1",
        ]
    )
    main(args)


@pytest.fixture(scope="module")
def glue_like(tmp_path_factory):
    """A binarized single-sentence classification task (label: does the sentence hold w3?) and a
    tiny post-LN RoBERTa teacher with its classification head (random weights)."""
    from fairseq.tasks.sentence_prediction import SentencePredictionTask

    from lightcompress.build import build_model_without_data, parse_model_args

    root = tmp_path_factory.mktemp("glue_like")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(20)]
    os.makedirs(root / "raw")
    for split, n in (("train", 200), ("valid", 40)):
        with (
            open(root / "raw" / f"{split}.input0", "w") as f,
            open(root / "raw" / f"{split}.label", "w") as g,
        ):
            for _ in range(n):
                s = [rng.choice(words) for _ in range(rng.randint(3, 10))]
                f.write(" ".join(s) + "\n")
                g.write(("1" if "w3" in s else "0") + "\n")
    for field in ("input0", "label"):
        _preprocess(root / "raw", root / "bin", field)
    dictionary = SentencePredictionTask.load_dictionary(str(root / "bin" / "input0" / "dict.txt"))
    args = parse_model_args(
        "roberta",
        [
            "--encoder-layers",
            "2",
            "--encoder-embed-dim",
            "32",
            "--encoder-ffn-embed-dim",
            "64",
            "--encoder-attention-heads",
            "2",
            "--max-positions",
            "64",
        ],
        task="sentence_prediction",
    )
    torch.manual_seed(0)
    teacher = build_model_without_data(args, dictionary)
    teacher.register_classification_head("sentence_classification_head", num_classes=2)
    path = str(root / "teacher.pt")
    torch.save({"args": None, "cfg": {"model": args}, "model": teacher.state_dict()}, path)
    return str(root / "bin"), path


def test_dawid_roberta_trains_fuses_and_the_fused_model_validates_alike(
    glue_like, tmp_path, capsys
):
    from lightcompress.convert.cli import cli_main

    data, teacher = glue_like
    save_dir = str(tmp_path / "student")
    train = harness.run_cli(
        "fairseq-train",
        [
            data,
            "--user-dir",
            harness.USER_DIR,
            "--cpu",
            *GLUE_FLAGS,
            "--arch",
            "dawid_roberta",
            "--dawid-teacher",
            teacher,
            "--criterion",
            "dawid",
            "--dawid-calib-tokens",
            "64",
            "--dawid-target-sparsity",
            "0.3",
            "--dawid-distill-updates",
            "2",
            "--dawid-sparsity-warmup",
            "4",
            "--dawid-structure-updates",
            "2",
            "--optimizer",
            "adam",
            "--lr",
            "0.01",
            "--batch-size",
            "16",
            "--max-update",
            "10",
            "--save-dir",
            save_dir,
            "--no-progress-bar",
            "--log-format",
            "simple",
            "--num-workers",
            "0",
            "--seed",
            "1",
            "--no-epoch-checkpoints",
            *harness.NO_PREFETCH,
        ],
    )
    trained = re.findall(r"valid on 'valid' subset .*\| accuracy ([0-9.]+)", train.stdout)
    assert trained, train.stdout[-3000:]
    state = torch.load(os.path.join(save_dir, "checkpoint_last.pt"), map_location="cpu")
    assert state["cfg"]["model"].arch == "dawid_roberta"
    assert any(k.startswith("classification_heads.") for k in state["model"])

    fused = str(tmp_path / "fused.pt")
    assert (
        cli_main(["dawid-fuse", "-i", os.path.join(save_dir, "checkpoint_last.pt"), "-o", fused])
        == 0
    )
    report = capsys.readouterr().out
    assert "dawid_roberta_fused" in report and "encoder-layer parameters" in report
    validate = harness.run_cli(
        "fairseq-validate",
        [
            data,
            "--user-dir",
            harness.USER_DIR,
            "--cpu",
            *GLUE_FLAGS,
            "--criterion",
            "sentence_prediction",
            "--path",
            fused,
            "--batch-size",
            "16",
            "--valid-subset",
            "valid",
            "--num-workers",
            "0",
        ],
    )
    fused_acc = re.findall(
        r"valid on 'valid' subset .*\| accuracy ([0-9.]+)", validate.stdout + validate.stderr
    )
    assert fused_acc and float(fused_acc[-1]) == float(trained[-1])

    # lightcompress-params counts the fused checkpoint (--path) and the same model rebuilt from
    # its shapes (--arch), the embedding excluded as the paper counts (the layers) and in total
    from fairseq import checkpoint_utils

    from lightcompress.measure.params import count_parameters
    from lightcompress.measure.params import main as params_main

    assert params_main(["--path", fused]) == 0
    from_path = json.loads(capsys.readouterr().out)
    models, _ = checkpoint_utils.load_model_ensemble([fused])
    model = models[0]
    assert type(model).__name__ == "DAWIDFusedRobertaModel"
    layers = sum(p.numel() for p in model.encoder.sentence_encoder.layers.parameters())
    assert from_path["arch"] == "dawid_roberta_fused"
    assert from_path["non_embedding"] == from_path["encoder"] == layers
    assert from_path["total"] == sum(p.numel() for p in model.parameters())
    assert from_path == {**from_path, **count_parameters(model)}
    assert f"{layers:,} encoder-layer parameters" in report
    assert f"{from_path['total']:,} in total" in report
    vocab = model.encoder.sentence_encoder.embed_tokens.weight.shape[0]
    with open(fused + ".shapes.json") as f:
        shapes = f.read().strip()
    argv = [
        "--arch",
        "dawid_roberta_fused",
        "--vocab-size",
        str(vocab),
        "--dawid-shapes",
        shapes,
        "--num-classes",
        "2",
        "--max-positions",
        "64",
    ]
    assert params_main(argv) == 0
    from_arch = json.loads(capsys.readouterr().out)
    keys = ("total", "embedding", "encoder", "decoder", "other", "non_embedding")
    assert {k: from_arch[k] for k in keys} == {k: from_path[k] for k in keys}
    # the training checkpoint is refused with one line
    assert params_main(["--path", os.path.join(save_dir, "checkpoint_last.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DA-WID training checkpoint" in err[0]


def test_a_translation_teacher_is_refused_for_roberta(tmp_path):
    from lightcompress.errors import ConfigError
    from lightcompress.wid.teacher import check_teacher

    targs = harness.build_without_data("transformer", 30, harness.tiny_arch_args("transformer")[2:])
    args = targs.args
    with pytest.raises(ConfigError, match="--arch dawid_roberta compresses a fairseq RoBERTa"):
        check_teacher(args, "--dawid-teacher t.pt", "roberta")
