#!/usr/bin/env bash
# WMT'16 English-Romanian as preprocessed by Lee et al. (2018, github.com/nyu-dl/dl4mt-nonauto):
# wmt16.tar.gz with wmt16/en-ro/{train/corpus.bpe,dev/dev.bpe,test/test.bpe}.{en,ro} (normalized,
# Moses-tokenized, diacritics removed on the Romanian side, joint BPE); about 610k / 2k / 2k pairs.
# The setup of DeLighT (Mehta et al. 2020), which LightFormer follows: joined dictionary (about
# 35k types), tokenized BLEU.
#
# Offline: put wmt16.tar.gz, or the unpacked wmt16/ folder, into RAW_DIR. The archive is on
# Google Drive; downloading it needs gdown (pip install gdown). DRY_RUN=1 prints the commands
# instead of running them.
#
# Environment (all optional):
#   RAW_DIR   folder with the archive or wmt16/         (default: data/raw/wmt16_en_ro)
#   DATA_BIN  binarized output                          (default: data-bin/wmt16_en_ro)
#   WORKERS   fairseq-preprocess workers                (default: 16)
#   URL       the archive (default: the Google Drive copy of Lee et al.'s data)
#   FORCE=1   rebuild even if DATA_BIN is complete
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RAW_DIR="${RAW_DIR:-data/raw/wmt16_en_ro}"
DATA_BIN="${DATA_BIN:-$DATA_ROOT/wmt16_en_ro}"
WORKERS="${WORKERS:-16}"
URL="${URL:-https://drive.google.com/uc?id=1YrAwCEuktG-iDVxtEW-FE72uFTLc5QMl}"

if [[ "${FORCE:-0}" != 1 && -f "$DATA_BIN/.done" ]]; then
  log "$DATA_BIN is complete (FORCE=1 rebuilds it)"
  exit 0
fi
require fairseq-preprocess

text="$RAW_DIR/wmt16/en-ro"
if [[ ! -f "$text/train/corpus.bpe.en" ]]; then
  fetch "$URL" "$RAW_DIR/wmt16.tar.gz"
  run tar -xzf "$RAW_DIR/wmt16.tar.gz" -C "$RAW_DIR"
fi
for f in train/corpus.bpe dev/dev.bpe test/test.bpe; do
  [[ "$DRY_RUN" == 1 || (-f "$text/$f.en" && -f "$text/$f.ro") ]] || die "missing $text/$f.{en,ro}"
done

run rm -rf "$DATA_BIN"
run fairseq-preprocess --source-lang en --target-lang ro \
  --trainpref "$text/train/corpus.bpe" --validpref "$text/dev/dev.bpe" \
  --testpref "$text/test/test.bpe" \
  --destdir "$DATA_BIN" --joined-dictionary --workers "$WORKERS"
run touch "$DATA_BIN/.done"
log "done: $DATA_BIN"
