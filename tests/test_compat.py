"""Checkpoints written before the kind registry and the one compressed model still load.

``tests/data/pre_registry/*.pt`` were written by the code of commit 09810ac (LightFormer and
Hypoformer built through their own hooks and factories): model flags, weights, a batch and the
logits the model gave. The models built by today's code from the same flags must take the
weights key for key (strict) and give the same logits.
"""

import os

import pytest
import torch

import lightcompress.plugin  # noqa: F401  (registers the models, allow-lists checkpoint types)
from lightcompress.convert.core import build_fairseq_model

DATA = os.path.join(os.path.dirname(__file__), "data", "pre_registry")


@pytest.mark.parametrize("name", ["lightformer", "hypoformer"])
def test_checkpoint_written_before_the_registry_loads_and_computes_the_same(name):
    state = torch.load(os.path.join(DATA, f"{name}.pt"))
    model = build_fairseq_model(state["args"], 60).eval()
    model.load_state_dict(state["model"], strict=True)
    src, lengths, prev = state["batch"]
    with torch.no_grad():
        logits = model(src, lengths, prev)[0]
    torch.testing.assert_close(logits, state["logits"], atol=1e-5, rtol=1e-5)
