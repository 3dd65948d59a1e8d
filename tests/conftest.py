"""Shared fixtures (a tiny binarized corpus and a tiny trained Transformer, built once per test
run) and the suite's scheduling under pytest-xdist.

``make test`` runs ``pytest -n auto`` (one worker per core). Here:

- the session fixtures are built once per run, not once per worker: the first worker that needs
  one builds it in the run's shared temporary directory while the others wait on a file lock;
- ``-n`` with the default ``--dist load`` uses this suite's scheduler: a module that defines
  module-scoped fixtures goes to one worker whole (its trained models are built once), every
  other test is a unit of its own; the units are sent longest first, estimated from the
  durations of the last run (kept in pytest's cache, ``.pytest_cache``) or, on a fresh clone,
  from ``SLOW`` below;
- the run's per-test durations go to that cache, and the slowest modules are printed after
  ``--durations``' slowest tests.
"""

import fcntl
import functools
import os
import re
import shutil
import sys
from collections import OrderedDict, defaultdict

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


@pytest.fixture(scope="session")
def bpe_toy(tmp_path_factory):
    """The IWSLT-style BPE toy (tests/test_deploy_text.py's ``_prepare``: Moses, lowercasing,
    subword-nmt, separate dictionaries), built once per run: ``{"raw", "bpe", "codes", "data"}``
    (the raw and BPE text folders, the BPE codes, the data-bin)."""
    from test_deploy_text import _prepare

    root = shared_dir(tmp_path_factory, "bpe_toy", _prepare)
    return {
        "raw": root / "raw",
        "bpe": root / "bpe",
        "codes": str(root / "code"),
        "data": str(root / "bin"),
    }


BLEU_FLAGS = [
    "--eval-bleu",
    "--eval-bleu-args",
    '{"beam": 1, "max_len_b": 20}',
    "--best-checkpoint-metric",
    "bleu",
    "--maximize-best-checkpoint-metric",
]


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
# clone without the cache of a last run: make test on 2 cores, serially, 2026-11-27 (scaled by
# what the faster-tests changes of 2026-11-29 measured for the entries they changed). A module's
# own entry is added once to the module's unit (its module fixtures' set-up); tests not listed
# count DEFAULT_SECONDS.
SLOW = {
    "tests/test_bad_inputs_compress.py::test_kill_9_in_every_step": 50,
    "tests/test_bad_inputs_compress.py::test_dawid_reaches_its_target": 35,
    "tests/test_compress.py::test_a_run_stopped_during_fine_tuning": 33,
    "tests/test_compress.py::test_hypoformer_from_the_post_ln_teacher": 27,
    "tests/test_compress_teachers.py": 15,
    "tests/test_bad_inputs_hydra.py": 20,
    "tests/test_compress_teachers.py::test_end_to_end_from_a_bpe_teacher": 30,
    "tests/test_shortlist.py::test_fast_path": 21,
    "tests/test_shortlist.py::test_onnx_shortlist_export": 21,
    "tests/test_shortlist.py::test_split_rows": 5,
    "tests/test_dawid_glue.py::test_prepare_glue_mrpc_offline": 20,
    "tests/test_readme_commands.py": 17,
    "tests/test_distributed.py": 16,
    "tests/test_web.py": 60,
    "tests/test_web.py::test_onnx_runtime_web_translates_as_the_runtime_but_for_float_rounding": 45,
    "tests/test_web.py::test_the_page_in_headless_chromium_translates_as_the_runtime": 30,
    "tests/test_web.py::test_the_page_stays_responsive_and_answers_every_line": 15,
}
DEFAULT_SECONDS = 1.0
CACHE_KEY = "lightcompress/durations"
_MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\([^)]*scope=["']module["']""")


def _module_of(nodeid):
    return nodeid.split("::", 1)[0]


@functools.cache
def _defines_module_fixtures(path):
    try:
        with open(path, encoding="utf-8") as f:
            return bool(_MODULE_FIXTURE.search(f.read()))
    except OSError:
        return False


def _make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):
        """Units of work: a module that defines module-scoped fixtures (its trained models are
        built once, on one worker), or else a single test; the units are sent longest first."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            cache = getattr(config, "cache", None)
            self.cached = cache.get(CACHE_KEY, {}) if cache is not None else {}
            self.ordered = False

        def _split_scope(self, nodeid):
            module = _module_of(nodeid)
            return module if _defines_module_fixtures(self.config.rootpath / module) else nodeid

        def _estimate(self, scope, nodeids):
            if any(n in self.cached for n in nodeids):
                return sum(self.cached.get(n, DEFAULT_SECONDS) for n in nodeids)
            total = SLOW.get(scope, 0) if "::" not in scope else 0
            for n in nodeids:
                keys = [k for k in SLOW if "::" in k and n.startswith(k)]
                total += SLOW[max(keys, key=len)] if keys else DEFAULT_SECONDS
            return total

        def _assign_work_unit(self, node):
            if not self.ordered:  # the first assignment: the queue is complete
                units = sorted(self.workqueue.items(), key=lambda u: -self._estimate(*u))
                self.workqueue = OrderedDict(units)  # (stable: ties keep collection order)
                self.ordered = True
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n N`` (``--dist load``, the default): this suite's scheduler."""
    return _make_scheduler(config, log) if config.getvalue("dist") == "load" else None


class _Durations:
    """The run's durations (set-up + call + tear-down per test), in the main process."""

    def __init__(self):
        self.seconds = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] += report.duration


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


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    """After ``--durations``' slowest tests: the slowest modules."""
    durations = config.pluginmanager.get_plugin("lightcompress-durations")
    if durations is None or not durations.seconds or not config.getoption("durations"):
        return
    modules = defaultdict(float)
    for nodeid, seconds in durations.seconds.items():
        modules[_module_of(nodeid)] += seconds
    top = sorted(modules.items(), key=lambda kv: -kv[1])[:10]
    terminalreporter.write_sep("=", f"slowest {len(top)} modules (their tests' durations summed)")
    for module, seconds in top:
        terminalreporter.write_line(f"{seconds:8.2f}s {module}")
    kept = (
        f"; the per-test durations are kept in pytest's cache ({CACHE_KEY}): the next run "
        "under xdist starts the slowest work first"
        if getattr(config, "cache", None) is not None
        else ""
    )
    terminalreporter.write_line(f"{sum(modules.values()):8.2f}s in all{kept}")
