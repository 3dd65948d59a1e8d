#!/usr/bin/env bash
# IWSLT'14 German-English, built the way fairseq's examples/translation/prepare-iwslt14.sh builds
# it (written anew, same steps), then binarized with a joined dictionary:
#   train: train.tags.de-en.{de,en} without <url>/<talkid>/<keywords> lines and title/description
#          tags; Moses tokenizer; the clean-corpus-n.perl filter -ratio 1.5 (1..175 tokens);
#          lowercase.
#   valid: every 23rd line of that training text (the rest is train).
#   test:  IWSLT14.TED.dev2010 + TEDX.dev2012 + TED.tst2010/2011/2012 (<seg> lines), tokenized and
#          lowercased the same way.
#   BPE:   10k joint merges (subword-nmt learn-bpe on train.de + train.en), applied everywhere.
#   fairseq-preprocess --joined-dictionary (about 10.2k types: the papers' 36.8M Transformer).
#
# Tools, from pip: sacremoses (the Moses tokenizer in Python) and subword-nmt. Nothing is cloned.
# fairseq tokenizes with the Moses perl scripts, to which sacremoses is close but not
# byte-identical: set MOSES_DIR to a mosesdecoder checkout to use its tokenizer.perl,
# lowercase.perl and clean-corpus-n.perl instead (as the papers did). Without MOSES_DIR the
# filter and lowercasing are ../../common/clean-corpus.pl and perl's lc, which do what those two
# Moses scripts do.
#
# Offline: put de-en.tgz, or the folder de-en/ it unpacks to, into RAW_DIR; nothing is
# downloaded then. DRY_RUN=1 prints the commands instead of running them.
#
# Environment (all optional):
#   RAW_DIR       raw download folder                    (default: data/raw/iwslt14)
#   WORK_DIR      tokenized / BPE text                   (default: data/iwslt14.tokenized.de-en)
#   DATA_BIN      fairseq binarized output        (default: data-bin/iwslt14.tokenized.de-en)
#   MOSES_DIR     optional mosesdecoder checkout (see above)
#   BPE_TOKENS    joint BPE merges                       (default: 10000)
#   THREADS, WORKERS  tokenizer processes / fairseq-preprocess workers (default: 8 / 8)
#   URL           the archive (default: fairseq's mirror of the WIT3 2014-01 de-en release)
#   FORCE=1       rebuild even if DATA_BIN is complete
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RAW_DIR="${RAW_DIR:-data/raw/iwslt14}"
WORK_DIR="${WORK_DIR:-data/iwslt14.tokenized.de-en}"
DATA_BIN="${DATA_BIN:-$DATA_ROOT/iwslt14.tokenized.de-en}"
BPE_TOKENS="${BPE_TOKENS:-10000}"
THREADS="${THREADS:-8}"
WORKERS="${WORKERS:-8}"
URL="${URL:-http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz}"
src=de tgt=en lang=de-en

if [[ "${FORCE:-0}" != 1 && -f "$DATA_BIN/.done" ]]; then
  log "$DATA_BIN is complete (FORCE=1 rebuilds it)"
  exit 0
fi

# The tools (checked first: one message names everything missing).
if [[ -n "$MOSES_DIR" ]]; then
  for f in tokenizer/tokenizer.perl tokenizer/lowercase.perl training/clean-corpus-n.perl; do
    need_file "$MOSES_DIR/scripts/$f" "MOSES_DIR is not a mosesdecoder checkout"
  done
  LOWERCASE=(perl "$MOSES_DIR/scripts/tokenizer/lowercase.perl")
  CLEAN=(perl "$MOSES_DIR/scripts/training/clean-corpus-n.perl")
else
  need_cmd sacremoses
  # shellcheck disable=SC2016  # perl code, as lowercase.perl
  LOWERCASE=(perl -CS -pe '$_ = lc')
  CLEAN=(perl "$COMMON_DIR/clean-corpus.pl")
fi
require perl subword-nmt fairseq-preprocess

# tokenizer LANG: TOKENIZE = the Moses tokenizer command for LANG.
tokenizer() {
  if [[ -n "$MOSES_DIR" ]]; then
    TOKENIZE=(perl "$MOSES_DIR/scripts/tokenizer/tokenizer.perl" -threads "$THREADS" -l "$1" -q)
  else
    TOKENIZE=(sacremoses -q -l "$1" -j "$THREADS" tokenize)
  fi
}

# Raw data: RAW_DIR/de-en/ if present, else RAW_DIR/de-en.tgz (downloaded if missing).
orig="$RAW_DIR/$lang"
if [[ ! -f "$orig/train.tags.$lang.$src" ]]; then
  fetch "$URL" "$RAW_DIR/de-en.tgz"
  run mkdir -p "$WORK_DIR/orig"
  run tar -xzf "$RAW_DIR/de-en.tgz" -C "$WORK_DIR/orig"
  orig="$WORK_DIR/orig/$lang"
fi

tmp="$WORK_DIR/tmp"
run mkdir -p "$tmp"

log "tokenizing train"
for l in $src $tgt; do
  tokenizer "$l"
  run_pipe "$tmp/train.tags.$lang.tok.$l" \
    grep -v -e '<url>' -e '<talkid>' -e '<keywords>' "$orig/train.tags.$lang.$l" '|' \
    sed -e 's/<title>//g; s/<\/title>//g; s/<description>//g; s/<\/description>//g' '|' \
    "${TOKENIZE[@]}"
done
run "${CLEAN[@]}" -ratio 1.5 "$tmp/train.tags.$lang.tok" $src $tgt "$tmp/train.tags.$lang.clean" 1 175
for l in $src $tgt; do
  run_pipe "$tmp/train.tags.$lang.$l" cat "$tmp/train.tags.$lang.clean.$l" '|' "${LOWERCASE[@]}"
done

log "tokenizing dev/test"
tests=(IWSLT14.TED.dev2010 IWSLT14.TEDX.dev2012 IWSLT14.TED.tst2010 IWSLT14.TED.tst2011
  IWSLT14.TED.tst2012)
for l in $src $tgt; do
  tokenizer "$l"
  for name in "${tests[@]}"; do
    run_pipe "$tmp/$name.$lang.$l" grep '<seg id' "$orig/$name.$lang.$l.xml" '|' \
      sed -e 's/<seg id="[0-9]*">[[:space:]]*//g' -e 's/[[:space:]]*<\/seg>[[:space:]]*//g' \
      -e "s/’/'/g" '|' "${TOKENIZE[@]}" '|' "${LOWERCASE[@]}"
  done
done

log "splitting train / valid / test"
for l in $src $tgt; do
  run_to "$tmp/valid.$l" awk 'NR % 23 == 0' "$tmp/train.tags.$lang.$l"
  run_to "$tmp/train.$l" awk 'NR % 23 != 0' "$tmp/train.tags.$lang.$l"
  files=()
  for name in "${tests[@]}"; do files+=("$tmp/$name.$lang.$l"); done
  run_to "$tmp/test.$l" cat "${files[@]}"
done

log "learning $BPE_TOKENS joint BPE merges"
run_to "$tmp/train.$lang" cat "$tmp/train.$src" "$tmp/train.$tgt"
run subword-nmt learn-bpe -s "$BPE_TOKENS" --input "$tmp/train.$lang" --output "$WORK_DIR/code"
for l in $src $tgt; do
  for split in train valid test; do
    run subword-nmt apply-bpe -c "$WORK_DIR/code" --input "$tmp/$split.$l" \
      --output "$WORK_DIR/$split.$l"
  done
done

log "binarizing into $DATA_BIN"
run rm -rf "$DATA_BIN"
run fairseq-preprocess --source-lang $src --target-lang $tgt \
  --trainpref "$WORK_DIR/train" --validpref "$WORK_DIR/valid" --testpref "$WORK_DIR/test" \
  --destdir "$DATA_BIN" --joined-dictionary --workers "$WORKERS"
run cp "$WORK_DIR/code" "$DATA_BIN/bpe.code"
run touch "$DATA_BIN/.done"
[[ "$DRY_RUN" == 1 ]] ||
  log "done: $(wc -l <"$WORK_DIR/train.$src") train / $(wc -l <"$WORK_DIR/valid.$src") valid / $(wc -l <"$WORK_DIR/test.$src") test pairs"
