"""The torch-free runtime (:mod:`lightcompress_runtime`): a package that imports numpy,
onnxruntime and the tokenizers only, carried file for file by every ONNX export as ``runtime/``
beside the ``translate.py`` that runs it; exports of the format before (version 1: the runtime as
module copies) still load, later ones are refused with one line naming their version."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from harness import SOURCES

__all__: list[str] = []

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO_ROOT, "runtime", "lightcompress_runtime")
# what the runtime may import besides itself: the standard library and these
THIRD_PARTY = {"numpy", "onnxruntime", "sentencepiece", "sacremoses", "subword_nmt"}


def _blocked_env(tmp_path, names=("torch", "fairseq")) -> dict:
    """An environment where ``import torch`` (and fairseq) fails; the checkout importable."""
    block = tmp_path / ("block-" + "-".join(names))
    for name in names:
        (block / name).mkdir(parents=True, exist_ok=True)
        (block / name / "__init__.py").write_text(f"raise ImportError('{name} is blocked')\n")
    path = os.pathsep.join([str(block), SOURCES])
    return dict(os.environ, PYTHONPATH=path, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A tiny Transformer's export (no tokenizer) and ids to translate."""
    import torch

    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.measure.specs import build_random_model

    torch.manual_seed(0)
    model, task, _ = build_random_model(
        "transformer",
        40,
        [
            "--encoder-layers",
            "1",
            "--decoder-layers",
            "1",
            "--encoder-embed-dim",
            "16",
            "--decoder-embed-dim",
            "16",
            "--encoder-ffn-embed-dim",
            "32",
            "--decoder-ffn-embed-dim",
            "32",
            "--encoder-attention-heads",
            "2",
            "--decoder-attention-heads",
            "2",
        ],
        True,
        return_task=True,
    )
    out = tmp_path_factory.mktemp("runtime") / "onnx"
    export_onnx(model.eval(), task, str(out))
    symbols = task.source_dictionary.symbols
    text = "".join(
        " ".join(symbols[i] for i in ids) + "\n" for ids in ([5, 6, 7], [9, 4, 11, 12, 8], [20])
    )
    return {"dir": str(out), "text": text}


def test_the_runtime_imports_nothing_of_lightcompress_and_no_torch():
    """Relative imports only (an export carries the package without the rest), and no module
    outside numpy, onnxruntime and the tokenizers' packages."""
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for name in sorted(os.listdir(PACKAGE)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            bad += [
                f"{name}:{node.lineno} imports {r}"
                for r in roots
                if r not in stdlib and r not in THIRD_PARTY
            ]
    assert not bad, bad


def test_the_runtime_package_imports_and_translates_with_torch_blocked(export, tmp_path):
    code = (
        "import sys\n"
        "import lightcompress_runtime as rt\n"
        "from lightcompress_runtime import OnnxTranslator\n"
        "t = OnnxTranslator(sys.argv[1], tokenized=True)\n"
        "print(t.translate(sys.stdin.read().splitlines()))\n"
        "assert 'torch' not in sys.modules and 'fairseq' not in sys.modules, 'torch imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, export["dir"]],
        input=export["text"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_blocked_env(tmp_path),
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr


def _translate_py(folder, *args, stdin="", env=None, cwd=None):
    return subprocess.run(
        [sys.executable, os.path.join(folder, "translate.py"), folder, "--tokenized", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=cwd,
    )


def test_an_export_runs_as_a_script_and_with_python_m(export, tmp_path):
    """``python EXPORT/translate.py EXPORT``, ``python -m runtime`` in the export's folder and
    ``python -m lightcompress_runtime EXPORT`` give the same translations (torch blocked)."""
    env = _blocked_env(tmp_path, ("torch", "fairseq", "lightcompress"))
    script = _translate_py(export["dir"], stdin=export["text"], env=env, cwd=str(tmp_path))
    assert script.returncode == 0, script.stderr
    assert len(script.stdout.splitlines()) == 3
    inside = subprocess.run(
        [sys.executable, "-m", "runtime", ".", "--tokenized"],
        input=export["text"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=export["dir"],
    )
    assert inside.returncode == 0, inside.stderr
    package = subprocess.run(
        [sys.executable, "-m", "lightcompress_runtime", export["dir"], "--tokenized"],
        input=export["text"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_blocked_env(tmp_path),
        cwd=str(tmp_path),
    )
    assert package.returncode == 0, package.stderr
    assert script.stdout == inside.stdout == package.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "lightcompress_runtime", str(tmp_path / "none"), "--tokenized"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_blocked_env(tmp_path),
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert bad.stderr.startswith("python -m lightcompress_runtime: error: model directory not")


def test_the_runtime_installs_and_translates_where_there_is_no_torch(export, tmp_path):
    """``pip install ./runtime[sentencepiece]`` into a fresh virtual environment (no torch, no
    fairseq, no lightcompress): the package imports, ``python -m lightcompress_runtime EXPORT``
    and ``OnnxTranslator`` give the translations of the checkout's runtime."""
    source = tmp_path / "runtime-src"  # (pip builds in the source folder: not the checkout's)
    shutil.copytree(
        os.path.join(REPO_ROOT, "runtime"),
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "-q",
            f"{source}[sentencepiece]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=str(tmp_path),
    )
    assert install.returncode == 0, install.stderr[-2000:]
    code = (
        "import importlib.util, sys\n"
        "for name in ('torch', 'fairseq', 'lightcompress'):\n"
        "    assert importlib.util.find_spec(name) is None, name\n"
        "import lightcompress_runtime as rt, sentencepiece\n"
        "assert rt.__file__.startswith(sys.prefix), rt.__file__\n"
        f"t = rt.OnnxTranslator({export['dir']!r}, tokenized=True, beam=5, threads=1)\n"
        "print(*t.translate(sys.stdin.read().splitlines()), sep='\\n')\n"
    )
    api = subprocess.run(
        [python, "-c", code],
        input=export["text"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=str(tmp_path),
    )
    assert api.returncode == 0, api.stderr[-2000:]
    command = subprocess.run(
        [python, "-m", "lightcompress_runtime", export["dir"], "--tokenized"],
        input=export["text"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=str(tmp_path),
    )
    assert command.returncode == 0, command.stderr[-2000:]
    ours = subprocess.run(
        [sys.executable, "-m", "lightcompress_runtime", export["dir"], "--tokenized"],
        input=export["text"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_blocked_env(tmp_path),
        cwd=str(tmp_path),
    )
    assert ours.returncode == 0, ours.stderr
    assert len(command.stdout.splitlines()) == 3
    assert command.stdout == api.stdout == ours.stdout


def test_an_exports_translate_py_loaded_by_path_gives_its_own_runtime(export):
    """A program that loads ``translate.py`` by its path (the memory measurement does) gets the
    export's OnnxGenerator, from the export's ``runtime/``."""
    code = (
        "import importlib.util, os, sys\n"
        "path = os.path.join(sys.argv[1], 'translate.py')\n"
        "spec = importlib.util.spec_from_file_location('export_runtime', path)\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "import numpy as np, runtime\n"
        "g = module.OnnxGenerator(sys.argv[1], beam_size=2)\n"
        "print(len(g.generate(np.array([[5, 6, 2]]), np.array([3]))[0]))\n"
        "print(os.path.dirname(runtime.__file__))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, export["dir"]],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    hyps, where = proc.stdout.split()
    assert hyps == "2" and os.path.samefile(where, os.path.join(export["dir"], "runtime"))


def _as_version(export, tmp_path, version, old_layout=False) -> str:
    """A copy of the export with another ``"version"`` in its config (the manifest written
    again); ``old_layout``: the files of a version 1 export (the runtime as the module copies
    ``translate.py`` and ``onnx_files.py``, no ``runtime/``)."""
    from lightcompress.deploy.onnx_tools import write_manifest

    out = tmp_path / f"v{version}"
    shutil.copytree(export["dir"], out)
    config = json.loads((out / "config.json").read_text())
    config["version"] = version
    (out / "config.json").write_text(json.dumps(config, indent=1))
    if old_layout:
        shutil.rmtree(out / "runtime")
        (out / "translate.py").write_text("# the old runtime's copy\n")
        (out / "onnx_files.py").write_text("# the old runtime's files\n")
    os.remove(out / "MANIFEST.sha256")
    write_manifest(str(out))
    return str(out)


def test_an_export_of_the_format_before_still_loads(export, tmp_path):
    from lightcompress_runtime import OnnxGenerator, OnnxTranslator, load_config

    assert load_config(export["dir"])["version"] == 2
    old = _as_version(export, tmp_path, 1, old_layout=True)
    src, lengths = np.array([[0, 5, 6, 2], [9, 4, 11, 2]]), np.array([3, 4])
    new_out = OnnxGenerator(export["dir"], beam_size=3).generate(src, lengths)
    old_out = OnnxGenerator(old, beam_size=3).generate(src, lengths)
    for a, b in zip(new_out, old_out):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        assert [h["score"] for h in a] == [h["score"] for h in b]
    lines = export["text"].splitlines()
    assert OnnxTranslator(old, tokenized=True).translate(lines) == OnnxTranslator(
        export["dir"], tokenized=True
    ).translate(lines)


def test_an_export_of_a_later_format_is_refused_with_one_line_naming_its_version(export, tmp_path):
    from lightcompress_runtime import OnnxError, OnnxTranslator

    later = _as_version(export, tmp_path, 3)
    with pytest.raises(OnnxError, match="format version 3, this runtime reads versions 1 to 2"):
        OnnxTranslator(later, tokenized=True)
    proc = _translate_py(later, stdin="5 6\n")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "format version 3" in lines[0], lines
    assert lines[0].startswith("translate.py: error: ")


def test_an_export_made_in_a_process_runs_its_own_shipped_copy(export):
    """The shipped files are the package's, byte for byte (no module renamed on copy)."""
    spec = importlib.util.find_spec("lightcompress_runtime")
    source = os.path.dirname(spec.origin)
    shipped = os.path.join(export["dir"], "runtime")
    names = sorted(n for n in os.listdir(source) if n.endswith(".py"))
    assert sorted(n for n in os.listdir(shipped) if n.endswith(".py")) == names
    for name in names:
        with (
            open(os.path.join(source, name), "rb") as a,
            open(os.path.join(shipped, name), "rb") as b,
        ):
            assert a.read() == b.read(), name


def test_there_is_one_beam_search():
    """The ONNX runtime and the PyTorch fast path run the same search
    (:class:`lightcompress_runtime.search.BeamSearch`) over their step: no other module of the
    package selects candidates or finalizes hypotheses (fairseq's ``finalize_hypos``)."""
    from lightcompress.deploy.generator import FastGenerator, TorchStep
    from lightcompress_runtime import BeamSearch, OnnxGenerator, OnnxStep
    from lightcompress_runtime.search import Step

    assert issubclass(FastGenerator, BeamSearch) and issubclass(OnnxGenerator, BeamSearch)
    for step in (TorchStep, OnnxStep):
        assert {"start", "step"} <= set(vars(step)) and not issubclass(step, BeamSearch)
    assert {"start", "step"} <= set(vars(Step))
    searches = []
    for root in (os.path.join(REPO_ROOT, "lightcompress"), os.path.join(REPO_ROOT, "runtime")):
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "build" and not d.endswith(".egg-info")]
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), encoding="utf-8") as f:
                        tree = ast.parse(f.read())
                    found = [
                        n.name
                        for n in ast.walk(tree)
                        if isinstance(n, ast.FunctionDef)
                        and n.name in ("_finalize", "finalize_hypos", "_generate")
                    ]
                    if found:
                        searches.append(os.path.relpath(os.path.join(folder, name), REPO_ROOT))
    assert searches == [os.path.join("runtime", "lightcompress_runtime", "search.py")], searches
