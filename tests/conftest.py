"""Shared fixtures: a tiny binarized corpus and a tiny trained Transformer, built once per session."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A binarized toy de->en corpus (joined dictionary). Returns the data-bin directory."""
    root = tmp_path_factory.mktemp("tiny_corpus")
    raw = harness.make_parallel_corpus(str(root / "raw"))
    return harness.preprocess(raw, str(root / "bin"))


BLEU_FLAGS = [
    "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 20}',
    "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric",
]  # fmt: skip


@pytest.fixture(scope="session")
def tiny_transformer(tiny_data, tmp_path_factory):
    """A tiny 2-2 Transformer trained for 10 epochs through ``--user-dir``, with --eval-bleu
    (so that its checkpoints hold numpy values, as users' checkpoints do).

    Returns the save directory (``checkpoint_best.pt``, ``checkpoint_last.pt``).
    """
    save_dir = str(tmp_path_factory.mktemp("tiny_transformer"))
    harness.train(
        tiny_data,
        save_dir,
        harness.tiny_arch_args("transformer"),
        extra=BLEU_FLAGS,
        max_epoch=10,
    )
    return save_dir
