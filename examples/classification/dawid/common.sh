# shellcheck shell=bash
# The DA-WID GLUE recipes (prepare-glue.sh and one script per task): the shared library
# ../../common/lib.sh (DRY_RUN, fetch, fit, check_tools; its header lists the environment) plus
# the GLUE steps, in dawid_glue_* functions. Defines functions and defaults only.
#
# Environment (all optional), besides those of ../../common/lib.sh:
#   GLUE_RAW        downloaded GLUE tasks and the GPT-2 BPE files       (default: data/raw/glue)
#   DATA_ROOT       binarized tasks go to DATA_ROOT/glue/TASK-bin                (default: data-bin)
#   ROBERTA_DIR     fairseq's roberta.base (downloaded once)  (default: data/raw/glue/roberta.base)
#   SAVE_ROOT       checkpoints, logs and results                 (default: checkpoints/dawid-glue)
#   TEACHER         a fine-tuned RoBERTa checkpoint of the task (default: fine-tuned first)
#   TARGET_SPARSITY 1 - student / teacher encoder-layer parameters (default 0.94: ~5M of 85M,
#                   Table 1; Table 2's DA-WID-10M: 0.88 with DAWID_MASKS=dim)
#   DAWID_MASKS, DAWID_INIT, CALIB_TOKENS, DAWID_LAMBDA: as in examples/translation/dawid/
#   EPOCHS          DA-WID epochs (default 20, App. C.1); dimension masks from the 2nd epoch,
#                   head and layer masks from the 8th (App. C.1); the target warms up over
#                   WARMUP_EPOCHS (default 5, ours)

# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/lib.sh"
LOG_TAG=dawid-glue
SAVE_ROOT="${SAVE_ROOT:-checkpoints/dawid-glue}"
GLUE_RAW="${GLUE_RAW:-data/raw/glue}"
ROBERTA_DIR="${ROBERTA_DIR:-$GLUE_RAW/roberta.base}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# dawid_glue_task TASK: the task's columns (fairseq's preprocess_GLUE_tasks.sh), classes,
# metric and fine-tuning schedule (fairseq's RoBERTa GLUE README: lr, batch, updates, warmup).
dawid_glue_task() {
  TASK="$1"
  : "${DATA_BIN:=$DATA_ROOT/glue/$TASK-bin}"
  DATA_CHECK=input0/dict.txt
  REGRESSION=0 NUM_CLASSES=2
  case "$TASK" in
    SST-2) INPUT_COLUMNS=(1) LABEL_COLUMN=2 TASK_LR=1e-5 TASK_BSZ=32 TASK_UPDATES=20935 TASK_WARMUP=1256 N_TRAIN=67349 ;;
    RTE) INPUT_COLUMNS=(2 3) LABEL_COLUMN=4 TASK_LR=2e-5 TASK_BSZ=16 TASK_UPDATES=2036 TASK_WARMUP=122 N_TRAIN=2490 ;;
    MRPC) INPUT_COLUMNS=(4 5) LABEL_COLUMN=1 TASK_LR=1e-5 TASK_BSZ=16 TASK_UPDATES=2296 TASK_WARMUP=137 N_TRAIN=3668 ;;
    STS-B)
      INPUT_COLUMNS=(8 9) LABEL_COLUMN=10 TASK_LR=2e-5 TASK_BSZ=16 TASK_UPDATES=3598 TASK_WARMUP=214 N_TRAIN=5749
      REGRESSION=1 NUM_CLASSES=1
      ;;
    *) die "unknown GLUE task '$TASK' (SST-2, RTE, MRPC, STS-B)" ;;
  esac
  TASK_FLAGS=(--task sentence_prediction --num-classes "$NUM_CLASSES" --init-token 0
    --separator-token 2 --max-positions 512 --required-batch-size-multiple 1)
  if [[ "$REGRESSION" == 1 ]]; then TASK_FLAGS+=(--regression-target); fi
}

# dawid_glue_prepare TASK: download the task (and GPT-2's BPE files), extract the columns,
# BPE-encode, binarize with RoBERTa's dictionary (fairseq's preprocess_GLUE_tasks.sh steps).
dawid_glue_prepare() {
  dawid_glue_task "$1"
  local raw="$GLUE_RAW/$TASK" proc="$GLUE_RAW/$TASK/processed" f split
  require tar fairseq-preprocess
  need_python
  report_missing
  for f in encoder.json vocab.bpe dict.txt; do
    fetch "https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/$f" "$GLUE_RAW/gpt2_bpe/$f"
  done
  if [[ "$TASK" == MRPC ]]; then
    fetch https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt "$raw/msr_paraphrase_train.txt"
    fetch https://dl.fbaipublicfiles.com/glue/data/mrpc_dev_ids.tsv "$raw/dev_ids.tsv"
    run "$PYTHON" "$HERE/format_mrpc.py" --train "$raw/msr_paraphrase_train.txt" \
      --dev-ids "$raw/dev_ids.tsv" --out-dir "$raw"
  else
    fetch "https://dl.fbaipublicfiles.com/glue/data/$TASK.zip" "$GLUE_RAW/$TASK.zip"
    run "$PYTHON" -m zipfile -e "$GLUE_RAW/$TASK.zip" "$GLUE_RAW"
  fi
  [[ "$DRY_RUN" == 1 ]] || mkdir -p "$proc"
  for split in train dev; do
    local i=0 col
    for col in "${INPUT_COLUMNS[@]}"; do
      run_pipe "$proc/$split.raw.input$i" tail -n +2 "$raw/$split.tsv" '|' cut -f"$col"
      run "$PYTHON" "$HERE/gpt2_bpe_encode.py" --encoder-json "$GLUE_RAW/gpt2_bpe/encoder.json" \
        --vocab-bpe "$GLUE_RAW/gpt2_bpe/vocab.bpe" --input "$proc/$split.raw.input$i" \
        --output "$proc/$split.input$i"
      i=$((i + 1))
    done
    run_pipe "$proc/$split.label" tail -n +2 "$raw/$split.tsv" '|' cut -f"$LABEL_COLUMN"
  done
  local i
  for ((i = 0; i < ${#INPUT_COLUMNS[@]}; i++)); do
    run fairseq-preprocess --only-source --trainpref "$proc/train.input$i" \
      --validpref "$proc/dev.input$i" --destdir "$DATA_BIN/input$i" --workers 4 \
      --srcdict "$GLUE_RAW/gpt2_bpe/dict.txt"
  done
  if [[ "$REGRESSION" == 1 ]]; then
    # STS-B: scores scaled to [0, 1], as fairseq's preprocessing does
    [[ "$DRY_RUN" == 1 ]] || mkdir -p "$DATA_BIN/label"
    # shellcheck disable=SC2016  # awk's $1
    run_pipe "$DATA_BIN/label/train.label" awk '{print $1 / 5.0}' "$proc/train.label"
    # shellcheck disable=SC2016  # awk's $1
    run_pipe "$DATA_BIN/label/valid.label" awk '{print $1 / 5.0}' "$proc/dev.label"
  else
    run fairseq-preprocess --only-source --trainpref "$proc/train.label" \
      --validpref "$proc/dev.label" --destdir "$DATA_BIN/label" --workers 4
  fi
}

# dawid_glue_roberta: fairseq's roberta.base (downloaded and unpacked once).
dawid_glue_roberta() {
  if [[ "$DRY_RUN" != 1 && -f "$ROBERTA_DIR/model.pt" ]]; then return 0; fi
  fetch https://dl.fbaipublicfiles.com/fairseq/models/roberta.base.tar.gz "$GLUE_RAW/roberta.base.tar.gz"
  run tar -xzf "$GLUE_RAW/roberta.base.tar.gz" -C "$(dirname "$ROBERTA_DIR")"
}

# dawid_glue_flags: TRAIN_FLAGS shared by fine-tuning and DA-WID (no dropout flags: the DA-WID
# student keeps its teacher's, and fairseq-train refuses them for --arch dawid_roberta).
dawid_glue_flags() {
  TRAIN_FLAGS=("${TASK_FLAGS[@]}" --batch-size "$TASK_BSZ" --max-tokens 4400 --weight-decay 0.1
    --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-06 --clip-norm 0.0
    --seed "$SEED" --log-format simple --log-interval 50 --no-epoch-checkpoints)
  if [[ "$REGRESSION" == 1 ]]; then
    TRAIN_FLAGS+=(--best-checkpoint-metric loss)
  else
    TRAIN_FLAGS+=(--best-checkpoint-metric accuracy --maximize-best-checkpoint-metric)
  fi
  device_flags
  extra_train_flags
}

# dawid_glue_evaluate SAVE_DIR CHECKPOINT: fairseq-validate on the dev set (accuracy; Pearson
# and Spearman for STS-B: fairseq-validate uses the criterion settings the checkpoint holds, which
# the teacher's training and lightcompress-convert dawid-fuse set) into SAVE_DIR/results.txt.
dawid_glue_evaluate() {
  run_log "$1/results.txt" fairseq-validate "$DATA_BIN" --user-dir "$(user_dir)" --path "$2" \
    "${TASK_FLAGS[@]}" --criterion sentence_prediction --valid-subset valid --batch-size 32
}

# dawid_glue_teacher: fine-tune roberta.base on the task (fairseq's GLUE recipe; an interrupted
# run resumes from its own checkpoint), unless TEACHER is given. Sets TEACHER_CKPT.
dawid_glue_teacher() {
  if [[ -n "${TEACHER:-}" ]]; then
    TEACHER_CKPT="$TEACHER"
    return 0
  fi
  local save_dir="$SAVE_ROOT/$TASK/roberta-base"
  TEACHER_CKPT="$save_dir/checkpoint_best.pt"
  dawid_glue_roberta
  dawid_glue_flags
  TRAIN_FLAGS+=(--lr-scheduler polynomial_decay --lr "$TASK_LR" --total-num-update "$TASK_UPDATES"
    --warmup-updates "$TASK_WARMUP" --max-epoch 10 --dropout 0.1 --attention-dropout 0.1)
  local report=()
  # fairseq-validate builds the criterion a checkpoint names: STS-B's must report correlations
  if [[ "$REGRESSION" == 1 ]]; then report=(--report-pearson-and-spearman); fi
  FINETUNE_FROM="$ROBERTA_DIR/model.pt" fit "$save_dir" --arch roberta_base \
    --criterion sentence_prediction "${report[@]}"
  if [[ "$DRY_RUN" == 1 || ! -f "$save_dir/results.txt" ]]; then
    dawid_glue_evaluate "$save_dir" "$TEACHER_CKPT"
  fi
}

# dawid_glue_row TASK: fine-tuned teacher -> DA-WID (App. C.1's schedule in epochs) -> fusion ->
# dev-set score of the fused model.
dawid_glue_row() {
  dawid_glue_task "$1"
  check_tools fairseq-validate lightcompress-convert
  local masks="${DAWID_MASKS:-dim,head,layer}" epochs="${EPOCHS:-20}"
  dawid_glue_teacher
  local upe=$(((N_TRAIN + TASK_BSZ - 1) / TASK_BSZ)) # updates per epoch
  local save_dir="$SAVE_ROOT/$TASK/dawid-${DAWID_INIT:-data-aware}-t${TARGET_SPARSITY:-0.94}-${masks//,/+}"
  local gate_scale
  gate_scale="$(awk -v lr="$TASK_LR" 'BEGIN { printf "%g", 0.01 / lr }')" # the masks at 0.01 (CoFi)
  dawid_glue_flags
  TRAIN_FLAGS+=(--lr-scheduler fixed --lr "$TASK_LR" --max-epoch "$epochs")
  # masks of a level not yet switched on get no gradient: DDP must allow unused parameters
  if ((NUM_GPUS > 1)); then TRAIN_FLAGS+=(--find-unused-parameters); fi
  FINETUNE_FROM="" fit "$save_dir" --arch dawid_roberta --criterion dawid \
    --dawid-teacher "$TEACHER_CKPT" --dawid-init "${DAWID_INIT:-data-aware}" \
    --dawid-calib-tokens "${CALIB_TOKENS:-4096}" --dawid-target-sparsity "${TARGET_SPARSITY:-0.94}" \
    --dawid-masks "$masks" --dawid-distill-updates "$upe" \
    --dawid-structure-updates $((6 * upe)) --dawid-sparsity-warmup $((${WARMUP_EPOCHS:-5} * upe)) \
    --dawid-gate-lr-scale "$gate_scale" --dawid-lambda "${DAWID_LAMBDA:-0.5}"
  if [[ "$DRY_RUN" == 1 || ! -f "$save_dir/fused.pt" ]]; then
    run_log "$save_dir/fuse.log" lightcompress-convert dawid-fuse \
      -i "$save_dir/checkpoint_last.pt" -o "$save_dir/fused.pt"
  fi
  dawid_glue_evaluate "$save_dir" "$save_dir/fused.pt"
}
