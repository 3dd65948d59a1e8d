#!/usr/bin/env bash
# WikiText-103 (Merity et al. 2016) for language modeling, as fairseq's
# examples/language_model/prepare-wikitext-103.sh and README: the word-level wikitext-103-v1
# release (wiki.{train,valid,test}.tokens, about 103M training tokens), binarized with
# fairseq-preprocess --only-source (one dictionary of about 267k types, no cut-off).
#
# Offline: put wikitext-103-v1.zip, or its unpacked files (wiki.train.tokens, ...), into RAW_DIR
# (or RAW_DIR/wikitext-103/). DRY_RUN=1 prints the commands instead of running them.
#
# Environment (all optional):
#   RAW_DIR   folder with the archive or its files        (default: data/raw/wikitext-103)
#   DATA_BIN  binarized output                            (default: data-bin/wikitext-103)
#   WORKERS   fairseq-preprocess workers                  (default: 16)
#   URL       the archive (default: the address of fairseq's prepare-wikitext-103.sh)
#   FORCE=1   rebuild even if DATA_BIN is complete
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/subformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/subformer/common.sh"

RAW_DIR="${RAW_DIR:-data/raw/wikitext-103}"
DATA_BIN="${DATA_BIN:-$DATA_ROOT/wikitext-103}"
WORKERS="${WORKERS:-16}"
URL="${URL:-https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip}"

if [[ "${FORCE:-0}" != 1 && -f "$DATA_BIN/.done" ]]; then
  log "$DATA_BIN is complete (FORCE=1 rebuilds it)"
  exit 0
fi
need_python
require fairseq-preprocess

text="$RAW_DIR"
if [[ ! -f "$text/wiki.train.tokens" ]]; then
  text="$RAW_DIR/wikitext-103"
fi
if [[ ! -f "$text/wiki.train.tokens" ]]; then
  fetch "$URL" "$RAW_DIR/wikitext-103-v1.zip"
  run "$PYTHON" -m zipfile -e "$RAW_DIR/wikitext-103-v1.zip" "$RAW_DIR"
fi
for split in train valid test; do
  [[ "$DRY_RUN" == 1 || -f "$text/wiki.$split.tokens" ]] || die "missing $text/wiki.$split.tokens"
done

run rm -rf "$DATA_BIN"
run fairseq-preprocess --only-source \
  --trainpref "$text/wiki.train.tokens" --validpref "$text/wiki.valid.tokens" \
  --testpref "$text/wiki.test.tokens" --destdir "$DATA_BIN" --workers "$WORKERS"
run touch "$DATA_BIN/.done"
log "done: $DATA_BIN"
