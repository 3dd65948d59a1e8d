#!/usr/bin/env python
"""Ship a student as a web page in the repository (issue 57 items 4 and 5): its int8 web export,
a model card, SHA256SUMS.

    python lab/results/ship_web_student.py \\
        --path STUDENT/checkpoint_best.pt --data DATA/bin --spm teacher/spm.model \\
        [--shortlist sl.txt] --src DATA/raw/test.de --ref DATA/raw/test.en \\
        [--command "the command that trained it"] [--measure] \\
        [--out examples/translation/results/web-student]
    (or --onnx DIR instead of --path / --data / --spm / --shortlist: an export made already)

It exports the checkpoint with every map in int8 (``lightcompress-export-onnx --int8 all``, the
sentencepiece model, the shortlist if given), writes its page (``lightcompress-export-web``,
``make web`` first) into ``--out``, translates ``--src`` with the Python runtime (beam 5) for
BLEU / chrF (sacreBLEU), and writes ``MODEL_CARD.md`` (what it is, how to open it, the scores,
every file's size next to the anchors, the commands) and ``SHA256SUMS`` of every file. With
``--measure`` it also measures the page in headless Chromium (lab/bench/web_page.py: speed at beam 5
and 1 next to the Python runtime, BLEU of the page's own output) into the card, and prints the
block for docs/deployment.md. No figure is typed by hand. Bad input: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "lab", "bench"))

OUT = os.path.join(REPO, "examples", "translation", "results", "web-student")


class ShipError(ValueError):
    pass


def _portable(path: str) -> str:
    """``path`` relative to the checkout when it is inside it, else the name of the folder
    under a placeholder (a card names no machine's absolute paths)."""
    full = os.path.abspath(path)
    if full.startswith(REPO + os.sep):
        return os.path.relpath(full, REPO)
    return os.path.join("SAVE", os.path.basename(os.path.dirname(full)), os.path.basename(full))


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as exc:
        raise ShipError(f"cannot read {path}: {exc}") from None


def _export(args, work: str) -> tuple[str, int | None]:
    """The int8 ONNX export (made here from --path, or --onnx as given) and the parameters."""
    if args.onnx:
        return args.onnx, None
    import lightcompress  # noqa: F401  (the plugin's architectures)
    from lightcompress.checkpoint import CheckpointError, load_checkpoint
    from lightcompress.deploy.onnx_export import export_onnx
    from lightcompress.errors import LightcompressError

    try:
        model, task, _ = load_checkpoint(args.path, args.data, args.source_lang, args.target_lang)
    except CheckpointError as exc:
        raise ShipError(str(exc)) from None
    params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    out = os.path.join(work, "onnx")
    try:
        export_onnx(model, task, out, int8="all", spm=args.spm, shortlist=args.shortlist)
    except LightcompressError as exc:
        raise ShipError(str(exc)) from None
    return out, params


def _sizes(folder: str, names: list[str]) -> list[tuple[str, int]]:
    return [(n, os.path.getsize(os.path.join(folder, n))) for n in names]


def _card(args, web: dict, onnx_config: dict, scores: dict, params, measured) -> str:
    from web_page import ANCHORS, markdown

    out_rel = os.path.relpath(args.out, REPO)
    model = _sizes(args.out, web["files"])
    engine = _sizes(args.out, web["engine"]["files"])
    mb = lambda n: f"{n / 1e6:.2f} MB"
    lines = [
        "# The default student in a web page (lightcompress)",
        "",
        f"{args.what} Every map in int8 (ONNX Runtime's dynamic int8), sentencepiece in the page, "
        + ("the vocabulary shortlist on" if web["shortlist"] else "no vocabulary shortlist")
        + f"; {onnx_config['architecture']}, {len(onnx_config['layers'])} decoder layer(s)"
        + (f", {params:,} parameters" if params else "")
        + ". It translates German to English in the browser, offline, on the user's own device.",
        "",
        "Open it:",
        "",
        "```bash",
        f"python -m http.server -d {out_rel} 8000   # then open http://localhost:8000/",
        "```",
        "",
        "## Scores (test split, beam 5, the Python runtime on the same int8 export)",
        "",
        f"- BLEU **{scores['bleu']}** (`{scores['bleu_signature']}`)",
        f"- chrF **{scores['chrf']}** (`{scores['chrf_signature']}`)",
        f"- on {scores['sentences']:,} sentences against the raw references",
        "",
        "## Files",
        "",
        "| model file | size |",
        "| --- | ---: |",
        *(f"| `{n}` | {mb(s)} |" for n, s in model),
        f"| **all model files** | **{mb(sum(s for _, s in model))}** |",
        *(f"| {name} (anchor) | {size:.0f} MB |" for name, size in ANCHORS.items()),
        "",
        "| engine file (the same for every model) | size |",
        "| --- | ---: |",
        *(f"| `{n}` | {mb(s)} |" for n, s in engine),
        f"| **all engine files** | **{mb(sum(s for _, s in engine))}** |",
        "",
        (
            f"Engine: onnxruntime-web {web['engine']['onnxruntime-web']}, @sctg/sentencepiece-js "
            f"{web['engine']['@sctg/sentencepiece-js']} (licences in `engine/NOTICE.md`). "
            "`sha256sum -c SHA256SUMS` in the folder checks every file."
        ),
    ]
    if measured:
        lines += ["", "## In Chromium", "", markdown(measured)]
    lines += ["", "## How it was made", "", "```bash"]
    if args.command:
        lines += [args.command]
    if args.onnx:
        lines += [f"# the ONNX export: {_portable(args.onnx)} (int8: {onnx_config.get('int8')})"]
    else:
        sl = f" --shortlist {args.shortlist}" if args.shortlist else ""
        lines.append(
            f"lightcompress-export-onnx --path {args.path} --data {args.data} "
            f"--spm {args.spm}{sl} --int8 all -o ONNX"
        )
    lines += [
        f"lightcompress-export-web ONNX -o {out_rel} --source-lang de",
        f"python lab/results/ship_web_student.py ... --out {out_rel}"
        + (" --measure" if measured else ""),
        "```",
        "",
        f"Written by ship_web_student.py on {datetime.date.today().isoformat()}.",
    ]
    return "\n".join(lines) + "\n"


def _sha256sums(folder: str) -> None:
    names = sorted(
        os.path.relpath(os.path.join(d, n), folder)
        for d, _, files in os.walk(folder)
        for n in files
        if n != "SHA256SUMS"
    )
    with open(os.path.join(folder, "SHA256SUMS"), "w", encoding="utf-8") as f:
        for name in names:
            with open(os.path.join(folder, name), "rb") as g:
                f.write(f"{hashlib.sha256(g.read()).hexdigest()}  {name}\n")


def ship(args) -> dict | None:
    import sacrebleu

    from lightcompress.deploy.web_export import export_web
    from lightcompress_runtime import OnnxTranslator

    src, ref = _lines(args.src), _lines(args.ref)
    if len(src) != len(ref):
        raise ShipError(f"--src has {len(src)} lines, --ref {len(ref)}")
    if os.path.exists(args.out) and os.listdir(args.out) and not args.force:
        raise ShipError(f"{args.out} exists: give --force to replace it")
    work = tempfile.mkdtemp(prefix=".ship-web-", dir=os.path.dirname(os.path.abspath(args.out)))
    try:
        onnx, params = _export(args, work)
        with open(os.path.join(onnx, "config.json"), encoding="utf-8") as f:
            onnx_config = json.load(f)
        if not onnx_config.get("spm"):
            raise ShipError(f"{onnx} has no sentencepiece model: export it with --spm")
        page = os.path.join(work, "web")
        web = export_web(onnx, page, source_lang="de")
        shortlist = bool(web["shortlist"])
        out = OnnxTranslator(onnx, beam=5, shortlist=shortlist).translate(src)
        bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
        scores = {
            "bleu": round(bleu.corpus_score(out, [ref]).score, 2),
            "chrf": round(chrf.corpus_score(out, [ref]).score, 2),
            "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()),
            "sentences": len(src),
        }
        measured = None
        if args.measure:
            from web_page import measure

            measured = measure(page, onnx, src, ref, args.sentences)
        if os.path.exists(args.out):
            shutil.rmtree(args.out)
        shutil.move(page, args.out)
        with open(os.path.join(args.out, "MODEL_CARD.md"), "w", encoding="utf-8") as f:
            f.write(_card(args, web, onnx_config, scores, params, measured))
        with open(os.path.join(args.out, "scores.json"), "w", encoding="utf-8") as f:
            json.dump({"python_runtime": scores, "page": measured}, f, indent=1)
        _sha256sums(args.out)
        return measured
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", help="the student's checkpoint")
    p.add_argument("--data", help="its data-bin (dictionaries)")
    p.add_argument("-s", "--source-lang", default="de")
    p.add_argument("-t", "--target-lang", default="en")
    p.add_argument("--spm", help="its sentencepiece model")
    p.add_argument("--shortlist", help="a lightcompress-shortlist file to ship")
    p.add_argument("--onnx", help="an int8 ONNX export made already (instead of --path ...)")
    p.add_argument("--src", required=True, help="test source (raw German, one per line)")
    p.add_argument("--ref", required=True, help="test references (raw English)")
    p.add_argument("--command", help="the command that trained the student (for the card)")
    p.add_argument(
        "--what",
        default="The default lightcompress-compress student of the shipped "
        "teacher (the results table's `default` row).",
        help="the card's first sentence",
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="also measure the page in Chromium (lab/bench/web_page.py)",
    )
    p.add_argument("--sentences", type=int, default=200, help="with --measure: sentences timed")
    p.add_argument("--out", default=OUT, help=f"the folder (default {os.path.relpath(OUT, REPO)})")
    p.add_argument("--force", action="store_true", help="replace --out")
    args = p.parse_args(argv)
    try:
        if args.onnx is None and not (args.path and args.data and args.spm):
            raise ShipError("give --path, --data and --spm (or --onnx of an int8 export)")
        if args.onnx is not None and (args.path or args.shortlist):
            raise ShipError("--onnx is an export made already: no --path / --shortlist with it")
        for path in (args.path, args.spm, args.shortlist, args.src, args.ref):
            if path is not None and not os.path.isfile(path):
                raise ShipError(f"not found: {path}")
        measured = ship(args)
    except (ShipError, ValueError) as exc:
        print(f"ship_web_student.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"ship_web_student.py: wrote {args.out} (MODEL_CARD.md, SHA256SUMS)", file=sys.stderr)
    if measured:
        from web_page import markdown

        print(markdown(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
