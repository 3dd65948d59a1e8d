"""The package's layers hold: no module imports from a higher layer, no import circle, no source
file over the line bound.

Layers, bottom to top:

0. foundation: ``errors``, ``cli``, ``io``, ``compat``, ``checkpoint``, ``build``, and the
   torch-free ``runtime`` of ONNX exports (it imports nothing of the package: tests/test_runtime.py);
1. ``modules`` (plain PyTorch);
2. ``models``, ``wid``, ``search`` and the fairseq glue they share (``integration``, ``admin``);
3. ``tasks``, ``criterions``, ``convert``, and the package itself (``lightcompress.plugin``
   imports the models, tasks and criterions to register them; the loaders' lazy imports of it
   are the registration hook, left out of the checks: ``REGISTRATION``);
4. ``deploy``;
5. ``measure`` and the commands (``kd``, ``distributed``, ``compress``, ``__main__``).

Every ``import`` statement counts, those inside functions included (they hide circles; they do
not remove them). A module may import from its own layer and from lower ones; the imports of
all modules together must have no circle. Failures name the importing file, line and module.
"""

from __future__ import annotations

import ast
import os
import re
import warnings

import pytest

PACKAGE = "lightcompress"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)

LAYERS = {
    "lightcompress.errors": 0,
    "lightcompress.cli": 0,
    "lightcompress.io": 0,
    "lightcompress.compat": 0,
    "lightcompress.checkpoint": 0,
    "lightcompress.build": 0,
    "lightcompress_runtime": 0,
    "lightcompress.modules": 1,
    "lightcompress.models": 2,
    "lightcompress.wid": 2,
    "lightcompress.search": 2,
    "lightcompress.integration": 2,
    "lightcompress.admin": 2,
    "lightcompress.tasks": 3,
    "lightcompress.criterions": 3,
    "lightcompress.convert": 3,
    "lightcompress": 3,
    "lightcompress.deploy": 4,
    "lightcompress.measure": 5,
    "lightcompress.kd": 5,
    "lightcompress.distributed": 5,
    "lightcompress.__main__": 5,
    "lightcompress.compress": 5,
}
LAYER_NAMES = [
    "foundation",
    "modules",
    "models/wid/search",
    "tasks/criterions/convert",
    "deploy",
    "measure/commands",
]

# A module past WARN_LINES is named in the test run's warnings (a reader's hint to split it by
# job, not a rule that draws module boundaries); past MAX_LINES it fails.
WARN_LINES = 600
MAX_LINES = 800


class LongModuleWarning(Warning):
    """A source file long enough to be hard to read (not a UserWarning: pytest.ini hides those)."""


def _module_files() -> dict[str, str]:
    """Module name -> file, for every .py file of the package."""
    out = {}
    for directory, _dirs, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


MODULES = _module_files()


def layer_of(module: str) -> int:
    """The layer of a module: that of its longest listed prefix."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_layers.py")


def imports_of(module: str) -> list[tuple[str, int]]:
    """``(imported module, line)`` of every import of the package in ``module``'s file, those
    inside functions included. ``from A import b`` imports ``A.b`` when that is a module."""
    path = MODULES[module]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                out.append((sub if sub in MODULES else source, node.lineno))
    return [(m, line) for m, line in out if m == PACKAGE or m.startswith(PACKAGE + ".")]


# The registration hook: importing it registers the plugin's models, tasks and criterions with
# fairseq (what fairseq's --user-dir does). The loaders (checkpoint, build) import it inside their
# functions so that a checkpoint loaded through the library finds the plugin's classes; no module
# uses a name of it. Those edges point at the registry, not at code the importer runs on, so they
# are left out of both checks; the hook's own imports are checked as every module's.
REGISTRATION = "lightcompress.plugin"


def _graph() -> dict[str, list[tuple[str, int]]]:
    return {
        m: [(t, line) for t, line in imports_of(m) if t not in (m, REGISTRATION)]
        for m in sorted(MODULES)
    }


def _rel(module: str) -> str:
    return os.path.relpath(MODULES[module], os.path.dirname(ROOT))


def upward_imports(graph) -> list[str]:
    bad = []
    for module, targets in graph.items():
        mine = layer_of(module)
        for target, line in targets:
            theirs = layer_of(target)
            if theirs > mine:
                bad.append(
                    f"{_rel(module)}:{line} imports {target} (layer {LAYER_NAMES[theirs]}) "
                    f"from layer {LAYER_NAMES[mine]}"
                )
    return bad


def import_circles(graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w, _line in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _circle_lines(graph, component) -> list[str]:
    inside = set(component)
    return [
        f"{_rel(m)}:{line} imports {t}" for m in component for t, line in graph[m] if t in inside
    ]


def test_every_module_is_in_a_layer():
    assert "lightcompress.compress" in MODULES and len(MODULES) > 20  # the walk found them
    unlisted = []
    for module in MODULES:
        try:
            assert layer_of(module) in range(len(LAYER_NAMES))
        except AssertionError as e:
            unlisted.append(str(e) or module)
    assert not unlisted, "\n".join(unlisted)
    # the longest listed prefix decides; a module outside every layer is named
    assert layer_of("lightcompress.modules.lowrank") == 1 and layer_of("lightcompress") == 3
    with pytest.raises(AssertionError, match="lightcompress_x is in no layer"):
        layer_of("lightcompress_x")


def test_no_module_imports_from_a_higher_layer():
    bad = upward_imports(_graph())
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


def test_no_import_circle():
    graph = _graph()
    circles = import_circles(graph)
    assert not circles, "import circles:\n" + "\n\n".join(
        "\n".join(_circle_lines(graph, c)) for c in circles
    )


def test_no_source_file_is_over_the_line_bound():
    long, warn = [], []
    for path in MODULES.values():
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            long.append(f"{PACKAGE}/{rel}: {n} lines")
        elif n > WARN_LINES:
            warn.append(f"{PACKAGE}/{rel}: {n} lines")
    if warn:
        warnings.warn(
            f"over {WARN_LINES} lines (split by job where it helps a reader): "
            + ", ".join(sorted(warn)),
            LongModuleWarning,
            stacklevel=1,
        )
    assert not long, f"files over {MAX_LINES} lines (split them by job):\n" + "\n".join(long)


# ---------------------------------------------------------------------- the checker itself


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": [("b", 1)], "b": [("c", 2)], "c": [("a", 3)]}, [["a", "b", "c"]]),
        ({"a": [("b", 1)], "b": [], "c": [("a", 3)]}, []),
        ({"a": [("b", 1)], "b": [("a", 2)], "c": [("c", 3)]}, [["a", "b"]]),
    ],
)
def test_the_circle_finder_finds_circles_and_only_circles(graph, expected):
    assert sorted(import_circles(graph)) == expected


def test_the_checker_names_an_upward_import():
    module = "lightcompress.modules.lowrank"
    graph = {module: [("lightcompress.measure.params", 12)]}
    (line,) = upward_imports(graph)
    assert line.startswith(
        "lightcompress/modules/lowrank.py:12 imports lightcompress.measure.params"
    )
    assert "layer measure/commands" in line and "from layer modules" in line


def test_function_level_and_relative_imports_are_seen(tmp_path, monkeypatch):
    pkg = tmp_path / PACKAGE / "modules"
    pkg.mkdir(parents=True)
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "x.py").write_text(
        "def f():\n    from lightcompress.measure import speed\n\nfrom . import y\n"
    )
    (pkg / "y.py").write_text("")
    monkeypatch.setitem(MODULES, "lightcompress.modules.x", str(pkg / "x.py"))
    monkeypatch.setitem(MODULES, "lightcompress.modules.y", str(pkg / "y.py"))
    assert sorted(imports_of("lightcompress.modules.x")) == [
        ("lightcompress.measure.speed", 2),
        ("lightcompress.modules.y", 4),
    ]


# ---------------------------------------------------------------------- the lab stays apart

LAB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab")


def _lab_module_names() -> set[str]:
    """The names a product file would import lab code by: ``lab`` and the stem of every script
    of the lab (they import each other by stem after a ``sys.path`` insert)."""
    names = {"lab"}
    for directory, _dirs, files in os.walk(LAB):
        names |= {n[:-3] for n in files if n.endswith(".py") and n != "__init__.py"}
    return names


_LAB_PATH = re.compile(r"[\w./-]*\blab/[\w./-]+\.py")


def lab_imports(roots) -> list[str]:
    """``file:line: module`` of every import of a lab script (by its top-level name) in the
    ``.py`` files under ``roots``, or of a file under ``lab/`` by path."""
    lab, out = _lab_module_names(), []
    for root in roots:
        for directory, _dirs, files in os.walk(root):
            for name in (n for n in files if n.endswith(".py")):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        found = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and not node.level:
                        found = [node.module or ""]
                    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                        # a path of the lab's code (spec_from_file_location, a subprocess; not
                        # a mention in a docstring or message)
                        found = [node.value] if _LAB_PATH.fullmatch(node.value) else []
                    else:
                        continue
                    for m in found:
                        if m.split(".")[0] in lab or "lab/" in m:
                            out.append(f"{os.path.relpath(path)}:{node.lineno}: {m}")
    return out


def test_nothing_in_the_product_imports_the_lab():
    repo = os.path.dirname(ROOT)
    bad = lab_imports([ROOT, os.path.join(repo, "runtime")])
    assert not bad, "the product imports the lab (lab/ is apart from it):\n" + "\n".join(bad)


def test_the_lab_check_finds_an_import_of_the_lab(tmp_path):
    (tmp_path / "a.py").write_text("import os\nimport converged\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("from lab.bench import web_page\n", encoding="utf-8")
    (tmp_path / "c.py").write_text("P = 'lab/results/collect.py'\n", encoding="utf-8")
    (tmp_path / "d.py").write_text('"""See lab/measure/measure_speed.py."""\n', encoding="utf-8")
    bad = lab_imports([str(tmp_path)])
    assert len(bad) == 3 and any(b.endswith("a.py:2: converged") for b in bad)
