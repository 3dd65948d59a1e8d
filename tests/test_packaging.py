"""What setup.py installs: the plugin and the runtime need no plotting or ROUGE package; those are
extras (``lightcompress[plots]``, ``[rouge]``), and ``make`` installs them all (the lock file)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

from harness import REPO_ROOT

__all__: list[str] = []

EXTRA_ONLY = {"matplotlib", "adjusttext", "rouge-score"}


def _setup_keywords() -> dict:
    with open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", None) == "setup")  # fmt: skip
    return {k.arg: k.value for k in call.keywords}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_plots_and_rouge_are_extras_that_make_installs():
    kw = _setup_keywords()
    required = {_name(r) for r in ast.literal_eval(kw["install_requires"])}
    extras = ast.literal_eval(kw["extras_require"])
    assert not required & EXTRA_ONLY, required & EXTRA_ONLY
    assert {_name(r) for r in extras["plots"]} == {"matplotlib", "adjusttext"}
    assert {_name(r) for r in extras["rouge"]} == {"rouge-score"}
    assert {_name(r) for r in extras["all"]} == {_name(r) for k, v in extras.items()
                                                 if k != "all" for r in v}  # fmt: skip
    with open(os.path.join(REPO_ROOT, "requirements", "lock.txt"), encoding="utf-8") as f:
        locked = {_name(line) for line in f if line.strip() and not line.startswith("#")}
    assert {_name(r) for r in extras["all"]} <= locked  # (make installs the lock file)


def test_every_module_of_the_package_imports_without_the_extras():
    """matplotlib and rouge_score unimportable: every module of lightcompress still imports,
    and every name its ``__all__`` lists is there."""
    code = (
        "import sys, pkgutil, importlib\n"
        "sys.modules['matplotlib'] = sys.modules['rouge_score'] = sys.modules['adjustText'] = None\n"
        "import lightcompress\n"
        "for m in pkgutil.walk_packages(lightcompress.__path__, 'lightcompress.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        mod = importlib.import_module(m.name)\n"
        "        for name in getattr(mod, '__all__', []):\n"
        "            assert hasattr(mod, name), (m.name, name)\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_compress_report_leaves_the_plot_out_without_matplotlib(tmp_path, monkeypatch):
    from lightcompress.compress import report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (import matplotlib raises)
    row = {"params": 1, "size_bytes": 1, "bleu": 1.0, "chrf": 1.0, "tokens_per_s": {}}
    path = str(tmp_path / "report.png")
    assert report.plot({"teacher": row, "student": row}, path, "title") is False
    assert not os.path.exists(path)
