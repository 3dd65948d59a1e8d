# shellcheck shell=bash
# The LightFormer recipes (sourced by every script in this folder and in
# examples/summarization/lightformer/): the shared library ../../common/lib.sh (DRY_RUN, the
# datasets, fit, average, evaluate, check_tools; its header lists the environment) plus the
# LightFormer schedule and rows, in lf_* functions. Defines functions and defaults only; running
# it does nothing.
#
# Environment (all optional), besides those of ../../common/lib.sh (DRY_RUN, PYTHON, USER_DIR,
# DATA_ROOT, DATA_BIN, NUM_GPUS (default: the GPUs `nvidia-smi -L` lists, else 0 = CPU),
# MAX_TOKENS, UPDATE_FREQ, MAX_UPDATE, LR, WARMUP, DROPOUT, WEIGHT_DECAY, SEED, AVG_N, FP16,
# EXTRA_TRAIN_ARGS, MOSES_DIR, MEASURE_SPEED):
#   SAVE_ROOT       checkpoints, logs and results              (default: checkpoints/lightformer)
#   LF_ARCH         the LightFormer architecture      (default: the dataset's, see lf_arch)
#   INIT, TEACHER, GROUP_INIT, ARCH: per row, see lf_row

# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/lib.sh"
LOG_TAG=lightformer
SAVE_ROOT="${SAVE_ROOT:-checkpoints/lightformer}"

# Row scripts fill these in after sourcing this file (see lf_row).
# shellcheck disable=SC2034
MODEL_FLAGS=()

# lf_arch: the LightFormer architecture of the dataset (LF_ARCH overrides it).
lf_arch() {
  if [[ -n "${LF_ARCH:-}" ]]; then
    echo "$LF_ARCH"
    return 0
  fi
  case "$DATASET" in
    iwslt14) echo lightformer_iwslt_de_en ;;
    wmt14ende) echo lightformer_wmt_en_de ;;
    wmt16enro) echo lightformer_wmt_en_ro ;;
    gigaword) echo lightformer_gigaword ;;
    *) die "no LightFormer architecture for dataset '$DATASET'" ;;
  esac
}

# lf_train_flags: the optimisation flags shared by every training run of a dataset.
lf_train_flags() {
  TRAIN_FLAGS=(
    --task translation --source-lang "$SRC" --target-lang "$TGT"
    --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 0.0
    --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --dropout "$DROPOUT" --weight-decay "$WEIGHT_DECAY"
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
    --seed "$SEED" --log-format simple --log-interval 100
  )
  device_flags
  if [[ "$AVG_MODE" == epoch ]]; then
    TRAIN_FLAGS+=(--keep-last-epochs "$AVG_N")
  else
    TRAIN_FLAGS+=(--save-interval-updates "${SAVE_INTERVAL_UPDATES:-1000}"
      --keep-interval-updates "$AVG_N" --no-epoch-checkpoints)
  fi
  extra_train_flags
}

# lf_train SAVE_DIR [model flags...]: lf_train_flags, then fit.
lf_train() {
  lf_train_flags
  fit "$@"
}

# lf_convert TEACHER STUDENT ARCH [converter flags and student model flags...]
# (lightcompress-convert passes the flags it does not know to the student architecture, parsed
# as fairseq-train parses them.)
lf_convert() {
  local teacher="$1" student="$2" arch="$3"
  shift 3
  if [[ "$DRY_RUN" != 1 && -f "$student" ]]; then
    log "$student exists (converted before)"
    return 0
  fi
  [[ "$DRY_RUN" == 1 ]] || mkdir -p "$(dirname "$student")"
  run lightcompress-convert --input "$teacher" --output "$student" --arch "$arch" "$@"
}

# lf_finish SAVE_DIR: average, evaluate, measure speed (next to the dataset's Transformer 6-6).
lf_finish() {
  local save_dir="$1"
  average "$save_dir"
  evaluate "$save_dir" "$save_dir/checkpoint_avg.pt"
  speed_column "$save_dir/checkpoint_avg.pt" "$(dense_dir 6 6)/checkpoint_avg.pt"
}

# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------

# lf_dense_row E D: a dense Transformer with E encoder and D decoder layers (baselines and the
# SVD teachers). The teacher of a converted row is its averaged checkpoint.
lf_dense_row() {
  local e="$1" d="$2" save_dir
  check_tools
  save_dir="$(dense_dir "$e" "$d")"
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/results.txt" ]]; then
    log "$save_dir: done before"
    return 0
  fi
  FINETUNE_FROM="" lf_train "$save_dir" --arch "$DENSE_ARCH" --share-all-embeddings \
    --encoder-layers "$e" --decoder-layers "$d"
  lf_finish "$save_dir"
}

# lf_row NAME: a compressed model. Reads
#   ARCH         the registered architecture                       (default: lf_arch's)
#   MODEL_FLAGS  array of model flags, given both to the converter and to training
#   RANK         optional: --rank for the converter, --lc-rank for training
#   INIT         svd (convert the teacher, then train) or random (train from scratch)
#   TEACHER_E / TEACHER_D  the dense teacher's depth (trained first if missing)
#   TEACHER      optional: an existing teacher checkpoint to use instead
#   GROUP_INIT   converter --group-init for shared groups: first (default) or mean
lf_row() {
  local name="$1" how="${INIT:-svd}" arch
  arch="${ARCH:-$(lf_arch)}"
  local save_dir="$SAVE_ROOT/$DATASET/$name-$how"
  local flags=(--arch "$arch" "${MODEL_FLAGS[@]}")
  local conv=()
  if [[ "$how" == svd ]]; then
    check_tools lightcompress-convert
  else
    check_tools
  fi
  if [[ -n "${RANK:-}" ]]; then
    flags+=(--lc-rank "$RANK")
    conv+=(--rank "$RANK")
  fi
  if [[ "$how" == svd ]]; then
    local teacher="${TEACHER:-}"
    if [[ -z "$teacher" ]]; then
      lf_dense_row "$TEACHER_E" "$TEACHER_D"
      teacher="$(dense_dir "$TEACHER_E" "$TEACHER_D")/checkpoint_avg.pt"
    fi
    lf_convert "$teacher" "$save_dir/student_init.pt" "$arch" "${conv[@]}" \
      --group-init "${GROUP_INIT:-first}" "${MODEL_FLAGS[@]}"
    FINETUNE_FROM="$save_dir/student_init.pt" lf_train "$save_dir" "${flags[@]}"
  elif [[ "$how" == random ]]; then
    FINETUNE_FROM="" lf_train "$save_dir" "${flags[@]}"
  else
    die "INIT must be svd or random, not '$how'"
  fi
  lf_finish "$save_dir"
}
