#!/usr/bin/env python3
"""The results table of examples/translation/results/run.sh.

    python examples/translation/results/collect.py --save-root checkpoints/results \\
        --ref data/results/raw/test.en [--speed SAVE_ROOT/speed.json] \\
        [--corpus-stats data/results/stats.json] --out results.md --json results.json

For every model folder of ``--save-root`` that run.sh trains (``MODELS``) and that has a
``generate-test.txt`` (fairseq-generate of its ``checkpoint_best.pt``): sacreBLEU and chrF
against the raw test references (detokenized text, one line per test sentence, scored with
sacreBLEU's defaults; the signatures go under the table), where the models trained (``machine.txt``, written by run.sh), parameters (``params.json``,
``lightcompress-params --path`` of the evaluated checkpoint, where run.sh writes one: DA-WID's
fused model, whose training model is its teacher with compactors and masks; else fairseq-train's
``num. shared model params``), updates trained and the update of the best validation loss
(``train.log``), training wall-clock (``train.seconds``, one line per invocation of run.sh),
tokens/s from ``measure_speed --json`` (one thread, batch 1, beam 5), and BLEU / size / speed
relative to the teacher. Then findings: each compressed model against the teacher (within
1 BLEU at 3-7x fewer parameters, the papers' claim), SVD transfer against random
initialisation at equal student updates, KD, DA-WID against its own (post-LN) teacher. Writes ``--out`` (markdown) and ``--json`` (the
``models`` format ``scripts/plot_frontier.py`` reads). Models without a translation are
listed as missing. Bad input (no model at all, a references file whose length does not match
a translation, an unreadable speed file) ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys

__all__ = ["MODELS", "CollectError", "collect", "main", "read_generate", "render_markdown"]

_SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts")
sys.path.insert(0, os.path.abspath(_SCRIPTS))
from plot_curves import LogError, parse_log
from recipe_result import params_from_log

# (folder, method, how it was trained)
MODELS = (
    ("teacher", "Transformer (dense teacher)", "ground truth, early stopping"),
    ("lightformer_svd", "LightFormer, SVD transfer", "from the teacher by SVD, fixed updates"),
    ("lightformer_random", "LightFormer, random init", "random init, same updates as SVD"),
    ("hypoformer_kd", "Hypoformer + seq-KD", "ground truth + teacher's translations"),
    ("subformer", "Subformer (sandwich, SAFE)", "ground truth, early stopping"),
    ("smartformer", "Smartformer (CPAC, fixed rank)", "ground truth, early stopping"),
    ("dawid_teacher", "Transformer post-LN (DA-WID's teacher)", "ground truth, early stopping"),
    ("dawid", "DA-WID, fused", "from its post-LN teacher: masks + distillation, fixed updates"),
)


class CollectError(ValueError):
    """Unusable input: one line, exit status 2."""


_HYP = re.compile(r"^D-(\d+)\t[^\t]*\t(.*)$")
_UPDATES = re.compile(r"num_updates[= ](\d+)")


def read_generate(path: str) -> dict[int, str]:
    """Sentence id -> detokenized hypothesis (fairseq-generate's ``D-`` lines)."""
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _HYP.match(line.rstrip("\n"))
            if m:
                out[int(m.group(1))] = m.group(2)
    return out


def _training(save_dir: str) -> dict:
    log = os.path.join(save_dir, "train.log")
    info = {"params": None, "updates": None, "best_update": None, "best_valid_loss": None,
            "train_seconds": None}  # fmt: skip
    if os.path.exists(log):
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        info["params"] = params_from_log(text)
        ups = [int(u) for u in _UPDATES.findall(text)]
        info["updates"] = max(ups) if ups else None
        try:
            valid = parse_log(log)["valid"]
        except LogError:
            valid = []
        if valid:
            upd, loss = min(valid, key=lambda p: p[1])
            info["best_update"], info["best_valid_loss"] = int(upd), loss
    counted = os.path.join(save_dir, "params.json")
    if os.path.exists(counted):
        try:
            with open(counted, encoding="utf-8") as f:
                info["params"] = int(json.load(f)["total"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CollectError(f"{counted}: not lightcompress-params output ({exc})") from None
    secs = os.path.join(save_dir, "train.seconds")
    if os.path.exists(secs):
        with open(secs, encoding="utf-8") as f:
            info["train_seconds"] = sum(int(x) for x in f.read().split() if x.isdigit())
    return info


def _speed(path: str | None) -> dict[str, dict]:
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        recs = doc["models"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CollectError(f"{path}: not measure_speed --json output ({exc})") from None
    return {r["label"]: r for r in recs if r.get("precision", "float32") == "float32"}


def collect(save_root: str, ref_path: str, speed_path: str | None = None) -> dict:
    """The records of every model (see the module docstring)."""
    import sacrebleu

    try:
        with open(ref_path, encoding="utf-8") as f:
            refs = f.read().splitlines()
    except OSError as exc:
        raise CollectError(f"--ref {ref_path}: cannot read ({exc.strerror})") from None
    speed = _speed(speed_path)
    records, missing = [], []
    for name, method, how in MODELS:
        d = os.path.join(save_root, name)
        gen = os.path.join(d, "generate-test.txt")
        if not os.path.exists(gen):
            missing.append(name)
            continue
        hyps = read_generate(gen)
        if sorted(hyps) != list(range(len(refs))):
            raise CollectError(
                f"{gen}: {len(hyps)} translations for {len(refs)} references in {ref_path} "
                "(a translation of another test set?)"
            )
        sys_out = [hyps[i] for i in range(len(refs))]
        bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
        b, c = bleu.corpus_score(sys_out, [refs]), chrf.corpus_score(sys_out, [refs])
        rec = {"label": name, "method": method, "training": how, "precision": "float32",
               "bleu": round(b.score, 2), "bleu_signature": str(bleu.get_signature()),
               "chrf": round(c.score, 2), "chrf_signature": str(chrf.get_signature()),
               "test_sentences": len(refs), **_training(d)}  # fmt: skip
        sp = speed.get(name, {})
        rec["tokens_per_s"] = sp.get("tokens_per_s")
        rec["tokens_per_s_std"] = sp.get("tokens_per_s_std")
        if rec["params"] is None:
            rec["params"] = sp.get("params")
        records.append(rec)
    if not records:
        raise CollectError(f"{save_root}: no model has a generate-test.txt yet (run run.sh)")
    teacher = next((r for r in records if r["label"] == "teacher"), None)
    for r in records:
        if teacher is None or r is teacher:
            continue
        r["bleu_vs_teacher"] = round(r["bleu"] - teacher["bleu"], 2)
        if r["params"] and teacher["params"]:
            r["compression"] = round(teacher["params"] / r["params"], 2)
        if r["tokens_per_s"] and teacher["tokens_per_s"]:
            r["speedup"] = round(r["tokens_per_s"] / teacher["tokens_per_s"], 2)
    machine = None
    mpath = os.path.join(save_root, "machine.txt")
    if os.path.exists(mpath):
        with open(mpath, encoding="utf-8") as f:
            machine = f.read().strip() or None
    return {"models": records, "missing": missing, "machine": machine}


def findings(records: list[dict]) -> list[str]:
    """Plain statements of how each method compares with the papers' claims."""
    by = {r["label"]: r for r in records}
    out = []
    t = by.get("teacher")
    if t is not None and t["bleu"] < 1.0:
        return [(f"The teacher scores {t['bleu']:.2f} BLEU: far too little training for any "
                "comparison (a smoke run?).")]  # fmt: skip
    for r in records:
        if r is t or t is None or "compression" not in r:
            continue
        within = r["bleu_vs_teacher"] >= -1.0
        ratio_ok = 3.0 <= r["compression"] <= 7.0
        verdict = "meets" if within and ratio_ok else "falls short of"
        why = []
        if not within:
            why.append(f"{-r['bleu_vs_teacher']:.2f} BLEU below the teacher")
        if not ratio_ok:
            why.append(f"{r['compression']:.1f}x fewer parameters, outside 3-7x")
        out.append(f"{r['method']}: {r['bleu']:.2f} BLEU ({r['bleu_vs_teacher']:+.2f} vs the "
                   f"teacher) at {r['compression']:.1f}x fewer parameters: {verdict} the "
                   f"papers' claim (within 1 BLEU at 3-7x fewer)"
                   + (f" ({'; '.join(why)})" if why else "") + ".")  # fmt: skip
    svd, rnd = by.get("lightformer_svd"), by.get("lightformer_random")
    if svd and rnd:
        better = svd["bleu"] > rnd["bleu"]
        out.append(f"SVD transfer vs random initialisation at equal student updates "
                   f"({svd['updates']} vs {rnd['updates']}): {svd['bleu']:.2f} vs {rnd['bleu']:.2f} "
                   f"BLEU: SVD transfer {'helps' if better else 'does NOT help'} here"
                   + ("" if better else " (the paper claims it does)") + ".")  # fmt: skip
    wid, wt = by.get("dawid"), by.get("dawid_teacher")
    if wid and wt:
        size = (f" at {wt['params'] / wid['params']:.1f}x fewer parameters"
                if wid["params"] and wt["params"] else "")  # fmt: skip
        out.append(f"DA-WID against its own post-LN teacher (the one it inherits from): "
                   f"{wid['bleu']:.2f} vs {wt['bleu']:.2f} BLEU ({wid['bleu'] - wt['bleu']:+.2f})"
                   f"{size}.")  # fmt: skip
    hyp = by.get("hypoformer_kd")
    if hyp and t:
        out.append(f"Hypoformer is trained with sequence-level KD only (no run without KD in "
                   f"this table), so the table does not isolate what KD adds: "
                   f"{hyp['bleu']:.2f} BLEU vs the teacher's {t['bleu']:.2f}.")  # fmt: skip
    return out


def _fmt(v, spec: str = "", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def render_markdown(result: dict, plan: str, corpus: dict | None) -> str:
    recs = result["models"]
    made = f"table made {datetime.date.today().isoformat()} on {platform.node() or 'unknown host'}"
    trained = result.get("machine")
    lines = [
        f"Results corpus, {plan} plan; trained {trained or 'on an unrecorded machine'}; {made}.",
        "",
    ]
    if corpus:
        p = corpus.get("pairs", {})
        lines += [(f"Corpus: {_fmt(p.get('train'), ',', '?')} / {_fmt(p.get('valid'), ',', '?')} / "
                  f"{_fmt(p.get('test'), ',', '?')} sentence pairs (train / valid / test, split "
                  f"by package), joined dictionary {_fmt(corpus.get('fairseq_dict_size'), ',', '?')} "
                  "types."), ""]  # fmt: skip
    lines += [
        "| model | params | x fewer | BLEU | vs teacher | chrF | tokens/s | speed | updates (best) | train time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for r in recs:
        secs = r.get("train_seconds")
        lines.append(
            f"| {r['method']} | {_fmt(r['params'] and r['params'] / 1e6, '.2f')}M "
            f"| {_fmt(r.get('compression'), '.1f', '1.0' if r['label'] == 'teacher' else '-')} "
            f"| {r['bleu']:.2f} | {_fmt(r.get('bleu_vs_teacher'), '+.2f')} | {r['chrf']:.2f} "
            f"| {_fmt(r['tokens_per_s'], '.1f')} "
            f"| {_fmt(r.get('speedup'), '.2f')}{'x' if r.get('speedup') else ''} "
            f"| {_fmt(r['updates'])} ({_fmt(r['best_update'])}) "
            f"| {_fmt(secs and secs / 60, '.1f')}{' min' if secs else ''} |"
        )
    sig = recs[0]
    lines += [
        "",
        (
            f"BLEU: sacreBLEU {sig['bleu_signature']}; chrF: {sig['chrf_signature']}; on the "
            f"{sig['test_sentences']:,} test sentences (packages never seen in training), "
            "checkpoint_best.pt (lowest validation loss; DA-WID: its fused model, from its last "
            "checkpoint), beam 5, lenpen 1.0. tokens/s: "
            "scripts/measure_speed.sh, one CPU thread, batch 1, beam 5, float32; speed relative "
            "to the teacher. updates: trained (best validation loss at). train time: wall-clock "
            "of each model's own training (models may have shared the device)."
        ),
    ]
    if result["missing"]:
        lines += ["", "Not (yet) evaluated: " + ", ".join(result["missing"]) + "."]
    lines += ["", "Findings:", ""] + [f"- {f}" for f in findings(recs)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--save-root", required=True, help="run.sh's SAVE_ROOT")
    p.add_argument("--ref", required=True, help="raw test references (DATA_DIR/raw/test.en)")
    p.add_argument("--speed", help="measure_speed --json output")
    p.add_argument("--corpus-stats", help="the corpus's stats.json")
    p.add_argument("--plan", default="full", help="plan name for the table's heading")
    p.add_argument("--out", required=True, help="markdown table")
    p.add_argument("--json", dest="json_out", required=True, help="records (plot_frontier format)")
    args = p.parse_args(argv)
    try:
        result = collect(args.save_root, args.ref, args.speed)
        corpus = None
        if args.corpus_stats and os.path.exists(args.corpus_stats):
            with open(args.corpus_stats, encoding="utf-8") as f:
                corpus = json.load(f)
    except CollectError as exc:
        print(f"collect: error: {exc}", file=sys.stderr)
        return 2
    text = render_markdown(result, args.plan, corpus)
    for path, data in ((args.out, text),
                       (args.json_out, json.dumps({"source": "examples/translation/results/run.sh",
                                                   "plan": args.plan, **result}, indent=2) + "\n")):  # fmt: skip
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(tmp, path)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
