"""The suite's own scheduling under pytest-xdist (tests/conftest.py), run on a tiny suite with
two workers: a module that defines module-scoped fixtures runs whole on one worker (its
fixture is set up once), a session fixture built with ``shared_dir`` is built once for both
workers, the units go out longest first, and the durations are kept for the next run."""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# both modules use the same session fixture, built with shared_dir
ZOO = """
import os, time

import pytest
from conftest import shared_dir

@pytest.fixture(scope="session")
def zoo(tmp_path_factory):
    def build(path):
        time.sleep(0.5)  # (the other worker asks meanwhile)
        with open(os.environ["LOG"], "a") as f:
            f.write("zoo built\\n")
        (path / "weights").write_text("w")
    return shared_dir(tmp_path_factory, "zoo", build)

def log(line):
    with open(os.environ["LOG"], "a") as f:
        f.write(line + "\\n")
"""

GROUPED = (
    ZOO
    + """
@pytest.fixture(scope="module")
def model():
    log("model set up")
    return 42

@pytest.mark.parametrize("i", range(6))
def test_uses_the_model(zoo, model, i):
    assert (zoo / "weights").read_text() == "w"
    log(f"grouped {os.environ['PYTEST_XDIST_WORKER']}")
"""
)

SINGLES = (
    ZOO
    + """
@pytest.mark.parametrize("i", range(6))
def test_single(zoo, i):
    assert (zoo / "weights").read_text() == "w"
    log(f"single {os.environ['PYTEST_XDIST_WORKER']}")

def test_slow():
    log("slow")
"""
)


def _run(root, log, workers):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(LOG=str(log), PYTHONWARNINGS="ignore")
    args = ["-q", "-n", str(workers), "--durations", "3", "tests"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_modules_with_module_fixtures_stay_whole_and_the_slowest_go_first(tmp_path):
    root = tmp_path / "suite"
    (root / "tests").mkdir(parents=True)
    for name in ("conftest.py", "harness.py"):
        shutil.copy(os.path.join(HERE, name), root / "tests")
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (root / "tests" / "test_grouped.py").write_text(GROUPED)
    (root / "tests" / "test_singles.py").write_text(SINGLES)
    log = tmp_path / "log.txt"

    proc = _run(root, log, 2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "13 passed" in proc.stdout, proc.stdout[-3000:]
    lines = log.read_text().splitlines()
    assert lines.count("model set up") == 1, lines  # the module is one unit, on one worker
    grouped = {line for line in lines if line.startswith("grouped ")}
    assert len(grouped) == 1, lines
    # the first single test went to the other worker; the zoo was built once for both
    assert {line.split()[-1] for line in lines if line.startswith(("grouped ", "single "))} == {
        "gw0",
        "gw1",
    }, lines
    assert lines.count("zoo built") == 1, lines
    assert "slowest 2 modules" in proc.stdout  # after --durations' slowest tests

    # the durations are kept; the next run sends the test that took longest first
    cache = root / ".pytest_cache" / "v" / "lightcompress" / "durations"
    durations = json.loads(cache.read_text())
    assert len(durations) == 13, durations
    durations["tests/test_singles.py::test_slow"] = 1000.0
    cache.write_text(json.dumps(durations))
    log.unlink()
    proc = _run(root, log, 1)  # (one worker: the order it gets is the order it runs)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert log.read_text().splitlines()[0] == "slow", log.read_text()
