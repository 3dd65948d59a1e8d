"""Shared fixtures (a tiny binarized corpus and a tiny trained Transformer, built once per test
run) and the suite's scheduling under pytest-xdist.

``make test`` runs ``pytest -n 2 --dist loadgroup --no-loadscope-reorder``. Here:

- the session fixtures are built once per run, not once per worker: the first worker that needs
  one builds it in the run's shared temporary directory while the others wait on a file lock;
- the tests that use a module-scoped fixture of their module go to one worker together
  (an ``xdist_group`` per module), so that a module's trained models are built once; every other
  test is scheduled on its own;
- the slowest work starts first: each unit (a group or a single test) is estimated from the
  durations of the last run (kept in pytest's cache, ``.pytest_cache``) or, on a fresh clone,
  from ``SLOW`` below, and the units are sent longest first;
- the run's per-test durations go to the cache and the slowest modules are printed at the end,
  next to ``--durations``.
"""

import fcntl
import os
import re
import shutil
import sys
from collections import defaultdict

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness

os.environ.setdefault("OMP_NUM_THREADS", "1")


def shared_dir(tmp_path_factory, name, build):
    """A directory made once per test run by ``build(path)`` and returned to every caller: under
    pytest-xdist, in the temporary directory all workers of the run share (the first worker that
    asks builds it, the others wait on a file lock). Its users read it, they never write in it."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)  # what a failed build left
            path.mkdir()
            build(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A binarized toy de->en corpus (joined dictionary). Returns the data-bin directory (the raw
    text is in ``../raw``)."""

    def build(root):
        raw = harness.make_parallel_corpus(str(root / "raw"))
        harness.preprocess(raw, str(root / "bin"))

    return str(shared_dir(tmp_path_factory, "tiny_corpus", build) / "bin")


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

    def build(save_dir):
        harness.train(
            tiny_data,
            str(save_dir),
            harness.tiny_arch_args("transformer"),
            extra=BLEU_FLAGS,
            max_epoch=10,
        )

    return str(shared_dir(tmp_path_factory, "tiny_transformer", build))


# ------------------------------------------------------------------- scheduling under xdist

# Seconds per test (node id prefix -> seconds, the longest matching prefix wins), for a fresh
# clone without the cache of a last run: make test on 2 cores, serially, 2026-11-27. A module's
# entry counts once for the module's group (its module fixtures' set-up); tests not listed
# count DEFAULT_SECONDS.
SLOW = {
    "tests/test_bad_inputs_compress.py::test_kill_9_in_every_step": 69,
    "tests/test_bad_inputs_compress.py::test_dawid_reaches_its_target": 44,
    "tests/test_compress.py::test_a_run_stopped_during_fine_tuning": 42,
    "tests/test_compress.py::test_hypoformer_from_the_post_ln_teacher": 27,
    "tests/test_compress_teachers.py": 42,
    "tests/test_compress_teachers.py::test_end_to_end_from_a_bpe_teacher": 30,
    "tests/test_shortlist.py::test_fast_path": 21,
    "tests/test_shortlist.py::test_onnx_shortlist_export": 21,
    "tests/test_shortlist.py::test_split_rows": 5,
    "tests/test_dawid_glue.py::test_prepare_glue_mrpc_offline": 20,
    "tests/test_readme_commands.py": 17,
    "tests/test_distributed.py": 16,
}
DEFAULT_SECONDS = 1.0
CACHE_KEY = "lightcompress/durations"


def _module_of(nodeid):
    return nodeid.split("::", 1)[0]


def _uses_a_module_fixture(item):
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope == "module" for d in defs)


def _estimate(nodeid, cached):
    if nodeid in cached:
        return cached[nodeid]
    keys = [k for k in SLOW if "::" in k and nodeid.startswith(k)]
    return SLOW[max(keys, key=len)] if keys else DEFAULT_SECONDS


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """In an xdist worker: group each module's users of its module fixtures, then order the
    units longest first (every worker computes the same order; the scheduler keeps it)."""
    if not hasattr(config, "workerinput"):
        return
    cache = getattr(config, "cache", None)
    cached = cache.get(CACHE_KEY, {}) if cache is not None else {}
    units = {}  # key -> [items], in collection order
    for item in items:
        module = _module_of(item.nodeid)
        key = module if _uses_a_module_fixture(item) else item.nodeid
        if key == module:
            item.add_marker(pytest.mark.xdist_group(os.path.basename(module)))
        units.setdefault(key, []).append(item)

    def seconds(key):
        total = sum(_estimate(item.nodeid, cached) for item in units[key])
        if key in SLOW and not any(item.nodeid in cached for item in units[key]):
            total += SLOW[key]
        return total

    order = sorted(units, key=seconds, reverse=True)  # stable: ties keep collection order
    items[:] = [item for key in order for item in units[key]]


_GROUP = re.compile(r"@[^\]]*$")  # the "@group" suffix xdist's loadgroup adds to node ids


def _plain(nodeid):
    return _GROUP.sub("", nodeid)


class _Durations:
    """The run's durations (set-up + call + tear-down per test), in the main process."""

    def __init__(self):
        self.seconds = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[_plain(report.nodeid)] += report.duration


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Durations(), "lightcompress-durations")


def pytest_sessionfinish(session):
    durations = session.config.pluginmanager.get_plugin("lightcompress-durations")
    cache = getattr(session.config, "cache", None)
    if durations is None or cache is None or not durations.seconds:
        return
    kept = cache.get(CACHE_KEY, {})
    kept.update({k: round(v, 3) for k, v in durations.seconds.items()})
    cache.set(CACHE_KEY, kept)


def pytest_terminal_summary(terminalreporter, config):
    durations = config.pluginmanager.get_plugin("lightcompress-durations")
    if durations is None or not durations.seconds or not config.getoption("durations"):
        return
    modules = defaultdict(float)
    for nodeid, seconds in durations.seconds.items():
        modules[_module_of(nodeid)] += seconds
    top = sorted(modules.items(), key=lambda kv: -kv[1])[:10]
    terminalreporter.write_sep("=", f"slowest {len(top)} modules (tests' durations summed)")
    for module, seconds in top:
        terminalreporter.write_line(f"{seconds:8.2f}s {module}")
    total = sum(modules.values())
    terminalreporter.write_line(
        f"{total:8.2f}s in all tests; per-test durations of this run are kept in "
        f"pytest's cache ({CACHE_KEY}) to order the next run, slowest first"
    )
