"""DRY_RUN=1 is honoured by every shell script under examples/ and scripts/.

One parametrized test over every ``*.sh`` under examples/ and scripts/ (found with glob, so a new
script is covered without touching this file; the tools under scripts/ get typical arguments,
ARGS below): the script runs with DRY_RUN=1 and nothing else from the
environment (no USER_DIR, PYTHON, DATA_ROOT, SAVE_ROOT: as a user would first try it), in a
temporary working directory, with stubs first on PATH for every program that downloads, trains,
decodes, preprocesses or scores. A stub writes a marker file and exits 1, so a program that is
really run fails the script and the test. The stub python passes ``python -c`` (the library's
read-only look-ups: where lightcompress and fairseq are installed, whether a module is) to the
real interpreter and refuses anything else (a script, ``-m`` entry points, code on stdin).

The scripts run from a copy of examples/ and scripts/ inside the temporary directory: they find
the repository from their own path, so whatever they could write next to themselves lands in
the copy. Before and after each run, every file under the temporary directory (the copy, the
working directory, HOME) is listed with its size and modification time; the lists must be
equal. TMPDIR is the only place a script may write to.

There is no data in the temporary directory, so every row's check_tools reports (in a dry run
it reports and goes on) what a real run would miss: the report must come before the first
training command, which shows that the check runs before the first training step.

The demo (examples/translation/demo.sh) has its own dry-run tests (tests/test_demo.py).
"""

import glob
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPTS = sorted(
    rel
    for rel in (
        os.path.relpath(p, EXAMPLES)
        for p in glob.glob(os.path.join(EXAMPLES, "**", "*.sh"), recursive=True)
    )
)
TOOLS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "scripts", "*.sh")))
# typical arguments of the tools (with none they print their usage)
ARGS = {
    "measure_speed.sh": [
        "--data",
        "data-bin/x",
        "--path",
        "base=a.pt,lf=b.pt",
        "--bleu",
        "--json",
        "out/speed.json",
    ],
    "train_distributed.sh": [
        "data-bin/x",
        "--arch",
        "transformer",
        "--max-tokens",
        "4096",
        "--save-dir",
        "ckpt/x",
    ],
    "distill_data.sh": ["data-bin/x", "--path", "teacher.pt", "--out-dir", "data-bin/x.kd"],
}
# downloading, cloning, training, decoding, preprocessing, converting, scoring, tokenizing
FORBIDDEN = (
    "git",
    "wget",
    "curl",
    "gdown",
    "fairseq-train",
    "fairseq-generate",
    "fairseq-preprocess",
    "fairseq-eval-lm",
    "fairseq-score",
    "fairseq-interactive",
    "fairseq-validate",
    "fairseq-hydra-train",
    "lightcompress-convert",
    "lightcompress-params",
    "torchrun",
    "sacrebleu",
    "sacremoses",
    "subword-nmt",
    "spm_train",
    "spm_encode",
    "perl",
)
STUB = """#!/usr/bin/env bash
echo "{name} $*" >> "{marker}"
echo "dry-run stub: {name} was run" >&2
exit 1
"""
# python -c: the library's look-ups (importlib.util.find_spec); anything else is refused
STUB_PYTHON = """#!/usr/bin/env bash
if [[ "${{1:-}}" == -c ]]; then
  exec "{python}" "$@"
fi
echo "{name} $*" >> "{marker}"
echo "dry-run stub: {name} $* was run" >&2
exit 1
"""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """(copy of the repository's examples/, scripts/, configs/ and lightcompress/__main__.py)"""
    root = tmp_path_factory.mktemp("dry-run")
    repo = root / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(EXAMPLES, repo / "examples", ignore=ignore, symlinks=True)
    shutil.copytree(os.path.join(ROOT, "scripts"), repo / "scripts", ignore=ignore, symlinks=True)
    shutil.copytree(os.path.join(ROOT, "configs"), repo / "configs")  # read by a row's dry run
    (repo / "lightcompress").mkdir()
    shutil.copy(os.path.join(ROOT, "lightcompress", "__main__.py"), repo / "lightcompress")
    return repo


def stub_dir(tmp_path, marker):
    stubs = tmp_path / "stub-bin"
    stubs.mkdir()
    for name in FORBIDDEN:
        (stubs / name).write_text(STUB.format(name=name, marker=marker))
    for name in ("python", "python3"):
        text = STUB_PYTHON.format(name=name, marker=marker, python=sys.executable)
        (stubs / name).write_text(text)
    for path in stubs.iterdir():
        path.chmod(0o755)
    return stubs


def listing(*dirs, skip=()):
    """{path: (size, mtime_ns)} of every file, directory and link under dirs (skip excluded)."""
    out = {}
    for top in dirs:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                out[path] = (st.st_size, st.st_mtime_ns) if name in filenames else (0, 0)
    return out


@pytest.mark.parametrize(
    "rel",
    [os.path.join("examples", r) for r in SCRIPTS] + [os.path.join("scripts", t) for t in TOOLS],
)
def test_dry_run_downloads_trains_and_writes_nothing(rel, sandbox, tmp_path):
    marker = tmp_path / "programs-run.txt"
    stubs = stub_dir(tmp_path, marker)
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for d in (work, home, tmp):
        d.mkdir()
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "DRY_RUN": "1",
    }
    path = sandbox / rel
    before = listing(sandbox, tmp_path, skip={str(tmp)})
    proc = subprocess.run(  # stderr into stdout: the order of messages and commands is kept
        [shutil.which("bash"), str(path), *ARGS.get(os.path.basename(rel), [])],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    ran = marker.read_text() if marker.exists() else ""
    assert ran == "", f"{rel} ran with DRY_RUN=1:\n{ran}\noutput:\n{out}"
    assert proc.returncode == 0, out
    assert "command not found" not in out, out
    assert "--user-dir ''" not in out
    after = listing(sandbox, tmp_path, skip={str(tmp)})
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert changed == [], f"{rel} wrote outside TMPDIR with DRY_RUN=1"
    with open(path, encoding="utf-8") as f:
        runnable = f.readline().startswith("#!")
    lines = out.splitlines()
    printed = [line for line in lines if line.startswith("+ ")]
    if not runnable:  # a sourced library (common.sh, lib.sh) defines functions and runs nothing
        assert out == ""
        return
    assert printed, f"{rel} printed no command:\n{out}"  # a recipe shows what it would run
    with open(path, encoding="utf-8") as f:
        row = "common.sh" in f.read()  # a row of the recipe library (not the demo, not a tool)
    trains = [i for i, line in enumerate(lines) if line.startswith("+ fairseq-train ")]
    if trains and row:  # check_tools (missing data, at least) reports before the first training
        checks = [i for i, line in enumerate(lines) if "a real run would stop here" in line]
        assert checks and checks[0] < trains[0], out
