#!/usr/bin/env python3
"""A change of the deployment code checked before and after, on every family the tests cover:
each family's checkpoint (trained briefly on the toy task, so that its translations vary) is
exported by both versions of the code, in float32 and in int8 (every map), and translated by
each export's own ``translate.py`` and by each version's ``lightcompress-translate`` (the
PyTorch path); the float32 translations of the two versions must be the same lines, and the
int8 exports' agreement with their own float32 translations the same figure.

    python lab/bench/before_after.py --before 591ba3b^1 --out /tmp/before-after [--json ba.json]

``--before`` is a git revision of this repository (unpacked with ``git archive``); the
"after" side is this checkout (``--after DIR``: another one). Both run with this interpreter.
Prints a markdown table; exit status 1 when a float32 translation differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

EXPORT = "from lightcompress.deploy.onnx_export import cli_main; cli_main()"
TRANSLATE = "from lightcompress.deploy.torch_translator import cli_main; cli_main()"


class BeforeAfterError(ValueError):
    """Bad input (one line)."""


def _run(argv, code_root, stdin=None, log=None) -> str:
    env = dict(os.environ, PYTHONPATH=code_root, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, env=env, timeout=900, check=False
    )
    if proc.returncode != 0:
        raise BeforeAfterError(
            f"{' '.join(map(str, argv[:4]))} ... failed (exit {proc.returncode}): "
            f"{proc.stderr.strip().splitlines()[-1:] or ['(no output)']}"
        )
    return proc.stdout


def unpack(rev: str, dest: str) -> str:
    """``rev`` of this repository's history, unpacked into ``dest``."""
    os.makedirs(dest, exist_ok=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=False)
    if archive.returncode != 0:
        raise BeforeAfterError(f"git archive {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    return dest


def toy_checkpoints(out: str, families: list[str], updates: int) -> tuple[str, dict, str]:
    """The toy data-bin, ``{family: checkpoint}`` and the test split's source tokens."""
    import harness
    from test_deploy import FAMILIES_ONNX, make_checkpoint

    raw = harness.make_parallel_corpus(os.path.join(out, "raw"), n_train=600, n_test=60)
    data = os.path.join(out, "bin")
    if not os.path.exists(os.path.join(data, "test.de-en.en.bin")):  # (a rerun reuses it)
        harness.preprocess(raw, data)
    ckpts = {}
    for fam in families:
        if fam not in FAMILIES_ONNX:
            raise BeforeAfterError(f"unknown family {fam!r}: one of {', '.join(FAMILIES_ONNX)}")
        arch, flags = FAMILIES_ONNX[fam]
        path = os.path.join(out, "ckpt", f"{fam}.pt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path):
            make_checkpoint(data, path, arch, flags, updates=updates)
        ckpts[fam] = path
    with open(os.path.join(raw, "test.de"), encoding="utf-8") as f:
        return data, ckpts, f.read()


def side(code_root: str, name: str, out: str, data: str, ckpt: str, fam: str, src: str) -> dict:
    """One version's translations of ``src``: float32 and int8 exports, the PyTorch path."""
    res = {}
    os.makedirs(os.path.join(out, name), exist_ok=True)
    for prec, flags in (("float32", []), ("int8", ["--int8", "all"])):
        export = os.path.join(out, name, f"{fam}-{prec}")
        if not os.path.exists(os.path.join(export, "MANIFEST.sha256")):
            _run(
                [
                    sys.executable,
                    "-c",
                    EXPORT,
                    "--path",
                    ckpt,
                    "--data",
                    data,
                    "-s",
                    "de",
                    "-t",
                    "en",
                    "-o",
                    export,
                    *flags,
                ],
                code_root,
            )
        res[prec] = _run(
            [
                sys.executable,
                os.path.join(export, "translate.py"),
                export,
                "--tokenized",
                "--beam",
                "5",
            ],
            code_root,
            stdin=src,
        ).splitlines()
    res["torch"] = _run(
        [
            sys.executable,
            "-c",
            TRANSLATE,
            "--path",
            ckpt,
            "--data",
            data,
            "-s",
            "de",
            "-t",
            "en",
            "--beam",
            "5",
        ],
        code_root,
        stdin=src,
    ).splitlines()
    return res


def compare(before: str, after: str, out: str, families: list[str], updates: int) -> list[dict]:
    data, ckpts, src = toy_checkpoints(out, families, updates)
    n = len(src.splitlines())
    rows = []
    for fam in families:
        b = side(before, "before", out, data, ckpts[fam], fam, src)
        a = side(after, "after", out, data, ckpts[fam], fam, src)

        def agree(x, y):
            return sum(p == q for p, q in zip(x, y)) / max(1, n)

        rows.append(
            {
                "family": fam,
                "sentences": n,
                "float32_same": b["float32"] == a["float32"],
                "torch_same": b["torch"] == a["torch"],
                "torch_equals_export": a["torch"] == a["float32"],
                "int8_agreement_before": round(agree(b["int8"], b["float32"]), 4),
                "int8_agreement_after": round(agree(a["int8"], a["float32"]), 4),
                "int8_same": b["int8"] == a["int8"],
                "distinct_outputs": len(set(a["float32"])),
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        (
            "| family | sentences (distinct outputs) | float32 export: same lines | PyTorch path: "
            "same lines | PyTorch = export (after) | int8 agreement before / after | int8: same lines |"
        ),
        "| --- | ---: | --- | --- | --- | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']} | {r['sentences']} ({r['distinct_outputs']}) | "
            f"{'yes' if r['float32_same'] else 'NO'} | {'yes' if r['torch_same'] else 'NO'} | "
            f"{'yes' if r['torch_equals_export'] else 'no'} | {r['int8_agreement_before']:.0%} / "
            f"{r['int8_agreement_after']:.0%} | {'yes' if r['int8_same'] else 'no'} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="before_after.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="git revision of the code before the change")
    p.add_argument("--after", default=ROOT, help="checkout of the code after (default: this one)")
    p.add_argument("--out", required=True, help="working directory (checkpoints, exports)")
    p.add_argument("--families", help="comma-separated (default: every family of the tests)")
    p.add_argument("--updates", type=int, default=60, help="toy training updates per family")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    try:
        from test_deploy import ONNX_FAMILIES

        families = args.families.split(",") if args.families else list(ONNX_FAMILIES)
        before = unpack(args.before, os.path.join(args.out, "code-before"))
        rows = compare(before, os.path.abspath(args.after), args.out, families, args.updates)
    except BeforeAfterError as exc:
        print(f"before_after.py: error: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"before": args.before, "rows": rows}, f, indent=1)
    return 0 if all(r["float32_same"] and r["torch_same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
