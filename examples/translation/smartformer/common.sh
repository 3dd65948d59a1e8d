# shellcheck shell=bash
# The Smartformer recipes (sourced by every script in this folder): the LightFormer recipes'
# library ../lightformer/common.sh (itself on ../../common/lib.sh: DRY_RUN, datasets, fit,
# evaluate, speed_column, check_tools; the dense Transformer rows and the converter call) plus
# the Smartformer rows, in sm_* functions. Defines functions and defaults only.
#
# Environment (all optional), besides those of ../../common/lib.sh:
#   SAVE_ROOT        checkpoints, logs and results              (default: checkpoints/smartformer)
#   SM_RANKS         the agent's action space                   (default: 16,32,64,96,128)
#   SM_START_RANK    CP rank of every Q/K/V map before the search (CP transfer from the
#                    teacher; default: the largest of SM_RANKS)
#   SM_INTERVAL      action interval in updates                 (default: 500; SMALL=1: 50)
#   SM_METRIC        reward metric: loss or bleu                (default: loss)
#   SM_EPSILON       tolerance of Eq. 27                        (default: 0.1)
#   SM_VALID_BATCHES validation batches per measurement, 0 = all (default: 0)
#   TEACHER          an existing dense 6-6 checkpoint to start from (default: trained first)

# shellcheck source-path=SCRIPTDIR source=../lightformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lightformer/common.sh"
LOG_TAG=smartformer
# (lightformer/common.sh gave SAVE_ROOT its own default; the user's setting wins)
SAVE_ROOT="${USER_SAVE_ROOT:-checkpoints/smartformer}"
SM_RANKS="${SM_RANKS:-16,32,64,96,128}"
SM_METRIC="${SM_METRIC:-loss}"
SM_EPSILON="${SM_EPSILON:-0.1}"
SM_VALID_BATCHES="${SM_VALID_BATCHES:-0}"

# sm_start_rank: the CP rank before the search (SM_START_RANK, else the largest action).
sm_start_rank() {
  if [[ -n "${SM_START_RANK:-}" ]]; then
    echo "$SM_START_RANK"
    return 0
  fi
  tr ',' '\n' <<<"$SM_RANKS" | sort -n | tail -n 1
}

# sm_interval: the action interval (SM_INTERVAL; SMALL=1 scales the default down with the plan).
sm_interval() {
  if [[ -n "${SM_INTERVAL:-}" ]]; then
    echo "$SM_INTERVAL"
  elif [[ "$SMALL" == 1 ]]; then
    echo 50
  else
    echo 500
  fi
}

# sm_teacher: the dense 6-6 teacher checkpoint (TEACHER, else trained by lf_dense_row).
sm_teacher() {
  if [[ -n "${TEACHER:-}" ]]; then
    echo "$TEACHER"
  else
    echo "$(dense_dir 6 6)/checkpoint_avg.pt"
  fi
}

# sm_train_flags: LightFormer's schedule with the task translation_smartformer (and the search
# flags when SEARCH=1).
sm_train_flags() {
  lf_train_flags
  local i
  for i in "${!TRAIN_FLAGS[@]}"; do
    if [[ "${TRAIN_FLAGS[i]}" == --task ]]; then TRAIN_FLAGS[i + 1]=translation_smartformer; fi
  done
  if [[ "${SEARCH:-0}" == 1 ]]; then
    TRAIN_FLAGS+=(--sm-search --sm-search-ranks "$SM_RANKS" --sm-search-interval "$(sm_interval)"
      --sm-search-metric "$SM_METRIC" --sm-search-epsilon "$SM_EPSILON"
      --sm-search-valid-batches "$SM_VALID_BATCHES")
    if [[ "$SM_METRIC" == bleu ]]; then
      TRAIN_FLAGS+=(--eval-bleu --eval-bleu-detok moses --eval-bleu-remove-bpe
        --eval-bleu-args '{"beam": 1}')
    fi
  fi
}

# sm_finish SAVE_DIR: evaluate the last checkpoint (the ranks the search ended with; checkpoints
# of other ranks cannot be averaged) and time it next to the Transformer 6-6.
sm_finish() {
  local save_dir="$1"
  evaluate "$save_dir" "$save_dir/checkpoint_last.pt"
  speed_column "$save_dir/checkpoint_last.pt" "$(dense_dir 6 6)/checkpoint_avg.pt"
}

# sm_search_row: the teacher (trained first unless TEACHER is set) -> CP transfer at the start
# rank -> fairseq-train with the A2C rank search -> test BLEU, parameters, tokens/s, and the
# decisions plot (rank_search.png).
sm_search_row() {
  check_tools lightcompress-convert
  local rank save_dir teacher
  rank="$(sm_start_rank)"
  save_dir="$SAVE_ROOT/$DATASET/smartformer-search-r$rank"
  teacher="$(sm_teacher)"
  if [[ -z "${TEACHER:-}" ]]; then lf_dense_row 6 6; fi
  lf_convert "$teacher" "$save_dir/student_init.pt" smartformer_iwslt_de_en --sm-rank "$rank"
  SEARCH=1 sm_train_flags
  FINETUNE_FROM="$save_dir/student_init.pt" fit "$save_dir" --arch smartformer_iwslt_de_en \
    --sm-rank "$rank"
  run "$PYTHON" "$REPO_ROOT/scripts/plot_rank_search.py" "$save_dir/rank_search.jsonl" \
    --out "$save_dir/rank_search.png"
  sm_finish "$save_dir"
}

# sm_fixed_row: the same model at one fixed rank for every Q/K/V map, the rank whose parameter
# count is closest to the searched model's (match_rank.py), CP-transferred from the same teacher
# and trained with the same schedule.
sm_fixed_row() {
  check_tools lightcompress-convert
  local searched rank save_dir teacher
  searched="$SAVE_ROOT/$DATASET/smartformer-search-r$(sm_start_rank)/checkpoint_last.pt"
  if [[ "$DRY_RUN" == 1 ]]; then
    run "$PYTHON" "$REPO_ROOT/examples/translation/smartformer/match_rank.py" --path "$searched"
    rank=RANK
  else
    [[ -f "$searched" ]] || die "no searched model $searched: run iwslt14-smartformer-search.sh first"
    rank="$("$PYTHON" "$REPO_ROOT/examples/translation/smartformer/match_rank.py" --path "$searched")"
  fi
  save_dir="$SAVE_ROOT/$DATASET/smartformer-fixed-r$rank"
  teacher="$(sm_teacher)"
  lf_convert "$teacher" "$save_dir/student_init.pt" smartformer_iwslt_de_en --sm-rank "$rank"
  SEARCH=0 sm_train_flags
  FINETUNE_FROM="$save_dir/student_init.pt" fit "$save_dir" --arch smartformer_iwslt_de_en \
    --sm-rank "$rank"
  sm_finish "$save_dir"
}
