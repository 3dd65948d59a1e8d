#!/usr/bin/env bash
# GigaWord headline generation, Rush et al. (2015) split as released by harvardnlp/sent-summary
# (summary.tar.gz, the "annotated gigaword" preprocessing used by fairseq-based work such as
# MASS and UniLM): already tokenized and lowercased, digits as '#'.
#   train: sumdata/train/train.{article,title}.txt(.gz)             3.8M pairs
#   valid: sumdata/train/valid.{article,title}.filter.txt           189k pairs (VALID_SIZE: first N)
#   test:  sumdata/Giga/input.txt, sumdata/Giga/task1_ref0.txt       1951 pairs
# Subwords: a joint sentencepiece BPE model (SPM_VOCAB, default 14000) trained on train
# article + title; fairseq-preprocess --joined-dictionary (languages "article" -> "title").
# 14000 is our choice: with Transformer-base 6-6 and one shared embedding table, the paper's
# 51.28M Transformer implies about 13.9k types; the paper does not state its vocabulary.
# The raw test titles are copied to DATA_BIN/refs/test.title for ROUGE.
#
# Offline: put summary.tar.gz, or the unpacked sumdata/ folder, into RAW_DIR. The archive is on
# Google Drive; downloading it needs gdown (pip install gdown). DRY_RUN=1 prints the commands
# instead of running them.
#
# Environment (all optional):
#   RAW_DIR      folder with the archive or sumdata/          (default: data/raw/gigaword)
#   WORK_DIR     sentencepiece model and encoded text          (default: data/gigaword)
#   DATA_BIN     binarized output                              (default: data-bin/gigaword)
#   SPM_VOCAB    sentencepiece vocabulary size                 (default: 14000)
#   SPM_SAMPLE   sentences sampled to train sentencepiece      (default: 2000000)
#   VALID_SIZE   keep only the first N validation pairs        (default: all)
#   WORKERS      fairseq-preprocess workers                    (default: 16)
#   URL          the archive (default: the Google Drive link of harvardnlp/sent-summary)
#   FORCE=1      rebuild even if DATA_BIN is complete
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/lightformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/lightformer/common.sh"

RAW_DIR="${RAW_DIR:-data/raw/gigaword}"
WORK_DIR="${WORK_DIR:-data/gigaword}"
DATA_BIN="${DATA_BIN:-$DATA_ROOT/gigaword}"
SPM_VOCAB="${SPM_VOCAB:-14000}"
SPM_SAMPLE="${SPM_SAMPLE:-2000000}"
WORKERS="${WORKERS:-16}"
URL="${URL:-https://drive.google.com/uc?id=0B6N7tANPyVeBNmlSX19Ld2xDU1E}"

if [[ "${FORCE:-0}" != 1 && -f "$DATA_BIN/.done" ]]; then
  log "$DATA_BIN is complete (FORCE=1 rebuilds it)"
  exit 0
fi
need_python
need_module sentencepiece sentencepiece
require fairseq-preprocess

sum="$RAW_DIR/sumdata"
if [[ ! -d "$sum/train" ]]; then
  fetch "$URL" "$RAW_DIR/summary.tar.gz"
  run tar -xzf "$RAW_DIR/summary.tar.gz" -C "$RAW_DIR"
fi

# raw_text FILE: RAW = the command printing FILE, or FILE.gz decompressed.
raw_text() {
  if [[ -f "$1" || ("$DRY_RUN" == 1 && ! -f "$1.gz") ]]; then
    RAW=(cat "$1")
  elif [[ -f "$1.gz" ]]; then
    RAW=(gzip -dc "$1.gz")
  else
    die "missing $1(.gz)"
  fi
}

plain="$WORK_DIR/plain"
run mkdir -p "$plain"
raw_text "$sum/train/train.article.txt"
run_to "$plain/train.article" "${RAW[@]}"
raw_text "$sum/train/train.title.txt"
run_to "$plain/train.title" "${RAW[@]}"
for side in article title; do
  raw_text "$sum/train/valid.$side.filter.txt"
  if [[ -n "${VALID_SIZE:-}" ]]; then
    # awk reads to the end (head would stop early and fail the pipe under pipefail)
    run_pipe "$plain/valid.$side" "${RAW[@]}" '|' awk -v n="$VALID_SIZE" 'NR <= n'
  else
    run_to "$plain/valid.$side" "${RAW[@]}"
  fi
done
raw_text "$sum/Giga/input.txt"
run_to "$plain/test.article" "${RAW[@]}"
raw_text "$sum/Giga/task1_ref0.txt"
run_to "$plain/test.title" "${RAW[@]}"

log "training a $SPM_VOCAB-piece joint sentencepiece BPE model"
run "$PYTHON" - "$plain" "$WORK_DIR" "$SPM_VOCAB" "$SPM_SAMPLE" <<'EOF'
import sys

import sentencepiece as spm

plain, work, vocab, sample = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
spm.SentencePieceTrainer.train(
    input=f"{plain}/train.article,{plain}/train.title", model_prefix=f"{work}/spm",
    vocab_size=vocab, model_type="bpe", character_coverage=1.0,
    input_sentence_size=sample, shuffle_input_sentence=True,
    # fairseq adds its own specials; keep '<unk>'-like strings of the raw text as plain text
    bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0, unk_piece="<spm-unk>",
)
sp = spm.SentencePieceProcessor(model_file=f"{work}/spm.model")
for split in ("train", "valid", "test"):
    for side in ("article", "title"):
        with open(f"{plain}/{split}.{side}", encoding="utf-8") as fin, \
                open(f"{work}/{split}.{side}", "w", encoding="utf-8") as fout:
            for line in fin:
                fout.write(" ".join(sp.encode(line.strip(), out_type=str)) + "\n")
EOF

log "binarizing into $DATA_BIN"
run rm -rf "$DATA_BIN"
run fairseq-preprocess --source-lang article --target-lang title \
  --trainpref "$WORK_DIR/train" --validpref "$WORK_DIR/valid" --testpref "$WORK_DIR/test" \
  --destdir "$DATA_BIN" --joined-dictionary --workers "$WORKERS"
run mkdir -p "$DATA_BIN/refs"
run cp "$plain/test.title" "$DATA_BIN/refs/test.title"
run cp "$WORK_DIR/spm.model" "$DATA_BIN/spm.model"
run touch "$DATA_BIN/.done"
log "done: $DATA_BIN"
