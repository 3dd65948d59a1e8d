#!/usr/bin/env python3
"""The results table of lab/results/run.sh.

    python lab/results/collect.py --save-root checkpoints/results \\
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

_SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
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
# the CPU plan's rows (run.sh SMALL=1, cpu_plan.sh): one post-LN teacher, fixed updates
CPU_MODELS = (
    ("teacher", "Transformer (dense teacher)", "ground truth"),
    ("lightformer_svd", "LightFormer, SVD transfer", "from the teacher by SVD"),
    ("lightformer_random", "LightFormer, random init", "random init, same updates as SVD"),
    ("hypoformer_kd", "Hypoformer + seq-KD", "ground truth + teacher's translations"),
    ("hypoformer", "Hypoformer, no KD", "ground truth"),
    ("subformer", "Subformer (sandwich, SAFE)", "ground truth"),
    ("smartformer_search", "Smartformer, searched ranks (A2C)", "ground truth, rank search"),
    ("smartformer", "Smartformer, fixed rank (same size)", "ground truth"),
    ("dawid_teacher", "Transformer post-LN (DA-WID's teacher)", "ground truth"),
    ("dawid", "DA-WID, fused", "from its post-LN teacher: masks + distillation"),
)


class CollectError(ValueError):
    """Unusable input: one line, exit status 2."""


_HYP = re.compile(r"^D-(\d+)\t[^\t]*\t(.*)$")
_UPDATES = re.compile(r"num_updates[= ](\d+)")
_WPS = re.compile(r"\| train_inner \|.*?wps=([0-9.]+)")


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
    info = {
        "params": None,
        "updates": None,
        "best_update": None,
        "best_valid_loss": None,
        "train_seconds": None,
        "train_wps": None,
    }
    if os.path.exists(log):
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        info["params"] = params_from_log(text)
        wps = [float(w) for w in _WPS.findall(text)]
        info["train_wps"] = round(sum(wps) / len(wps), 1) if wps else None
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


def read_refs(ref_path: str) -> list[str]:
    """The references, one per line (split at \\n only, as fairseq reads text)."""
    try:
        with open(ref_path, encoding="utf-8", newline="") as f:
            text = f.read()
        return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    except OSError as exc:
        raise CollectError(f"--ref {ref_path}: cannot read ({exc.strerror})") from None


def model_record(d: str, name: str, method: str, how: str, refs: list[str], ref_path: str) -> dict:
    """One model's record from its folder: BLEU / chrF of generate-test.txt and training."""
    import sacrebleu

    gen = os.path.join(d, "generate-test.txt")
    hyps = read_generate(gen)
    if sorted(hyps) != list(range(len(refs))):
        raise CollectError(
            f"{gen}: {len(hyps)} translations for {len(refs)} references in {ref_path} "
            "(a translation of another test set?)"
        )
    sys_out = [hyps[i] for i in range(len(refs))]
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    b, c = bleu.corpus_score(sys_out, [refs]), chrf.corpus_score(sys_out, [refs])
    return {
        "label": name,
        "method": method,
        "training": how,
        "precision": "float32",
        "bleu": round(b.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": round(c.score, 2),
        "chrf_signature": str(chrf.get_signature()),
        "test_sentences": len(refs),
        **_training(d),
    }


def _machine(save_root: str) -> str | None:
    """Where the models trained (run.sh's machine.txt), or None."""
    mpath = os.path.join(save_root, "machine.txt")
    if not os.path.exists(mpath):
        return None
    with open(mpath, encoding="utf-8") as f:
        return f.read().strip() or None


def collect(save_root: str, ref_path: str, speed_path: str | None = None) -> dict:
    """The records of every model (see the module docstring)."""

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
        rec = model_record(d, name, method, how, refs, ref_path)
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
    return {"models": records, "missing": missing, "machine": _machine(save_root)}


def findings(records: list[dict]) -> list[str]:
    """Plain statements of how each method compares with the papers' claims."""
    by = {r["label"]: r for r in records}
    out = []
    t = by.get("teacher")
    if t is not None and t["bleu"] < 1.0:
        return [
            (
                f"The teacher scores {t['bleu']:.2f} BLEU: far too little training for any "
                "comparison (a smoke run?)."
            )
        ]
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
        out.append(
            f"{r['method']}: {r['bleu']:.2f} BLEU ({r['bleu_vs_teacher']:+.2f} vs the "
            f"teacher) at {r['compression']:.1f}x fewer parameters: {verdict} the "
            f"papers' claim (within 1 BLEU at 3-7x fewer)"
            + (f" ({'; '.join(why)})" if why else "")
            + "."
        )
    svd, rnd = by.get("lightformer_svd"), by.get("lightformer_random")
    if svd and rnd:
        better = svd["bleu"] > rnd["bleu"]
        out.append(
            f"SVD transfer vs random initialisation at equal student updates "
            f"({svd['updates']} vs {rnd['updates']}): {svd['bleu']:.2f} vs {rnd['bleu']:.2f} "
            f"BLEU: SVD transfer {'helps' if better else 'does NOT help'} here"
            + ("" if better else " (the paper claims it does)")
            + "."
        )
    wid, wt = by.get("dawid"), by.get("dawid_teacher")
    if wid and wt:
        size = (
            f" at {wt['params'] / wid['params']:.1f}x fewer parameters"
            if wid["params"] and wt["params"]
            else ""
        )
        out.append(
            f"DA-WID against its own post-LN teacher (the one it inherits from): "
            f"{wid['bleu']:.2f} vs {wt['bleu']:.2f} BLEU ({wid['bleu'] - wt['bleu']:+.2f})"
            f"{size}."
        )
    hyp = by.get("hypoformer_kd")
    if hyp and t:
        out.append(
            f"Hypoformer is trained with sequence-level KD only (no run without KD in "
            f"this table), so the table does not isolate what KD adds: "
            f"{hyp['bleu']:.2f} BLEU vs the teacher's {t['bleu']:.2f}."
        )
    return out


def _fmt(v, spec: str = "", none: str = "-") -> str:
    return none if v is None else format(v, spec)


CORPUS_FILE = "corpus.json"  # in the rows directory: the corpus's figures, kept with the rows


def corpus_stats(rows_dir: str, stats_path: str | None) -> dict | None:
    """The corpus's figures (pairs per split, dictionary size): from the corpus's ``stats.json``
    when it is there, then also kept as ``ROWS_DIR/corpus.json``, so that the table can be built
    again from the repository's files alone (the corpus itself is not committed); else from that
    copy; ``None`` when neither exists."""
    keep = os.path.join(rows_dir, CORPUS_FILE)
    if stats_path and os.path.exists(stats_path):
        stats = _read_json(stats_path, "corpus stats file")
        corpus = {
            "pairs": stats.get("pairs", {}),
            "fairseq_dict_size": stats.get("fairseq_dict_size"),
        }
        _write_json(keep, corpus)
        return corpus
    if os.path.exists(keep):
        return _read_json(keep, "corpus figures")
    return None


def _corpus_line(corpus: dict) -> str:
    p = corpus.get("pairs", {})
    return (
        f"Corpus: {_fmt(p.get('train'), ',', '?')} / {_fmt(p.get('valid'), ',', '?')} / "
        f"{_fmt(p.get('test'), ',', '?')} sentence pairs (train / valid / test, split "
        f"by package), joined dictionary {_fmt(corpus.get('fairseq_dict_size'), ',', '?')} "
        "types."
    )


def render_markdown(result: dict, plan: str, corpus: dict | None) -> str:
    recs = result["models"]
    made = f"table made {datetime.date.today().isoformat()} on {platform.node() or 'unknown host'}"
    trained = result.get("machine")
    lines = [
        f"Results corpus, {plan} plan; trained {trained or 'on an unrecorded machine'}; {made}.",
        "",
    ]
    if corpus:
        lines += [_corpus_line(corpus), ""]
    lines += [
        "| model | params | x fewer | BLEU | vs teacher | chrF | tokens/s | speed | updates (best) | train time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in recs:
        secs = r.get("train_seconds")
        lines.append(
            f"| {r['method']} | {_fmt(r['params'] and r['params'] / 1e6, '.2f')}M "
            f"| {_fmt(r.get('compression'), '.1f', '1.0' if r['label'] == 'teacher' else '-')} "
            f"| {r['bleu']:.2f} | {_fmt(r.get('bleu_vs_teacher'), '+.2f')} | {r['chrf']:.2f} "
            f"| {_fmt(r.get('best_valid_loss'), '.3f')} "
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


# --------------------------------------------------------------------------------------------
# The CPU plan: one JSON file per finished row in the repository, the table from those alone
# --------------------------------------------------------------------------------------------


def _write_json(path: str, doc) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise CollectError(f"{path}: not a readable {what} ({exc})") from None


def write_row(
    save_root: str, name: str, ref_path: str, rows_dir: str, commit: str, plan: str = "cpu"
) -> dict:
    """The figures of one finished model into ``rows_dir/name.json`` (written atomically)."""
    known = {m[0]: m for m in (CPU_MODELS if plan == "cpu" else MODELS)}
    if name not in known:
        raise CollectError(f"unknown model {name!r} (one of {', '.join(sorted(known))})")
    _, method, how = known[name]
    d = os.path.join(save_root, name)
    if not os.path.exists(os.path.join(d, "generate-test.txt")):
        raise CollectError(f"{d}: no generate-test.txt: the model is not evaluated yet")
    rec = model_record(d, name, method, how, read_refs(ref_path), ref_path)
    rec.update(
        plan=plan,
        commit=commit,
        machine=_machine(save_root),
        finished=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    os.makedirs(rows_dir, exist_ok=True)
    _write_json(os.path.join(rows_dir, f"{name}.json"), rec)
    return rec


def write_speed(b1: str, b32: str, rows_dir: str, commit: str) -> dict:
    """measure_speed --json of batch 1 and batch 32 -> ``rows_dir/speed.json``: per model and
    engine (fairseq, onnx, ct2) and precision, tokens/s at each batch size and size on disk."""
    out = _speed_doc(b1, b32, commit)
    os.makedirs(rows_dir, exist_ok=True)
    _write_json(os.path.join(rows_dir, "speed.json"), out)
    return out


REMEASURE_FILE = "speed_remeasure.json"


def write_remeasure(
    b1: str, b32: str, save_root: str, ref_path: str, rows_dir: str, commit: str
) -> dict:
    """The re-measurement after the CTranslate2 fix (see VOID_NOTE): models retrained with the
    plan's own commands in ``save_root`` (each with its generate-test.txt), timed side by side
    as the plan does -> ``rows_dir/speed_remeasure.json``, with their test BLEU and chrF scored
    as the rows are (:func:`model_record`)."""
    out = _speed_doc(b1, b32, commit)
    refs = read_refs(ref_path)
    out["scores"] = {}
    for label in out["models"]:
        d = os.path.join(save_root, label)
        if not os.path.exists(os.path.join(d, "generate-test.txt")):
            raise CollectError(f"{d}: no generate-test.txt: {label} is not evaluated yet")
        rec = model_record(d, label, label, "retrained", refs, ref_path)
        out["scores"][label] = {k: rec.get(k) for k in ("bleu", "chrf", "updates")}
    os.makedirs(rows_dir, exist_ok=True)
    _write_json(os.path.join(rows_dir, REMEASURE_FILE), out)
    return out


def _speed_doc(b1: str, b32: str, commit: str) -> dict:
    out = {
        "commit": commit,
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs)",
        "measured": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        # measured by code whose CTranslate2 export converts a copy (see VOID_NOTE)
        "ct2_exports_copy": True,
        "models": {},
    }
    for batch, path in ((1, b1), (32, b32)):
        doc = _read_json(path, "measure_speed --json output")
        try:
            recs = doc["models"]
            out[f"protocol_b{batch}"] = doc.get("protocol")
        except (KeyError, TypeError) as exc:
            raise CollectError(f"{path}: not measure_speed --json output ({exc})") from None
        for r in recs:
            key = f"{r.get('engine', 'fairseq')}-{r.get('precision', 'float32')}"
            m = out["models"].setdefault(r["label"], {}).setdefault(key, {})
            m[f"tokens_per_s_b{batch}"] = round(r["tokens_per_s"], 1)
            m[f"tokens_per_s_std_b{batch}"] = round(r.get("tokens_per_s_std") or 0.0, 1)
            if r.get("size_bytes") is not None:
                m["size_bytes"] = r["size_bytes"]
    return out


# A speed file without "ct2_exports_copy" was measured by code whose CTranslate2 export
# quantized the loaded model in place (its converter reads the parameters as numpy views):
# measure_speed then timed, and exported to ONNX, the int8-scaled weights of every model it
# had exported to CTranslate2. Those models' fairseq and ONNX Runtime figures are void; their
# CTranslate2 figures (the export was made before the damage) and every BLEU stand.
VOID_NOTE = (
    "void: measured on a model that CTranslate2's int8 export had quantized in place (a "
    "defect of `measure_speed --ct2`, found after this run and fixed in 7473f50; the "
    "CTranslate2 figures and every BLEU stand)"
)


def _void_speed(speed: dict | None, label: str) -> bool:
    models = (speed or {}).get("models", {})
    return (
        bool(speed)
        and not speed.get("ct2_exports_copy")
        and any(k.startswith("ctranslate2-") for k in models.get(label, {}))
    )


def table_from_rows(rows_dir: str) -> dict:
    """The CPU plan's records from ``rows_dir`` alone (no checkpoint, no log needed)."""
    records, missing = [], []
    for name, _method, _how in CPU_MODELS:
        path = os.path.join(rows_dir, f"{name}.json")
        if not os.path.exists(path):
            missing.append(name)
            continue
        records.append(_read_json(path, "row"))
    if not records:
        raise CollectError(f"{rows_dir}: no row yet (run.sh SMALL=1 writes one per finished model)")
    speed_path = os.path.join(rows_dir, "speed.json")
    speed = _read_json(speed_path, "speed file") if os.path.exists(speed_path) else None
    for r in records:
        sp = (speed or {}).get("models", {}).get(r["label"], {})
        fs, ox = sp.get("fairseq-float32", {}), sp.get("onnxruntime-float32", {})
        ct = sp.get("ctranslate2-int8", {})
        r["fairseq_b1"], r["fairseq_b32"] = fs.get("tokens_per_s_b1"), fs.get("tokens_per_s_b32")
        r["onnx_b1"], r["onnx_b32"] = ox.get("tokens_per_s_b1"), ox.get("tokens_per_s_b32")
        r["onnx_bytes"] = ox.get("size_bytes")
        if _void_speed(speed, r["label"]):
            r["speed_void"] = True
            r["fairseq_b1"] = r["fairseq_b32"] = r["onnx_b1"] = r["onnx_b32"] = None
        r["ct2_int8_b1"], r["ct2_int8_b32"] = ct.get("tokens_per_s_b1"), ct.get("tokens_per_s_b32")
        # the deployment path's batch-1 figure is the frontier's speed axis (one engine for
        # every point: a model without an ONNX export is left off that panel)
        r["tokens_per_s"] = r["onnx_b1"]
    teacher = next((r for r in records if r["label"] == "teacher"), None)
    for r in records:
        if teacher is None or r is teacher:
            continue
        r["bleu_vs_teacher"] = round(r["bleu"] - teacher["bleu"], 2)
        if r.get("params") and teacher.get("params"):
            r["compression"] = round(teacher["params"] / r["params"], 2)
        for k in ("onnx_b1", "onnx_b32"):
            if r.get(k) and teacher.get(k):
                r[f"speedup_{k}"] = round(r[k] / teacher[k], 2)
    again = os.path.join(rows_dir, REMEASURE_FILE)
    remeasure = _read_json(again, "re-measurement") if os.path.exists(again) else None
    return {"models": records, "missing": missing, "speed": speed, "remeasure": remeasure}


def render_remeasure(again: dict, records: list[dict]) -> list[str]:
    """The re-measurement's lines: its timings, then the engine's share and compression's share
    and the comparison with CTranslate2 int8 on the teacher, as ratios of one run."""
    rows = {r["label"]: r for r in records}
    models = again["models"]
    scores = again.get("scores", {})
    named = ", ".join(
        f"{label} {s['bleu']:.2f}"
        + (f" (its row: {rows[label]['bleu']:.2f})" if label in rows else "")
        for label, s in scores.items()
    )
    lines = [
        "",
        (
            f"Re-measured after the fix ({again.get('measured')}, code {again.get('commit')}): "
            "models retrained with the plan's own commands (one thread, same seed), timed side by "
            f"side as above; their test BLEU: {named}."
        ),
        "",
        "| model | engine | precision | tok/s b1 | b32 | size |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for label, engines in models.items():
        for key, m in engines.items():
            engine, _, precision = key.partition("-")
            size = m.get("size_bytes")
            lines.append(
                f"| {label} | {engine} | {precision} | {_fmt(m.get('tokens_per_s_b1'), '.1f')} "
                f"| {_fmt(m.get('tokens_per_s_b32'), '.1f')} "
                f"| {_fmt(size and size / 2**20, '.1f')}{' MiB' if size else ''} |"
            )

    def ratio(a, b, batch):
        x = models.get(a[0], {}).get(a[1], {}).get(f"tokens_per_s_b{batch}")
        y = models.get(b[0], {}).get(b[1], {}).get(f"tokens_per_s_b{batch}")
        return f"{x / y:.2f}x" if x and y else "-"

    teacher = "teacher"
    students = [m for m in models if m != teacher]
    pairs = [
        (
            "the engine's share: the teacher on ONNX Runtime float32 against fairseq",
            (teacher, "onnxruntime-float32"),
            (teacher, "fairseq-float32"),
        )
    ]
    for s in students:
        pairs += [
            (
                f"compression's share: {s} against the teacher, both on ONNX Runtime float32",
                (s, "onnxruntime-float32"),
                (teacher, "onnxruntime-float32"),
            ),
            (
                f"{s} on ONNX Runtime float32 against CTranslate2 int8 on the teacher",
                (s, "onnxruntime-float32"),
                (teacher, "ctranslate2-int8"),
            ),
        ]
        for key in models[s]:
            if key.startswith("onnxruntime-int8"):
                pairs.append(
                    (
                        (
                            f"{s} on ONNX Runtime {key.split('-', 1)[1]} against CTranslate2 "
                            "int8 on the teacher"
                        ),
                        (s, key),
                        (teacher, "ctranslate2-int8"),
                    )
                )
    lines.append("")
    for text, a, b in pairs:
        lines.append(f"- {text}: {ratio(a, b, 1)} at batch 1, {ratio(a, b, 32)} at batch 32.")
    return lines


def claims(records: list[dict]) -> list[str]:
    """One line per paper claim, in direction, from the CPU plan's records."""
    by = {r["label"]: r for r in records}
    t = by.get("teacher")
    out = []

    def cmp(a, b, claim, why_not):
        if a is None or b is None:
            return
        holds = a["bleu"] > b["bleu"]
        loss = ""
        if (
            a.get("best_valid_loss") is not None
            and b.get("best_valid_loss") is not None
            and "dawid" not in (a["label"], b["label"])
        ):  # (DA-WID's: its own criterion)
            loss = (
                f"; validation loss {a['best_valid_loss']:.3f} vs {b['best_valid_loss']:.3f}"
                " (label-smoothed, lower is better)"
            )
        out.append(
            f"{claim}: {a['bleu']:.2f} vs {b['bleu']:.2f} BLEU "
            f"({a['bleu'] - b['bleu']:+.2f}){loss}: "
            f"**{'holds' if holds else 'does not hold'} here**"
            + ("." if holds else f" ({why_not}).")
        )

    cmp(
        by.get("lightformer_svd"),
        by.get("lightformer_random"),
        "SVD transfer beats random initialisation at equal updates (LightFormer)",
        "see the findings in lab/notes/results-cpu-plan.md",
    )
    cmp(
        by.get("hypoformer_kd"),
        by.get("hypoformer"),
        "KD helps Hypoformer",
        "see the findings in lab/notes/results-cpu-plan.md",
    )
    s, f = by.get("smartformer_search"), by.get("smartformer")
    if s and f:
        size = (
            f"{s['params'] / 1e6:.2f}M vs {f['params'] / 1e6:.2f}M parameters"
            if s.get("params") and f.get("params")
            else "sizes unknown"
        )
        cmp(
            s,
            f,
            f"The searched ranks beat the fixed rank at equal size ({size})",
            "see the findings in lab/notes/results-cpu-plan.md",
        )
    d, lf = by.get("dawid"), by.get("lightformer_svd")
    if d and lf:
        size = (
            f"{d['params'] / 1e6:.2f}M vs {lf['params'] / 1e6:.2f}M parameters"
            if d.get("params") and lf.get("params")
            else "sizes unknown"
        )
        cmp(
            d,
            lf,
            f"DA-WID beats the LightFormer of the same size (SVD transfer; {size})",
            "see the findings in lab/notes/results-cpu-plan.md",
        )
    wid, wt = by.get("dawid"), by.get("dawid_teacher")
    if wid and wt:
        size = (
            f" at {wt['params'] / wid['params']:.2f}x fewer parameters"
            if wid.get("params") and wt.get("params")
            else ""
        )
        out.append(
            f"DA-WID against its own post-LN teacher (the one it inherits from): "
            f"{wid['bleu']:.2f} vs {wt['bleu']:.2f} BLEU ({wid['bleu'] - wt['bleu']:+.2f})"
            f"{size}."
        )
    if t is not None:
        for r in records:
            if r is t or "compression" not in r or r["label"] == "dawid_teacher":
                continue
            own = t  # DA-WID's teacher is its own post-LN one (the one it inherits from)
            if r["label"] == "dawid" and by.get("dawid_teacher"):
                own = by["dawid_teacher"]
            vs = round(r["bleu"] - own["bleu"], 2)
            ratio = (
                round(own["params"] / r["params"], 2)
                if own.get("params") and r.get("params")
                else r["compression"]
            )
            r = {**r, "bleu_vs_teacher": vs, "compression": ratio}
            ok_bleu, ok_size = r["bleu_vs_teacher"] >= -1.0, r["compression"] >= 3.0
            verdict = "holds" if ok_bleu and ok_size else "does not hold"
            why = []
            if not ok_bleu:
                why.append(f"{-r['bleu_vs_teacher']:.2f} BLEU below the teacher")
            if not ok_size:
                why.append(f"only {r['compression']:.2f}x fewer parameters")
            out.append(
                f"{r['method']} within 1 BLEU of its teacher at 3x or more fewer "
                f"parameters ({r['bleu_vs_teacher']:+.2f} BLEU, {r['compression']:.2f}x): "
                f"**{verdict} here**" + (f" ({'; '.join(why)})." if why else ".")
            )
    return out


def render_cpu_markdown(result: dict, corpus: dict | None) -> str:
    recs = result["models"]
    commits = sorted({r.get("commit") or "?" for r in recs})
    machines = sorted({r.get("machine") or "?" for r in recs})
    dates = sorted(r.get("finished") or "?" for r in recs)
    first = (
        f"CPU plan (`SMALL=1 bash lab/results/run.sh`); trained on "
        f"{'; '.join(machines)}; code {', '.join(commits)}; rows finished "
        f"{dates[0]} to {dates[-1]}."
    )
    lines = [first, ""]
    if corpus:
        lines += [_corpus_line(corpus), ""]
    lines += [
        "| model | params | x fewer | ONNX size | BLEU | vs teacher | chrF | valid loss | ONNX tok/s b1 | b32 | fairseq tok/s b1 | b32 | updates | train time | train tok/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in recs:
        secs = r.get("train_seconds")
        mib = r.get("onnx_bytes") and r["onnx_bytes"] / 2**20
        void = "void" if r.get("speed_void") else "-"
        lines.append(
            f"| {r['method']} | {_fmt(r.get('params') and r['params'] / 1e6, '.2f')}M "
            f"| {_fmt(r.get('compression'), '.2f', '1.00' if r['label'] == 'teacher' else '-')} "
            f"| {_fmt(mib, '.1f')}{' MiB' if mib else ''} "
            f"| {r['bleu']:.2f} | {_fmt(r.get('bleu_vs_teacher'), '+.2f')} | {r['chrf']:.2f} "
            f"| {_fmt(r.get('best_valid_loss'), '.3f')} "
            f"| {_fmt(r.get('onnx_b1'), '.1f', void)} | {_fmt(r.get('onnx_b32'), '.1f', void)} "
            f"| {_fmt(r.get('fairseq_b1'), '.1f', void)} "
            f"| {_fmt(r.get('fairseq_b32'), '.1f', void)} "
            f"| {_fmt(r.get('updates'))} "
            f"| {_fmt(secs and secs / 60, '.1f')}{' min' if secs else ''} "
            f"| {_fmt(r.get('train_wps'), '.0f')} |"
        )
    sig = recs[0]
    speed = result.get("speed") or {}
    ct2 = [r for r in recs if r.get("ct2_int8_b1")]
    lines += [
        "",
        (
            f"BLEU: sacreBLEU `{sig['bleu_signature']}`; chrF: `{sig['chrf_signature']}`; on the "
            f"{sig['test_sentences']:,} test sentences (packages never seen in training), "
            "checkpoint_best.pt (lowest validation loss; DA-WID: its fused model), fairseq-generate, "
            "beam 5, lenpen 1.0. params: every parameter, embeddings included (DA-WID: "
            "`lightcompress-params` of the fused model). tokens/s: `scripts/measure_speed.sh "
            "--onnx --ct2`, one CPU thread, beam 5, float32, test sentences of about 12 tokens, "
            "batch 1 and batch 32 measured side by side on the two cores"
            + (f" ({speed.get('measured')}, code {speed.get('commit')})" if speed else "")
            + "; ONNX size: the export's folder on disk. updates: trained; train time: wall-clock "
            "of the model's training, one thread, two trainings at a time; train tok/s: target "
            "tokens per second in training; valid loss: the lowest label-smoothed validation "
            "loss in training (base 2; DA-WID's is its own criterion's, not comparable)."
        ),
    ]
    for r in ct2:
        ct2_line = (
            f"CTranslate2 int8 on {r['label']} (what users deploy dense models with): "
            f"{r['ct2_int8_b1']:.1f} tokens/s at batch 1, {_fmt(r.get('ct2_int8_b32'), '.1f')} "
            "at batch 32."
        )
        lines += ["", ct2_line]
    if any(r.get("speed_void") for r in recs):
        lines += ["", VOID_NOTE[0].upper() + VOID_NOTE[1:] + "."]
    if result.get("remeasure"):
        lines += render_remeasure(result["remeasure"], recs)
    if result["missing"]:
        lines += ["", "Not (yet) finished: " + ", ".join(result["missing"]) + "."]
    lines += ["", "Paper claims, in direction, on this run:", ""] + [f"- {c}" for c in claims(recs)]
    return "\n".join(lines) + "\n"


def _cpu_main(argv) -> int:
    p = argparse.ArgumentParser(prog="collect.py", description="the CPU plan's rows and table")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("row", help="one finished model's figures -> ROWS_DIR/NAME.json")
    r.add_argument("name")
    r.add_argument("--save-root", required=True)
    r.add_argument("--ref", required=True)
    r.add_argument("--rows-dir", required=True)
    r.add_argument("--commit", default="unknown")
    r.add_argument("--plan", default="cpu")
    sp = sub.add_parser("speed", help="measure_speed --json (batch 1, 32) -> ROWS_DIR/speed.json")
    sp.add_argument("--b1", required=True)
    sp.add_argument("--b32", required=True)
    sp.add_argument("--rows-dir", required=True)
    sp.add_argument("--commit", default="unknown")
    rm = sub.add_parser(
        "remeasure",
        help=f"timings of retrained models and their scores -> ROWS_DIR/{REMEASURE_FILE}",
    )
    rm.add_argument("--b1", required=True)
    rm.add_argument("--b32", required=True)
    rm.add_argument("--save-root", required=True, help="the retrained models' folders")
    rm.add_argument("--ref", required=True, help="raw test references")
    rm.add_argument("--rows-dir", required=True)
    rm.add_argument("--commit", default="unknown")
    t = sub.add_parser("table", help="results.md / results.json from ROWS_DIR alone")
    t.add_argument("--rows-dir", required=True)
    t.add_argument("--corpus-stats")
    t.add_argument("--out", required=True)
    t.add_argument("--json", dest="json_out", required=True)
    t.add_argument(
        "--readme",
        help="replace the block between <!-- results-cpu:start --> and "
        "<!-- results-cpu:end --> of this file with the table",
    )
    args = p.parse_args(argv)
    try:
        if args.cmd == "row":
            rec = write_row(
                args.save_root, args.name, args.ref, args.rows_dir, args.commit, args.plan
            )
            print(
                f"{args.name}: BLEU {rec['bleu']:.2f}, chrF {rec['chrf']:.2f}, params {rec['params']}"
            )
            return 0
        if args.cmd == "speed":
            write_speed(args.b1, args.b32, args.rows_dir, args.commit)
            return 0
        if args.cmd == "remeasure":
            write_remeasure(args.b1, args.b32, args.save_root, args.ref, args.rows_dir, args.commit)
            return 0
        result = table_from_rows(args.rows_dir)
        corpus = corpus_stats(args.rows_dir, args.corpus_stats)
        text = render_cpu_markdown(result, corpus)
        if args.readme:
            update_readme(args.readme, text)
    except CollectError as exc:
        print(f"collect: error: {exc}", file=sys.stderr)
        return 2
    with open(f"{args.out}.tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(f"{args.out}.tmp", args.out)
    _write_json(
        args.json_out,
        {
            "source": "lab/results/run.sh (SMALL=1)",
            "plan": "cpu",
            "models": result["models"],
            "missing": result["missing"],
        },
    )
    print(text, end="")
    return 0


START, END = "<!-- results-cpu:start -->", "<!-- results-cpu:end -->"


def update_readme(path: str, table: str) -> None:
    """Put ``table`` between the README's markers (both must be there, once each)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise CollectError(f"--readme {path}: cannot read ({exc.strerror})") from None
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise CollectError(f"--readme {path}: needs one {START} line and one {END} line after it")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    with open(f"{path}.tmp", "w", encoding="utf-8") as f:
        f.write(f"{head}{START}\n{table}{END}{tail}")
    os.replace(f"{path}.tmp", path)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("row", "speed", "remeasure", "table"):
        return _cpu_main(argv)
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
    for path, data in (
        (args.out, text),
        (
            args.json_out,
            json.dumps({"source": "lab/results/run.sh", "plan": args.plan, **result}, indent=2)
            + "\n",
        ),
    ):
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(tmp, path)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
