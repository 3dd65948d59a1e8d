#!/usr/bin/env bash
# IWSLT'14 German-English, built the way fairseq's examples/translation/prepare-iwslt14.sh builds
# it (written anew, same steps), then binarized with a joined dictionary:
#   train: train.tags.de-en.{de,en} without <url>/<talkid>/<keywords> lines and title/description
#          tags; Moses tokenizer.perl; clean-corpus-n.perl -ratio 1.5 (1..175 tokens); lowercase.
#   valid: every 23rd line of that training text (the rest is train).
#   test:  IWSLT14.TED.dev2010 + TEDX.dev2012 + TED.tst2010/2011/2012 (<seg> lines), tokenized and
#          lowercased the same way.
#   BPE:   10k joint merges (subword-nmt learn_bpe on train.de + train.en), applied everywhere.
#   fairseq-preprocess --joined-dictionary (about 10.2k types: the papers' 36.8M Transformer).
#
# Tokenizer: the Moses perl scripts (a mosesdecoder checkout), as fairseq does -- sacremoses is
# close but not byte-identical, and the papers' numbers come from the perl scripts.
#
# Offline: put de-en.tgz, or the folder de-en/ it unpacks to, into RAW_DIR; point MOSES_DIR at a
# mosesdecoder checkout and have subword-nmt installed (pip) or checked out at SUBWORD_NMT_DIR.
# Nothing is downloaded or cloned when these are present.
#
# Environment (all optional):
#   RAW_DIR       raw download folder                    (default: data/raw/iwslt14)
#   WORK_DIR      tokenized / BPE text                   (default: data/iwslt14.tokenized.de-en)
#   DATA_BIN      fairseq binarized output        (default: data-bin/iwslt14.tokenized.de-en)
#   TOOLS_DIR     where tools are cloned                 (default: data/tools)
#   MOSES_DIR     mosesdecoder checkout                  (default: $TOOLS_DIR/mosesdecoder)
#   SUBWORD_NMT_DIR  subword-nmt checkout, used when `import subword_nmt` fails
#   BPE_TOKENS    joint BPE merges                       (default: 10000)
#   THREADS, WORKERS  tokenizer threads / fairseq-preprocess workers (default: 8 / 8)
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

ensure_moses
ensure_subword_nmt

# Raw data: RAW_DIR/de-en/ if present, else RAW_DIR/de-en.tgz (downloaded if missing).
orig="$RAW_DIR/$lang"
if [[ ! -f "$orig/train.tags.$lang.$src" ]]; then
  fetch "$URL" "$RAW_DIR/de-en.tgz"
  mkdir -p "$WORK_DIR/orig"
  tar -xzf "$RAW_DIR/de-en.tgz" -C "$WORK_DIR/orig"
  orig="$WORK_DIR/orig/$lang"
fi

TOKENIZER="$MOSES_DIR/scripts/tokenizer/tokenizer.perl"
LC="$MOSES_DIR/scripts/tokenizer/lowercase.perl"
CLEAN="$MOSES_DIR/scripts/training/clean-corpus-n.perl"
tmp="$WORK_DIR/tmp"
mkdir -p "$tmp"

log "tokenizing train"
for l in $src $tgt; do
  grep -v -e '<url>' -e '<talkid>' -e '<keywords>' "$orig/train.tags.$lang.$l" |
    sed -e 's/<title>//g; s/<\/title>//g; s/<description>//g; s/<\/description>//g' |
    perl "$TOKENIZER" -threads "$THREADS" -l "$l" -q >"$tmp/train.tags.$lang.tok.$l"
done
perl "$CLEAN" -ratio 1.5 "$tmp/train.tags.$lang.tok" $src $tgt "$tmp/train.tags.$lang.clean" 1 175
for l in $src $tgt; do
  perl "$LC" <"$tmp/train.tags.$lang.clean.$l" >"$tmp/train.tags.$lang.$l"
done

log "tokenizing dev/test"
for l in $src $tgt; do
  for xml in "$orig"/IWSLT14.TED*."$lang.$l".xml; do
    base="$(basename "$xml" .xml)"
    grep '<seg id' "$xml" |
      sed -e 's/<seg id="[0-9]*">[[:space:]]*//g' -e 's/[[:space:]]*<\/seg>[[:space:]]*//g' \
        -e "s/’/'/g" |
      perl "$TOKENIZER" -threads "$THREADS" -l "$l" -q |
      perl "$LC" >"$tmp/$base"
  done
done

log "splitting train / valid / test"
for l in $src $tgt; do
  awk 'NR % 23 == 0' "$tmp/train.tags.$lang.$l" >"$tmp/valid.$l"
  awk 'NR % 23 != 0' "$tmp/train.tags.$lang.$l" >"$tmp/train.$l"
  cat "$tmp/IWSLT14.TED.dev2010.$lang.$l" "$tmp/IWSLT14.TEDX.dev2012.$lang.$l" \
    "$tmp/IWSLT14.TED.tst2010.$lang.$l" "$tmp/IWSLT14.TED.tst2011.$lang.$l" \
    "$tmp/IWSLT14.TED.tst2012.$lang.$l" >"$tmp/test.$l"
done

log "learning $BPE_TOKENS joint BPE merges"
cat "$tmp/train.$src" "$tmp/train.$tgt" >"$tmp/train.$lang"
"$PYTHON" -m subword_nmt.learn_bpe -s "$BPE_TOKENS" <"$tmp/train.$lang" >"$WORK_DIR/code"
for l in $src $tgt; do
  for split in train valid test; do
    "$PYTHON" -m subword_nmt.apply_bpe -c "$WORK_DIR/code" <"$tmp/$split.$l" >"$WORK_DIR/$split.$l"
  done
done

log "binarizing into $DATA_BIN"
rm -rf "$DATA_BIN"
fairseq-preprocess --source-lang $src --target-lang $tgt \
  --trainpref "$WORK_DIR/train" --validpref "$WORK_DIR/valid" --testpref "$WORK_DIR/test" \
  --destdir "$DATA_BIN" --joined-dictionary --workers "$WORKERS"
cp "$WORK_DIR/code" "$DATA_BIN/bpe.code"
touch "$DATA_BIN/.done"
log "done: $(wc -l <"$WORK_DIR/train.$src") train / $(wc -l <"$WORK_DIR/valid.$src") valid / $(wc -l <"$WORK_DIR/test.$src") test pairs"
