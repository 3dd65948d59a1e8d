# shellcheck shell=bash
# Shared pieces of the LightFormer recipes (sourced by every script in this folder and in
# examples/summarization/lightformer/). Defines functions and defaults only; running it does
# nothing. Every default can be overridden from the environment.
#
# Environment (all optional):
#   DRY_RUN=1       print the commands (one per line, starting with "+ ") instead of running them
#   PYTHON          python with fairseq and lightcompress installed            (default: python)
#   USER_DIR        fairseq --user-dir        (default: $(python -m lightcompress --user-dir))
#   DATA_ROOT       where the data-bin folders live                           (default: data-bin)
#   DATA_BIN        the binarized data of the recipe     (default: $DATA_ROOT/<dataset folder>)
#   SAVE_ROOT       checkpoints, logs and results                      (default: checkpoints/lightformer)
#   NUM_GPUS        GPUs to train on       (default: the number `nvidia-smi -L` lists, else 1)
#   MAX_TOKENS      tokens per GPU per batch                  (default: the paper's, see below)
#   UPDATE_FREQ     gradient accumulation (default: computed so that NUM_GPUS x MAX_TOKENS x
#                   UPDATE_FREQ equals the paper's effective batch)
#   MAX_UPDATE, LR, WARMUP, DROPOUT, WEIGHT_DECAY, SEED, AVG_N: training schedule overrides
#   FP16=0          train in fp32 on GPUs (default: --fp16; with NUM_GPUS=0 fairseq runs --cpu)
#   EXTRA_TRAIN_ARGS  extra fairseq-train flags (word-split), e.g. "--num-workers 4"
#   MOSES_DIR       a mosesdecoder checkout for detokenization (sacreBLEU); falls back to the
#                   `sacremoses` command
#   MEASURE_SPEED=0 skip scripts/measure_speed.sh

LF_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$LF_DIR/../../.." && pwd)"
PYTHON="${PYTHON:-python}"
DRY_RUN="${DRY_RUN:-0}"
DATA_ROOT="${DATA_ROOT:-data-bin}"
SAVE_ROOT="${SAVE_ROOT:-checkpoints/lightformer}"
SEED="${SEED:-1}"
MEASURE_SPEED="${MEASURE_SPEED:-1}"
TOOLS_DIR="${TOOLS_DIR:-data/tools}"
MOSES_DIR="${MOSES_DIR:-$TOOLS_DIR/mosesdecoder}"
if [[ -z "${NUM_GPUS:-}" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    NUM_GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  fi
  NUM_GPUS="${NUM_GPUS:-0}"
fi

# Row scripts fill these in after sourcing this file (see lightformer_row).
# shellcheck disable=SC2034
MODEL_FLAGS=()

log() { echo "[lightformer] $*" >&2; }
die() { echo "[lightformer] error: $*" >&2; exit 1; }

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

# ---------------------------------------------------------------------------------------------
# Data preparation helpers (prepare-*.sh)
# ---------------------------------------------------------------------------------------------

# fetch URL OUT: download URL to OUT unless OUT exists (a .part file is renamed when complete).
# Google Drive links need gdown (pip install gdown); otherwise download by hand into OUT's folder.
fetch() {
  local url="$1" out="$2"
  if [[ -s "$out" ]]; then
    log "using $out"
    return 0
  fi
  mkdir -p "$(dirname "$out")"
  log "downloading $url -> $out"
  if [[ "$url" == *drive.google.com* ]]; then
    command -v gdown >/dev/null 2>&1 ||
      die "$url is on Google Drive: install gdown (pip install gdown), or download it by hand to $out"
    gdown "$url" -O "$out.part"
  elif command -v curl >/dev/null 2>&1; then
    curl -fL --retry 3 -o "$out.part" "$url"
  else
    wget -O "$out.part" "$url"
  fi
  mv "$out.part" "$out"
}

# ensure_moses: MOSES_DIR holds the Moses tokenizer scripts (cloned if missing).
ensure_moses() {
  if [[ ! -f "$MOSES_DIR/scripts/tokenizer/tokenizer.perl" ]]; then
    log "cloning mosesdecoder (tokenizer scripts) into $MOSES_DIR"
    git clone --depth 1 https://github.com/moses-smt/mosesdecoder.git "$MOSES_DIR"
  fi
}

# ensure_subword_nmt: `python -m subword_nmt.learn_bpe` works (installed, or from a checkout).
ensure_subword_nmt() {
  if "$PYTHON" -c 'import subword_nmt' >/dev/null 2>&1; then
    return 0
  fi
  local dir="${SUBWORD_NMT_DIR:-$TOOLS_DIR/subword-nmt}"
  if [[ ! -d "$dir/subword_nmt" ]]; then
    log "cloning subword-nmt into $dir"
    git clone --depth 1 https://github.com/rsennrich/subword-nmt.git "$dir"
  fi
  dir="$(cd "$dir" && pwd)"
  export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
}

user_dir() {
  if [[ -z "${USER_DIR:-}" ]]; then
    USER_DIR="$("$PYTHON" -m lightcompress --user-dir)"
  fi
  echo "$USER_DIR"
}

# ---------------------------------------------------------------------------------------------
# Datasets: the paper's batch and schedule, and how to decode and score.
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
      LF_ARCH="${LF_ARCH:-lightformer_iwslt_de_en}"
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
      LF_ARCH="${LF_ARCH:-lightformer_wmt_en_de}"
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
      LF_ARCH="${LF_ARCH:-lightformer_wmt_en_ro}"
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
      LF_ARCH="${LF_ARCH:-lightformer_gigaword}"
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

# The optimisation flags shared by every training run of a dataset.
train_flags() {
  TRAIN_FLAGS=(
    --task translation --source-lang "$SRC" --target-lang "$TGT"
    --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 0.0
    --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --dropout "$DROPOUT" --weight-decay "$WEIGHT_DECAY"
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
    --seed "$SEED" --log-format simple --log-interval 100
  )
  if ((NUM_GPUS > 1)); then
    TRAIN_FLAGS+=(--distributed-world-size "$NUM_GPUS")
  fi
  if ((NUM_GPUS == 0)); then
    TRAIN_FLAGS+=(--cpu)
  elif [[ "${FP16:-1}" == 1 ]]; then
    TRAIN_FLAGS+=(--fp16)
  fi
  if [[ "$AVG_MODE" == epoch ]]; then
    TRAIN_FLAGS+=(--keep-last-epochs "$AVG_N")
  else
    TRAIN_FLAGS+=(--save-interval-updates "${SAVE_INTERVAL_UPDATES:-1000}"
      --keep-interval-updates "$AVG_N" --no-epoch-checkpoints)
  fi
  local extra=()
  read -r -a extra <<<"${EXTRA_TRAIN_ARGS:-}"
  TRAIN_FLAGS+=("${extra[@]}")
}

# ---------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------

# train SAVE_DIR [model flags...]: train_flags, then fit.
train() {
  train_flags
  fit "$@"
}

# fit SAVE_DIR [model flags...]: fairseq-train with TRAIN_FLAGS into SAVE_DIR unless it finished
# before. DATA_CHECK names the file of DATA_BIN that must exist (default dict.$SRC.txt). Set
# FINETUNE_FROM to start from converted weights (fairseq's --finetune-from-model: used only
# on the first launch, with fresh optimizer, scheduler, meters and data loader; an interrupted
# run resumes from its own checkpoint_last.pt).
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
  else  # pip-installed fairseq does not ship scripts/average_checkpoints.py
    run "$PYTHON" "$LF_DIR/average_checkpoints.py" --inputs "$save_dir" "$how" "$AVG_N" \
      --output "$save_dir/checkpoint_avg.pt"
  fi
}

# convert TEACHER STUDENT ARCH [converter flags and student model flags...]
# (lightcompress-convert passes the flags it does not know to the student architecture, parsed
# as fairseq-train parses them.)
convert() {
  local teacher="$1" student="$2" arch="$3"
  shift 3
  if [[ "$DRY_RUN" != 1 && -f "$student" ]]; then
    log "$student exists (converted before)"
    return 0
  fi
  [[ "$DRY_RUN" == 1 ]] || mkdir -p "$(dirname "$student")"
  run lightcompress-convert --input "$teacher" --output "$student" --arch "$arch" "$@"
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

# detok LANG < tokenized > detokenized
detok() {
  if [[ -f "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" ]]; then
    perl "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" -q -l "$1"
  elif command -v sacremoses >/dev/null 2>&1; then
    sacremoses -l "$1" -j 1 detokenize
  else
    die "detokenizing needs a mosesdecoder checkout (MOSES_DIR) or the sacremoses command"
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

# speed CHECKPOINT: the speed column (tokens/s on one CPU core, batch 1, the papers' protocol).
# The paper reports it as a ratio to the Transformer 6-6 baseline: when the baseline's averaged
# checkpoint exists (always, in a dry run) both are timed side by side (interleaved runs).
speed() {
  local ckpt="$1" script="$REPO_ROOT/scripts/measure_speed.sh"
  local base paths
  [[ "$MEASURE_SPEED" == 1 ]] || return 0
  if [[ "$DRY_RUN" != 1 && ! -x "$script" ]]; then
    log "scripts/measure_speed.sh not found: skipping the speed column"
    return 0
  fi
  base="$(dense_dir 6 6)/checkpoint_avg.pt"
  paths="model=$ckpt"
  if [[ "$ckpt" != "$base" && ("$DRY_RUN" == 1 || -f "$base") ]]; then
    paths="transformer=$base,$paths"
  fi
  run_log "$(dirname "$ckpt")/speed.txt" "$script" --path "$paths" --data "$DATA_BIN" \
    --user-dir "$(user_dir)" --src-len "$SPEED_SRC_LEN" --beam "$BEAM" --lenpen "$LENPEN"
}

# finish SAVE_DIR: average, evaluate, measure speed.
finish() {
  local save_dir="$1"
  average "$save_dir"
  evaluate "$save_dir" "$save_dir/checkpoint_avg.pt"
  speed "$save_dir/checkpoint_avg.pt"
}

# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------

dense_dir() { echo "$SAVE_ROOT/$DATASET/transformer-$1-$2"; }

# dense_row E D: a dense Transformer with E encoder and D decoder layers (baselines and the
# SVD teachers). The teacher of a converted row is its averaged checkpoint.
dense_row() {
  local e="$1" d="$2" save_dir
  save_dir="$(dense_dir "$e" "$d")"
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/results.txt" ]]; then
    log "$save_dir: done before"
    return 0
  fi
  FINETUNE_FROM="" train "$save_dir" --arch "$DENSE_ARCH" --share-all-embeddings \
    --encoder-layers "$e" --decoder-layers "$d"
  finish "$save_dir"
}

# lightformer_row NAME: a compressed model. Reads
#   ARCH         the registered architecture                         (default: $LF_ARCH)
#   MODEL_FLAGS  array of model flags, given both to the converter and to training
#   RANK         optional: --rank for the converter, --lc-rank for training
#   INIT         svd (convert the teacher, then train) or random (train from scratch)
#   TEACHER_E / TEACHER_D  the dense teacher's depth (trained first if missing)
#   TEACHER      optional: an existing teacher checkpoint to use instead
#   GROUP_INIT   converter --group-init for shared groups: first (default) or mean
lightformer_row() {
  local name="$1" how="${INIT:-svd}"
  local arch="${ARCH:-$LF_ARCH}"
  local save_dir="$SAVE_ROOT/$DATASET/$name-$how"
  local flags=(--arch "$arch" "${MODEL_FLAGS[@]}")
  local conv=()
  if [[ -n "${RANK:-}" ]]; then
    flags+=(--lc-rank "$RANK")
    conv+=(--rank "$RANK")
  fi
  if [[ "$how" == svd ]]; then
    local teacher="${TEACHER:-}"
    if [[ -z "$teacher" ]]; then
      dense_row "$TEACHER_E" "$TEACHER_D"
      teacher="$(dense_dir "$TEACHER_E" "$TEACHER_D")/checkpoint_avg.pt"
    fi
    convert "$teacher" "$save_dir/student_init.pt" "$arch" "${conv[@]}" \
      --group-init "${GROUP_INIT:-first}" "${MODEL_FLAGS[@]}"
    FINETUNE_FROM="$save_dir/student_init.pt" train "$save_dir" "${flags[@]}"
  elif [[ "$how" == random ]]; then
    FINETUNE_FROM="" train "$save_dir" "${flags[@]}"
  else
    die "INIT must be svd or random, not '$how'"
  fi
  finish "$save_dir"
}
