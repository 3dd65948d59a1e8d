"""The report of ``lightcompress-compress``: teacher and student side by side (parameters, size
on disk, BLEU and chrF with their sacreBLEU signatures, tokens/s per engine), as markdown, JSON
and a PNG. Reads only files the earlier steps wrote: ``fairseq-generate`` outputs and
``measure_speed --json`` results.
"""

from __future__ import annotations

import json
import os

__all__ = ["against_ct2", "dir_size", "read_generate", "read_speed", "score", "write_report"]


def read_generate(path: str) -> tuple[list[str], list[str]]:
    """Hypotheses (detokenized ``D-`` lines when fairseq wrote them, else ``H-``) and its
    post-processed references (``T-``), ordered by sentence id."""
    hyps: dict[int, str] = {}
    dets: dict[int, str] = {}
    refs: dict[int, str] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            tag, _, rest = line.partition("\t")
            if len(tag) < 3 or tag[1] != "-" or not tag[2:].isdigit():
                continue
            sid = int(tag[2:])
            if tag[0] == "T":
                refs[sid] = rest
            elif tag[0] in "HD":
                (hyps if tag[0] == "H" else dets)[sid] = rest.partition("\t")[2]
    out = dets or hyps
    ids = sorted(out)
    return [out[i] for i in ids], [refs.get(i, "") for i in ids]


def score(hyps: list[str], refs: list[str]) -> dict:
    """sacreBLEU's BLEU and chrF of ``hyps`` against ``refs``, with their signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return {
        "bleu": round(b.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": round(c.score, 2),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hyps),
    }


def read_speed(path: str) -> dict[tuple[str, str, str], dict]:
    """``(label, engine, precision) -> record`` of a ``measure_speed --json`` file; a row timed
    with a vocabulary shortlist (its record names the list) is engine ``...+shortlist``, as
    measure_speed's table names it."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    return {
        (m["label"], m["engine"] + ("+shortlist" if m.get("shortlist") else ""), m["precision"]): m
        for m in doc["models"]
    }


SPREAD_WARNING = 0.25  # (fastest - slowest) / fastest run of one row above this: a warning


def best_rate(rec: dict) -> float | None:
    """A row's tokens/s: the best of its timed runs (a disturbance only slows a run down)."""
    rates = [r["tokens_per_s"] for r in rec.get("runs", []) if r.get("tokens_per_s")]
    return max(rates) if rates else rec.get("tokens_per_s")


def spread_warnings(speed: dict) -> list[str]:
    """One line per row whose runs differ by more than :data:`SPREAD_WARNING` of the best."""
    out = []
    for (label, engine, prec), rec in sorted(speed.items()):
        rates = [r["tokens_per_s"] for r in rec.get("runs", []) if r.get("tokens_per_s")]
        if len(rates) > 1 and (max(rates) - min(rates)) / max(rates) > SPREAD_WARNING:
            out.append(
                f"Warning: the runs of {label} [{engine} {prec}] spread from {min(rates):.1f} to "
                f"{max(rates):.1f} tokens/s ({(max(rates) - min(rates)) / max(rates):.0%} of the "
                "best): the machine was disturbed; the ratios are rough (rerun the speed step: "
                "delete speed.json and report.*)"
            )
    return out


def dir_size(path: str) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def _human(n: float | None, unit: str = "") -> str:
    if n is None:
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


def _atomic_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


INT8_PRECISIONS = ("int8-large", "int8")  # measure_speed's names of --int8 large / all
ENGINES = [
    "fairseq",
    "onnxruntime",
    *(f"onnxruntime-{p}" for p in INT8_PRECISIONS),
    "ctranslate2-float32",
    "ctranslate2-int8",
]


INT8_MAPS = {"int8-large": "large maps", "int8": "every map"}  # which maps each int8 quantizes


def _engine_name(key: str) -> str:
    """``onnxruntime-int8-large`` -> ``onnxruntime int8 (large maps)``."""
    prec = key.removeprefix("onnxruntime-")
    return f"onnxruntime int8 ({INT8_MAPS[prec]})" if prec in INT8_MAPS else f"{key} float32"


def build_rows(
    plan: dict,
    speed: dict,
    ct2: dict | None,
    scores: dict,
    onnx_dir: str | None,
    int8: dict | None = None,
):
    """The report's figures: ``{"teacher": {...}, "student": {...}}``; with ``int8`` (the int8
    step's export, scores or the reason it was left out), ``student["int8"]`` too."""
    rows = {}
    for who in ("teacher", "student"):
        fair = speed.get((who, "fairseq", "float32"), {})
        onnx = speed.get((who, "onnxruntime", "float32"), {})
        row = {
            "checkpoint": plan[who]["checkpoint"],
            "model": plan[who]["model"],
            "params": fair.get("params"),
            "size_bytes": fair.get("size_bytes"),
            "onnx_size_bytes": onnx.get("size_bytes"),
            "tokens_per_s": {"fairseq": best_rate(fair)},
            **scores[who],
        }
        if onnx:
            row["tokens_per_s"]["onnxruntime"] = best_rate(onnx)
        rows[who] = row
    if onnx_dir and os.path.isdir(onnx_dir):
        rows["student"]["onnx_export"] = onnx_dir
        rows["student"]["onnx_size_bytes"] = dir_size(onnx_dir)
    for who in ("teacher", "student"):  # ONNX Runtime int8 (compress --int8)
        for prec in INT8_PRECISIONS:
            rec = speed.get((who, "onnxruntime", prec))
            if rec:
                rows[who]["tokens_per_s"][f"onnxruntime-{prec}"] = best_rate(rec)
    if ct2:
        for prec in ("int8", "float32"):
            rec = ct2.get(("teacher", "ctranslate2", prec))
            if rec:
                rows["teacher"]["tokens_per_s"][f"ctranslate2-{prec}"] = best_rate(rec)
                rows["teacher"][f"ctranslate2_{prec}_size_bytes"] = rec.get("size_bytes")
    if int8:
        rows["student"]["int8"] = dict(int8)
        if int8.get("onnx_export") and os.path.isdir(int8["onnx_export"]):
            rows["student"]["int8"]["onnx_size_bytes"] = dir_size(int8["onnx_export"])
    return rows


def against_ct2(speeds: dict, rows: dict, shortlist: bool) -> dict:
    """The student's default export (ONNX Runtime int8 of every map, else the int8 compress
    made, else float32; with the shortlist when compress built one) against what a user already
    has: the teacher in CTranslate2 int8, without and with the same list as its vocabulary map
    (like for like), at each timed batch size (``speeds``: ``{1: speed, 32: speed}``). Returns
    ``{"engine": ..., "b1": x, "b1_vmap": x, "b32": ..., "size_vs_ct2_int8": x, ...}`` (ratios
    of tokens/s, and the teacher's CTranslate2 int8 bytes on disk over the student's export's);
    a figure whose rows were not timed is left out."""
    out: dict = {}
    sub = "+shortlist" if shortlist else ""
    for batch, speed in sorted(speeds.items()):
        for prec in ("int8", "int8-large", "float32"):
            rec = speed.get(("student", f"onnxruntime{sub}", prec))
            if rec:
                break
        if not rec:
            continue
        out.setdefault("engine", f"onnxruntime{sub} {prec}")
        mine = best_rate(rec)
        out[f"student_tokens_per_s_b{batch}"] = mine
        for key, eng in ((f"b{batch}", "ctranslate2"), (f"b{batch}_vmap", "ctranslate2+shortlist")):
            theirs = speed.get(("teacher", eng, "int8"))
            if theirs and best_rate(theirs) and mine:
                out[f"teacher_{eng}_int8_tokens_per_s_b{batch}"] = best_rate(theirs)
                out[key] = round(mine / best_rate(theirs), 3)
                # the student's shape on CTranslate2 (its factors multiplied out), like for like
                dense = speed.get(("student", eng, "int8"))
                if dense and best_rate(dense):
                    out[f"{key}_student_ct2"] = round(best_rate(dense) / best_rate(theirs), 3)
    q = rows["student"].get("int8") or {}
    size = q.get("onnx_size_bytes") or rows["student"].get("onnx_size_bytes")
    ct2 = rows["teacher"].get("ctranslate2_int8_size_bytes")
    if size and ct2:
        out["student_export_bytes"], out["teacher_ct2_int8_bytes"] = size, ct2
        out["size_vs_ct2_int8"] = round(size / ct2, 3)
    return out


def _against_lines(vs: dict, ct2_export: str | None = None) -> list[str]:
    """The report's table of :func:`against_ct2` (``ct2_export``: the student's CTranslate2
    export that compress wrote, named where it is the faster engine)."""
    if not any(k.startswith("b") for k in vs):
        return []

    def x(key):
        return f"{vs[key]:.2f}x" if key in vs else "-"

    lines = [
        "",
        (
            "Against what you have now, the teacher in CTranslate2 int8 (tokens/s of the "
            f"student's default export, {vs['engine']}, over the teacher's; one thread, beam 5):"
        ),
        "",
        "| the teacher in CTranslate2 int8 | batch 1 | batch 32 |",
        "| --- | ---: | ---: |",
        f"| without a vocabulary map | {x('b1')} | {x('b32')} |",
        (
            f"| with the shortlist as its vocabulary map (like for like) | {x('b1_vmap')} | "
            f"{x('b32_vmap')} |"
        ),
    ]
    dense = [
        k
        for k in (
            "b1_student_ct2",
            "b32_student_ct2",
            "b1_vmap_student_ct2",
            "b32_vmap_student_ct2",
        )
        if k in vs
    ]
    if dense:
        lines += [
            (
                f"| the student's own shape in CTranslate2 int8 (its factors multiplied out; "
                f"against the teacher with the vocabulary map where both have it) | "
                f"{x('b1_vmap_student_ct2') if 'b1_vmap_student_ct2' in vs else x('b1_student_ct2')} | "
                f"{x('b32_vmap_student_ct2') if 'b32_vmap_student_ct2' in vs else x('b32_student_ct2')} |"
            )
        ]
        for batch in (1, 32):
            ours = vs.get(f"b{batch}_vmap", vs.get(f"b{batch}"))
            theirs = vs.get(f"b{batch}_vmap_student_ct2", vs.get(f"b{batch}_student_ct2"))
            if ours and theirs and theirs > ours:
                where = (
                    f"`{ct2_export}`"
                    if ct2_export
                    else "`lightcompress-export-ct2 --path STUDENT --data DATA --quantization "
                    "int8 --shortlist shortlist.txt`"
                )
                lines += [
                    "",
                    (
                        f"At batch {batch} the student runs faster in CTranslate2 "
                        f"({theirs:.2f}x against {ours:.2f}x): deploy its CTranslate2 export "
                        f"({where}) for that batch size; it stores the student dense, so "
                        "it is larger on disk."
                    ),
                ]
    if "size_vs_ct2_int8" in vs:
        lines += [
            "",
            (
                f"On disk: the student's export {_human(vs['student_export_bytes'], 'B')}, "
                f"{vs['size_vs_ct2_int8']:.2f}x the teacher's CTranslate2 int8 model "
                f"({_human(vs['teacher_ct2_int8_bytes'], 'B')})."
            ),
        ]
    return lines


def render_markdown(plan: dict, rows: dict, protocol: dict) -> str:
    t, s = rows["teacher"], rows["student"]

    def ratio(a, b, fmt="{:.2f}x"):
        return fmt.format(a / b) if a and b else "-"

    lines = [
        f"# {plan['method']} student of {os.path.basename(plan['teacher']['checkpoint'])}",
        "",
        (
            f"Teacher: {plan['teacher']['model']}. Student: {plan['student']['model']}. "
            f"{plan['choice']}. Fine-tuned on "
            + (
                "ground truth and the teacher's translations (sequence-level KD)."
                if plan["student"].get("kd")
                else "ground truth."
            )
        ),
        "",
        "| | teacher | student | student / teacher |",
        "| --- | ---: | ---: | ---: |",
        (
            f"| parameters | {t['params'] or 0:,} | {s['params'] or 0:,} | "
            f"{ratio(s['params'], t['params'])} ({ratio(t['params'], s['params'])} fewer) |"
        ),
        (
            f"| size on disk (fairseq weights) | {_human(t['size_bytes'], 'B')} | "
            f"{_human(s['size_bytes'], 'B')} | {ratio(s['size_bytes'], t['size_bytes'])} |"
        ),
        (
            f"| size on disk (ONNX Runtime export) | {_human(t.get('onnx_size_bytes'), 'B')} | "
            f"{_human(s.get('onnx_size_bytes'), 'B')} | "
            f"{ratio(s.get('onnx_size_bytes'), t.get('onnx_size_bytes'))} |"
        ),
        f"| BLEU | {t['bleu']:.2f} | {s['bleu']:.2f} | {s['bleu'] - t['bleu']:+.2f} |",
        f"| chrF | {t['chrf']:.2f} | {s['chrf']:.2f} | {s['chrf'] - t['chrf']:+.2f} |",
    ]
    q = s.get("int8") or {}
    if q.get("bleu") is not None:
        what = f"ONNX Runtime int8, {INT8_MAPS[q['precision']]}"
        if plan.get("shortlist"):
            what += " + shortlist"
        size = q.get("onnx_size_bytes")
        lines += [
            (
                f"| size on disk (student's {what}) | - | {_human(size, 'B')} | "
                f"{ratio(size, t.get('onnx_size_bytes'))} of the teacher's float32 export |"
            ),
            (
                f"| BLEU, student's {what} | {t['bleu']:.2f} | {q['bleu']:.2f} | "
                f"{q['bleu'] - t['bleu']:+.2f} |"
            ),
            (
                f"| chrF, student's {what} | {t['chrf']:.2f} | {q['chrf']:.2f} | "
                f"{q['chrf'] - t['chrf']:+.2f} |"
            ),
            (
                f"| BLEU, student's {what} against the student in float32 (fairseq) | - | "
                f"{q['bleu']:.2f} | {q['bleu'] - s['bleu']:+.2f} |"
            ),
        ]
    for eng in ENGINES[:4]:
        a, b = t["tokens_per_s"].get(eng), s["tokens_per_s"].get(eng)
        if a is None and b is None:
            continue
        lines.append(
            f"| tokens/s, {_engine_name(eng)} | {_human(a)} | {_human(b)} | {ratio(b, a)} |"
        )
    for prec in ("int8", "float32"):
        v = t["tokens_per_s"].get(f"ctranslate2-{prec}")
        if v is None:
            continue
        for eng in ENGINES[1:4] if prec == "int8" else ENGINES[1:2]:  # the student's exports
            b = s["tokens_per_s"].get(eng)
            if b is not None:
                lines.append(
                    f"| tokens/s, CTranslate2 {prec} (the dense teacher) vs the student's "
                    f"{_engine_name(eng)} | {_human(v)} | {_human(b)} | {ratio(b, v)} |"
                )
    lines += _against_lines(s.get("vs_ct2_int8") or {}, plan["student"].get("ct2_export"))
    lines += [
        "",
        (
            f"BLEU and chrF: the {protocol['subset']} split ({t['sentences']} sentences), beam "
            f"{protocol['beam']}, fairseq-generate, post-processing {protocol['post_process']}, "
            f"references {protocol['references']}. Signatures: BLEU `{t['bleu_signature']}`; "
            f"chrF `{t['chrf_signature']}`."
        ),
        "",
        f"Speed: {protocol['speed']}.",
    ]
    if s.get("onnx_export"):
        raw = _takes_raw_text(s["onnx_export"])
        flag = "" if raw else " --tokenized"
        what = "raw text" if raw else "the data's subword tokens: --spm or --bpe-codes for raw text"
        lines += [
            "",
            (
                f"The student's ONNX Runtime export: `{s['onnx_export']}` "
                f"(`python {s['onnx_export']}/translate.py {s['onnx_export']}{flag} < in > out`; "
                f"{what})."
            ),
        ]
    if q.get("onnx_export"):
        lines += [
            "",
            (
                f"The student's int8 export: `{q['onnx_export']}` (the same commands; "
                f"BLEU above from its translation of the {protocol['subset']} split)."
            ),
        ]
    elif q.get("left_out"):
        lines += ["", f"No int8 export of the student: {q['left_out']}"]
    for note in protocol.get("notes", []) + protocol.get("warnings", []):
        lines += ["", note]
    lines += ["", "Commands run (`plan.json` in this directory):", "", "```bash"]
    lines += plan["commands"]
    lines += ["```", ""]
    return "\n".join(lines)


def plot(rows: dict, path: str, title: str) -> bool:
    """Four panels, teacher beside student: parameters, size on disk, BLEU / chrF, tokens/s.
    False, and nothing written, where matplotlib (the ``plots`` extra) is not installed."""
    import logging

    # (before the import: matplotlib logs its set-up at DEBUG when the root logger is verbose)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, s = rows["teacher"], rows["student"]
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8), constrained_layout=True)
    colors = ("C0", "C1")

    def bars(ax, labels, teacher_vals, student_vals, ylabel):
        xs = range(len(labels))
        w = 0.38
        for k, (vals, who) in enumerate(((teacher_vals, "teacher"), (student_vals, "student"))):
            pos = [x + (k - 0.5) * w for x in xs]
            heights = [v or 0 for v in vals]
            ax.bar(pos, heights, w, color=colors[k], label=who)
            for x, v in zip(pos, vals):
                ax.annotate(
                    "-" if v is None else _human(v),
                    (x, v or 0),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        ax.set_xticks(list(xs), labels, fontsize=8)
        ax.set_ylabel(ylabel)
        ax.margins(y=0.15)

    bars(axes[0], ["total"], [t["params"]], [s["params"]], "parameters")
    bars(
        axes[1],
        ["fairseq", "ONNX"],
        [t["size_bytes"], t.get("onnx_size_bytes")],
        [s["size_bytes"], s.get("onnx_size_bytes")],
        "bytes on disk",
    )
    bars(axes[2], ["BLEU", "chrF"], [t["bleu"], t["chrf"]], [s["bleu"], s["chrf"]], "score")
    engines = sorted(set(t["tokens_per_s"]) | set(s["tokens_per_s"]), key=ENGINES.index)
    short = {
        "onnxruntime": "ONNX",
        "onnxruntime-int8-large": "ONNX int8",
        "onnxruntime-int8": "ONNX int8 all",
    }
    bars(
        axes[3],
        [short.get(e, e.replace("ctranslate2-", "CT2 ")) for e in engines],
        [t["tokens_per_s"].get(e) for e in engines],
        [s["tokens_per_s"].get(e) for e in engines],
        "tokens/s",
    )
    axes[3].tick_params(axis="x", labelrotation=20)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def write_report(save_dir: str, plan: dict, protocol: dict, refs_file: str | None) -> None:
    """Score the translations, read the speed results, write report.json / .md / .png (the plot
    where matplotlib is installed)."""
    scores = {}
    ref_lines = None
    if refs_file:
        with open(refs_file, encoding="utf-8") as f:
            ref_lines = [line.rstrip("\n") for line in f]
    for who in ("teacher", "student"):
        hyps, refs = read_generate(os.path.join(save_dir, "eval", f"{who}.txt"))
        if refs_file:
            refs = ref_lines
            if len(refs) != len(hyps):
                from lightcompress.compress.teacher import CompressError

                raise CompressError(
                    f"--ref {refs_file} has {len(refs)} lines, the {protocol['subset']} split "
                    f"{len(hyps)} sentences"
                )
        scores[who] = score(hyps, refs)
    int8 = None
    done = os.path.join(save_dir, "eval", "student-int8.done")
    skipped = os.path.join(save_dir, "eval", "student-int8.skipped")
    if os.path.exists(done) and os.path.exists(skipped):
        with open(skipped, encoding="utf-8") as f:
            int8 = {"left_out": f.read().strip()}
    elif os.path.exists(done):
        hyps, refs = read_generate(os.path.join(save_dir, "eval", "student-int8.txt"))
        if refs_file:
            refs = ref_lines
        export = os.path.join(save_dir, "student-onnx-int8")
        precision = "int8" if plan["student"].get("int8") == "all" else "int8-large"
        int8 = {"precision": precision, "onnx_export": export, **score(hyps, refs)}
    speed = read_speed(os.path.join(save_dir, "speed.json"))
    # every engine in one interleaved run (speed.json); a separate CTranslate2 run's file is
    # read only where an older run of compress wrote one
    ct2_path = os.path.join(save_dir, "speed-ct2.json")
    ct2 = read_speed(ct2_path) if os.path.exists(ct2_path) else speed
    protocol = {**protocol, "warnings": spread_warnings(speed) + left_out(save_dir, speed, ct2)}
    for line in protocol["warnings"]:
        print(f"[compress] {line}", flush=True)
    onnx_dir = os.path.join(save_dir, "student-onnx")
    rows = build_rows(plan, speed, ct2, scores, onnx_dir, int8)
    speeds = {1: speed}
    b32 = os.path.join(save_dir, "speed-b32.json")
    if os.path.exists(b32):
        speeds[32] = read_speed(b32)
    rows["student"]["vs_ct2_int8"] = against_ct2(speeds, rows, bool(plan.get("shortlist")))
    doc = {"plan": plan, "protocol": protocol, "models": rows}
    _atomic_text(os.path.join(save_dir, "report.json"), json.dumps(doc, indent=1) + "\n")
    png = os.path.join(save_dir, "report.png")
    if not plot(rows, png, f"{plan['method']}: teacher vs student ({plan['choice']})"):
        if os.path.exists(png):
            os.remove(png)  # (an earlier run's plot is not this report's)
        print(
            "[compress] report.png left out: matplotlib is not installed "
            "(pip install 'lightcompress[plots]')",
            flush=True,
        )
    _atomic_text(os.path.join(save_dir, "report.md"), render_markdown(plan, rows, protocol))


ROUGH_RUNS, ROUGH_SENTENCES = 3, 20  # fewer timed runs or sentences: a rough speed figure


def left_out(save_dir: str, speed: dict, ct2: dict) -> list[str]:
    """What the report leaves out or measures roughly, one line each: an engine row that is
    missing and why (measure_speed's notes, e.g. CTranslate2 refusing a model), and speed from
    few sentences or few runs."""
    out, notes, protocol = [], [], {}
    for name in ("speed.json", "speed-ct2.json"):
        path = os.path.join(save_dir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            notes += [n for n in doc.get("notes", []) if isinstance(n, str)]
            protocol = protocol or doc.get("protocol", {})
    for prec in ("int8", "float32"):
        if ("teacher", "ctranslate2", prec) not in ct2:
            why = [n for n in notes if "ctranslate2" in n.lower() or "ct2" in n.lower()]
            out.append(
                f"No CTranslate2 {prec} row for the teacher: "
                + ("; ".join(why) if why else "measure_speed wrote none (see logs/*-speed.log)")
            )
    runs, sentences = protocol.get("runs"), protocol.get("num_sentences")
    if (isinstance(runs, int) and runs < ROUGH_RUNS) or (
        isinstance(sentences, int) and sentences < ROUGH_SENTENCES
    ):
        out.append(
            f"Rough speed: every engine was timed on {sentences} sentences in {runs} run(s); "
            f"figures to compare need at least {ROUGH_SENTENCES} sentences and {ROUGH_RUNS} runs "
            "(--speed-sentences, --speed-runs)"
        )
    return out


def _takes_raw_text(onnx_dir: str) -> bool:
    """Whether an ONNX export carries a tokenizer (sentencepiece, or Moses + BPE)."""
    try:
        with open(os.path.join(onnx_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    return bool(isinstance(config, dict) and (config.get("spm") or config.get("bpe")))
