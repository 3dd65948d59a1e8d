#!/usr/bin/env python3
"""The deployment benchmark's report (``lab/results/deploy_bench.sh``): one
Markdown table from its batch-1 and batch-32 ``measure_speed --json`` runs, and what it says.

    python lab/bench/deploy_report.py deploy-b1.json deploy-b32.json [--out report.md]

Rows: model x engine (``+shortlist``: the vocabulary shortlist; ``+text``: raw text to raw text,
sentencepiece in the timed path) x precision, with size on disk, peak memory, BLEU (from the run
that has it), tokens/s at batch 1 and 32, and tokens/s relative to CTranslate2 int8 on the
dense teacher (the first model of the runs); where the runs have CTranslate2 with the shortlist
as its vocabulary map (``measure_speed --ct2 --shortlist``), also relative to CTranslate2 int8
with the same shortlist and input (like for like: what a CTranslate2 user with a vocabulary map
runs). Then:

- the engine's share: the teacher on each engine against fairseq, same precision;
- compression's share: each compressed model against the teacher on the same engine, precision,
  shortlist and input (ids or text);
- the goal: each compressed row at twice CTranslate2 int8 on the teacher at both batch sizes,
  BLEU within 0.3 of the same model in fairseq float32, and 1.5 times the teacher on its own
  path; met or not, row by row (the shortfall named); with the like-for-like rows, the 2x part
  again against CTranslate2 int8 with the same shortlist.

Bad input (a file that is not measure_speed output, runs of different models or settings, no
CTranslate2 int8 row, no BLEU) ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["ReportError", "goal", "load", "render", "rows"]

GOAL_VS_CT2, GOAL_VS_TEACHER, GOAL_BLEU = 2.0, 1.5, 0.3


class ReportError(ValueError):
    """Input that is not the benchmark's two measure_speed runs."""


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise ReportError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), list) or not doc["models"]:
        raise ReportError(f"{path}: no 'models' list (expected measure_speed --json output)")
    if not isinstance(doc.get("protocol"), dict):
        raise ReportError(f"{path}: no 'protocol' (expected measure_speed --json output)")
    return doc


def _key(r: dict) -> tuple:
    return (r["label"], r["engine"], r["precision"], bool(r.get("shortlist")), bool(r.get("text")))


def _name(key: tuple) -> str:
    _label, engine, _precision, shortlist, text = key
    return engine + ("+shortlist" if shortlist else "") + ("+text" if text else "")


def rows(b1: dict, b32: dict) -> list[dict]:
    """One row per measured model/engine/precision/shortlist/text, both batch sizes."""
    for doc, size in ((b1, 1), (b32, 32)):
        if doc["protocol"].get("batch_size") != size:
            raise ReportError(
                f"the {'first' if size == 1 else 'second'} run is not at batch {size}"
            )
    first = {_key(r): r for r in b1["models"]}
    second = {_key(r): r for r in b32["models"]}
    if set(first) != set(second):
        raise ReportError("the two runs measured different models, engines or precisions")
    if not any(r.get("bleu") is not None for r in first.values()):
        raise ReportError("the batch-1 run has no BLEU (measure_speed --bleu)")
    out = []
    for key, r in first.items():
        out.append(
            {
                "label": key[0],
                "engine": key[1],
                "precision": key[2],
                "shortlist": key[3],
                "text": key[4],
                "name": _name(key),
                "params": r["params"],
                "size_bytes": r.get("size_bytes"),
                "peak_rss_kib": r.get("peak_rss_kib"),
                "bleu": r.get("bleu"),
                "b1": r["tokens_per_s"],
                "b32": second[key]["tokens_per_s"],
            }
        )
    teacher = out[0]["label"]
    ct2 = [
        r
        for r in out
        if r["label"] == teacher
        and r["engine"] == "ctranslate2"
        and r["precision"] == "int8"
        and not r["text"]
    ]
    if not ct2:
        raise ReportError(f"no CTranslate2 int8 row of {teacher} (measure_speed --ct2)")
    for r in out:
        ref = ct2[0] if not r["text"] else _find(out, teacher, "ctranslate2", "int8", False, True)
        ref = ref or ct2[0]
        r["vs_ct2_b1"], r["vs_ct2_b32"] = r["b1"] / ref["b1"], r["b32"] / ref["b32"]
        # like for like: CTranslate2 int8 with the same shortlist (its vocabulary map) and input
        same = _find(out, teacher, "ctranslate2", "int8", r["shortlist"], r["text"])
        for b in ("b1", "b32"):
            r[f"vs_ct2_same_{b}"] = None if same is None else r[b] / same[b]
    return out


def _like_for_like(rs: list[dict]) -> bool:
    """The runs have CTranslate2 int8 rows with the shortlist (its vocabulary map)."""
    return any(r["engine"] == "ctranslate2" and r["shortlist"] for r in rs)


def _find(rs, label, engine, precision, shortlist, text):
    for r in rs:
        if (r["label"], r["engine"], r["precision"], r["shortlist"], r["text"]) == (
            label,
            engine,
            precision,
            shortlist,
            text,
        ):
            return r
    return None


def shares(rs: list[dict]) -> tuple[list[str], list[str]]:
    """The engine's share (teacher) and compression's share (each model against the teacher)."""
    teacher = rs[0]["label"]
    engine, compression = [], []
    for r in rs:
        if r["label"] == teacher and r["engine"] != "fairseq" and not (r["shortlist"] or r["text"]):
            base = _find(rs, teacher, "fairseq", r["precision"], False, False) or _find(
                rs, teacher, "fairseq", "float32", False, False
            )
            if base is not None:
                engine.append(
                    f"{teacher} on {r['name']} {r['precision']} against fairseq "
                    f"{base['precision']}: {r['b1'] / base['b1']:.2f}x at batch 1, "
                    f"{r['b32'] / base['b32']:.2f}x at batch 32"
                )
        if r["label"] != teacher:
            base = _find(rs, teacher, r["engine"], r["precision"], r["shortlist"], r["text"])
            if base is not None:
                compression.append(
                    f"{r['label']} against {teacher}, both {r['name']} "
                    f"{r['precision']}: {r['b1'] / base['b1']:.2f}x at batch 1, "
                    f"{r['b32'] / base['b32']:.2f}x at batch 32"
                )
    return engine, compression


def goal(rs: list[dict]) -> list[dict]:
    """Each deployed row of a compressed model against the goal (see the module notes)."""
    teacher = rs[0]["label"]
    out = []
    for r in rs:
        if r["label"] == teacher or r["engine"] == "fairseq":
            continue
        ref = _find(rs, r["label"], "fairseq", "float32", False, False)
        own = _find(rs, teacher, r["engine"], r["precision"], r["shortlist"], r["text"])
        bleu_drop = None if ref is None or r["bleu"] is None else ref["bleu"] - r["bleu"]
        # short: against CTranslate2 int8; same: against it with the same shortlist and input
        short, same, rest = [], [], []  # (rest: the teacher and BLEU parts, in both)
        for b in ("b1", "b32"):
            if r[f"vs_ct2_{b}"] < GOAL_VS_CT2:
                short.append(f"{r[f'vs_ct2_{b}']:.2f}x CTranslate2 int8 at batch {b[1:]}")
            v = r[f"vs_ct2_same_{b}"]
            if v is not None and v < GOAL_VS_CT2:
                same.append(f"{v:.2f}x CTranslate2 int8 with the same shortlist at batch {b[1:]}")
            if own is not None and r[b] / own[b] < GOAL_VS_TEACHER:
                short.append(f"{r[b] / own[b]:.2f}x its teacher at batch {b[1:]}")
                rest.append(short[-1])
        if bleu_drop is not None and bleu_drop > GOAL_BLEU:
            short.append(f"BLEU {bleu_drop:.2f} below fairseq float32")
            rest.append(short[-1])
        short_same = same + rest
        out.append(
            {
                "row": r,
                "met": not short,
                "short": short,
                "met_same": not short_same,
                "short_same": short_same,
            }
        )
    return out


def _mib(n) -> str:
    return "-" if not n else f"{n / 2**20:.1f} MiB"


def render(b1: dict, b32: dict) -> str:
    rs = rows(b1, b32)
    p1, p32 = b1["protocol"], b32["protocol"]
    lines = [
        (
            f"Batch 1: {p1['num_sentences']} test sentences, batch 32: {p32['num_sentences']} "
            f"(every k-th of the split, natural lengths: {p1['mean_src_len']:.1f} / "
            f"{p32['mean_src_len']:.1f} source tokens on average"
            f"{'; batch 32 longest first' if p32.get('sorted_batches') else ''}); beam {p1['beam']}, "
            f"{p1['threads']} thread, best-trimmed mean of {p1['runs']} interleaved runs; "
            f"{b1['environment'].get('date', '')[:16]} UTC, {b1['environment'].get('cpu', '')}."
        ),
        "",
        "| model | engine | precision | size | peak RSS | BLEU | tok/s b1 | b32 | vs CT2 int8 b1 | b32 |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    same = _like_for_like(rs)
    if same:  # (two more columns: against CTranslate2 int8 with the same shortlist and input)
        lines[-2] += " vs CT2 int8, same shortlist, b1 | b32 |"
        lines[-1] += " ---: | ---: |"
    for r in rs:
        rss = _mib(r["peak_rss_kib"] * 1024) if r["peak_rss_kib"] else "-"
        bleu = f"{r['bleu']:.2f}" if r["bleu"] is not None else "-"
        lines.append(
            f"| {r['label']} | {r['name']} | {r['precision']} | {_mib(r['size_bytes'])} | {rss} "
            f"| {bleu} | {r['b1']:.0f} | {r['b32']:.0f} | {r['vs_ct2_b1']:.2f}x "
            f"| {r['vs_ct2_b32']:.2f}x |"
        )
        if same:
            lines[-1] += "".join(
                " - |" if r[f"vs_ct2_same_{b}"] is None else f" {r[f'vs_ct2_same_{b}']:.2f}x |"
                for b in ("b1", "b32")
            )
    engine, compression = shares(rs)
    lines += ["", "The engine's share (the dense teacher, same precision):", ""]
    lines += [f"- {x}" for x in engine]
    lines += ["", "Compression's share (against the teacher on the same path):", ""]
    lines += [f"- {x}" for x in compression]
    lines += [
        "",
        (
            f"The goal (each compressed row: {GOAL_VS_CT2:g}x CTranslate2 int8 on the "
            f"teacher at batch 1 and 32, BLEU within {GOAL_BLEU:g} of fairseq float32, "
            f"{GOAL_VS_TEACHER:g}x the teacher on the same path):"
        ),
        "",
    ]
    goals = goal(rs)
    for g in goals:
        r = g["row"]
        what = "**met**" if g["met"] else "not met: " + "; ".join(g["short"])
        lines.append(f"- {r['label']} {r['name']} {r['precision']}: {what}")
    if same:
        lines += [
            "",
            (
                "The same goal against CTranslate2 int8 with the same shortlist (as its "
                "vocabulary map) and input:"
            ),
            "",
        ]
        for g in goals:
            r = g["row"]
            what = "**met**" if g["met_same"] else "not met: " + "; ".join(g["short_same"])
            lines.append(f"- {r['label']} {r['name']} {r['precision']}: {what}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("b1", help="measure_speed --json of the batch-1 run (with --bleu)")
    p.add_argument("b32", help="measure_speed --json of the batch-32 run")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    try:
        text = render(load(args.b1), load(args.b32))
        if args.out:
            tmp = f"{args.out}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, args.out)
    except (ReportError, OSError) as exc:
        print(f"deploy_report.py: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
