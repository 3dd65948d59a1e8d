"""What setup.py installs: the plugin and the runtime need no plotting, ROUGE or CTranslate2
package; those are extras (``lightcompress[plots]``, ``[rouge]``, ``[ct2]``, ``[bench]``), and
``make`` installs them all (the lock file). Without ctranslate2, ``lightcompress-export-ct2`` is
refused with one line and ``measure_speed --ct2`` gives no CTranslate2 rows and a note."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

from harness import REPO_ROOT, SOURCES

__all__: list[str] = []

EXTRA_ONLY = {"matplotlib", "adjusttext", "rouge-score", "ctranslate2"}


def _setup_keywords() -> dict:
    with open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    call = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "setup"
    )
    return {k.arg: k.value for k in call.keywords}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_plots_rouge_and_ctranslate2_are_extras_that_make_installs():
    kw = _setup_keywords()
    required = {_name(r) for r in ast.literal_eval(kw["install_requires"])}
    extras = ast.literal_eval(kw["extras_require"])
    assert not required & EXTRA_ONLY, required & EXTRA_ONLY
    assert {_name(r) for r in extras["plots"]} == {"matplotlib", "adjusttext"}
    assert {_name(r) for r in extras["rouge"]} == {"rouge-score"}
    assert {_name(r) for r in extras["ct2"]} == {"ctranslate2"}
    assert {_name(r) for r in extras["bench"]} == {"ctranslate2", "matplotlib", "adjusttext"}
    assert {_name(r) for r in extras["all"]} == {
        _name(r) for k, v in extras.items() if k != "all" for r in v
    }
    with open(os.path.join(REPO_ROOT, "requirements", "lock.txt"), encoding="utf-8") as f:
        locked = {_name(line) for line in f if line.strip() and not line.startswith("#")}
    assert {_name(r) for r in extras["all"]} <= locked  # (make installs the lock file)


def test_every_module_of_the_package_imports_without_the_extras():
    """matplotlib, rouge_score and ctranslate2 unimportable: every module of lightcompress still imports,
    and every name its ``__all__`` lists is there."""
    code = (
        "import sys, pkgutil, importlib\n"
        "for name in ('matplotlib', 'rouge_score', 'adjustText', 'ctranslate2'):\n"
        "    sys.modules[name] = None\n"
        "import lightcompress\n"
        "for m in pkgutil.walk_packages(lightcompress.__path__, 'lightcompress.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        mod = importlib.import_module(m.name)\n"
        "        for name in getattr(mod, '__all__', []):\n"
        "            assert hasattr(mod, name), (m.name, name)\n"
    )
    env = dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_compress_report_leaves_the_plot_out_without_matplotlib(tmp_path, monkeypatch):
    from lightcompress.compress import report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (import matplotlib raises)
    row = {"params": 1, "size_bytes": 1, "bleu": 1.0, "chrf": 1.0, "tokens_per_s": {}}
    path = str(tmp_path / "report.png")
    assert report.plot({"teacher": row, "student": row}, path, "title") is False
    assert not os.path.exists(path)


def _no_ct2_env(tmp_path) -> dict:
    """An environment where ``import ctranslate2`` fails, as where the extra is not installed."""
    block = tmp_path / "block" / "ctranslate2"
    block.mkdir(parents=True)
    (block / "__init__.py").write_text("raise ImportError('ctranslate2 is blocked')\n")
    return dict(
        os.environ,
        PYTHONPATH=f"{SOURCES}:{block.parent}",
        PYTHONWARNINGS="ignore",
        OMP_NUM_THREADS="1",
        PYTHON=sys.executable,
    )


def test_without_ctranslate2_the_export_is_one_line_and_measure_speed_notes_it(tmp_path):
    from lightcompress.compress.report import left_out

    env = _no_ct2_env(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from lightcompress.deploy.ct2 import cli_main; cli_main()",
            "--path",
            "teacher.pt",
            "--data",
            str(tmp_path),
            "-o",
            str(tmp_path / "ct2"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 2 and proc.stdout == ""
    missing = "ctranslate2 is not installed (pip install 'lightcompress[ct2]')"
    assert proc.stderr.splitlines() == [f"lightcompress-export-ct2: error: {missing}"]
    assert not (tmp_path / "ct2").exists()

    tiny = ":".join(f"--{k}=32" for k in ("encoder-embed-dim", "decoder-embed-dim"))
    tiny += ":--encoder-layers=1:--decoder-layers=1:--encoder-ffn-embed-dim=64"
    tiny += ":--decoder-ffn-embed-dim=64:--encoder-attention-heads=2:--decoder-attention-heads=2"
    out = tmp_path / "speed.json"
    proc = subprocess.run(
        [
            os.path.join(REPO_ROOT, "scripts", "measure_speed.sh"),
            "--arch",
            f"teacher=transformer:{tiny}",
            "--vocab-size",
            "50",
            "--ct2",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--num-sentences",
            "2",
            "--src-len",
            "5",
            "--quiet",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    note = f"{missing}: no CTranslate2 rows"
    assert f"note: {note}" in proc.stdout.splitlines()
    doc = json.loads(out.read_text())
    assert [(m["label"], m["engine"]) for m in doc["models"]] == [("teacher", "fairseq")]
    assert doc["notes"] == [note]
    # lightcompress-compress's report says why its teacher has no CTranslate2 row
    assert f"No CTranslate2 int8 row for the teacher: {note}" in left_out(str(tmp_path), doc, {})


def _fresh(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=SOURCES, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_part_that_needs_no_fairseq_imports_none():
    """In a fresh interpreter: the runtime and io import neither torch nor fairseq; the
    factorization library imports torch but no fairseq (the package ``__init__`` is light)."""
    code = (
        "import sys\n"
        "import lightcompress_runtime, lightcompress.io, lightcompress.errors\n"
        "assert 'torch' not in sys.modules and 'fairseq' not in sys.modules, 'runtime/io'\n"
        "import lightcompress.modules\n"
        "assert 'fairseq' not in sys.modules, 'modules'\n"
    )
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_fairseqs_user_dir_import_registers_the_plugin_and_its_checkpoint_allow_list():
    """fairseq's ``import_user_module`` (what ``--user-dir`` runs) registers every model,
    task and criterion and allow-lists fairseq checkpoints' types for ``weights_only``."""
    code = (
        "import argparse, torch\n"
        "from fairseq import utils\n"
        "from fairseq.criterions import CRITERION_REGISTRY\n"
        "from fairseq.models import ARCH_MODEL_REGISTRY\n"
        "from fairseq.tasks import TASK_REGISTRY\n"
        f"utils.import_user_module(argparse.Namespace(user_dir={REPO_ROOT + '/lightcompress'!r}))\n"
        "plugin = {c.__module__.split('.')[1] for r in (ARCH_MODEL_REGISTRY, TASK_REGISTRY,\n"
        "          CRITERION_REGISTRY) for c in r.values() if c.__module__.startswith('lightcompress.')}\n"
        "assert {'models', 'tasks', 'criterions', 'wid'} <= plugin, plugin\n"
        "assert argparse.Namespace in torch.serialization.get_safe_globals()\n"
    )
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
