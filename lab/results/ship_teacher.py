#!/usr/bin/env python
"""Ship the converged results teacher (teacher.sh's) into a folder of the repository.

    python lab/results/ship_teacher.py [--save-root DIR] [--data DIR] \\
        [--out examples/translation/results/teacher] [--machine TEXT] [--head N]

From teacher.sh's SAVE_ROOT (``chosen``, ``out/NAME.pt``: the float16 pack, ``NAME/train.log``,
``NAME/test.json``, ``NAME/generate-test.txt``) and the corpus (``spm/spm.model``,
``bin/dict.*.txt``, ``SOURCES.tsv``, ``raw/test.de``) it writes into ``--out``:

- ``checkpoint.pt``: the teacher, float16 weights, no optimizer state, tied tables once (a
  fairseq checkpoint: ``fairseq-generate --path``, ``from_pretrained``, ``lightcompress-compress``
  take it as it is);
- ``spm.model``, ``dict.de.txt``, ``dict.en.txt``: its tokenizer and dictionaries;
- ``SOURCES.tsv``: every training / valid / test catalog with version, licence and sha256;
- ``scores.json``: test BLEU and chrF with sacreBLEU signatures, updates, the validation curve;
- ``head.json``: the first ``--head`` test sentences (raw German) and the teacher's translations
  (beam 5, from ``generate-test.txt``), which tests/test_shipped_teacher.py reproduces;
- ``curve.png`` (if matplotlib is there), ``train.log.gz``;
- ``MODEL_CARD.md``, written from the files above (no figure typed by hand);
- ``SHA256SUMS`` of every file (``sha256sum -c SHA256SUMS`` in the folder).

Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TEACHER_OUT = os.path.join(REPO, "examples", "translation", "results", "teacher")  # (shipped)
CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lightcompress"
)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "scripts"))

from collect import read_generate

sys.path.insert(0, REPO)
from lightcompress_runtime.files import file_sha256


class ShipError(ValueError):
    pass


def _need(path: str) -> str:
    if not os.path.isfile(path):
        raise ShipError(f"{path} is missing")
    return path


def _read(path: str) -> str:
    with open(_need(path), encoding="utf-8") as f:
        return f.read()


def _train_command(name: str) -> str:
    """teacher.sh's fairseq-train command for configuration ``name`` (its dry run), with the
    corpus and save paths as placeholders."""
    env = dict(os.environ, DRY_RUN="1", CONFIGS=name, DATA_DIR="DATA", SAVE_ROOT="SAVE")
    proc = subprocess.run(
        ["bash", os.path.join(HERE, "teacher.sh")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("+ fairseq-train")]
    if proc.returncode != 0 or not lines:
        raise ShipError(f"teacher.sh's dry run failed: {proc.stderr.strip()[-200:]}")
    cmd = (
        lines[0][2:]
        .split(" >> ")[0]
        .replace(f"--user-dir {REPO}/lightcompress", "--user-dir lightcompress")
    )
    return cmd.replace(" --cpu", "")


def _licences(sources: str) -> list[str]:
    """``licence: packages`` lines of SOURCES.tsv's training catalogs."""
    import csv

    by: dict[str, list[str]] = {}
    with open(sources, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["licence_class"] != "permissive":
                raise ShipError(
                    f"{sources}: {row['package']} is {row['licence_class']}, not permissive"
                )
            by.setdefault(row["licence"], []).append(row["package"])
    return [f"- {lic} ({len(p)}): {', '.join(sorted(p))}" for lic, p in sorted(by.items())]


def ship(save_root: str, data: str, out: str, machine: str, head: int) -> dict:
    name = _read(os.path.join(save_root, "chosen")).strip()
    packed = _need(os.path.join(save_root, "out", f"{name}.pt"))
    log = _need(os.path.join(save_root, name, "train.log"))
    scores = json.loads(_read(os.path.join(save_root, name, "test.json")))
    if not (scores.get("stopped") or "").startswith("early stop"):
        raise ShipError(
            f"{save_root}/{name} did not stop early ({scores.get('stopped')}): not converged"
        )
    hyps = read_generate(_need(os.path.join(save_root, name, "generate-test.txt")))
    with open(_need(os.path.join(data, "raw", "test.de")), encoding="utf-8") as f:
        src = [next(f).rstrip("\n") for _ in range(head)]
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    shutil.copyfile(packed, os.path.join(tmp, "checkpoint.pt"))
    shutil.copyfile(_need(os.path.join(data, "spm", "spm.model")), os.path.join(tmp, "spm.model"))
    for lang in ("de", "en"):
        shutil.copyfile(
            _need(os.path.join(data, "bin", f"dict.{lang}.txt")),
            os.path.join(tmp, f"dict.{lang}.txt"),
        )
    shutil.copyfile(_need(os.path.join(data, "SOURCES.tsv")), os.path.join(tmp, "SOURCES.tsv"))
    with open(log, "rb") as f, gzip.GzipFile(os.path.join(tmp, "train.log.gz"), "wb", mtime=0) as g:
        g.write(f.read())
    keep = (
        "bleu",
        "bleu_signature",
        "chrf",
        "chrf_signature",
        "test_sentences",
        "params",
        "updates",
        "best_update",
        "best_valid_loss",
        "stopped",
        "valid_curve",
    )
    rec = {k: scores.get(k) for k in keep}
    rec["machine"] = machine
    with open(os.path.join(tmp, "scores.json"), "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    pairs = [{"de": s, "en": hyps[i]} for i, s in enumerate(src)]
    with open(os.path.join(tmp, "head.json"), "w", encoding="utf-8") as f:
        json.dump({"beam": 5, "lenpen": 1.0, "pairs": pairs}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    try:
        from plot_curves import parse_log, plot_curves

        plot_curves(
            {"teacher": parse_log(log)},
            os.path.join(tmp, "curve.png"),
            "results teacher: loss (base 2, label-smoothed)",
        )
    except ImportError:
        pass
    stats = json.loads(_read(os.path.join(data, "stats.json")))
    _card(tmp, rec, stats, _licences(os.path.join(tmp, "SOURCES.tsv")), _train_command(name), pairs)
    files = sorted(f for f in os.listdir(tmp) if f != "SHA256SUMS")
    with open(os.path.join(tmp, "SHA256SUMS"), "w", encoding="utf-8") as f:
        f.writelines(f"{file_sha256(os.path.join(tmp, fn))}  {fn}\n" for fn in files)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return rec


def _card(d: str, rec: dict, stats: dict, licences: list[str], command: str, pairs: list) -> None:
    p, curve = stats["pairs"], rec["valid_curve"]
    lines = [
        "# The results teacher (lightcompress)",
        "",
        (
            "A fairseq Transformer (`--arch transformer`, 3-3, d 256, FFN 1024, 4 heads, post-LN, "
            "`--share-all-embeddings`, sinusoidal positions) for German -> English user-interface "
            "strings, trained until its validation loss stopped improving. It is the teacher every "
            "method of lightcompress starts from in the results table. Float16 weights, no optimizer "
            f"state: {rec['params']:,} parameters."
        ),
        "",
        "## Scores (test split, beam 5, lenpen 1.0, float16 weights)",
        "",
        f"- BLEU **{rec['bleu']:.2f}** (`{rec['bleu_signature']}`)",
        f"- chrF **{rec['chrf']:.2f}** (`{rec['chrf_signature']}`)",
        (
            f"- on {rec['test_sentences']:,} sentences against the raw references "
            "(`fairseq-generate --post-process sentencepiece`, sacreBLEU)"
        ),
        "",
        "## Data",
        "",
        (
            "The permissive-only results corpus (`python examples/translation/l10n_corpus.py "
            "--permissive-only`): German translation catalogs of pinned, hash-checked PyPI and Debian "
            f"packages; {p['train']:,} / {p['valid']:,} / {p['test']:,} sentence pairs "
            "(train / valid / test, split by project), joined sentencepiece unigram vocabulary "
            f"{stats['spm_vocab_size']:,} (fairseq dictionary {stats['fairseq_dict_size']:,} types). "
            "Every catalog, version, licence and sha256 is in `SOURCES.tsv`. Licences of the "
            "catalogs (all permissive):"
        ),
        "",
        *licences,
        "",
        "## Training",
        "",
        (
            f"`bash lab/results/teacher.sh` ({rec['machine']}), configuration "
            "chosen by the lowest validation loss; the command (DATA: the corpus, SAVE: the state):"
        ),
        "",
        "```bash",
        command,
        "```",
        "",
        (
            f"It stopped by itself ({rec['stopped']}) after {rec['updates']:,} updates; the "
            f"checkpoint kept is the lowest validation loss, {rec['best_valid_loss']:.3f} "
            f"(label-smoothed, base 2) at update {rec['best_update']:,}. Validation curve "
            "(`scores.json` has every point; `curve.png`, `train.log.gz`):"
        ),
        "",
        "| update | valid loss |",
        "| ---: | ---: |",
        *[f"| {u:,} | {v:.3f} |" for u, v in curve[:: max(1, len(curve) // 12)] + curve[-1:]],
        "",
        "## Use",
        "",
        "```bash",
        "sha256sum -c SHA256SUMS",
        "lightcompress-compress checkpoint.pt --data DATA/bin --spm spm.model --save-dir out",
        "```",
        "",
        "```python",
        "from fairseq.models.transformer import TransformerModel",
        "",
        "m = TransformerModel.from_pretrained(",
        '    FOLDER, "checkpoint.pt", FOLDER, bpe="sentencepiece", sentencepiece_model=FOLDER + "/spm.model"',
        ")",
        'm.translate("Datei speichern", beam=5)',
        "```",
        "",
        "The first test sentences and its translations (`head.json`):",
        "",
        "| de | en |",
        "| --- | --- |",
        *[f"| {x['de'].replace('|', '/')} | {x['en'].replace('|', '/')} |" for x in pairs],
        "",
    ]
    with open(os.path.join(d, "MODEL_CARD.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--save-root", default=os.path.join(CACHE, "teacher"), help="teacher.sh's SAVE_ROOT"
    )
    ap.add_argument(
        "--data",
        default=os.path.join(CACHE, "data", "results-permissive"),
        help="the corpus (l10n_corpus.py --permissive-only output)",
    )
    ap.add_argument("--out", default=TEACHER_OUT, help="the folder to write")
    ap.add_argument("--machine", default="see machine.txt", help="where it trained (for the card)")
    ap.add_argument("--head", type=int, default=5, help="test sentences in head.json (5)")
    a = ap.parse_args(argv)
    try:
        if a.head < 1:
            raise ShipError("--head must be at least 1")
        rec = ship(a.save_root, a.data, a.out, a.machine, a.head)
    except (ShipError, OSError, KeyError, StopIteration) as exc:
        print(f"ship_teacher.py: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {a.out}: BLEU {rec['bleu']:.2f}, chrF {rec['chrf']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
