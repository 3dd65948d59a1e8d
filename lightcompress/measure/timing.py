"""Pure logic of the speed protocol: trimmed means, run order, summaries and text tables.

Nothing here imports torch or fairseq, so the protocol can be tested on fixed numbers.

The protocol (Hypoformer appendix A.4, LightFormer section 4.3): ``runs`` timed runs of the same
sentences, the fastest and the slowest ``trim`` fraction of runs dropped (10 % of 10 runs is one
run at each end), the mean of the remaining runs reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "format_table",
    "human_count",
    "interleaved_schedule",
    "summarize_runs",
    "trim_count",
    "trimmed",
    "trimmed_mean",
]


def trim_count(n: int, trim: float = 0.1) -> int:
    """How many values to drop at EACH end of ``n`` sorted values: ``floor(n * trim)``.

    At least one value always remains: the count is capped at ``(n - 1) // 2``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), got {trim}")
    k = math.floor(n * trim + 1e-9)
    return max(0, min(k, (n - 1) // 2))


def trimmed(values: Sequence[float], trim: float = 0.1) -> list[float]:
    """``values`` sorted ascending without the ``trim_count`` lowest and highest ones."""
    if not values:
        raise ValueError("no values to trim")
    k = trim_count(len(values), trim)
    ordered = sorted(float(v) for v in values)
    return ordered[k : len(ordered) - k]


def trimmed_mean(values: Sequence[float], trim: float = 0.1) -> float:
    """Mean of :func:`trimmed` ``values`` (10 values, trim 0.1: the mean of the middle 8)."""
    kept = trimmed(values, trim)
    return sum(kept) / len(kept)


def summarize_runs(seconds: Sequence[float], tokens: Sequence[int], trim: float = 0.1) -> dict:
    """Tokens/s of each run, trimmed; the fastest and slowest runs are dropped.

    Parameters
    ----------
    seconds, tokens : sequences of equal length
        Wall time and generated tokens of each timed run.
    trim : float
        Fraction of runs dropped at each end (by tokens/s).

    Returns
    -------
    dict
        ``tokens_per_s`` (per run, in run order), ``kept`` (the kept tokens/s, ascending),
        ``mean``, ``std`` (population std of the kept runs), ``min``, ``max`` (of the kept runs),
        ``dropped_each_end``.
    """
    if len(seconds) != len(tokens):
        raise ValueError("seconds and tokens differ in length")
    if not seconds:
        raise ValueError("no runs")
    if any(s <= 0 for s in seconds):
        raise ValueError("run times must be positive")
    rates = [t / s for t, s in zip(tokens, seconds)]
    kept = trimmed(rates, trim)
    mean = sum(kept) / len(kept)
    std = math.sqrt(sum((r - mean) ** 2 for r in kept) / len(kept))
    return {
        "tokens_per_s": rates,
        "kept": kept,
        "mean": mean,
        "std": std,
        "min": kept[0],
        "max": kept[-1],
        "dropped_each_end": trim_count(len(rates), trim),
    }


def interleaved_schedule(num_models: int, runs: int) -> list[tuple[int, int]]:
    """Order of timed runs: ``(run, model)`` pairs, A B C A B C ... (one run of each per round).

    Interleaving spreads slow drifts of the machine (thermal, other load) over all models instead
    of penalising whichever model happens to run last.
    """
    if num_models < 1 or runs < 1:
        raise ValueError("need at least one model and one run")
    return [(r, m) for r in range(runs) for m in range(num_models)]


def human_count(n: float, digits: int = 1) -> str:
    """``36765696 -> '36.8M'``, ``1.2e9 -> '1.2B'``, ``5400 -> '5.4K'``."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.{digits}f}{unit}"
    return f"{n:.0f}"


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> str:
    """An aligned plain-text table.

    Parameters
    ----------
    headers : sequence of str
    rows : sequence of sequences
        Cells are turned into strings with ``str``.
    align : str, optional
        One character per column, ``"l"`` or ``"r"``; default: first column left, others right.

    Returns
    -------
    str
        Header, a dashed rule, then one line per row (no trailing spaces).
    """
    ncol = len(headers)
    if align is None:
        align = "l" + "r" * (ncol - 1)
    if len(align) != ncol:
        raise ValueError("align must have one character per column")
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != ncol:
            raise ValueError(f"row has {len(row)} cells, expected {ncol}: {row}")
    widths = [max(len(row[i]) for row in cells) for i in range(ncol)]

    def line(row):
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells[1:]]
    return "\n".join(out)
