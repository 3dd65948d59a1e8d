"""The README's command blocks, run as written where they can run here: its deploy commands on
the demo's layout (``data/demo/bin``, ``data/demo/spm/spm.model``: what ``make demo`` creates),
with tiny trained checkpoints in the places the commands name. A command that names a path the
demo never creates, or a flag a command does not take, fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from harness import REPO_ROOT, make_parallel_corpus

__all__: list[str] = []

README = os.path.join(REPO_ROOT, "README.md")


def readme_blocks(section: str) -> list[str]:
    """The shell commands of the ```bash blocks under the README's ``## {section}``, one string
    per command (continuation lines joined, comments dropped)."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    part = text[start : end if end != -1 else len(text)]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", part, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()  # (a comment; no '#' in arguments)
            if line:
                commands.append(line)
    return commands


def test_the_readme_sections_hold_commands():
    assert len(readme_blocks("Deploy")) == 5
    assert any(c.startswith("make demo") for c in readme_blocks("Quick start"))


@pytest.fixture(scope="module")
def demo_layout(tmp_path_factory):
    """A directory laid out as ``make demo`` leaves it, with tiny trained models where the
    README's commands look for them."""
    from test_deploy import TINY, _binarize, _sentencepiece, make_checkpoint

    root = tmp_path_factory.mktemp("readme")
    raw = make_parallel_corpus(str(root / "raw"), n_train=300, n_valid=10, n_test=12)
    spm_model, pieces = _sentencepiece(raw, root)
    demo = root / "data" / "demo"
    (demo / "spm").mkdir(parents=True)
    shutil.copyfile(spm_model, demo / "spm" / "spm.model")
    data = _binarize(pieces, str(demo / "bin"))
    teacher = make_checkpoint(data, str(root / "teacher.pt"), "transformer", TINY, updates=20)
    lf = make_checkpoint(
        data,
        str(root / "lf.pt"),
        "lightformer_iwslt_de_en",
        TINY + ["--lc-rank", "8", "--lc-embed-rank", "8", "--lc-encoder-groups", "1"],
        updates=20,
    )
    (root / "student").mkdir()
    shutil.copyfile(lf, root / "student" / "checkpoint_best.pt")
    for name in ("ckpt.pt", "t.pt"):
        shutil.copyfile(teacher, root / name)
    shutil.copyfile(os.path.join(raw, "test.de"), root / "test.de")
    return root


def _expand(command: str) -> str:
    """What a reader types for the README's placeholders: optional ``[...]`` parts left out,
    ``DATA`` the demo's data-bin; the speed script at one short run."""
    command = re.sub(r"\s*\[[^\]]*\]", "", command)
    command = re.sub(r"(?<![\w/])DATA(?![\w/])", "data/demo/bin", command)
    if command.startswith("scripts/measure_speed.sh"):
        command = f"{REPO_ROOT}/{command} --runs 1 --warmup 0 --num-sentences 4"
    return command


def test_the_readme_deploy_commands_run_on_the_demo_layout(demo_layout):
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONWARNINGS"] = "ignore"
    ran = []
    for command in readme_blocks("Deploy"):
        line = _expand(command)
        proc = subprocess.run(
            ["bash", "-c", line],
            cwd=demo_layout,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        ran.append(line)
        if "> test.en" in line:  # one translation per input line
            with open(demo_layout / "test.de") as src, open(demo_layout / "test.en") as out:
                assert len(out.read().split("\n")) == len(src.read().split("\n"))
            os.remove(demo_layout / "test.en")
    assert (demo_layout / "model-onnx" / "translate.py").is_file()
    assert (demo_layout / "teacher-ct2" / "model.bin").is_file()
    assert len(ran) == 5
