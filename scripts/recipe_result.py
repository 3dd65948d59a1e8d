#!/usr/bin/env python3
"""One model's result as JSON, in the format scripts/plot_frontier.py reads.

The recipes' evaluation step (examples/common/lib.sh: ``evaluate``, then ``speed_column``)
calls it after scoring and again after timing:

    python scripts/recipe_result.py --out SAVE_DIR/result.json --label NAME \\
        --results SAVE_DIR/results.txt [--train-log SAVE_DIR/train.log] \\
        [--speed-json SAVE_DIR/speed.json] [--checkpoint CKPT] [--dataset D] [--plan paper|small]

It reads, from files the recipe wrote before:

- ``results.txt`` (``evaluate``): the sacreBLEU line in sacreBLEU's text format
  (``BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 34.56 ...``): the score and
  its signature; the tokenized BLEU of fairseq-generate (``BLEU4 = ...``) when present;
- ``train.log``: fairseq-train's ``num. shared model params: N`` (each shared tensor once); for
  a Smartformer rank search (``--sm-search``), whose ranks change during training, the count of
  its last decision line (``rank search | update U | ... | params N``) instead;
- ``speed.json`` (``scripts/measure_speed.sh --json``), when the speed was measured: the record
  labelled ``model`` (tokens/s, its std, the ratio to the first row, normally the dataset's
  Transformer 6-6); without it ``tokens_per_s`` is ``null``. Its ``params`` (the plugin's count,
  also each shared tensor once) is used when train.log has none.

and writes ``{"source": ..., "models": [record]}`` (atomically). A missing or unreadable
results.txt, or one without a sacreBLEU line, ends with one line on stderr and exit status 2;
the output's directory is checked before anything is read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from plot_output import plugin_io

__all__ = ["ResultError", "build_record", "main", "params_from_log", "parse_results"]

SACREBLEU_LINE = re.compile(r"BLEU[|+](\S+) = ([0-9.]+)")
TOKENIZED_BLEU = re.compile(r"BLEU4? = ([0-9.]+)")
PARAMS_LINE = re.compile(r"num\. shared model params: ([0-9,]+)")
SEARCH_PARAMS_LINE = re.compile(r"rank search \| update \d+ \|.*?\| params ([0-9,]+)")


class ResultError(ValueError):
    """A missing or unusable input: one line, exit status 2."""


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise ResultError(f"{what} {path}: cannot read ({exc.strerror})") from None


def parse_results(text: str) -> dict:
    """``bleu``, ``bleu_signature`` (and ``bleu_tokenized``) of an ``evaluate`` results.txt."""
    out = {}
    for line in text.splitlines():
        if line.startswith("sacreBLEU"):
            m = SACREBLEU_LINE.search(line)
            if m:
                out["bleu_signature"], out["bleu"] = m.group(1), float(m.group(2))
        elif line.startswith("tokenized BLEU (fairseq-generate)"):
            m = TOKENIZED_BLEU.search(line)
            if m:
                out["bleu_tokenized"] = float(m.group(1))
    return out


def params_from_log(text: str) -> int | None:
    """fairseq-train's ``num. shared model params`` (the first one logged), or the count of a
    rank search's last decision (the ranks the model ends with)."""
    searched = SEARCH_PARAMS_LINE.findall(text)
    if searched:
        return int(searched[-1].replace(",", ""))
    m = PARAMS_LINE.search(text)
    return int(m.group(1).replace(",", "")) if m else None


def build_record(args) -> dict:
    scores = parse_results(_read(args.results, "--results"))
    if "bleu" not in scores:
        raise ResultError(
            f"{args.results} has no sacreBLEU line in sacreBLEU's text format "
            "('BLEU|nrefs:...|version:... = SCORE'): was it written by the recipes' evaluate?"
        )
    rec = {"label": args.label, "precision": "float32"}
    if args.checkpoint:
        rec["checkpoint"] = args.checkpoint
    if args.dataset:
        rec["dataset"] = args.dataset
    rec.update(scores)
    params, source = None, None
    if args.train_log and os.path.exists(args.train_log):
        params = params_from_log(_read(args.train_log, "--train-log"))
        source = "fairseq-train log (num. shared model params)" if params is not None else None
    speed = None
    if args.speed_json and os.path.exists(args.speed_json):
        try:
            doc = json.loads(_read(args.speed_json, "--speed-json"))
            models = doc["models"]
            speed = next(m for m in models if m.get("label") == args.speed_label)
        except (json.JSONDecodeError, KeyError, TypeError, StopIteration):
            raise ResultError(
                f"{args.speed_json}: no measure_speed record labelled {args.speed_label!r}"
            ) from None
        if params is None and speed.get("params") is not None:
            params, source = speed["params"], "measure_speed (count_parameters)"
        first = models[0]
        rec["tokens_per_s"] = speed.get("tokens_per_s")
        rec["tokens_per_s_std"] = speed.get("tokens_per_s_std")
        rec["speed_ratio"] = speed.get("speed_ratio")
        rec["speed_baseline"] = first.get("label") if first is not speed else None
        rec["speed_protocol"] = doc.get("protocol", {}).get("tokens")
    else:
        rec["tokens_per_s"] = None
    rec["params"] = params
    rec["params_source"] = source
    if args.plan:
        rec["plan"] = args.plan
    return rec


def _check_output(path: str) -> None:
    message = plugin_io().output_error(path, "--out")
    if message:
        raise ResultError(message)


def _write(path: str, doc: dict) -> None:
    try:
        with plugin_io().atomic_write(path) as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    except OSError as exc:
        raise ResultError(f"--out {path}: cannot write ({exc.strerror or exc})") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    p = _Parser(prog="recipe_result", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON file to write (result.json)")
    p.add_argument("--label", required=True, help="the model's name in plots")
    p.add_argument("--results", required=True, help="the results.txt evaluate wrote")
    p.add_argument("--train-log", help="fairseq-train's log (parameter count)")
    p.add_argument("--speed-json", help="measure_speed --json output, when measured")
    p.add_argument("--speed-label", default="model", help="its record of this model (model)")
    p.add_argument("--checkpoint", help="the checkpoint that was scored")
    p.add_argument("--dataset", help="the dataset's name")
    p.add_argument("--plan", help="the training plan (paper, or small with SMALL=1)")
    args = p.parse_args(argv)
    try:
        _check_output(args.out)
        record = build_record(args)
        _write(args.out, {"source": "examples/common/lib.sh evaluate", "models": [record]})
    except ResultError as exc:
        print(f"recipe_result: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
