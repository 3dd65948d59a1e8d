#!/usr/bin/env python3
"""BLEU vs parameters and BLEU vs speed (Hypoformer Figure 4) from JSON results.

    scripts/measure_speed.sh --data DATA --path a=a.pt,b=b.pt --bleu --json speed.json
    python scripts/plot_frontier.py speed.json [more.json ...] --out frontier.png
    python scripts/plot_frontier.py checkpoints/lightformer/iwslt14/*/result.json --out f.png

Reads ``measure_speed --json`` output (with ``--bleu``) and the ``result.json`` every recipe's
evaluation step writes (examples/common/lib.sh): a ``models`` list whose records have
``label``, ``bleu`` and ``params`` and/or ``tokens_per_s`` (``precision``, default float32).
Each record becomes a point in both panels: left BLEU vs parameters (millions), right BLEU vs
tokens/s; int8 points are drawn hollow. A record without tokens/s (a recipe run with
MEASURE_SPEED=0) appears only in the left panel, one without parameters only in the right.
Records without BLEU are an error (run measure_speed with --bleu). The BLEU axis is labelled
with the sacreBLEU signature when the records carry one (``bleu_signature``).

Bad input (an unreadable, empty or foreign file, a record without BLEU, an ``--out`` that cannot
be written as an image) ends with one line on stderr and exit status 2, before anything is drawn.
"""

from __future__ import annotations

import argparse
import json
import sys

from plot_output import image_output_error

__all__ = ["FrontierError", "load_points", "main", "plot_frontier"]


class FrontierError(ValueError):
    """Empty, unparseable or BLEU-less results."""


def load_points(paths) -> list[dict]:
    """Model records with ``label``, ``precision``, ``bleu`` and ``params`` and/or
    ``tokens_per_s`` (``None`` when absent)."""
    points = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise FrontierError(f"{path}: cannot read: {exc.strerror}") from None
        if not text.strip():
            raise FrontierError(f"{path}: empty file")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FrontierError(f"{path}: not JSON ({exc})") from None
        models = doc.get("models") if isinstance(doc, dict) else None
        if not models:
            raise FrontierError(
                f"{path}: no 'models' list (expected measure_speed --json output or a recipe's "
                "result.json)"
            )
        if not isinstance(models, list):
            raise FrontierError(f"{path}: 'models' is not a list")
        for rec in models:
            if not isinstance(rec, dict) or "label" not in rec:
                raise FrontierError(f"{path}: a model record has no 'label'")
            if rec.get("bleu") is None:
                raise FrontierError(
                    f"{path}: {rec['label']} has no BLEU (run measure_speed with --data and --bleu)"
                )
            if rec.get("params") is None and rec.get("tokens_per_s") is None:
                raise FrontierError(f"{path}: {rec['label']} has neither params nor tokens_per_s")
            for key in ("bleu", "params", "tokens_per_s"):
                if rec.get(key) is not None and not isinstance(rec[key], (int, float)):
                    raise FrontierError(f"{path}: {rec['label']}: {key} is not a number")
            points.append({**rec, "precision": rec.get("precision", "float32")})
    return points


def _place_labels(ax, texts, xs, ys) -> None:
    """Move the point labels of one panel apart and inside the axes (adjustText, pinned in
    requirements/lock.txt): neighbouring points' names overprinted each other and the
    rightmost ran off the figure."""
    if not texts:
        return
    try:
        from adjustText import adjust_text
    except ImportError:  # an environment installed before the pin: labels stay where drawn
        return
    adjust_text(
        texts,
        x=xs,
        y=ys,
        ax=ax,
        ensure_inside_axes=True,
        expand=(1.15, 1.4),
        arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.5},
    )


def plot_frontier(points, out: str, title: str | None = None) -> None:
    """Draw the two panels into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_p, ax_s) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    labels = sorted({p["label"] for p in points}, key=[p["label"] for p in points].index)
    colors = {lab: f"C{i % 10}" for i, lab in enumerate(labels)}
    placed = {ax_p: ([], [], []), ax_s: ([], [], [])}
    for p in points:
        c = colors[p["label"]]
        face = "none" if p["precision"] == "int8" else c
        name = p["label"] + (" (int8)" if p["precision"] == "int8" else "")
        for ax, x in ((ax_p, p.get("params")), (ax_s, p.get("tokens_per_s"))):
            if x is None:
                continue
            x = x / 1e6 if ax is ax_p else x
            ax.scatter([x], [p["bleu"]], s=50, edgecolors=c, facecolors=face, label=name, zorder=3)
            texts, xs, ys = placed[ax]
            texts.append(ax.text(x, p["bleu"], name, fontsize=8, zorder=4))
            xs.append(x)
            ys.append(p["bleu"])
    sigs = sorted({p["bleu_signature"] for p in points if p.get("bleu_signature")})
    ax_p.set_xlabel("parameters (M)")
    ax_s.set_xlabel("tokens/s")
    for ax in (ax_p, ax_s):
        ax.set_ylabel("BLEU")
        ax.grid(alpha=0.3)
        if not ax.has_data():
            ax.text(0.5, 0.5, "no record has this value", ha="center", transform=ax.transAxes)
            continue
        # room for the labels: 12 % margins on every side
        ax.margins(x=0.12, y=0.12)
    if sigs:
        fig.supxlabel("BLEU: sacreBLEU " + "; ".join(sigs), fontsize=7)
    ax_p.set_title("BLEU vs parameters")
    ax_s.set_title("BLEU vs speed")
    if title:
        fig.suptitle(title)
    fig.canvas.draw()  # (final limits and layout before the labels are placed)
    for ax, (texts, xs, ys) in placed.items():
        _place_labels(ax, texts, xs, ys)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="measure_speed --json files or recipe result.json")
    p.add_argument("--out", default="frontier.png", help="output image (default frontier.png)")
    p.add_argument("--title")
    args = p.parse_args(argv)
    error = image_output_error(args.out)
    if error:
        print(f"plot_frontier: error: {error}", file=sys.stderr)
        return 2
    try:
        points = load_points(args.results)
    except FrontierError as exc:
        print(f"plot_frontier: error: {exc}", file=sys.stderr)
        return 2
    plot_frontier(points, args.out, args.title)
    print(f"wrote {args.out} ({len(points)} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
