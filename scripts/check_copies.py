#!/usr/bin/env python3
"""Fail when deliberately mirrored code drifts: the beam searches of the deployment paths.

The project keeps fairseq's beam search in three places on purpose: fairseq's own
``SequenceGenerator`` (the reference), :class:`lightcompress.deploy.generator.FastGenerator`
(torch, the PyTorch fast path) and :class:`lightcompress.runtime.search.OnnxGenerator`
(numpy, carried by every ONNX export in its torch-free ``runtime/``). They cannot share code
(the runtime must import neither torch nor the package), so, as Hugging Face checks its
``# Copied from`` blocks, every mirrored function carries a line right above its ``def``::

    # Mirrors: lightcompress.deploy.generator.FastGenerator.generate@1a2b3c4d5e6f, \
fairseq.sequence_generator.SequenceGenerator._generate@...; self@...

naming the functions it mirrors with a fingerprint of each (and ``self@`` its own): a sha256 of
the function's syntax tree without its docstring, so formatting and comments do not count, code
does. When one side changes, its own fingerprint and the fingerprint recorded by every mirror no
longer match, and this check fails naming both: bring the copies in line (the equality tests,
``tests/test_deploy.py``, prove it), then record the new fingerprints with ``--fix``.

    python scripts/check_copies.py          # exit 1 and one line per drift
    python scripts/check_copies.py --fix    # rewrite the recorded fingerprints

Run by ``make lint`` and by ``tests/test_copies.py``. It reads the files with ``ast`` and imports
nothing (fairseq's source is found through ``importlib.util.find_spec``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import os
import re
import sys

__all__ = ["MIRRORED_FILES", "check", "fingerprint", "main"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the files whose functions carry "# Mirrors:" lines
MIRRORED_FILES = ("lightcompress/deploy/generator.py", "lightcompress/runtime/search.py")
MARK = re.compile(r"^(?P<indent>\s*)# Mirrors: (?P<targets>.*); self@(?P<self>[0-9a-f]+)\s*$")
TARGET = re.compile(r"(?P<name>[\w.]+)@(?P<fp>[0-9a-f]+)")
WIDTH = 12  # hex digits of a fingerprint


class CopyError(Exception):
    """A mirror line that cannot be checked (a name that does not resolve, a misplaced line)."""


def _source_file(module: str, root: str) -> str:
    """The file of ``module``: under ``root`` for the project's modules, else where Python finds
    it (without importing it)."""
    local = os.path.join(root, *module.split(".")) + ".py"
    if module.split(".")[0] == "lightcompress":
        if not os.path.isfile(local):
            raise CopyError(f"{module}: no file {local}")
        return local
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise CopyError(f"{module}: not found (is it installed in this environment?)")
    return spec.origin


def _function(tree: ast.Module, qualname: str, where: str):
    node = tree
    for part in qualname.split("."):
        body = getattr(node, "body", [])
        found = [n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef,
                                                   ast.AsyncFunctionDef)) and n.name == part]  # fmt: skip
        if not found:
            raise CopyError(f"{where}: no {qualname}")
        node = found[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise CopyError(f"{where}: {qualname} is not a function")
    return node


def _fingerprint_node(node) -> str:
    node = ast.parse(ast.unparse(node)).body[0]  # (a copy)
    body = node.body
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):  # (the docstring does not count)
        node.body = body[1:] or [ast.Pass()]
    dump = ast.dump(node, annotate_fields=False, include_attributes=False)
    return hashlib.sha256(dump.encode()).hexdigest()[:WIDTH]


def _split(dotted: str, root: str) -> tuple[str, str]:
    """``package.module.Class.method`` -> (module, ``Class.method``): the longest module prefix
    that has a source file."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        try:
            _source_file(module, root)
        except CopyError:
            continue
        return module, ".".join(parts[cut:])
    raise CopyError(f"{dotted}: no module of it is found")


_TREES: dict = {}


def fingerprint(dotted: str, root: str = ROOT) -> str:
    """The fingerprint of the function ``dotted`` (``module.Class.method``)."""
    module, qualname = _split(dotted, root)
    path = _source_file(module, root)
    if path not in _TREES:
        with open(path, encoding="utf-8") as f:
            _TREES[path] = ast.parse(f.read(), filename=path)
    return _fingerprint_node(_function(_TREES[path], qualname, path))


def _marks(path: str, root: str):
    """``(line index, match, qualname of the def below)`` for every mirror line of ``path``."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    tree = ast.parse("\n".join(lines), filename=path)
    defs = {}
    for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)] + [tree]:
        for n in cls.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([n.lineno] + [d.lineno for d in n.decorator_list])
                defs[first - 1] = n.name if cls is tree else f"{cls.name}.{n.name}"
    out = []
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if m is None:
            if "# Mirrors:" in line:
                raise CopyError(f"{path}:{i + 1}: a '# Mirrors:' line that cannot be read")
            continue
        if i + 1 not in defs:
            raise CopyError(f"{path}:{i + 1}: a '# Mirrors:' line must stand right above a def")
        out.append((i, m, defs[i + 1]))
    return lines, out


def check(root: str = ROOT, fix: bool = False) -> list[str]:
    """The drifts (one line each); with ``fix`` the recorded fingerprints are rewritten."""
    _TREES.clear()
    problems = []
    for rel in MIRRORED_FILES:
        path = os.path.join(root, rel)
        module = rel[:-3].replace("/", ".")
        lines, marks = _marks(path, root)
        if not marks:
            problems.append(f"{rel}: no '# Mirrors:' line (the mirrored functions lost theirs)")
        changed = False
        for i, m, qualname in marks:
            own = fingerprint(f"{module}.{qualname}", root)
            targets = [(t.group("name"), t.group("fp")) for t in TARGET.finditer(m["targets"])]
            if not targets:
                raise CopyError(f"{rel}:{i + 1}: a '# Mirrors:' line that names nothing")
            now = [(name, fingerprint(name, root)) for name, _ in targets]
            if fix:
                text = ", ".join(f"{n}@{fp}" for n, fp in now)
                new = f"{m['indent']}# Mirrors: {text}; self@{own}"
                if lines[i] != new:
                    lines[i], changed = new, True
                continue
            if own != m["self"]:
                problems.append(
                    f"{rel}:{i + 1}: {qualname} changed since its mirrors were last checked "
                    f"(fingerprint {own}, recorded {m['self']}): bring "
                    f"{', '.join(n for n, _ in targets)} in line, then run "
                    "scripts/check_copies.py --fix"
                )
            for (name, recorded), (_n, current) in zip(targets, now):
                if current != recorded:
                    problems.append(
                        f"{rel}:{i + 1}: {name} changed (fingerprint {current}, recorded "
                        f"{recorded}): bring its mirror {qualname} in line, then run "
                        "scripts/check_copies.py --fix"
                    )
        if changed:
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fix", action="store_true", help="rewrite the recorded fingerprints")
    p.add_argument("--root", default=ROOT, help="the checkout (default: this script's)")
    args = p.parse_args(argv)
    try:
        problems = check(args.root, fix=args.fix)
    except CopyError as exc:
        print(f"check_copies.py: error: {exc}", file=sys.stderr)
        return 2
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        return 1
    if not args.fix:
        print("check_copies.py: the mirrored beam searches are in step", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
