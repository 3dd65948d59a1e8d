"""End to end: a tiny Transformer trained through ``--user-dir lightcompress`` and reloaded by every
path users take (fairseq-generate, fairseq-interactive, --restore-file, resume, the hub interface),
on torch >= 2.6 with weights_only loading left on and no environment variable."""

import os
import pickle
import re
import subprocess
import sys
from collections import Counter

import harness
import pytest
import torch

CHECKPOINT_ENV_VARS = ("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_WEIGHTS_ONLY_LOAD")


def test_no_weights_only_override_in_environment():
    for var in CHECKPOINT_ENV_VARS:
        assert var not in os.environ


def test_importing_the_plugin_registers_its_components():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import lightcompress.plugin  # noqa: F401

    # plain fairseq architectures stay available next to the plugin's
    assert "transformer_iwslt_de_en" in ARCH_MODEL_REGISTRY


def test_plain_torch_load_still_rejects_unlisted_globals(tmp_path):
    """The shim allow-lists fairseq's types only; weights_only stays on for everything else."""
    import fractions

    import lightcompress.plugin  # noqa: F401

    path = tmp_path / "evil.pt"
    torch.save({"x": fractions.Fraction(1, 3)}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)


def test_checkpoint_loads_with_weights_only_because_of_the_allow_list(tiny_transformer):
    """Without the plugin torch rejects the checkpoint; importing the plugin's registration
    (``lightcompress.plugin``, what fairseq's ``--user-dir`` runs) is what fixes it."""
    ckpt = os.path.join(tiny_transformer, "checkpoint_best.pt")
    code = "import sys, torch\n{}torch.load(sys.argv[1])\nprint('LOADED')"
    env = {k: v for k, v in os.environ.items() if k not in CHECKPOINT_ENV_VARS}
    bare = harness.run(
        [sys.executable, "-c", code.format(""), ckpt],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bare.returncode != 0 and "Unsupported global" in bare.stderr
    shimmed = harness.run(
        [sys.executable, "-c", code.format("import lightcompress.plugin\n"), ckpt],
        capture_output=True,
        text=True,
        env=env,
        cwd=harness.REPO_ROOT,
        check=False,
    )
    assert shimmed.returncode == 0, shimmed.stderr[-3000:]
    assert "LOADED" in shimmed.stdout
    # every global the checkpoint holds is on the list (nothing is loaded through a loophole)
    import lightcompress.plugin  # noqa: F401

    assert torch.serialization.get_unsafe_globals_in_checkpoint(ckpt) == []


def test_generate_scores_bleu(tiny_data, tiny_transformer):
    bleu, hyps, _ = harness.generate(
        tiny_data, os.path.join(tiny_transformer, "checkpoint_best.pt"), extra=["--scoring", "bleu"]
    )
    assert len(hyps) == 40
    assert bleu is not None and 0.0 <= bleu <= 100.0
    # 10 epochs on the toy task are enough to get well above zero
    assert bleu > 20.0, bleu


def _test_sentences(tiny_data, n=10):
    """The first ``n`` source sentences of the toy corpus's test split and their references."""
    raw = os.path.join(os.path.dirname(tiny_data), "raw")
    with open(os.path.join(raw, "test.de")) as fs, open(os.path.join(raw, "test.en")) as ft:
        return fs.read().splitlines()[:n], ft.read().splitlines()[:n]


def _assert_translates_the_toy_task(hyps, refs):
    """One hypothesis per source line, in order, of target words only, holding most words of
    its word-for-word reference (the tiny model gets about 3/4 of them; an untrained one ~1/20)."""
    assert len(hyps) == len(refs)
    words = [h.split() for h in hyps]
    assert all(w and all(re.fullmatch(r"t\d+", t) for t in w) for w in words), hyps
    found = sum(sum((Counter(w) & Counter(r.split())).values()) for w, r in zip(words, refs))
    assert found >= 0.6 * sum(len(r.split()) for r in refs), list(zip(hyps, refs))


def _hub(tiny_data, tiny_transformer):
    from fairseq.models.transformer import TransformerModel

    return TransformerModel.from_pretrained(
        tiny_transformer,
        checkpoint_file="checkpoint_best.pt",
        data_name_or_path=tiny_data,
        user_dir=harness.USER_DIR,
    )


def test_interactive_translates(tiny_data, tiny_transformer):
    """fairseq-interactive translates the toy task's test sentences, each as the hub interface
    does in this process (same checkpoint, beam 2)."""
    src, refs = _test_sentences(tiny_data)
    hyps = harness.interactive(tiny_data, os.path.join(tiny_transformer, "checkpoint_best.pt"), src)
    _assert_translates_the_toy_task(hyps, refs)
    assert hyps == _hub(tiny_data, tiny_transformer).translate(src, beam=2)


def test_hub_interface_loads_and_translates(tiny_data, tiny_transformer):
    src, refs = _test_sentences(tiny_data)
    hub = _hub(tiny_data, tiny_transformer)
    out = hub.translate(src, beam=2)
    _assert_translates_the_toy_task(out, refs)
    assert hub.translate(src[0], beam=2) == out[0]  # one sentence as in a batch


def test_restore_file_and_resume(tiny_data, tiny_transformer, tmp_path):
    # --restore-file into a new save dir (fine-tuning from a trained model)
    new_dir = str(tmp_path / "ft")
    restore = [
        "--restore-file",
        os.path.join(tiny_transformer, "checkpoint_last.pt"),
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
    ]
    proc = harness.train(
        tiny_data, new_dir, harness.tiny_arch_args("transformer"), extra=restore, max_epoch=1
    )
    log = proc.stdout + proc.stderr
    assert "Loaded checkpoint" in log and "checkpoint_last.pt" in log
    # resume: the same save dir again with a larger --max-epoch continues at epoch 2
    proc = harness.train(tiny_data, new_dir, harness.tiny_arch_args("transformer"), max_epoch=2)
    log = proc.stdout + proc.stderr
    assert f"Loaded checkpoint {new_dir}/checkpoint_last.pt (epoch 2 @" in log, log[-3000:]
    assert "begin training epoch 2" in log


def test_bare_user_dir_name_works_from_any_directory(tiny_data, tmp_path):
    """``--user-dir lightcompress`` resolves to the installed package from an unrelated cwd, and
    ``python -m lightcompress --user-dir`` prints that path."""
    out = subprocess.run(
        [sys.executable, "-m", "lightcompress", "--user-dir"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert os.path.isfile(os.path.join(out, "__init__.py"))
    assert os.path.realpath(out) != os.path.realpath(harness.USER_DIR), (
        "the installed package should be found (run `make install`)"
    )
    harness.train(
        tiny_data,
        str(tmp_path / "ckpt"),
        harness.tiny_arch_args("transformer", layers=(1, 1)),
        user_dir="lightcompress",
        cwd=str(tmp_path),
        max_update=2,
        max_epoch=None,
    )
    assert os.path.exists(tmp_path / "ckpt" / "checkpoint_last.pt")
