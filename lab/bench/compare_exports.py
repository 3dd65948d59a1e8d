#!/usr/bin/env python3
"""Several ONNX exports side by side: the same sentences translated by each, in one process,
the exports taking turns in every run (so that a busy or throttled machine slows them alike),
the best of ``--runs`` kept; tokens/s, each export's speed against the first (its tokens/s over
the first's: a faster export reads more than 1x), and how many of its translations equal the
first export's.

    python lab/bench/compare_exports.py old-onnx new-onnx --input test.de --num-sentences 150 \\
        --batch-size 1 --runs 5 [--shortlist] [--json compare.json]

Use it for a change of the exporter (the same checkpoint exported by two versions of the code),
or for two exports of one model (float32 against int8, with and without ``--shortlist``).
Lines of ``--input`` are raw text, encoded by the first export's tokenizer (``--tokenized``:
the data's space-separated subword tokens, the only input of an export without a tokenizer);
every k-th line is taken (k = lines // ``--num-sentences``).
Tokens are the hypotheses' tokens with EOS, as ``measure_speed`` counts them. One thread,
beam 5, fairseq's length rules as set. Bad input: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import lightcompress_runtime as runtime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_onnx import ProfileError, sample_lines  # (the same sentences as the profiler's)


class CompareError(ValueError):
    """Bad input (one line)."""


def compare(args) -> list[dict]:
    """One row per export: ``{"export", "tokens", "seconds", "tokens_per_s", "speed",
    "same_output", "sentences"}`` (speed and same output against the first export)."""
    lines = sample_lines(args.input, args.num_sentences)
    settings = {
        "beam": 5,
        "batch_size": args.batch_size,
        "threads": 1,
        "lenpen": 1.0,
        "max_len_a": args.max_len_a,
        "max_len_b": args.max_len_b,
        "shortlist": args.shortlist,
        "tokenized": args.tokenized,
    }
    try:
        translators = [runtime.OnnxTranslator(d, **settings) for d in args.exports]
        if translators[0].text_error:
            raise runtime.OnnxError(translators[0].text_error)
    except runtime.OnnxError as exc:
        raise CompareError(str(exc)) from None
    dicts = {tuple(t.src_symbols) for t in translators}
    if len(dicts) > 1:
        raise CompareError(
            "the exports have different source dictionaries: they cannot translate the same ids"
        )
    sources = [translators[0].encode(line) for line in lines]
    best = [float("inf")] * len(translators)
    outputs: list = [None] * len(translators)
    for _ in range(args.runs):
        for i, t in enumerate(translators):
            start = time.perf_counter()
            outputs[i] = t.translate_ids(sources)
            best[i] = min(best[i], time.perf_counter() - start)
    rows = []
    tokens = [sum(len(h) + 1 for h in out) for out in outputs]  # (with EOS)
    rates = [n / seconds for n, seconds in zip(tokens, best)]
    for path, seconds, out, n, rate in zip(args.exports, best, outputs, tokens, rates):
        rows.append(
            {
                "export": path,
                "tokens": n,
                "seconds": round(seconds, 4),
                "tokens_per_s": round(rate, 1),
                # (tokens/s against the first's: faster > 1, also where the outputs' lengths differ)
                "speed": round(rate / rates[0], 3),
                "same_output": sum(a == b for a, b in zip(outputs[0], out)),
                "sentences": len(sources),
            }
        )
    return rows


def _arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("exports", nargs="+", help="ONNX exports (lightcompress-export-onnx)")
    p.add_argument("--input", required=True, help="raw source text, one sentence per line")
    p.add_argument("--num-sentences", type=int, default=150, help="default 150")
    p.add_argument("--batch-size", type=int, default=1, help="default 1")
    p.add_argument("--runs", type=int, default=5, help="timed runs, the best kept (default 5)")
    p.add_argument("--max-len-a", type=float, default=1.2, help="default 1.2 (the benchmark's)")
    p.add_argument("--max-len-b", type=int, default=10, help="default 10 (the benchmark's)")
    p.add_argument("--shortlist", action="store_true", help="score each export's shortlist")
    p.add_argument(
        "--tokenized",
        action="store_true",
        help="--input is the data's subword tokens (space-separated)",
    )
    p.add_argument("--json", help="also write the rows to this file")
    return p


def main(argv=None) -> int:
    args = _arg_parser().parse_args(argv)
    try:
        for name in ("num_sentences", "batch_size", "runs", "max_len_b"):
            if getattr(args, name) < 1:
                raise CompareError(f"--{name.replace('_', '-')} must be >= 1")
        if len(args.exports) < 2:
            raise CompareError("give at least two exports to compare")
        rows = compare(args)
    except (CompareError, ProfileError) as exc:
        print(f"compare_exports.py: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(rows)} exports, {args.num_sentences} sentences at most, batch {args.batch_size},"
        f" beam 5, 1 thread, best of {args.runs}{', shortlist' if args.shortlist else ''}"
    )
    for r in rows:
        print(
            f"{r['export']}: {r['tokens_per_s']:.1f} tokens/s ({r['tokens']} tokens, "
            f"{r['seconds']:.3f} s), {r['speed']:.3f}x the first's tokens/s, "
            f"same output {r['same_output']}/{r['sentences']}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"settings": {k: v for k, v in vars(args).items() if k != "json"}, "rows": rows},
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
