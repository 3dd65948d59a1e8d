#!/usr/bin/env python3
"""Training throughput with Smartformer's rank search on vs. the same model at fixed ranks.

    python examples/translation/smartformer/benchmark_search.py --data data/results/bin \\
        --updates 400 --interval 50 --repeats 2 [--cpu] [--fp16] [--json out.json]

Runs ``fairseq-train`` on DATA alternately with ``--task translation_smartformer --sm-search``
and without it (same model, data, seed, schedule; ``--no-save``), REPEATS times each, and reads
fairseq's own end-of-training throughput (``wps``: target words per second of the training
loop, which includes the search's importance accumulation, validation measurements and CP
re-fits since they run inside the optimizer step). Prints one line per run, the mean words/s of
each side and the search overhead ``1 - search / fixed``. A benchmark (timings vary with the
machine's load): nothing is asserted. Model flags after ``--``, default: a 3-3, 256-wide
smartformer (rank 64 start, ranks 16,32,48,64 to choose from).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

DEFAULT_MODEL = [
    "--arch",
    "smartformer_iwslt_de_en",
    "--encoder-layers",
    "3",
    "--decoder-layers",
    "3",
    "--encoder-embed-dim",
    "256",
    "--decoder-embed-dim",
    "256",
    "--encoder-ffn-embed-dim",
    "1024",
    "--decoder-ffn-embed-dim",
    "1024",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--sm-rank",
    "64",
]
WPS = re.compile(r"\| train \| epoch \d+ \|.*?\| wps ([0-9.]+)")


def train_args(data, save_dir, args, model, search):
    out = [
        data,
        "--user-dir",
        os.path.join(os.path.dirname(__file__), "..", "..", "..", "lightcompress"),
        "--task",
        "translation_smartformer",
        "--save-dir",
        save_dir,
        "--no-save",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        "5e-4",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "100",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        str(args.max_tokens),
        "--max-update",
        str(args.updates),
        "--seed",
        "1",
        "--log-format",
        "simple",
        "--log-interval",
        "50",
        "--disable-validation",
        "--num-workers",
        "0",
        *model,
    ]
    if args.cpu:
        out.append("--cpu")
    if args.fp16:
        out.append("--fp16")
    if search:
        out += [
            "--sm-search",
            "--sm-search-ranks",
            args.ranks,
            "--sm-search-interval",
            str(args.interval),
            "--sm-search-valid-batches",
            str(args.valid_batches),
        ]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="fairseq data-bin directory")
    p.add_argument("--updates", type=int, default=400)
    p.add_argument("--interval", type=int, default=50, help="--sm-search-interval (updates)")
    p.add_argument("--ranks", default="16,32,48,64", help="--sm-search-ranks")
    p.add_argument("--valid-batches", type=int, default=10, help="--sm-search-valid-batches")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--keep-logs", help="copy each search run's rank_search.jsonl into this folder")
    args, model = p.parse_known_args(argv)
    model = [m for m in model if m != "--"] or DEFAULT_MODEL
    if not os.path.isfile(os.path.join(args.data, "dict.en.txt")) and not any(
        f.startswith("dict.") for f in os.listdir(args.data) if os.path.isdir(args.data)
    ):
        print(f"benchmark_search: error: {args.data} is not a fairseq data-bin", file=sys.stderr)
        return 2
    exe = [sys.executable, "-m", "fairseq_cli.train"]  # fairseq-train of this interpreter
    wps = {"search": [], "fixed": []}
    runs = []
    for rep in range(args.repeats):
        for side in ("search", "fixed"):
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [*exe, *train_args(args.data, tmp, args, model, side == "search")]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                log = proc.stdout + proc.stderr
                found = WPS.findall(log)
                if proc.returncode != 0 or not found:
                    print(
                        f"benchmark_search: error: fairseq-train ({side}) failed:\n" + log[-3000:],
                        file=sys.stderr,
                    )
                    return 1
                decisions = log.count("rank search | update")
                jsonl = os.path.join(tmp, "rank_search.jsonl")
                if args.keep_logs and os.path.exists(jsonl):
                    os.makedirs(args.keep_logs, exist_ok=True)
                    shutil.copy(jsonl, os.path.join(args.keep_logs, f"rank_search_{rep + 1}.jsonl"))
                value = float(found[-1])
                wps[side].append(value)
                runs.append({"side": side, "repeat": rep, "wps": value, "decisions": decisions})
                print(
                    f"{side:6s} run {rep + 1}: {value:,.0f} words/s ({decisions} decisions)",
                    flush=True,
                )
    mean = {k: statistics.mean(v) for k, v in wps.items()}
    overhead = 1.0 - mean["search"] / mean["fixed"]
    print(
        f"mean words/s: search {mean['search']:,.0f}, fixed ranks {mean['fixed']:,.0f}; "
        f"search overhead {100 * overhead:.1f} %"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "runs": runs,
                    "mean_wps": mean,
                    "overhead": overhead,
                    "settings": vars(args),
                    "model": model,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
