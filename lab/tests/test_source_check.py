"""lab/results/source_check.py: does a checkpoint read its source? Its teacher-forced measure
pairs each target with its own source and with another sentence's; a decoder that cannot see
the encoder must cost the same either way, one that reads it must not."""

import os
import subprocess
import sys

import harness
import torch

RESULTS = os.path.join(harness.REPO_ROOT, "lab", "results")
sys.path.insert(0, RESULTS)

import source_check


def _deaf_copy(checkpoint: str, out: str) -> None:
    """``checkpoint`` with every decoder layer's encoder attention output set to zero: the
    decoder then computes the same thing whatever the source."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    zeroed = 0
    for key, value in state["model"].items():
        if ".encoder_attn.out_proj." in key:
            value.zero_()
            zeroed += 1
    assert zeroed == 4  # two decoder layers, weight and bias each
    torch.save(state, out)


def test_a_model_that_reads_its_source_costs_more_with_another_sentences(
    tiny_data, tiny_transformer, tmp_path
):
    best = os.path.join(tiny_transformer, "checkpoint_best.pt")
    reads = source_check.measure(best, tiny_data)
    assert reads["sources"] == 40  # the toy's whole test split (fewer than SOURCES)
    assert -1.0 <= reads["pooled_cosine"] <= 1.0 and reads["updates"] > 0
    assert reads["other_bits"] - reads["own_bits"] > 0.5, reads
    deaf = str(tmp_path / "deaf.pt")
    _deaf_copy(best, deaf)
    ignores = source_check.measure(deaf, tiny_data)
    assert abs(ignores["other_bits"] - ignores["own_bits"]) < 1e-3, ignores
    assert ignores["pooled_cosine"] == reads["pooled_cosine"]  # (the encoder is untouched)
    # a command of its own: the figures as JSON; a missing checkpoint is one line, exit 1
    ok = subprocess.run(
        [sys.executable, os.path.join(RESULTS, "source_check.py"), best, tiny_data, "-n", "8"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([harness.REPO_ROOT, RESULTS])),
        check=False,
    )
    assert ok.returncode == 0 and '"sources": 8' in ok.stdout, ok.stderr[-2000:]
    bad = subprocess.run(
        [
            sys.executable,
            os.path.join(RESULTS, "source_check.py"),
            str(tmp_path / "x.pt"),
            tiny_data,
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([harness.REPO_ROOT, RESULTS])),
        check=False,
    )
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0
    assert "x.pt: no such checkpoint" in bad.stderr
