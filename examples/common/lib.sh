# shellcheck shell=bash
# The shared recipe library of examples/. Every recipe script sources its family's common.sh,
# which sources this file and then only adds functions named with the family's prefix:
#
#   examples/translation/lightformer/common.sh  lf_*    (and examples/summarization/lightformer/)
#   examples/translation/hypoformer/common.sh   hypo_*
#   examples/translation/subformer/common.sh    sf_*    (and summarization/, language_model/)
#   examples/translation/kd/common.sh           kd_*
#
# No family redefines a function of this file or of another family (tests/test_recipes.py
# checks it). A family sets LOG_TAG (the tag of its log lines) and SAVE_ROOT's default.
# Defines functions and defaults only; sourcing it runs nothing but `nvidia-smi -L` (when
# NUM_GPUS is unset).
#
# Environment (all optional; every default can be overridden):
#   DRY_RUN=1       print the commands (one per line, "+ " and the command shell-quoted) instead of
#                   running them: nothing is downloaded, trained or written
#   PYTHON          python with fairseq and lightcompress (default: python, else python3; a real
#                   run stops with a message when neither is found)
#   USER_DIR        fairseq --user-dir (default: the folder `python -m lightcompress --user-dir`
#                   prints, found without importing fairseq; without python, this checkout's
#                   lightcompress/, which is what that command prints here)
#   DATA_ROOT       where the data-bin folders live                           (default: data-bin)
#   DATA_BIN        the binarized data of the recipe     (default: $DATA_ROOT/<dataset folder>)
#   NUM_GPUS        GPUs to train on (default: the number `nvidia-smi -L` lists, else 0, which
#                   trains on the CPU)
#   MAX_TOKENS      tokens per GPU per batch                  (default: the paper's, see below)
#   UPDATE_FREQ     gradient accumulation (default: computed so that NUM_GPUS x MAX_TOKENS x
#                   UPDATE_FREQ equals the paper's effective batch)
#   MAX_UPDATE, LR, WARMUP, DROPOUT, WEIGHT_DECAY, SEED, AVG_N: training schedule overrides
#   FP16=0          train in fp32 on GPUs (default: --fp16; with NUM_GPUS=0 fairseq runs --cpu)
#   EXTRA_TRAIN_ARGS  extra fairseq-train flags (word-split), e.g. "--num-workers 4"
#   MOSES_DIR       optional mosesdecoder checkout: its perl scripts detokenize for sacreBLEU (and
#                   tokenize in prepare-iwslt14.sh) instead of the `sacremoses` command
#   MEASURE_SPEED=0 skip scripts/measure_speed.sh
#
# Tools, all from pip (check_tools names what is missing, with how to get it, before anything
# trains): fairseq and lightcompress (make install), sacrebleu, sacremoses (detokenizing for
# sacreBLEU, tokenizing IWSLT'14), subword-nmt (IWSLT'14 BPE), sentencepiece (GigaWord, CNN-DM),
# rouge-score (ROUGE), gdown (only to download from Google Drive). Nothing is cloned.

COMMON_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$COMMON_DIR/../.." && pwd)"
LOG_TAG=recipes
DRY_RUN="${DRY_RUN:-0}"
DATA_ROOT="${DATA_ROOT:-data-bin}"
SEED="${SEED:-1}"
MEASURE_SPEED="${MEASURE_SPEED:-1}"
MOSES_DIR="${MOSES_DIR:-}"
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=python
  if ! command -v python >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
    PYTHON=python3
  fi
fi
export PYTHON # scripts/distill_data.sh and scripts/measure_speed.sh read it
if [[ -z "${NUM_GPUS:-}" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    NUM_GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  fi
  NUM_GPUS="${NUM_GPUS:-0}"
fi

log() { echo "[$LOG_TAG] $*" >&2; }
die() {
  echo "[$LOG_TAG] error: $*" >&2
  exit 1
}

# ---------------------------------------------------------------------------------------------
# Running commands (or printing them: DRY_RUN=1)
# ---------------------------------------------------------------------------------------------

# run CMD...: run a command, or print it (shell-quoted, after "+ ") when DRY_RUN=1.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# run_log LOG CMD...: run a command with its output appended to LOG (and shown).
run_log() {
  local logfile="$1"
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    run "$@"
    echo "  (output appended to $logfile)"
  else
    mkdir -p "$(dirname "$logfile")"
    "$@" 2>&1 | tee -a "$logfile"
  fi
}

# run_to OUT CMD...: run a command with its stdout written to OUT (atomically).
run_to() {
  local out="$1"
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    run "$@"
    echo "  (stdout written to $out)"
  else
    mkdir -p "$(dirname "$out")"
    "$@" >"$out.tmp"
    mv "$out.tmp" "$out"
  fi
}

# run_pipe OUT CMD... ['|' CMD...]: run_to for a pipeline, its commands separated by a '|'
# argument: run_pipe out.txt grep x in.txt '|' sort.
run_pipe() {
  local out="$1" arg
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    for arg in "$@"; do
      if [[ "$arg" == '|' ]]; then printf ' |'; else printf ' %q' "$arg"; fi
    done
    printf '\n'
    echo "  (stdout written to $out)"
  else
    mkdir -p "$(dirname "$out")"
    pipeline "$@" >"$out.tmp"
    mv "$out.tmp" "$out"
  fi
}

# pipeline CMD... ['|' CMD...]: run the commands connected by pipes (run_pipe's worker).
pipeline() {
  local cmd=()
  while (($# > 0)) && [[ "$1" != '|' ]]; do
    cmd+=("$1")
    shift
  done
  if (($# > 0)); then
    shift
    "${cmd[@]}" | pipeline "$@"
  else
    "${cmd[@]}"
  fi
}

# fetch URL OUT: download URL to OUT unless OUT exists (a .part file is renamed when complete).
# Google Drive links need gdown (pip install gdown); otherwise download by hand into OUT's folder.
fetch() {
  local url="$1" out="$2"
  if [[ -s "$out" ]]; then
    log "using $out"
    return 0
  fi
  log "downloading $url -> $out"
  [[ "$DRY_RUN" == 1 ]] || mkdir -p "$(dirname "$out")"
  if [[ "$url" == *drive.google.com* ]]; then
    [[ "$DRY_RUN" == 1 ]] || command -v gdown >/dev/null 2>&1 ||
      die "$url is on Google Drive: install gdown (pip install gdown), or download it by hand to $out"
    run gdown "$url" -O "$out.part"
  elif command -v curl >/dev/null 2>&1; then
    run curl -fL --retry 3 -o "$out.part" "$url"
  else
    run wget -O "$out.part" "$url"
  fi
  run mv "$out.part" "$out"
}

# ---------------------------------------------------------------------------------------------
# Python, the plugin and the tools: checked before anything runs
# ---------------------------------------------------------------------------------------------

have_python() { command -v "$PYTHON" >/dev/null 2>&1; }

# resolve_user_dir: set USER_DIR (unless given) to the folder `python -m lightcompress
# --user-dir` prints, i.e. the lightcompress package that PYTHON imports, found without importing
# it (and fairseq); else this checkout's lightcompress/. Returns 1 when there is neither.
resolve_user_dir() {
  [[ -z "${USER_DIR:-}" ]] || return 0
  if have_python; then
    USER_DIR="$("$PYTHON" -c 'import importlib.util, os
spec = importlib.util.find_spec("lightcompress")
if spec and spec.origin:
    print(os.path.dirname(os.path.abspath(spec.origin)))' 2>/dev/null || true)"
  fi
  if [[ -z "${USER_DIR:-}" && -f "$REPO_ROOT/lightcompress/__main__.py" ]]; then
    USER_DIR="$REPO_ROOT/lightcompress"
  fi
  [[ -n "${USER_DIR:-}" ]]
}

# user_dir: print the fairseq --user-dir (see resolve_user_dir; check_tools resolves it once).
user_dir() {
  resolve_user_dir || die "cannot find lightcompress: install it (make install) or set USER_DIR"
  echo "$USER_DIR"
}

# tool_hint CMD: how to get CMD.
tool_hint() {
  case "$1" in
    fairseq-*) echo "fairseq: make install" ;;
    lightcompress-*) echo "lightcompress: make install" ;;
    sacrebleu | sacremoses | subword-nmt | gdown) echo "pip install $1" ;;
    perl | curl | wget | tar | gzip) echo "the $1 package of your system" ;;
    *) echo "not on PATH" ;;
  esac
}

MISSING=()

# need_cmd CMD...: note each CMD that is not on PATH (see report_missing).
need_cmd() {
  local cmd
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null 2>&1 || MISSING+=("$cmd ($(tool_hint "$cmd"))")
  done
}

# need_python: note a missing PYTHON.
need_python() {
  have_python ||
    MISSING+=("python ('$PYTHON' not found: activate the environment with fairseq and lightcompress, or set PYTHON)")
}

# need_module MODULE PACKAGE: note MODULE when PYTHON cannot import it (looked up, not imported).
need_module() {
  have_python || return 0 # need_python notes that
  "$PYTHON" -c 'import importlib.util, sys
sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' "$1" 2>/dev/null ||
    MISSING+=("the python module $1 (pip install $2)")
}

# need_file PATH WHAT: note PATH (described as WHAT) when it does not exist.
need_file() { [[ -e "$1" ]] || MISSING+=("$1 ($2)"); }

# need_detokenizer: the Moses detokenizer (MOSES_DIR's perl script, or the sacremoses command).
need_detokenizer() {
  if [[ -n "$MOSES_DIR" ]]; then
    need_cmd perl
    need_file "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" "MOSES_DIR is not a mosesdecoder checkout"
  else
    need_cmd sacremoses
  fi
}

# report_missing: stop with one message naming everything noted as missing (a dry run only
# says what a real run would miss, and goes on).
report_missing() {
  ((${#MISSING[@]} > 0)) || return 0
  local msg item
  msg="missing before anything runs:"
  for item in "${MISSING[@]}"; do msg+=$'\n'"  - $item"; done
  MISSING=()
  if [[ "$DRY_RUN" == 1 ]]; then
    log "dry run: a real run would stop here, $msg"
  else
    die "$msg"
  fi
}

# require CMD...: stop unless every CMD is on PATH (one message for all; a dry run goes on).
require() {
  need_cmd "$@"
  report_missing
}

# check_tools [CMD...]: run by every row before its first training step. Checks python, the
# plugin (and resolves USER_DIR once), fairseq-train, the given CMDs, the scorer of METRIC (bleu:
# fairseq-generate, sacrebleu, the detokenizer, and fairseq-score with compound splitting; rouge:
# fairseq-generate, rouge-score; ppl: fairseq-eval-lm) and the binarized data
# (DATA_BIN/DATA_CHECK, default dict.$SRC.txt), then stops with one message naming everything
# missing. A dry run only reports. Runs once per script.
check_tools() {
  [[ "${TOOLS_CHECKED:-0}" != 1 ]] || return 0
  TOOLS_CHECKED=1
  need_python
  resolve_user_dir || MISSING+=("lightcompress (make install, or set USER_DIR)")
  need_cmd fairseq-train "$@"
  case "${METRIC:-}" in
    bleu)
      need_cmd fairseq-generate sacrebleu
      need_detokenizer
      if [[ "${COMPOUND_SPLIT:-0}" == 1 ]]; then need_cmd fairseq-score perl; fi
      ;;
    rouge)
      need_cmd fairseq-generate
      need_module rouge_score rouge-score
      need_file "$REPO_ROOT/examples/summarization/lightformer/score_rouge.py" "the ROUGE scorer"
      ;;
    ppl) need_cmd fairseq-eval-lm ;;
  esac
  need_file "$DATA_BIN/${DATA_CHECK:-dict.$SRC.txt}" \
    "no binarized data: run the dataset's prepare-*.sh first, or set DATA_BIN"
  report_missing
}

# ---------------------------------------------------------------------------------------------
# Datasets: the paper's batch and schedule, and how to decode and score (LightFormer and
# Hypoformer; Subformer has its own schedules).
#
# The effective batch is PAPER_GPUS x PAPER_MAX_TOKENS (x PAPER_UPDATE_FREQ) tokens per update;
# UPDATE_FREQ is derived from it for the GPUs at hand (see set_update_freq).
# Sources: IWSLT'14 -- fairseq examples/translation/README.md (transformer_iwslt_de_en: adam
# (0.9, 0.98), lr 5e-4, inverse_sqrt, warmup 4000, dropout 0.3, weight decay 1e-4, label smoothing
# 0.1, max-tokens 4096 on one GPU). WMT'14 En-De -- Transformer base (Vaswani et al. 2017:
# ~25k source + 25k target tokens per step, 100k steps, dropout 0.1) in fairseq's form: 8 GPUs x
# 4096 tokens, lr 7e-4, inverse_sqrt, warmup 4000, warmup-init-lr 1e-7. WMT'16 En-Ro -- DeLighT's
# nmt_wmt16_en2ro.py batch and length (8 GPUs x 4096 tokens, 100k updates) with the base
# schedule above and dropout 0.3. GigaWord -- the WMT base recipe (our choice: the paper gives
# no schedule). MAX_UPDATE for IWSLT (50k, about 45 epochs) and the averaging windows are ours.
# ---------------------------------------------------------------------------------------------
use_dataset() {
  DATASET="$1"
  case "$DATASET" in
    iwslt14)
      : "${DATA_BIN:=$DATA_ROOT/iwslt14.tokenized.de-en}"
      SRC=de TGT=en
      DENSE_ARCH="${DENSE_ARCH:-transformer_iwslt_de_en}"
      PAPER_GPUS=1 PAPER_MAX_TOKENS=4096
      : "${LR:=5e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.3}" "${WEIGHT_DECAY:=1e-4}"
      : "${MAX_UPDATE:=50000}"
      AVG_MODE=epoch
      : "${AVG_N:=10}"
      BEAM=5 LENPEN=1.0 COMPOUND_SPLIT=0 BPE_KIND=subword_nmt METRIC=bleu
      SPEED_SRC_LEN=23
      ;;
    wmt14ende)
      : "${DATA_BIN:=$DATA_ROOT/wmt16_en_de_bpe32k}"
      SRC=en TGT=de
      DENSE_ARCH="${DENSE_ARCH:-transformer_wmt_en_de}"
      PAPER_GPUS=8 PAPER_MAX_TOKENS=4096
      : "${LR:=7e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.1}" "${WEIGHT_DECAY:=0.0}"
      : "${MAX_UPDATE:=100000}"
      AVG_MODE=update
      : "${AVG_N:=5}"
      BEAM=4 LENPEN=0.6 COMPOUND_SPLIT=1 BPE_KIND=subword_nmt METRIC=bleu
      SPEED_SRC_LEN=30
      ;;
    wmt16enro)
      : "${DATA_BIN:=$DATA_ROOT/wmt16_en_ro}"
      SRC=en TGT=ro
      DENSE_ARCH="${DENSE_ARCH:-transformer_wmt_en_de}"
      PAPER_GPUS=8 PAPER_MAX_TOKENS=4096
      : "${LR:=7e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.3}" "${WEIGHT_DECAY:=0.0}"
      : "${MAX_UPDATE:=100000}"
      AVG_MODE=update
      : "${AVG_N:=5}"
      BEAM=5 LENPEN=1.0 COMPOUND_SPLIT=0 BPE_KIND=subword_nmt METRIC=bleu
      SPEED_SRC_LEN=30
      ;;
    gigaword)
      : "${DATA_BIN:=$DATA_ROOT/gigaword}"
      SRC=article TGT=title
      DENSE_ARCH="${DENSE_ARCH:-transformer_wmt_en_de}"
      PAPER_GPUS=8 PAPER_MAX_TOKENS=4096
      : "${LR:=5e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.1}" "${WEIGHT_DECAY:=0.0}"
      : "${MAX_UPDATE:=100000}"
      AVG_MODE=update
      : "${AVG_N:=5}"
      BEAM=5 LENPEN=1.0 COMPOUND_SPLIT=0 BPE_KIND=sentencepiece METRIC=rouge
      SPEED_SRC_LEN=30
      ;;
    *) die "unknown dataset '$DATASET'" ;;
  esac
  : "${MAX_TOKENS:=$PAPER_MAX_TOKENS}"
  set_update_freq
}

# UPDATE_FREQ = ceil(PAPER_GPUS x PAPER_MAX_TOKENS / (max(NUM_GPUS, 1) x MAX_TOKENS)), so that
# the effective batch stays the paper's on fewer GPUs (or with smaller MAX_TOKENS).
set_update_freq() {
  local gpus=$((NUM_GPUS > 0 ? NUM_GPUS : 1))
  local paper=$((PAPER_GPUS * PAPER_MAX_TOKENS))
  local per_step=$((gpus * MAX_TOKENS))
  if [[ -z "${UPDATE_FREQ:-}" ]]; then
    UPDATE_FREQ=$(((paper + per_step - 1) / per_step))
  fi
  if ((gpus * MAX_TOKENS * UPDATE_FREQ != paper)); then
    log "note: effective batch ${gpus}x${MAX_TOKENS}x${UPDATE_FREQ} tokens differs from the paper's ${paper}"
  fi
}

# device_flags: append to TRAIN_FLAGS --distributed-world-size (NUM_GPUS > 1), and --cpu
# (NUM_GPUS=0) or --fp16 followed by the array FP16_FLAGS (unless FP16=0).
FP16_FLAGS=()
device_flags() {
  if ((NUM_GPUS > 1)); then
    TRAIN_FLAGS+=(--distributed-world-size "$NUM_GPUS")
  fi
  if ((NUM_GPUS == 0)); then
    TRAIN_FLAGS+=(--cpu)
  elif [[ "${FP16:-1}" == 1 ]]; then
    TRAIN_FLAGS+=(--fp16 "${FP16_FLAGS[@]}")
  fi
}

# extra_train_flags: append EXTRA_TRAIN_ARGS (word-split) to TRAIN_FLAGS.
extra_train_flags() {
  local extra=()
  read -r -a extra <<<"${EXTRA_TRAIN_ARGS:-}"
  TRAIN_FLAGS+=("${extra[@]}")
}

# ---------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------

dense_dir() { echo "$SAVE_ROOT/$DATASET/transformer-$1-$2"; }

# fit SAVE_DIR [model flags...]: fairseq-train with TRAIN_FLAGS (set by the family) into
# SAVE_DIR unless it finished before. DATA_CHECK names the file of DATA_BIN that must exist
# (default dict.$SRC.txt). Set FINETUNE_FROM to start from converted weights (fairseq's
# --finetune-from-model: used only on the first launch, with fresh optimizer, scheduler, meters
# and data loader; an interrupted run resumes from its own checkpoint_last.pt).
fit() {
  local save_dir="$1"
  shift
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/train.done" ]]; then
    log "$save_dir: trained before (remove $save_dir/train.done to train again)"
    return 0
  fi
  [[ "$DRY_RUN" == 1 || -f "$DATA_BIN/${DATA_CHECK:-dict.$SRC.txt}" ]] ||
    die "no binarized data in $DATA_BIN (run the prepare-*.sh script first, or set DATA_BIN)"
  local init=()
  if [[ -n "${FINETUNE_FROM:-}" ]]; then
    init=(--finetune-from-model "$FINETUNE_FROM")
  fi
  run_log "$save_dir/train.log" fairseq-train "$DATA_BIN" --user-dir "$(user_dir)" \
    --save-dir "$save_dir" "$@" "${init[@]}" "${TRAIN_FLAGS[@]}"
  [[ "$DRY_RUN" == 1 ]] || touch "$save_dir/train.done"
}

# average SAVE_DIR: average the last AVG_N checkpoints into SAVE_DIR/checkpoint_avg.pt.
average() {
  local save_dir="$1" how
  if [[ "$AVG_MODE" == epoch ]]; then how=--num-epoch-checkpoints; else how=--num-update-checkpoints; fi
  # fairseq's own averager when the installed fairseq has it (looked up without importing fairseq)
  if "$PYTHON" -c 'import importlib.util as u, os, sys
s = u.find_spec("fairseq")
sys.exit(not (s and any(os.path.exists(os.path.join(d, "scripts", "average_checkpoints.py"))
                         for d in s.submodule_search_locations)))' 2>/dev/null; then
    run "$PYTHON" -m fairseq.scripts.average_checkpoints --inputs "$save_dir" "$how" "$AVG_N" \
      --output "$save_dir/checkpoint_avg.pt"
  else # pip-installed fairseq does not ship scripts/average_checkpoints.py
    run "$PYTHON" "$REPO_ROOT/examples/translation/lightformer/average_checkpoints.py" \
      --inputs "$save_dir" "$how" "$AVG_N" --output "$save_dir/checkpoint_avg.pt"
  fi
}

# hyp_ref GEN_OUT: write GEN_OUT.hyp / GEN_OUT.ref (detokenized BPE-free text, in test order).
hyp_ref() {
  local gen="$1" tag
  for tag in H T; do
    local out="$gen.ref" field=2
    if [[ "$tag" == H ]]; then out="$gen.hyp" field=3; fi
    grep "^$tag-" "$gen" | sed "s/^$tag-//" | sort -t$'\t' -k1,1n | cut -f"$field"- >"$out"
  done
}

# detok LANG < tokenized > detokenized: the Moses detokenizer (MOSES_DIR's perl script when
# MOSES_DIR is set, else the sacremoses command of `pip install sacremoses`).
detok() {
  if [[ -n "$MOSES_DIR" ]]; then
    [[ -f "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" ]] ||
      die "MOSES_DIR=$MOSES_DIR has no scripts/tokenizer/detokenizer.perl"
    perl "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" -q -l "$1"
  else
    command -v sacremoses >/dev/null 2>&1 ||
      die "detokenizing needs the sacremoses command (pip install sacremoses), or MOSES_DIR"
    sacremoses -q -l "$1" -j 1 detokenize
  fi
}

# evaluate SAVE_DIR CHECKPOINT: decode the test set and write SAVE_DIR/results.txt.
evaluate() {
  local save_dir="$1" ckpt="$2"
  local gen="$save_dir/generate-test.txt" res="$save_dir/results.txt"
  # --required-batch-size-multiple 1: fairseq main drops a last batch that is not a multiple
  # of it (default 8), i.e. up to 7 test sentences
  local bpe=(--remove-bpe)
  if [[ "$BPE_KIND" == sentencepiece ]]; then bpe=(--remove-bpe sentencepiece); fi
  run_to "$gen" fairseq-generate "$DATA_BIN" --user-dir "$(user_dir)" --path "$ckpt" \
    --task translation --source-lang "$SRC" --target-lang "$TGT" --gen-subset test \
    --beam "$BEAM" --lenpen "$LENPEN" --batch-size 128 --required-batch-size-multiple 1 \
    "${bpe[@]}"
  local ref_raw="$DATA_BIN/refs/test.$TGT"
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "  (score: $METRIC of $gen; compound splitting: $COMPOUND_SPLIT; sacreBLEU ref: ${ref_raw} if present)"
    return 0
  fi
  hyp_ref "$gen"
  {
    echo "checkpoint: $ckpt"
    grep -h -m1 'model params' "$save_dir/train.log" 2>/dev/null | sed 's/.*| //' || true
    if [[ "$METRIC" == rouge ]]; then
      local ref="$gen.ref"
      if [[ -f "$ref_raw" ]]; then ref="$ref_raw"; fi
      "$PYTHON" "$REPO_ROOT/examples/summarization/lightformer/score_rouge.py" \
        --hyp "$gen.hyp" --ref "$ref"
    else
      echo "tokenized BLEU (fairseq-generate): $(tail -n 1 "$gen")"
      if [[ "$COMPOUND_SPLIT" == 1 ]]; then
        # compound splitting as fairseq's scripts/compound_split_bleu.sh
        perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' <"$gen.hyp" >"$gen.hyp.cs"
        perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' <"$gen.ref" >"$gen.ref.cs"
        echo "tokenized BLEU (compound split): $(fairseq-score --sys "$gen.hyp.cs" --ref "$gen.ref.cs" | tail -n 1)"
      fi
      detok "$TGT" <"$gen.hyp" >"$gen.hyp.detok"
      local ref="$ref_raw"
      if [[ ! -f "$ref" ]]; then
        detok "$TGT" <"$gen.ref" >"$gen.ref.detok"
        ref="$gen.ref.detok"
      fi
      echo "sacreBLEU (detokenized, ref $ref): $(sacrebleu "$ref" -i "$gen.hyp.detok" -m bleu -b -w 2)"
    fi
  } | tee "$res"
}

# speed_column CHECKPOINT BASELINE [ARGS...]: the speed column (scripts/measure_speed.sh:
# tokens/s on one CPU core, batch 1; ARGS are passed on) into CHECKPOINT's folder/speed.txt. The
# papers report it as a ratio to the Transformer 6-6: when BASELINE (that model's checkpoint)
# exists (always, in a dry run) both are timed side by side (interleaved runs).
speed_column() {
  local ckpt="$1" base="$2" script="$REPO_ROOT/scripts/measure_speed.sh"
  shift 2
  local paths="model=$ckpt"
  [[ "$MEASURE_SPEED" == 1 ]] || return 0
  if [[ "$DRY_RUN" != 1 && ! -x "$script" ]]; then
    log "scripts/measure_speed.sh not found: skipping the speed column"
    return 0
  fi
  if [[ "$ckpt" != "$base" && ("$DRY_RUN" == 1 || -f "$base") ]]; then
    paths="transformer=$base,$paths"
  fi
  run_log "$(dirname "$ckpt")/speed.txt" "$script" --path "$paths" --data "$DATA_BIN" \
    --user-dir "$(user_dir)" --src-len "$SPEED_SRC_LEN" --beam "$BEAM" --lenpen "$LENPEN" "$@"
}
