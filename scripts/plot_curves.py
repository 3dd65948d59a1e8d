#!/usr/bin/env python3
"""Training and validation loss vs updates of several fairseq runs (LightFormer Figure 4).

    python scripts/plot_curves.py svd/train.log random/train.log --labels "SVD transfer,random init" \\
        --out curves.png

Reads the logs fairseq-train writes with ``--log-format simple`` or ``--log-format json``
(stdout/stderr or ``--log-file``): ``train_inner`` lines give the training loss at
``num_updates``, ``valid`` lines the validation loss at ``num_updates``. The losses are fairseq's
(base 2, label-smoothed for ``label_smoothed_cross_entropy``); ``--nll`` plots ``nll_loss``.
Left panel: training loss; right panel: validation loss.

Bad input (an empty or foreign log, labels that do not match the logs, an ``--out`` that cannot
be written as an image) ends with one line on stderr and exit status 2, before anything is drawn.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from plot_output import image_output_error

__all__ = ["LogError", "main", "parse_log", "plot_curves"]

_SIMPLE_KV = re.compile(r"(\w+)=([-+0-9.eE]+|nan|inf)")
_SIMPLE_PIPE = re.compile(r"\|\s*(\w+)\s+([-+0-9.eE]+|nan|inf)\s*(?=\||$)")


class LogError(ValueError):
    """An empty or unparseable log."""


def _tag_and_rest(line: str):
    # "2024-01-01 00:00:00 | INFO | train_inner | epoch 001: ..." or "... | valid | {...}"
    for tag in ("train_inner", "valid"):
        marker = f"| {tag} |"
        pos = line.find(marker)
        if pos >= 0:
            return tag, line[pos + len(marker) :].strip()
    return None, None


def _parse_json(rest: str, tag: str, key: str):
    try:
        rec = json.loads(rest)
    except json.JSONDecodeError:
        return None
    prefix = "valid_" if tag == "valid" else ""
    upd, loss = rec.get(f"{prefix}num_updates"), rec.get(f"{prefix}{key}")
    if upd is None or loss is None:
        return None
    return int(float(upd)), float(loss)


def _parse_simple(rest: str, tag: str, key: str):
    pairs = dict(_SIMPLE_KV.findall(rest)) if tag == "train_inner" else {}
    if tag == "valid" or not pairs:
        pairs = dict(_SIMPLE_PIPE.findall(rest + " |")) or pairs
    upd, loss = pairs.get("num_updates"), pairs.get(key)
    if upd is None or loss is None:
        return None
    return int(float(upd)), float(loss)


def parse_log(path: str, key: str = "loss") -> dict:
    """``{"train": [(updates, loss)...], "valid": [(updates, loss)...]}`` of one fairseq log.

    Raises
    ------
    LogError
        The file is empty or holds no ``train_inner`` / ``valid`` record with a loss.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise LogError(f"{path}: cannot read: {exc.strerror}") from None
    if not any(ln.strip() for ln in lines):
        raise LogError(f"{path}: empty log")
    out = {"train": [], "valid": []}
    for line in lines:
        tag, rest = _tag_and_rest(line)
        if tag is None:
            continue
        parse = _parse_json if rest.startswith("{") else _parse_simple
        point = parse(rest, tag, key)
        if point is not None:
            out["train" if tag == "train_inner" else "valid"].append(point)
    if not out["train"] and not out["valid"]:
        raise LogError(
            f"{path}: no fairseq 'train_inner' or 'valid' line with {key} and num_updates "
            "(expected the output of fairseq-train with --log-format simple or json)"
        )
    return out


def plot_curves(runs: dict, out: str, title: str | None = None, logy: bool = False) -> None:
    """Draw ``{label: parse_log(...)}`` into ``out`` (PNG, PDF, ... by extension)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for ax, part, name in zip(axes, ("train", "valid"), ("training", "validation")):
        for label, curves in runs.items():
            pts = sorted(curves[part])
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    label=label,
                    marker="o" if part == "valid" else None,
                    markersize=3,
                )
        ax.set_xlabel("updates")
        ax.set_ylabel(f"{name} loss")
        ax.set_title(f"{name} loss")
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", help="fairseq-train logs (simple or json format)")
    p.add_argument("--labels", help="comma-separated labels, one per log (default: file names)")
    p.add_argument("--out", default="curves.png", help="output image (default curves.png)")
    p.add_argument("--title")
    p.add_argument("--nll", action="store_true", help="plot nll_loss instead of loss")
    p.add_argument("--logy", action="store_true", help="logarithmic loss axis")
    args = p.parse_args(argv)
    error = image_output_error(args.out)
    if error:
        print(f"plot_curves: error: {error}", file=sys.stderr)
        return 2
    labels = args.labels.split(",") if args.labels else list(args.logs)
    if len(labels) != len(args.logs):
        print(
            f"plot_curves: error: {len(labels)} labels for {len(args.logs)} logs", file=sys.stderr
        )
        return 2
    try:
        runs = {
            lab: parse_log(path, "nll_loss" if args.nll else "loss")
            for lab, path in zip(labels, args.logs)
        }
    except LogError as exc:
        print(f"plot_curves: error: {exc}", file=sys.stderr)
        return 2
    plot_curves(runs, args.out, args.title, args.logy)
    for lab, c in runs.items():
        print(f"{lab}: {len(c['train'])} train points, {len(c['valid'])} valid points")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
