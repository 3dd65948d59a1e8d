"""The deliberate copies of fairseq's beam search (FastGenerator in torch, OnnxGenerator in numpy,
fairseq's SequenceGenerator) are checked for drift by scripts/check_copies.py, as Hugging Face
checks its ``# Copied from`` blocks: a code change on one side fails until its mirrors are
brought in line and the fingerprints recorded again."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

__all__: list[str] = []

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "scripts", "check_copies.py")


def _script():
    spec = importlib.util.spec_from_file_location("check_copies", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(tmp_path):
    """A copy of the mirrored files in a checkout of their own."""
    mod = _script()
    for rel in mod.MIRRORED_FILES:
        dst = tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(REPO_ROOT, rel), dst)
    return mod


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_the_mirrored_beam_searches_are_in_step():
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    marks = 0
    for rel in _script().MIRRORED_FILES:
        with open(os.path.join(REPO_ROOT, rel), encoding="utf-8") as f:
            marks += f.read().count("# Mirrors: ")
    assert marks == 4  # generate and _finalize, in torch and in numpy


def test_a_code_change_on_one_side_fails_naming_its_mirror_until_fixed(tmp_path):
    mod = _tree(tmp_path)
    runtime = tmp_path / "lightcompress" / "runtime" / "search.py"
    text = runtime.read_text()
    # comments, blank lines and the docstring do not count
    cosmetic = text.replace(
        '"""fairseq\'s ``finalize_hypos`` (as', '"""fairseq\'s finalize_hypos (as'
    )
    cosmetic = cosmetic.replace("# no leading EOS", "# (without the leading EOS)")
    assert cosmetic != text
    runtime.write_text(cosmetic)
    assert mod.check(str(tmp_path)) == []
    # a code change does: both the changed function and its torch mirror's line name it
    drifted = cosmetic.replace(
        "tokens_clone[:, step] = self.eos", "tokens_clone[:, step] = self.pad"
    )
    assert drifted != cosmetic
    runtime.write_text(drifted)
    problems = mod.check(str(tmp_path))
    assert any("search.py" in p and "OnnxGenerator._finalize changed since" in p
               for p in problems), problems  # fmt: skip
    assert any("generator.py" in p and "OnnxGenerator._finalize changed (fingerprint" in p
               and "FastGenerator._finalize in line" in p for p in problems), problems  # fmt: skip
    assert all("_finalize" in p for p in problems)  # generate is untouched
    # --fix records the new fingerprints (after the copies were brought in line)
    assert mod.check(str(tmp_path), fix=True) == []
    assert mod.check(str(tmp_path)) == []


def test_a_mirror_line_away_from_its_def_is_an_error(tmp_path):
    mod = _tree(tmp_path)
    runtime = tmp_path / "lightcompress" / "runtime" / "search.py"
    lines = runtime.read_text().split("\n")
    i = next(i for i, line in enumerate(lines) if "# Mirrors: " in line)
    lines.insert(i + 1, "")
    runtime.write_text("\n".join(lines))
    with pytest.raises(mod.CopyError, match="must stand right above a def"):
        mod.check(str(tmp_path))
