"""The probes that prove a derived model (multiplied out, exported) computes its source model:
teacher-forced log-probabilities and greedy translations, within TOLERANCE."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import harness
import pytest
import torch

from lightcompress.deploy.probes import (
    TOLERANCE,
    ProbeMismatch,
    greedy,
    greedy_mismatch,
    max_len_of,
    max_logprob_difference,
    probe_pairs,
)
from lightcompress.errors import LightcompressError

EOS = 2
V = 8


def _steps(*rows):
    """Per-step log-probability vectors over V tokens: each row sets some tokens' values."""
    out = []
    for row in rows:
        lp = torch.full((V,), -10.0)
        for token, value in row.items():
            lp[token] = value
        out.append(lp)
    return out


def test_equal_translations_and_a_near_tie_pass():
    ours = [([5, 6], _steps({5: -0.1}, {6: -0.2}, {EOS: -0.1})), ([4], _steps({4: -0.1}, {EOS: 0}))]
    # the second parts at step 0 where the reference's 4 and 7 are 5e-4 apart: a near tie
    ours[1][1][0][7] = -0.1 - TOLERANCE / 2
    got = greedy_mismatch(ours, [[5, 6], [7, 3]], EOS, "the export")
    assert got == {"sentences": 2, "equal": 1, "near_ties": 1}


def test_an_end_at_a_near_tie_with_eos_passes():
    """One ends where the other goes on: the gap is between the reference's token and EOS."""
    ours = [([5, 6], _steps({5: -0.1}, {6: -0.3, EOS: -0.3 - TOLERANCE / 2}, {EOS: 0}))]
    assert greedy_mismatch(ours, [[5]], EOS, "x")["near_ties"] == 1


@pytest.mark.parametrize(
    "theirs, why",
    [([[5, 4]], "step 1"), ([[5, 6, 1]], "step 2"), ([[5, 99]], "inf apart")],
    ids=["another-token", "longer", "out-of-vocabulary"],
)
def test_a_translation_parting_elsewhere_is_one_error_naming_the_model(theirs, why):
    ours = [([5, 6], _steps({5: -0.1}, {6: -0.2, 4: -1.5}, {EOS: -0.05, 1: -3.0}))]
    with pytest.raises(ProbeMismatch) as info:
        greedy_mismatch(ours, theirs, EOS, "the CTranslate2 export")
    msg = str(info.value)
    assert isinstance(info.value, LightcompressError) and "\n" not in msg
    assert msg.startswith("the CTranslate2 export translates probe sentence 0 otherwise"), msg
    assert why in msg, msg


@pytest.fixture(scope="module")
def tiny():
    model = harness.build_without_data(
        "transformer", 20, harness.tiny_arch_args("transformer", layers=(1, 1), dim=16, ffn=32)
    )
    model.eval()
    task = SimpleNamespace(
        source_dictionary=model.encoder.dictionary, target_dictionary=model.decoder.dictionary
    )
    return model, task


def test_teacher_forced_differences(tiny):
    """A model against itself differs by 0, a perturbed copy by more than the tolerance, a copy
    with a NaN weight by inf; the probe pairs are the same for a seed and avoid special tokens."""
    model, task = tiny
    model.train()  # the probes run it in eval mode and put its mode back
    pairs = probe_pairs(task, sentences=3, seed=1)
    assert [(len(s), len(t)) for s, t in pairs] == [(5, 4), (6, 5), (7, 6)]
    assert all(
        torch.equal(a, b) for p, q in zip(pairs, probe_pairs(task, 3, 1)) for a, b in zip(p, q)
    )
    assert min(int(x.min()) for p in pairs for x in p) >= task.source_dictionary.nspecial
    assert max_logprob_difference(model, model, task) == 0.0
    other = copy.deepcopy(model)
    with torch.no_grad():
        w = other.decoder.output_projection.weight
        w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(0)))
    assert max_logprob_difference(model, other, task) > TOLERANCE
    with torch.no_grad():
        other.encoder.layers[0].fc1.weight[0, 0] = float("nan")
    assert max_logprob_difference(model, other, task) == float("inf")
    assert model.training and other.training


def test_greedy_translations_stop_at_eos_or_the_limit(tiny):
    model, task = tiny
    sources = [s for s, _ in probe_pairs(task, sentences=2)]
    out = greedy(model, task, sources)
    eos = task.target_dictionary.eos()
    for src, (tokens, steps) in zip(sources, out):
        assert len(tokens) <= max_len_of(src) and eos not in tokens
        # one step per emitted token and the last, which chose EOS unless the limit ended it
        assert len(steps) == len(tokens) + 1
        assert tokens == [int(lp.argmax()) for lp in steps[:-1]]
        assert int(steps[-1].argmax()) == eos or len(tokens) == max_len_of(src)
    assert greedy_mismatch(out, [t for t, _ in out], eos, "itself")["equal"] == 2
