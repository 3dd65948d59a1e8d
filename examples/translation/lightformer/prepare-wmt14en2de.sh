#!/usr/bin/env bash
# WMT'14 English-German as in fairseq's "Scaling NMT" example (examples/scaling_nmt/README.md) and
# the papers that compare on it (Wu et al., DeLighT, LightFormer): Google's preprocessed WMT'16
# En-De data (wmt16_en_de.tar.gz: Moses-tokenized, cleaned, 32k joint BPE), newstest2013 as
# valid, newstest2014 as test; binarized with a joined dictionary of at most 32768 types.
# The raw newstest2014.de of the archive is copied to DATA_BIN/refs/test.de for sacreBLEU.
#
# Offline: put wmt16_en_de.tar.gz, or its unpacked files (train.tok.clean.bpe.32000.en, ...),
# into RAW_DIR (or RAW_DIR/wmt16_en_de_bpe32k/). The archive is on Google Drive; downloading it
# needs gdown (pip install gdown). DRY_RUN=1 prints the commands instead of running them.
#
# Environment (all optional):
#   RAW_DIR   folder with the archive or its files        (default: data/raw/wmt16_en_de)
#   DATA_BIN  binarized output                    (default: data-bin/wmt16_en_de_bpe32k)
#   WORKERS   fairseq-preprocess workers                  (default: 16)
#   URL       the archive (default: the Google Drive link of the fairseq README)
#   FORCE=1   rebuild even if DATA_BIN is complete
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RAW_DIR="${RAW_DIR:-data/raw/wmt16_en_de}"
DATA_BIN="${DATA_BIN:-$DATA_ROOT/wmt16_en_de_bpe32k}"
WORKERS="${WORKERS:-16}"
URL="${URL:-https://drive.google.com/uc?export=download&id=0B_bZck-ksdkpM25jRUN2X2UxMm8}"

if [[ "${FORCE:-0}" != 1 && -f "$DATA_BIN/.done" ]]; then
  log "$DATA_BIN is complete (FORCE=1 rebuilds it)"
  exit 0
fi
require fairseq-preprocess

text="$RAW_DIR"
if [[ ! -f "$text/train.tok.clean.bpe.32000.en" ]]; then
  text="$RAW_DIR/wmt16_en_de_bpe32k"
fi
if [[ ! -f "$text/train.tok.clean.bpe.32000.en" ]]; then
  fetch "$URL" "$RAW_DIR/wmt16_en_de.tar.gz"
  text="$RAW_DIR/wmt16_en_de_bpe32k"
  run mkdir -p "$text"
  run tar -xzf "$RAW_DIR/wmt16_en_de.tar.gz" -C "$text"
fi
for f in train.tok.clean.bpe.32000 newstest2013.tok.bpe.32000 newstest2014.tok.bpe.32000; do
  [[ "$DRY_RUN" == 1 || (-f "$text/$f.en" && -f "$text/$f.de") ]] || die "missing $text/$f.{en,de}"
done

run rm -rf "$DATA_BIN"
run fairseq-preprocess --source-lang en --target-lang de \
  --trainpref "$text/train.tok.clean.bpe.32000" \
  --validpref "$text/newstest2013.tok.bpe.32000" \
  --testpref "$text/newstest2014.tok.bpe.32000" \
  --destdir "$DATA_BIN" --nwordssrc 32768 --nwordstgt 32768 \
  --joined-dictionary --workers "$WORKERS"
if [[ "$DRY_RUN" == 1 || -f "$text/newstest2014.de" ]]; then # (when the archive has it)
  run mkdir -p "$DATA_BIN/refs"
  run cp "$text/newstest2014.de" "$DATA_BIN/refs/test.de"
fi
run touch "$DATA_BIN/.done"
log "done: $DATA_BIN"
