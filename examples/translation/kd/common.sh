# shellcheck shell=bash
# The knowledge-distillation recipe (run_iwslt14_kd.sh): the shared library ../../common/lib.sh
# (DRY_RUN, fit, check_tools; its header lists the environment it reads) plus Hypoformer's
# sequence-level KD procedure with plain fairseq architectures, in kd_* functions. Defines
# functions and defaults only; running it does nothing. The environment is listed in
# run_iwslt14_kd.sh.

# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/lib.sh"
LOG_TAG=kd
SAVE_ROOT="${SAVE_ROOT:-checkpoints/iwslt14-kd}"

# kd_iwslt14: IWSLT'14 De-En with Table 6's settings (and the environment's overrides).
kd_iwslt14() {
  DATASET=iwslt14
  SRC=de TGT=en
  : "${DATA_BIN:=$DATA_ROOT/iwslt14.tokenized.de-en}"
  : "${KD_BIN:=$DATA_BIN.kd-12-2}"
  : "${ARCH:=transformer_iwslt_de_en}"
  : "${TEACHER_ARGS:=--encoder-layers 12 --decoder-layers 2}"
  : "${DISTILL_GENERATE_ARGS:=}"
  : "${STUDENT_ARGS:=--encoder-layers 12 --decoder-layers 2}"
  : "${TEACHER_UPDATES:=20000}" "${STUDENT_UPDATES:=20000}"
  : "${MAX_TOKENS:=4096}" "${DROPOUT:=0.1}" "${BEAM:=5}" "${LENPEN:=1.0}"
  : "${DISTILL_MAX_TOKENS:=8192}" "${NUM_SHARDS:=8}"
  DEVICE_ARGS=()
  if [[ "${CPU:-0}" == 1 ]]; then DEVICE_ARGS+=(--cpu); fi
  if [[ "${FP16:-0}" == 1 ]]; then DEVICE_ARGS+=(--fp16); fi
}

# kd_train_flags UPDATES: Table 6's training settings, shared by teacher and student.
kd_train_flags() {
  TRAIN_FLAGS=(
    "${DEVICE_ARGS[@]}"
    --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0
    --lr 7e-4 --lr-scheduler inverse_sqrt --warmup-updates 6000 --warmup-init-lr 1e-7
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --dropout "$DROPOUT" --max-tokens "$MAX_TOKENS"
    --no-epoch-checkpoints --log-format simple --log-interval 100 --max-update "$1"
  )
}

# kd_test NAME: decode the test set with SAVE_ROOT/NAME/checkpoint_best.pt (the lowest validation
# loss) and print its tokenized BLEU.
kd_test() {
  local dir="$SAVE_ROOT/$1"
  # --required-batch-size-multiple 1: fairseq main drops a last batch that is not a multiple of it
  run_to "$dir/generate-test.txt" fairseq-generate "$DATA_BIN" --user-dir "$(user_dir)" \
    "${DEVICE_ARGS[@]}" --path "$dir/checkpoint_best.pt" --gen-subset test \
    --beam "$BEAM" --lenpen "$LENPEN" --max-tokens 8192 --required-batch-size-multiple 1 \
    --remove-bpe
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "  (score: the tokenized BLEU line of $dir/generate-test.txt)"
  else
    echo "$1: $(tail -n 1 "$dir/generate-test.txt")"
  fi
}

# kd_row: teacher on the ground truth, its translation of the training set, the student on both,
# then both tested.
kd_row() {
  local teacher_args=() student_args=() student="student-$ARCH"
  read -r -a teacher_args <<<"$TEACHER_ARGS"
  read -r -a student_args <<<"$STUDENT_ARGS"
  need_file "$REPO_ROOT/scripts/distill_data.sh" "the distillation script"
  check_tools fairseq-generate

  # 1. Teacher: 12-2 Transformer on the ground truth.
  kd_train_flags "$TEACHER_UPDATES"
  fit "$SAVE_ROOT/teacher-12-2" --arch transformer_iwslt_de_en "${teacher_args[@]}" \
    --share-all-embeddings

  # 2. SKD data: the teacher's beam-search translation of the training set, in the training
  #    data's BPE space, binarized with the teacher's (joined) dictionary. Resumes if interrupted.
  run "$REPO_ROOT/scripts/distill_data.sh" "$DATA_BIN" \
    --path "$SAVE_ROOT/teacher-12-2/checkpoint_best.pt" --out-dir "$KD_BIN" \
    --user-dir "$(user_dir)" --beam "$BEAM" --lenpen "$LENPEN" \
    --max-tokens "$DISTILL_MAX_TOKENS" --num-shards "$NUM_SHARDS" \
    --generate-args "$DISTILL_GENERATE_ARGS" "${DEVICE_ARGS[@]}"

  # 3. Student on ground truth + SKD data (validation on the real references).
  kd_train_flags "$STUDENT_UPDATES"
  fit "$SAVE_ROOT/$student" \
    --task translation_seqkd --kd-data-mode both --kd-distilled-data "$KD_BIN" \
    --arch "$ARCH" "${student_args[@]}" --share-all-embeddings

  # 4. Test: beam 5, lenpen 1.0, tokenized BLEU on BPE-removed output, lowest-loss checkpoint.
  kd_test teacher-12-2
  kd_test "$student"
}
