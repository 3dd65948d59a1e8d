# shellcheck shell=bash
# The DA-WID translation recipe (iwslt14-dawid.sh): the shared library ../../common/lib.sh
# (DRY_RUN, the datasets, fit, evaluate, speed_column, check_tools; its header lists the
# environment) plus the DA-WID steps, in dawid_* functions. Defines functions and defaults only;
# running it does nothing.
#
# Environment (all optional), besides those of ../../common/lib.sh:
#   SAVE_ROOT          checkpoints, logs and results               (default: checkpoints/dawid)
#   TEACHER            a trained post-LN Transformer checkpoint to compress (default: the
#                      dataset's dense 6-6, trained first under SAVE_ROOT unless it exists)
#   TARGET_SPARSITY    1 - student / teacher non-embedding parameters      (default: 0.8)
#   DAWID_MASKS        mask levels: dim,head,layer (the paper's ablations: dim / dim,head /
#                      dim,layer; none: distillation only)            (default: dim,head,layer)
#   DAWID_INIT         data-aware (DA-WID) or identity (WID's, the ablation) (default: data-aware)
#   CALIB_TOKENS       calibration tokens per side (the paper's Table 3)        (default: 4096)
#   WID_UPDATES        DA-WID training updates                                  (default: 30000)
#   DISTILL_UPDATES    distillation only, before any mask                       (default: 2200)
#   SPARSITY_WARMUP    the target rises linearly over these updates             (default: 11000)
#   STRUCTURE_UPDATES  head and layer masks start this long after the dimension masks (6600)
#   WID_LR, GATE_LR_SCALE  learning rate of the compactors (default 2e-4) and the factor of the
#                      masks and the Lagrange multipliers (default 50: 0.01, CoFi's L0 rate)
#   DAWID_LAMBDA       lambda of Eq. 16 (output KL vs layer MSE)                (default: 0.5)
#   LIGHTFORMER        a LightFormer checkpoint of the same size: teacher, DA-WID and it are
#                      then measured side by side (BLEU, params, tokens/s: speed-vs-lightformer.txt)
#   SAME_SIZE_LIGHTFORMER=0  do not train one (default 1 when LIGHTFORMER is not given: the
#                      LightFormer row of examples/translation/lightformer/ at the rank whose
#                      model is as large as the fused DA-WID model, lightformer_rank.py)

# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/lib.sh"
LOG_TAG=dawid
SAVE_ROOT="${SAVE_ROOT:-checkpoints/dawid}"

# dawid_teacher_flags: the dense teacher's schedule (the dataset's, label-smoothed CE).
dawid_teacher_flags() {
  set_update_freq
  TRAIN_FLAGS=(
    --task translation --source-lang "$SRC" --target-lang "$TGT"
    --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 0.0
    --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --dropout "$DROPOUT" --weight-decay "$WEIGHT_DECAY"
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
    --seed "$SEED" --log-format simple --log-interval 100 --keep-last-epochs "$AVG_N"
  )
  device_flags
  extra_train_flags
}

# dawid_wid_flags: DA-WID's schedule (the masks, the Lagrangian, the distillation loss). No
# --dropout: the student keeps its teacher's dropout (--arch dawid has no such flag, and
# fairseq-train refuses it).
dawid_wid_flags() {
  set_update_freq
  TRAIN_FLAGS=(
    --task translation --source-lang "$SRC" --target-lang "$TGT"
    --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 0.0
    --lr "${WID_LR:-2e-4}" --lr-scheduler inverse_sqrt --warmup-updates 1000 --warmup-init-lr 1e-07
    --criterion dawid --dawid-lambda "${DAWID_LAMBDA:-0.5}"
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "${WID_UPDATES:-30000}"
    --seed "$SEED" --log-format simple --log-interval 100 --no-epoch-checkpoints
  )
  # masks of a level not yet switched on get no gradient: DDP must allow unused parameters
  if ((NUM_GPUS > 1)); then TRAIN_FLAGS+=(--find-unused-parameters); fi
  device_flags
  extra_train_flags
}

# dawid_teacher: the dense post-LN 6-6 Transformer (shared embeddings), trained, averaged,
# tested and timed, unless TEACHER names a checkpoint. Sets TEACHER_CKPT.
dawid_teacher() {
  if [[ -n "${TEACHER:-}" ]]; then
    TEACHER_CKPT="$TEACHER"
    return 0
  fi
  local save_dir
  save_dir="$(dense_dir 6 6)"
  TEACHER_CKPT="$save_dir/checkpoint_avg.pt"
  if [[ "$DRY_RUN" == 1 || ! -f "$save_dir/results.txt" ]]; then
    dawid_teacher_flags
    fit "$save_dir" --arch "$DENSE_ARCH" --share-all-embeddings
    average "$save_dir"
    evaluate "$save_dir" "$TEACHER_CKPT"
    speed_column "$TEACHER_CKPT" "$TEACHER_CKPT"
  fi
}

# dawid_row NAME: teacher -> DA-WID training (calibration, distillation, masks) -> fusion into
# an ordinary smaller model -> test (BLEU) -> tokens/s beside the teacher (and LIGHTFORMER).
dawid_row() {
  local name="$1" teacher save_dir
  check_tools lightcompress-convert
  dawid_teacher
  teacher="$TEACHER_CKPT"
  save_dir="$SAVE_ROOT/$DATASET/$name"
  dawid_wid_flags
  fit "$save_dir" --arch dawid --dawid-teacher "$teacher" \
    --dawid-init "${DAWID_INIT:-data-aware}" --dawid-calib-tokens "${CALIB_TOKENS:-4096}" \
    --dawid-target-sparsity "${TARGET_SPARSITY:-0.8}" --dawid-masks "${DAWID_MASKS:-dim,head,layer}" \
    --dawid-distill-updates "${DISTILL_UPDATES:-2200}" \
    --dawid-sparsity-warmup "${SPARSITY_WARMUP:-11000}" \
    --dawid-structure-updates "${STRUCTURE_UPDATES:-6600}" \
    --dawid-gate-lr-scale "${GATE_LR_SCALE:-50}"
  if [[ "$DRY_RUN" == 1 || ! -f "$save_dir/fused.pt" ]]; then
    run_log "$save_dir/fuse.log" lightcompress-convert dawid-fuse \
      -i "$save_dir/checkpoint_last.pt" -o "$save_dir/fused.pt"
  fi
  evaluate "$save_dir" "$save_dir/fused.pt"
  speed_column "$save_dir/fused.pt" "$teacher"
  if [[ -z "${LIGHTFORMER:-}" && "${SAME_SIZE_LIGHTFORMER:-1}" == 1 ]]; then
    dawid_same_size_lightformer "$save_dir" # sets LIGHTFORMER
  fi
  if [[ -n "${LIGHTFORMER:-}" && "$MEASURE_SPEED" == 1 ]]; then
    # the three side by side (interleaved runs): teacher, DA-WID, LightFormer of the same size
    run_log "$save_dir/speed-vs-lightformer.txt" "$REPO_ROOT/scripts/measure_speed.sh" \
      --path "transformer=$teacher,dawid=$save_dir/fused.pt,lightformer=$LIGHTFORMER" \
      --data "$DATA_BIN" --user-dir "$(user_dir)" --src-len "$SPEED_SRC_LEN" --beam "$BEAM" \
      --lenpen "$LENPEN" --bleu --remove-bpe --json "$save_dir/speed-vs-lightformer.json"
  fi
}

# dawid_same_size_lightformer SAVE_DIR: train the LightFormer 18-3 row (SVD transfer from its
# dense 18-3 teacher, examples/translation/lightformer/table2-iwslt14-lightformer.sh) at the
# --lc-rank whose total parameter count is closest to the fused model's, under
# SAVE_ROOT/lightformer-same-size; sets LIGHTFORMER to its averaged checkpoint.
dawid_same_size_lightformer() {
  local save_dir="$1" rank here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  if [[ "$DRY_RUN" == 1 ]]; then
    run "$PYTHON" "$here/lightformer_rank.py" --shapes "$save_dir/fused.pt.shapes.json" \
      --vocab-size "(entries of $DATA_BIN/dict.$SRC.txt + 4)"
    rank=RANK
  else
    local vocab
    vocab=$(($(wc -l <"$DATA_BIN/dict.$SRC.txt") + 4)) # fairseq's 4 special symbols
    rank="$("$PYTHON" "$here/lightformer_rank.py" --shapes "$save_dir/fused.pt.shapes.json" \
      --vocab-size "$vocab")"
  fi
  log "LightFormer of the fused model's size: --lc-rank $rank"
  local lf_root="$SAVE_ROOT/lightformer-same-size"
  RANK="$rank" SAVE_ROOT="$lf_root" DATA_BIN="$DATA_BIN" DRY_RUN="$DRY_RUN" \
    bash "$REPO_ROOT/examples/translation/lightformer/table2-iwslt14-lightformer.sh"
  LIGHTFORMER="$lf_root/$DATASET/lightformer-18-3-g6-svd/checkpoint_avg.pt"
}
