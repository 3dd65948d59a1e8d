# shellcheck shell=bash
# The Hypoformer recipes (sourced by every script in this folder). Builds on the shared library
# ../../common/lib.sh (DRY_RUN, run/run_log, UPDATE_FREQ from the paper's batch, the datasets,
# fit, average, evaluate, check_tools) and adds, in hypo_* functions, what Hypoformer does
# differently: the Table 6 / Table 7 schedule with Admin, the sequence-level KD pipeline (12-2
# teacher -> distilled train set -> student on ground truth + SKD data), the checkpoint
# selection of Appendix A.3 and the speed protocol of A.4. Defines functions and defaults only;
# running it does nothing.
#
# Environment (all optional; those of ../../common/lib.sh apply too: DRY_RUN, PYTHON, USER_DIR,
# DATA_ROOT, DATA_BIN, NUM_GPUS, MAX_TOKENS, UPDATE_FREQ, FP16, SEED, EXTRA_TRAIN_ARGS,
# MOSES_DIR, MEASURE_SPEED):
#   SAVE_ROOT       checkpoints, logs and results              (default: checkpoints/hypoformer)
#   TEACHER         an existing 12-2 teacher checkpoint (skips training the teacher)
#   KD_BIN          the distilled train set  (default: $DATA_BIN.hypoformer-skd-12-2; made from
#                   the teacher by scripts/distill_data.sh unless it exists)
#   DISTILL_MAX_TOKENS, NUM_SHARDS   distillation batching / resumable shards (default 8192 / 0)
#   LR, WARMUP, MAX_UPDATE, WEIGHT_DECAY, AVG_N   schedule overrides (default: Tables 6 and 7)
#   DROPOUT, LABEL_SMOOTHING         the student's (default: the row's, see hypo_dataset)
#   TEACHER_DROPOUT, TEACHER_LABEL_SMOOTHING  the teacher's
#   ATTENTION_DROPOUT, ACTIVATION_DROPOUT     (default 0.1 / 0.1, Admin's recipes)
#   OPTIMIZER       (default adam; Tables 6/7 use RAdam, which fairseq does not have: any
#                   optimizer registered under another name that reads --adam-betas works)
#
# Choices where the paper is silent (it says it follows Liu et al. 2020, whose Admin recipes
# in LiyuanLucasLiu/Transformer-Clinic give the rest): weight decay 1e-4 (IWSLT) / 0 (WMT),
# attention and ReLU dropout 0.1, --clip-norm 0, warmup from 1e-7; the teacher decodes the
# training set with the test-time beam and length penalty; WMT checkpoints are saved every
# 1000 updates and the last 10 averaged (60k updates on ground truth + SKD data are only a few
# epochs, so "the last 10 checkpoints" cannot be epoch checkpoints); per-row dropout and label
# smoothing (the tables give sets of values) are set by each row script and documented there.

# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/lib.sh"
LOG_TAG=hypoformer
SAVE_ROOT="${SAVE_ROOT:-checkpoints/hypoformer}"

OPTIMIZER="${OPTIMIZER:-adam}"
ATTENTION_DROPOUT="${ATTENTION_DROPOUT:-0.1}"
ACTIVATION_DROPOUT="${ACTIVATION_DROPOUT:-0.1}"
DISTILL_MAX_TOKENS="${DISTILL_MAX_TOKENS:-8192}"
NUM_SHARDS="${NUM_SHARDS:-0}"

# The dense 12-2 Transformer with Admin ("Transformer 12-2 (Our impl.)", the KD teacher) is the
# plugin's hypoformer model with every part dense and the attention output projections kept:
# fairseq's Transformer plus one omega vector per residual (36.8M / 65.3M / 64.1M parameters).
HYPO_DENSE=(--hypo-embed dense --hypo-self-attn dense --hypo-attn-out-proj --hypo-ffn dense
  --hypo-cross-attn dense)

# hypo_dataset DATASET: the Table 6 (IWSLT'14 De-En) or Table 7 (WMT'14 En-De, WMT'16 En-Ro)
# settings, then ../../common/lib.sh's use_dataset (data, languages, BLEU flavour, speed
# source length). Row scripts set ROW_DROPOUT / ROW_LABEL_SMOOTHING first.
hypo_dataset() {
  local ds="$1" user_update_freq="${UPDATE_FREQ:-}"
  case "$ds" in
    iwslt14)
      # Table 6: lr 7e-4, warmup 6000, 20k updates, dropout from {0.05, 0.1, 0.2}, 4 heads,
      # d_ff 1024; the lowest-perplexity checkpoint is tested (A.3), beam 5, lenpen 1.0.
      : "${LR:=7e-4}" "${WARMUP:=6000}" "${MAX_UPDATE:=20000}" "${WEIGHT_DECAY:=1e-4}"
      : "${DROPOUT:=${ROW_DROPOUT:-0.1}}" "${LABEL_SMOOTHING:=${ROW_LABEL_SMOOTHING:-0.1}}"
      : "${TEACHER_DROPOUT:=0.2}" "${TEACHER_LABEL_SMOOTHING:=0.1}"
      SELECT=best
      WIDTH_FLAGS=(--encoder-embed-dim 512 --decoder-embed-dim 512
        --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024
        --encoder-attention-heads 4 --decoder-attention-heads 4)
      ;;
    wmt14ende | wmt16enro)
      # Table 7: lr 1e-3, warmup 8000, 60k updates, dropout from {0, 0.05, 0.1}, label
      # smoothing from {0.05, 0.1}, 8 heads; the last 10 checkpoints averaged (A.3).
      : "${LR:=1e-3}" "${WARMUP:=8000}" "${MAX_UPDATE:=60000}" "${WEIGHT_DECAY:=0.0}"
      : "${DROPOUT:=${ROW_DROPOUT:-0.1}}" "${LABEL_SMOOTHING:=${ROW_LABEL_SMOOTHING:-0.1}}"
      : "${TEACHER_DROPOUT:=0.1}" "${TEACHER_LABEL_SMOOTHING:=0.1}"
      : "${AVG_N:=10}"
      SELECT=average
      WIDTH_FLAGS=(--encoder-embed-dim 512 --decoder-embed-dim 512
        --encoder-ffn-embed-dim 2048 --decoder-ffn-embed-dim 2048
        --encoder-attention-heads 8 --decoder-attention-heads 8)
      ;;
    *) die "unknown dataset '$ds' (iwslt14, wmt14ende or wmt16enro)" ;;
  esac
  use_dataset "$ds"
  # 4096 tokens per GPU on 1 GPU (De-En, Table 6), 8 GPUs (En-De, Table 7) and 4 GPUs (En-Ro,
  # A.3); beam 4 and length penalty 0.6 on En-De and En-Ro (A.3).
  if [[ "$ds" == wmt16enro ]]; then
    PAPER_GPUS=4
    UPDATE_FREQ="$user_update_freq"
    set_update_freq
  fi
  if [[ "$ds" != iwslt14 ]]; then
    BEAM=4 LENPEN=0.6
  fi
  : "${KD_BIN:=$DATA_BIN.hypoformer-skd-12-2}"
}

# hypo_train_flags: the optimisation flags of every training run. Per run: RUN_DROPOUT,
# RUN_LABEL_SMOOTHING, RUN_KD (1 = ground truth + SKD data through --task translation_seqkd
# --kd-data-mode both).
hypo_train_flags() {
  TRAIN_FLAGS=()
  if [[ "${RUN_KD:-0}" == 1 ]]; then
    TRAIN_FLAGS+=(--task translation_seqkd --kd-data-mode both --kd-distilled-data "$KD_BIN")
  else
    TRAIN_FLAGS+=(--task translation)
  fi
  TRAIN_FLAGS+=(
    --source-lang "$SRC" --target-lang "$TGT"
    --optimizer "$OPTIMIZER" --adam-betas '(0.9, 0.98)' --clip-norm 0.0
    --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --dropout "${RUN_DROPOUT:-$DROPOUT}" --attention-dropout "$ATTENTION_DROPOUT"
    --activation-dropout "$ACTIVATION_DROPOUT" --weight-decay "$WEIGHT_DECAY"
    --criterion label_smoothed_cross_entropy
    --label-smoothing "${RUN_LABEL_SMOOTHING:-$LABEL_SMOOTHING}"
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
    --seed "$SEED" --log-format simple --log-interval 100
  )
  # Tables 6/7: fp16, scale window 256, threshold loss scale 0.03125 (+ tolerance 0.25, WMT)
  FP16_FLAGS=(--fp16-scale-window 256 --threshold-loss-scale 0.03125)
  if [[ "$DATASET" != iwslt14 ]]; then
    FP16_FLAGS+=(--fp16-scale-tolerance 0.25)
  fi
  device_flags
  if [[ "$SELECT" == best ]]; then
    # "the lowest perplexity checkpoint" (A.3): checkpoint_best.pt by validation perplexity
    TRAIN_FLAGS+=(--best-checkpoint-metric ppl --no-epoch-checkpoints)
  else
    TRAIN_FLAGS+=(--save-interval-updates "${SAVE_INTERVAL_UPDATES:-1000}"
      --keep-interval-updates "$AVG_N" --no-epoch-checkpoints)
  fi
  extra_train_flags
}

# hypo_eval_ckpt SAVE_DIR: the checkpoint that is tested (A.3).
hypo_eval_ckpt() {
  if [[ "$SELECT" == best ]]; then
    echo "$1/checkpoint_best.pt"
  else
    echo "$1/checkpoint_avg.pt"
  fi
}

# hypo_uses_admin_profile FLAGS...: true for a hypoformer architecture with profiled Admin.
hypo_uses_admin_profile() {
  local a prev=""
  local hypo=0
  for a in "$@"; do
    if [[ "$prev" == --arch && "$a" == hypoformer* ]]; then hypo=1; fi
    if [[ "$prev" == --admin-init && "$a" != profile ]]; then return 1; fi
    prev="$a"
  done
  ((hypo == 1))
}

# hypo_train SAVE_DIR FLAGS...: hypo_train_flags, then fit, with Admin's profile in
# SAVE_DIR/admin_profile.json.
# Admin profiles one training batch. With several GPUs every rank would profile its own batch
# and start from different omegas, so (as Admin's own recipes do) the profile is first taken on
# one GPU by a one-update run that saves nothing; the real run reads it.
hypo_train() {
  local save_dir="$1"
  shift
  local flags=("$@")
  if hypo_uses_admin_profile "$@"; then
    local profile="$save_dir/admin_profile.json"
    flags+=(--admin-profile-file "$profile")
    if ((NUM_GPUS > 1)) && [[ "$DRY_RUN" == 1 || ! -f "$profile" ]]; then
      local gpus="$NUM_GPUS"
      NUM_GPUS=1
      hypo_train_flags
      NUM_GPUS="$gpus"
      run_log "$save_dir/admin_profile.log" fairseq-train "$DATA_BIN" --user-dir "$(user_dir)" \
        "${flags[@]}" "${TRAIN_FLAGS[@]}" --distributed-world-size 1 --max-update 1 --no-save \
        --disable-validation --save-dir "$save_dir/admin-profiling"
    fi
  fi
  hypo_train_flags
  FINETUNE_FROM="" fit "$save_dir" "${flags[@]}"
}

# hypo_speed CHECKPOINT: tokens/s on one CPU core, batch 1, 50 sentences of the average length
# (23 IWSLT, 30 WMT), the test beam, 10 runs with the fastest and slowest 10 % dropped (A.4),
# side by side with the Transformer 6-6 of the dataset (the speedup baseline of Tables 3 and 4)
# when its tested checkpoint exists (always, in a dry run).
hypo_speed() {
  local ckpt="$1"
  speed_column "$ckpt" "$(hypo_eval_ckpt "$(dense_dir 6 6)")" \
    --num-sentences 50 --runs 10 --trim 0.1 --threads 1 --json "$(dirname "$ckpt")/speed.json"
}

# hypo_finish SAVE_DIR: select the checkpoint (A.3), test it (tokenized BLEU, compound-split
# BLEU on En-De, sacreBLEU: ../../common/lib.sh's evaluate), measure its speed.
hypo_finish() {
  local save_dir="$1"
  if [[ "$SELECT" == average ]]; then
    average "$save_dir"
  fi
  evaluate "$save_dir" "$(hypo_eval_ckpt "$save_dir")"
  hypo_speed "$(hypo_eval_ckpt "$save_dir")"
}

# hypo_model_row NAME KD DROPOUT LABEL_SMOOTHING FLAGS...: train SAVE_ROOT/DATASET/NAME on the
# ground truth (KD=0) or ground truth + SKD data (KD=1), then test it.
hypo_model_row() {
  local name="$1" kd="$2" dropout="$3" ls="$4"
  shift 4
  local save_dir="$SAVE_ROOT/$DATASET/$name"
  check_tools fairseq-generate
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/results.txt" ]]; then
    log "$save_dir: done before"
    return 0
  fi
  RUN_KD="$kd" RUN_DROPOUT="$dropout" RUN_LABEL_SMOOTHING="$ls" hypo_train "$save_dir" "$@"
  hypo_finish "$save_dir"
}

# hypo_transformer_row E D: fairseq's Transformer (no Admin, no KD): the "Transformer" rows of
# Tables 2, 3 and 4 (row 1) and the speedup baseline (E-D 6-6).
hypo_transformer_row() {
  hypo_model_row "transformer-$1-$2" 0 "$TEACHER_DROPOUT" "$TEACHER_LABEL_SMOOTHING" \
    --arch "$DENSE_ARCH" --share-all-embeddings "${WIDTH_FLAGS[@]}" \
    --encoder-layers "$1" --decoder-layers "$2"
}

# hypo_admin_transformer_row E D: the dense Transformer with Admin, trained on the ground truth.
# 12-2 is the KD teacher (Sec. 5.2) and "Transformer 12-2 (Our impl.)" of Tables 2 and 8.
hypo_admin_transformer_row() {
  hypo_model_row "transformer-admin-$1-$2" 0 "$TEACHER_DROPOUT" "$TEACHER_LABEL_SMOOTHING" \
    --arch hypoformer "${HYPO_DENSE[@]}" "${WIDTH_FLAGS[@]}" \
    --encoder-layers "$1" --decoder-layers "$2"
}

# hypo_teacher: TEACHER_CKPT = the 12-2 teacher (trained and tested first unless TEACHER is given).
hypo_teacher() {
  if [[ -n "${TEACHER:-}" ]]; then
    TEACHER_CKPT="$TEACHER"
  else
    hypo_admin_transformer_row 12 2
    TEACHER_CKPT="$(hypo_eval_ckpt "$SAVE_ROOT/$DATASET/transformer-admin-12-2")"
  fi
}

# hypo_skd_data: the teacher's beam-search translation of the training set, binarized with the
# teacher's dictionaries into KD_BIN (scripts/distill_data.sh; resumable, skipped when done).
hypo_skd_data() {
  if [[ "$DRY_RUN" != 1 && -f "$KD_BIN/train.$SRC-$TGT.$TGT.idx" ]]; then
    log "$KD_BIN: distilled before"
    return 0
  fi
  local device=()
  if ((NUM_GPUS == 0)); then
    device=(--cpu)
  elif [[ "${FP16:-1}" == 1 ]]; then
    device=(--fp16)
  fi
  run_log "$SAVE_ROOT/$DATASET/distill.log" "$REPO_ROOT/scripts/distill_data.sh" "$DATA_BIN" \
    --path "$TEACHER_CKPT" --out-dir "$KD_BIN" --user-dir "$(user_dir)" \
    -s "$SRC" -t "$TGT" --beam "$BEAM" --lenpen "$LENPEN" \
    --max-tokens "$DISTILL_MAX_TOKENS" --num-shards "$NUM_SHARDS" "${device[@]}"
}

# hypo_student_row NAME FLAGS...: the sequence-level KD pipeline of Sec. 5.2: the 12-2 teacher,
# its SKD data, then the student (FLAGS: --arch and model flags) on ground truth + SKD data,
# tested.
hypo_student_row() {
  local name="$1"
  shift
  need_file "$REPO_ROOT/scripts/distill_data.sh" "the distillation script"
  check_tools fairseq-generate
  hypo_teacher
  hypo_skd_data
  hypo_model_row "$name" 1 "$DROPOUT" "$LABEL_SMOOTHING" "$@"
}
