#!/usr/bin/env python3
"""Ranks and parameters over updates of a Smartformer rank search (its decision log).

    python scripts/plot_rank_search.py checkpoints/sm_search/rank_search.jsonl --out search.png

Reads the JSON-lines file ``fairseq-train --task translation_smartformer --sm-search`` writes
next to its checkpoints (one record per decision: ``update``, ``layer``, ``rank``, ``ranks`` of
every layer, ``params``, ``metric``, ``reward``). Top panel: the CP rank of every searched
attention layer over updates (a step line per layer); bottom panel: the model's parameter
count and the reward metric (validation NLL or BLEU) over updates. Prints one summary line.

Bad input (a missing, empty or foreign log, an ``--out`` that cannot be written as an image)
ends with one line on stderr and exit status 2, before anything is drawn.
"""

from __future__ import annotations

import argparse
import json
import sys

from plot_output import image_output_error

__all__ = ["LogError", "main", "parse_decisions", "plot_search"]

_KEYS = ("update", "ranks", "params", "metric", "metric_name")


class LogError(ValueError):
    """An empty or unparseable decision log."""


def parse_decisions(path: str) -> list[dict]:
    """The records of a decision log, in order; :class:`LogError` for anything else."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
    except OSError as exc:
        raise LogError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise LogError(f"{path} is not a text file (a rank_search.jsonl is needed)") from None
    records = []
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise LogError(f"{path}:{i}: not a JSON line (a rank_search.jsonl is needed)") from None
        if not isinstance(rec, dict) or any(k not in rec for k in _KEYS):
            raise LogError(f"{path}:{i}: not a rank-search decision (keys {', '.join(_KEYS)})")
        records.append(rec)
    if not records:
        raise LogError(f"{path} holds no decisions")
    return records


def plot_search(records: list[dict], out: str, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    updates = [r["update"] for r in records]
    layers = list(records[0]["ranks"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    for name in layers:
        top.step(updates, [r["ranks"].get(name) for r in records], where="post", label=name)
    top.set_ylabel("CP rank (after the decision)")
    top.legend(fontsize=7, ncol=2)
    top.grid(alpha=0.3)
    bottom.plot(updates, [r["params"] / 1e6 for r in records], "k.-", label="parameters")
    bottom.set_ylabel("parameters (M)")
    bottom.set_xlabel("updates")
    bottom.grid(alpha=0.3)
    metric = bottom.twinx()
    metric.plot(updates, [r["metric"] for r in records], "C3x--", label=records[0]["metric_name"])
    metric.set_ylabel(records[0]["metric_name"], color="C3")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="rank_search.jsonl of a search")
    p.add_argument(
        "--out", default="rank_search.png", help="output image (default rank_search.png)"
    )
    p.add_argument("--title")
    args = p.parse_args(argv)
    error = image_output_error(args.out)
    if error:
        print(f"plot_rank_search: error: {error}", file=sys.stderr)
        return 2
    try:
        records = parse_decisions(args.log)
    except LogError as exc:
        print(f"plot_rank_search: error: {exc}", file=sys.stderr)
        return 2
    plot_search(records, args.out, args.title)
    last = records[-1]
    print(
        f"{len(records)} decisions, updates {records[0]['update']}-{last['update']}, params "
        f"{records[0]['params']:,} -> {last['params']:,}, final ranks "
        + ", ".join(f"{k}={v}" for k, v in last["ranks"].items())
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
