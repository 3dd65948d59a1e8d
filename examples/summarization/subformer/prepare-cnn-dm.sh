#!/usr/bin/env bash
# CNN-DailyMail (Hermann et al. 2015; the non-anonymized split of See et al. 2017: about
# 287k / 13.4k / 11.5k articles) as fairseq's BART README prepares it, then the Subformer's
# 32K BPE vocabulary (Edunov et al. 2019) instead of GPT-2's:
#   1. raw stories -> {train,val,test}.{source,target}: one article / one summary per line, in the
#      order of See et al.'s url_lists/all_{train,val,test}.txt (story file = sha1 of its URL);
#      article = its lines before the first @highlight, summary = the @highlight lines, both
#      joined with spaces, a " ." added to lines without final punctuation; case and text kept
#      (no tokenization), as the BART-style make_datafiles.py.
#   2. articles truncated to their first ARTICLE_WORDS words (See et al.: 400 tokens).
#   3. a joint sentencepiece BPE model of SPM_VOCAB pieces (default 32000) trained on the train
#      articles + summaries; every split encoded with it.
#   4. fairseq-preprocess source -> target, joined dictionary (the model keeps separate tables).
# The raw (untruncated, un-encoded) valid and test summaries are copied to
# DATA_BIN/refs/{valid,test}.target for ROUGE.
#
# Offline: put into RAW_DIR either the BART-style text files {train,val,test}.{source,target}
# (step 1 done), or cnn/stories/*.story and dailymail/stories/*.story (or the archives
# cnn_stories.tgz and dailymail_stories.tgz) with all_{train,val,test}.txt (in RAW_DIR or
# RAW_DIR/url_lists/). The story archives are on Google Drive; downloading them needs gdown.
# DRY_RUN=1 prints the commands instead of running them.
#
# Environment (all optional):
#   RAW_DIR        folder with the raw data                    (default: data/raw/cnn_dm)
#   WORK_DIR       text, sentencepiece model, encoded text     (default: data/cnn_dm)
#   DATA_BIN       binarized output                            (default: data-bin/cnn_dm)
#   SPM_VOCAB      sentencepiece vocabulary size               (default: 32000)
#   SPM_SAMPLE     sentences sampled to train sentencepiece    (default: 1000000)
#   ARTICLE_WORDS  words kept of each article                  (default: 400)
#   WORKERS        fairseq-preprocess workers                  (default: 16)
#   CNN_URL, DM_URL, URL_LISTS  where to download the stories and the url lists
#   FORCE=1        rebuild even if DATA_BIN is complete
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/subformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/subformer/common.sh"

RAW_DIR="${RAW_DIR:-data/raw/cnn_dm}"
WORK_DIR="${WORK_DIR:-data/cnn_dm}"
DATA_BIN="${DATA_BIN:-$DATA_ROOT/cnn_dm}"
SPM_VOCAB="${SPM_VOCAB:-32000}"
SPM_SAMPLE="${SPM_SAMPLE:-1000000}"
ARTICLE_WORDS="${ARTICLE_WORDS:-400}"
WORKERS="${WORKERS:-16}"
CNN_URL="${CNN_URL:-https://drive.google.com/uc?export=download&id=0BwmD_VLjROrfTHk4NFg2SndKcjQ}"
DM_URL="${DM_URL:-https://drive.google.com/uc?export=download&id=0BwmD_VLjROrfM1BxdkxVaTY2bWs}"
URL_LISTS="${URL_LISTS:-https://raw.githubusercontent.com/abisee/cnn-dailymail/master/url_lists}"

if [[ "${FORCE:-0}" != 1 && -f "$DATA_BIN/.done" ]]; then
  log "$DATA_BIN is complete (FORCE=1 rebuilds it)"
  exit 0
fi
need_python
need_module sentencepiece sentencepiece
require fairseq-preprocess

text="$WORK_DIR/text"
run mkdir -p "$text"
if [[ -f "$RAW_DIR/train.source" ]]; then
  log "using the text files in $RAW_DIR"
  for split in train val test; do
    for side in source target; do
      [[ -f "$RAW_DIR/$split.$side" ]] || die "missing $RAW_DIR/$split.$side"
      run cp "$RAW_DIR/$split.$side" "$text/$split.$side"
    done
  done
else
  for corpus in cnn dailymail; do
    if [[ ! -d "$RAW_DIR/$corpus/stories" ]]; then
      url="$CNN_URL"
      if [[ "$corpus" == dailymail ]]; then url="$DM_URL"; fi
      fetch "$url" "$RAW_DIR/${corpus}_stories.tgz"
      run tar -xzf "$RAW_DIR/${corpus}_stories.tgz" -C "$RAW_DIR"
    fi
  done
  lists="$RAW_DIR/url_lists"
  if [[ -f "$RAW_DIR/all_train.txt" ]]; then lists="$RAW_DIR"; fi
  for split in train val test; do
    fetch "$URL_LISTS/all_$split.txt" "$lists/all_$split.txt"
  done
  log "stories -> $text/{train,val,test}.{source,target}"
  run "$PYTHON" - "$RAW_DIR" "$lists" "$text" <<'PY'
import hashlib
import os
import sys

raw, lists, out = sys.argv[1:4]
END = (".", "!", "?", "...", "'", "`", '"', "\u2019", "\u201d", ")")


def story_path(url):
    name = hashlib.sha1(url.encode()).hexdigest() + ".story"
    for corpus in ("cnn", "dailymail"):
        path = os.path.join(raw, corpus, "stories", name)
        if os.path.exists(path):
            return path
    raise SystemExit(f"no story file {name} for {url}")


def article_summary(path):
    with open(path, encoding="utf-8") as f:
        lines = [" ".join(line.split()) for line in f]
    article, summary, in_summary = [], [], False
    for line in lines:
        if not line:
            continue
        if line.startswith("@highlight"):
            in_summary = True
            continue
        if not line.endswith(END):
            line += " ."
        (summary if in_summary else article).append(line)
    return " ".join(article), " ".join(summary)


for split in ("train", "val", "test"):
    with open(os.path.join(lists, f"all_{split}.txt"), encoding="utf-8") as f:
        urls = [u.strip() for u in f if u.strip()]
    with open(os.path.join(out, f"{split}.source"), "w", encoding="utf-8") as src, \
            open(os.path.join(out, f"{split}.target"), "w", encoding="utf-8") as tgt:
        for url in urls:
            article, summary = article_summary(story_path(url))
            src.write(article + "\n")
            tgt.write(summary + "\n")
    print(f"{split}: {len(urls)} stories", file=sys.stderr)
PY
fi

plain="$WORK_DIR/plain"
run mkdir -p "$plain"
for split in train val test; do
  name="$split"
  if [[ "$split" == val ]]; then name=valid; fi
  run_to "$plain/$name.source" \
    awk -v n="$ARTICLE_WORDS" '{ if (NF > n) { NF = n } print }' "$text/$split.source"
  run cp "$text/$split.target" "$plain/$name.target"
done

log "training a $SPM_VOCAB-piece joint sentencepiece BPE model"
run "$PYTHON" - "$plain" "$WORK_DIR" "$SPM_VOCAB" "$SPM_SAMPLE" <<'PY'
import sys

import sentencepiece as spm

plain, work, vocab, sample = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
spm.SentencePieceTrainer.train(
    input=f"{plain}/train.source,{plain}/train.target", model_prefix=f"{work}/spm",
    vocab_size=vocab, model_type="bpe", character_coverage=1.0,
    input_sentence_size=sample, shuffle_input_sentence=True, max_sentence_length=1 << 16,
    # fairseq adds its own specials; '<unk>'-like strings of the raw text stay plain text
    bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0, unk_piece="<spm-unk>",
)
sp = spm.SentencePieceProcessor(model_file=f"{work}/spm.model")
for split in ("train", "valid", "test"):
    for side in ("source", "target"):
        with open(f"{plain}/{split}.{side}", encoding="utf-8") as fin, \
                open(f"{work}/{split}.{side}", "w", encoding="utf-8") as fout:
            for line in fin:
                fout.write(" ".join(sp.encode(line.strip(), out_type=str)) + "\n")
PY

log "binarizing into $DATA_BIN"
run rm -rf "$DATA_BIN"
run fairseq-preprocess --source-lang source --target-lang target \
  --trainpref "$WORK_DIR/train" --validpref "$WORK_DIR/valid" --testpref "$WORK_DIR/test" \
  --destdir "$DATA_BIN" --joined-dictionary --workers "$WORKERS"
run mkdir -p "$DATA_BIN/refs"
run cp "$plain/valid.target" "$DATA_BIN/refs/valid.target"
run cp "$plain/test.target" "$DATA_BIN/refs/test.target"
run cp "$WORK_DIR/spm.model" "$DATA_BIN/spm.model"
run touch "$DATA_BIN/.done"
log "done: $DATA_BIN"
