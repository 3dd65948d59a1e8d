#!/usr/bin/env python3
"""One deployment table from a ``measure_speed --json --bleu`` run (``--onnx --ct2``: every
engine in one interleaved run, as ``make demo`` measures), or from two: every row of the first
and the CTranslate2 rows of the second (older demo runs timed CTranslate2 separately). Prints
model, engine, precision, parameters, size on disk, BLEU and tokens/s; ``--json OUT`` writes the
rows in the format ``scripts/plot_frontier.py`` reads (each label suffixed with its engine).

    python scripts/deploy_table.py speed.json --json deploy.json

Bad input (a file that cannot be read, is not measure_speed output, or has no BLEU) ends with
one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["combine", "main", "render"]


class TableError(ValueError):
    """Input that is not measure_speed --json --bleu output."""


def _models(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise TableError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise TableError(f"{path}: not JSON ({exc})") from None
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list) or not models:
        raise TableError(f"{path}: no 'models' list (expected measure_speed --json output)")
    for m in models:
        missing = [k for k in ("label", "engine", "precision", "tokens_per_s") if k not in m]
        if missing:
            raise TableError(f"{path}: a model record has no {', '.join(missing)}")
        if m.get("bleu") is None:
            raise TableError(f"{path}: {m['label']} has no BLEU (run measure_speed with --bleu)")
    return models


def combine(first: str, ct2: str | None) -> list[dict]:
    """The rows of ``first`` and the ``ctranslate2`` rows of ``ct2``."""
    rows = [dict(m) for m in _models(first)]
    if ct2:
        rows += [dict(m) for m in _models(ct2) if m["engine"] == "ctranslate2"]
    return rows


def render(rows: list[dict]) -> str:
    head = f"{'model':<18} {'engine':<12} {'precision':<9} {'params':>10} {'size':>9} {'BLEU':>6} {'tokens/s':>9}"
    lines = [head, "-" * len(head)]
    for m in rows:
        size = f"{m['size_bytes'] / 1e6:.2f}M" if m.get("size_bytes") else "-"
        lines.append(
            f"{m['label']:<18} {m['engine']:<12} {m['precision']:<9} {m.get('params') or 0:>10,} "
            f"{size:>9} {m['bleu']:>6.2f} {m['tokens_per_s']:>9.1f}"
        )
    sigs = sorted({m["bleu_signature"] for m in rows if m.get("bleu_signature")})
    if sigs:
        lines.append("BLEU: sacreBLEU " + "; ".join(sigs))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("speed", help="measure_speed --json --bleu output (fairseq, ONNX Runtime)")
    p.add_argument("ct2", nargs="?", help="measure_speed --json --bleu output with --ct2")
    p.add_argument("--json", dest="json_out", help="rows for scripts/plot_frontier.py")
    args = p.parse_args(argv)
    try:
        rows = combine(args.speed, args.ct2)
    except TableError as exc:
        print(f"deploy_table: error: {exc}", file=sys.stderr)
        return 2
    print(render(rows))
    if args.json_out:
        out = [{**m, "label": f"{m['label']} ({m['engine']})"} for m in rows]
        tmp = args.json_out + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"models": out}, f, indent=1)
            os.replace(tmp, args.json_out)
        except OSError as exc:
            print(f"deploy_table: error: {args.json_out}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
