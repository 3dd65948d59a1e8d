"""Reporting a speed measurement (:mod:`lightcompress.measure.speed`): the machine, the
results table, the protocol and BLEU lines, the JSON file.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Sequence

import torch

from lightcompress.measure.candidates import SpeedError
from lightcompress.measure.timing import (
    format_table,
    human_count,
)

__all__ = [
    "bleu_lines",
    "cpu_model",
    "environment",
    "format_results",
    "protocol_line",
    "write_json",
]


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment() -> dict:
    import fairseq

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "fairseq": getattr(fairseq, "__version__", "unknown"),
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "quantized_engine": torch.backends.quantized.engine,
    }


def format_results(records: Sequence[dict], bleu: bool = False) -> str:
    """The side-by-side table."""
    memory = any("peak_rss_kib" in r for r in records)
    headers = ["Model", "Engine", "Precision", "Params", "Size"]
    if memory:
        headers += ["Peak RSS", "+Model"]
    headers += ["Tokens/s", "Std", "Kept min-max", "Speed"]
    if bleu:
        headers.append("BLEU")
    rows = []
    for r in records:
        row = [
            r["label"],
            r.get("engine", "fairseq")
            + ("+shortlist" if r.get("shortlist") else "")
            + ("+text" if r.get("text") else ""),
            r["precision"],
            human_count(r["params"], 2),
            _mib(r.get("size_bytes")),
        ]
        if memory:
            peak, base = r.get("peak_rss_kib"), r.get("baseline_rss_kib")
            row += [
                _mib(peak * 1024 if peak else None),
                _mib((peak - base) * 1024 if peak and base else None),
            ]
        row += [
            f"{r['tokens_per_s']:.1f}",
            f"{r['tokens_per_s_std']:.1f}",
            f"{r['tokens_per_s_min']:.1f}-{r['tokens_per_s_max']:.1f}",
            f"{r['speed_ratio']:.2f}x",
        ]
        if bleu:
            row.append(f"{r['bleu']:.2f}" if r.get("bleu") is not None else "-")
        rows.append(row)
    return format_table(headers, rows, align="lll" + "r" * (len(headers) - 3))


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}M" if n >= 2**20 else f"{n / 1024:.0f}K"


def protocol_line(p: dict) -> str:
    length = (
        f"output forced to {p['min_len']} tokens"
        if p["min_len"] == p["max_len_b"] and p["max_len_a"] == 0
        else f"output length free (max {p['max_len_a']}*src+{p['max_len_b']}, min {p['min_len']})"
    )
    return (
        f"{p['num_sentences']} sentences (source length {p['mean_src_len']:.1f} on average"
        f"{'' if p.get('natural') else ', target ' + str(p['src_len'])}; "
        f"{p['sentences_from']}), batch {p['batch_size']}"
        f"{' (longest first)' if p.get('sorted_batches') else ''}, "
        f"beam {p['beam']}, "
        f"lenpen {p['lenpen']}, {p['threads']} thread(s), {p['runs']} runs after "
        f"{p['warmup']} warm-up, {p['dropped_each_end']} fastest + "
        f"{p['dropped_each_end']} slowest dropped; {length}. "
        "Tokens/s counts generated target tokens EXCLUDING EOS (mean of kept runs; Std and "
        "min-max over kept runs; Speed relative to the first row)."
    )


def bleu_lines(records: Sequence[dict], protocol: dict) -> list[str]:
    """What the BLEU column is: one line per distinct sacreBLEU signature (normally one) with
    the text it scored. Empty without BLEU."""
    sigs = sorted({r["bleu_signature"] for r in records if r.get("bleu_signature")})
    if not sigs:
        return []
    b = protocol.get("bleu", {})
    sentences = "/".join(sorted({str(r.get("bleu_sentences")) for r in records if "bleu" in r}))
    post = repr(b["post_process"]) if b.get("post_process") else "none"
    what = (
        f"on the {b.get('subset', '?')} split ({sentences} sentences, post-process {post}, "
        f"beam {protocol['beam']}, lenpen {protocol['lenpen']}, output length not forced)"
    )
    return [f"BLEU: sacreBLEU {sig} {what}" for sig in sigs]


def write_json(path: str, result: dict) -> None:
    """``result`` as JSON into ``path`` (atomically: a complete file or the old one)."""
    from lightcompress.io import atomic_write

    try:
        with atomic_write(path) as f:
            json.dump(result, f, indent=1)
    except OSError as exc:
        raise SpeedError(f"--json {path}: cannot write ({exc.strerror or exc})") from None
