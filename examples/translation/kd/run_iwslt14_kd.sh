#!/usr/bin/env bash
# shellcheck disable=SC2086  # *_ARGS variables are space-separated lists of flags
# Hypoformer's sequence-level KD procedure on IWSLT'14 De-En (Sec. 5.2, Table 6):
#   1. train a 12-2 Transformer teacher on the ground truth;
#   2. translate the training set with it (beam 5, lenpen 1.0) -> SKD data (scripts/distill_data.sh);
#   3. train the student on ground truth + SKD data together (--task translation_seqkd
#      --kd-data-mode both);
#   4. evaluate the student: beam 5, lenpen 1.0, tokenized BLEU after --remove-bpe, on the
#      checkpoint with the lowest validation loss (checkpoint_best.pt).
#
# Data: DATA_BIN must hold IWSLT'14 De-En as fairseq's examples/translation/prepare-iwslt14.sh
# builds it (Moses tokenized, lowercased, 10k joint BPE), binarized with --joined-dictionary;
# examples/translation/lightformer/prepare-iwslt14.sh does exactly this.
#
# Environment (all optional):
#   DATA_BIN        binarized IWSLT'14            (default: data-bin/iwslt14.tokenized.de-en)
#   SAVE_ROOT       checkpoints and outputs       (default: checkpoints/iwslt14-kd)
#   KD_BIN          the distilled train split     (default: $DATA_BIN.kd-12-2)
#   ARCH            student architecture          (default: transformer_iwslt_de_en)
#   TEACHER_ARGS    teacher flags                 (default: --encoder-layers 12 --decoder-layers 2)
#   DISTILL_GENERATE_ARGS  more fairseq-generate flags for the distillation, one string
#                   (e.g. '--max-len-a 1.2 --max-len-b 10')
#   STUDENT_ARGS    extra student flags (e.g. layer counts, dims of a Hypoformer configuration)
#                                                 (default: --encoder-layers 12 --decoder-layers 2)
#   TEACHER_UPDATES / STUDENT_UPDATES  max updates (default: 20000 / 20000, Table 6)
#   MAX_TOKENS      tokens per batch              (default: 4096, Table 6)
#   DROPOUT         dropout of both models        (default: 0.1; Table 6 searches 0.05/0.1/0.2)
#   BEAM, LENPEN    decoding                      (default: 5 / 1.0)
#   DISTILL_MAX_TOKENS, NUM_SHARDS  distillation batching / resumable shards (default: 8192 / 8)
#   CPU=1           train and translate on CPU (slow; for trying the pipeline)
#   FP16=1          mixed precision (Table 6 trains in fp16 on one GPU)
#   PYTHON          interpreter of the environment (default: python)
#
# Deviations from Table 6: fairseq has no RAdam, so Adam (0.9, 0.98) is used with the same
# schedule (inverse sqrt, 6000 warmup updates from 1e-7 to 7e-4); the Admin initialization belongs
# to the Hypoformer model (set it through ARCH/STUDENT_ARGS once that model exists). Embeddings are
# shared (joined dictionary), as in the papers' 36.8M-parameter transformer_iwslt_de_en.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PYTHON="${PYTHON:-python}"
DATA_BIN="${DATA_BIN:-data-bin/iwslt14.tokenized.de-en}"
SAVE_ROOT="${SAVE_ROOT:-checkpoints/iwslt14-kd}"
KD_BIN="${KD_BIN:-$DATA_BIN.kd-12-2}"
ARCH="${ARCH:-transformer_iwslt_de_en}"
TEACHER_ARGS="${TEACHER_ARGS:---encoder-layers 12 --decoder-layers 2}"
DISTILL_GENERATE_ARGS="${DISTILL_GENERATE_ARGS:-}"
STUDENT_ARGS="${STUDENT_ARGS:---encoder-layers 12 --decoder-layers 2}"
TEACHER_UPDATES="${TEACHER_UPDATES:-20000}"
STUDENT_UPDATES="${STUDENT_UPDATES:-20000}"
MAX_TOKENS="${MAX_TOKENS:-4096}"
DROPOUT="${DROPOUT:-0.1}"
BEAM="${BEAM:-5}"
LENPEN="${LENPEN:-1.0}"
DISTILL_MAX_TOKENS="${DISTILL_MAX_TOKENS:-8192}"
NUM_SHARDS="${NUM_SHARDS:-8}"
USER_DIR="${USER_DIR:-$REPO/lightcompress}"

[[ -f "$DATA_BIN/dict.de.txt" ]] || {
  echo "no binarized IWSLT'14 in $DATA_BIN: run examples/translation/lightformer/prepare-iwslt14.sh" \
       "(or fairseq's examples/translation/prepare-iwslt14.sh + fairseq-preprocess --joined-dictionary)," \
       "or set DATA_BIN" >&2
  exit 1
}

DEVICE_ARGS=()
[[ "${CPU:-0}" == 1 ]] && DEVICE_ARGS+=(--cpu)
[[ "${FP16:-0}" == 1 ]] && DEVICE_ARGS+=(--fp16)

# Table 6 training settings shared by teacher and student.
COMMON=(
  --user-dir "$USER_DIR" "${DEVICE_ARGS[@]}"
  --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0
  --lr 7e-4 --lr-scheduler inverse_sqrt --warmup-updates 6000 --warmup-init-lr 1e-7
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --dropout "$DROPOUT" --max-tokens "$MAX_TOKENS"
  --no-epoch-checkpoints --log-format simple --log-interval 100
)

# 1. Teacher: 12-2 Transformer on the ground truth.
TEACHER_DIR="$SAVE_ROOT/teacher-12-2"
mkdir -p "$TEACHER_DIR"
# fairseq-train resumes from checkpoint_last.pt, and returns at once when the run is complete.
fairseq-train "$DATA_BIN" "${COMMON[@]}" \
  --arch transformer_iwslt_de_en $TEACHER_ARGS --share-all-embeddings \
  --max-update "$TEACHER_UPDATES" --save-dir "$TEACHER_DIR" 2>&1 | tee -a "$TEACHER_DIR/train.log"

# 2. SKD data: the teacher's beam-search translation of the training set, in the training data's
#    BPE space, binarized with the teacher's (joined) dictionary. Resumes if interrupted.
PYTHON="$PYTHON" "$REPO/scripts/distill_data.sh" "$DATA_BIN" \
  --path "$TEACHER_DIR/checkpoint_best.pt" --out-dir "$KD_BIN" --user-dir "$USER_DIR" \
  --beam "$BEAM" --lenpen "$LENPEN" --max-tokens "$DISTILL_MAX_TOKENS" --num-shards "$NUM_SHARDS" \
  --generate-args "$DISTILL_GENERATE_ARGS" "${DEVICE_ARGS[@]}"

# 3. Student on ground truth + SKD data (validation on the real references).
STUDENT_DIR="$SAVE_ROOT/student-$ARCH"
mkdir -p "$STUDENT_DIR"
fairseq-train "$DATA_BIN" "${COMMON[@]}" \
  --task translation_seqkd --kd-data-mode both --kd-distilled-data "$KD_BIN" \
  --arch "$ARCH" $STUDENT_ARGS --share-all-embeddings \
  --max-update "$STUDENT_UPDATES" --save-dir "$STUDENT_DIR" 2>&1 | tee -a "$STUDENT_DIR/train.log"

# 4. Test: beam 5, lenpen 1.0, tokenized BLEU on BPE-removed output, lowest-perplexity checkpoint.
#    --required-batch-size-multiple 1: fairseq main drops a last batch that is not a multiple of it.
for name in teacher-12-2 "student-$ARCH"; do
  fairseq-generate "$DATA_BIN" --user-dir "$USER_DIR" "${DEVICE_ARGS[@]}" \
    --path "$SAVE_ROOT/$name/checkpoint_best.pt" --gen-subset test \
    --beam "$BEAM" --lenpen "$LENPEN" --max-tokens 8192 --required-batch-size-multiple 1 \
    --remove-bpe > "$SAVE_ROOT/$name/generate-test.txt"
  echo "$name: $(tail -n 1 "$SAVE_ROOT/$name/generate-test.txt")"
done
