# shellcheck shell=bash
# The Subformer recipes (Reid et al., "Subformer"), sourced by every script in this folder, in
# examples/summarization/subformer/ and in examples/language_model/subformer/. Builds on the
# shared library ../../common/lib.sh (run / run_log / run_to and DRY_RUN, set_update_freq,
# user_dir, fetch, fit, hyp_ref, detok, evaluate, check_tools) and adds the Subformer schedules
# and rows, in sf_* functions. Defines functions and defaults only; running it does nothing.
#
# Environment (all optional), besides those of ../../common/lib.sh (DRY_RUN, PYTHON, USER_DIR,
# DATA_ROOT, DATA_BIN, NUM_GPUS, MAX_TOKENS, UPDATE_FREQ, MAX_UPDATE, LR, WARMUP, DROPOUT,
# WEIGHT_DECAY, SEED, FP16, EXTRA_TRAIN_ARGS, MOSES_DIR):
#   SAVE_ROOT       checkpoints, logs and results               (default: checkpoints/subformer)
#   CHECKPOINT      which checkpoint of a run is decoded         (default: checkpoint_best.pt, the
#                   paper's "lowest loss on the development set")
#   PATIENCE        early stopping: fairseq-train --patience N (validations without improvement)
#   LENPEN          MT: fix the length penalty instead of tuning it on valid
#   LENPEN_GRID     MT: the values tried on valid             (default: 0.0 0.2 ... 2.0, the paper's)
#   MIN_LEN         CNN-DM: fix the minimum summary length instead of tuning it on valid
#   MIN_LEN_GRID    CNN-DM: the values tried on valid         (default: 40 50 60, the paper's)

# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/lib.sh"
LOG_TAG=subformer
SAVE_ROOT="${SAVE_ROOT:-checkpoints/subformer}"

CHECKPOINT="${CHECKPOINT:-checkpoint_best.pt}"
ROUGE_SCRIPT="$REPO_ROOT/examples/summarization/lightformer/score_rouge.py"

# ---------------------------------------------------------------------------------------------
# Datasets and schedules
#
# Machine translation (paper Sec. 4.1 and A.1.1; the authors' README command): adam (0.9, 0.999)
# eps 1e-6, lr 5e-4, inverse_sqrt with 10k warmup from 1e-7, weight decay 0.01, dropout 0.2 (the
# best of 0.1 / 0.2 / 0.3; 0.3 for the big models, as Transformer-big), label smoothing 0.1,
# 200k updates, fp16, BERT initialisation (--subformer-init bert; the plugin's default,
# bert-safe-table, draws a SAFE token table at N(0, r^-1/2) instead). Effective batch 128K
# tokens: base and small models 8 GPUs x 8192 tokens x update-freq 2, big models 16 GPUs x 4096
# tokens x update-freq 2. Decoding: the best checkpoint on valid loss, beam 5, length penalty
# tuned on valid over 0.0, 0.2, ..., 2.0, tokenized BLEU (compound splitting on En-De).
#
# set_update_freq reads the paper's effective batch as PAPER_GPUS x PAPER_MAX_TOKENS; here
# PAPER_GPUS counts GPU steps per update (GPUs x update-freq).
# ---------------------------------------------------------------------------------------------

# sf_mt DATASET SIZE: DATASET wmt14ende or wmt16enro; SIZE base (small, base, mid and the
# baselines) or big (Table 4).
sf_mt() {
  DATASET="$1"
  local size="${2:-base}"
  case "$DATASET" in
    wmt14ende)
      : "${DATA_BIN:=$DATA_ROOT/wmt16_en_de_bpe32k}"
      SRC=en TGT=de COMPOUND_SPLIT=1
      ;;
    wmt16enro)
      : "${DATA_BIN:=$DATA_ROOT/wmt16_en_ro}"
      SRC=en TGT=ro COMPOUND_SPLIT=0
      ;;
    *) die "unknown MT dataset '$DATASET'" ;;
  esac
  case "$size" in
    base)
      PAPER_GPUS=16 PAPER_MAX_TOKENS=8192
      : "${DROPOUT:=0.2}"
      ;;
    big)
      PAPER_GPUS=32 PAPER_MAX_TOKENS=4096
      : "${DROPOUT:=0.3}"
      ;;
    *) die "unknown model size '$size' (base or big)" ;;
  esac
  : "${LR:=5e-4}" "${WARMUP:=10000}" "${WEIGHT_DECAY:=0.01}" "${MAX_UPDATE:=200000}"
  LENPEN_FIXED="${LENPEN:-}"
  : "${LENPEN_GRID:=0.0 0.2 0.4 0.6 0.8 1.0 1.2 1.4 1.6 1.8 2.0}"
  # shellcheck disable=SC2034  # read by evaluate() and check_tools in ../../common/lib.sh
  BEAM=5 BPE_KIND=subword_nmt METRIC=bleu
  DATA_CHECK="dict.$SRC.txt"
  : "${MAX_TOKENS:=$PAPER_MAX_TOKENS}"
  set_update_freq
}

# CNN-DailyMail (Table 6): "the same configuration as SUBFORMER-BASE" with d_e = 256
# (subformer_cnn_dm), so the MT optimisation recipe and batch above; articles truncated to 400
# words by prepare-cnn-dm.sh. The paper follows Edunov et al. (2019) for the schedule without
# giving it: MAX_UPDATE (default 30000, about 30 epochs at 128K tokens) is our choice. Decoding:
# beam 4, trigram blocking (--no-repeat-ngram-size 3), the minimum length tuned on valid over
# 40 / 50 / 60, at most 140 subword tokens; ROUGE-1/2/L F1 with rouge-score.
sf_cnndm() {
  DATASET=cnndm
  : "${DATA_BIN:=$DATA_ROOT/cnn_dm}"
  SRC=source TGT=target
  PAPER_GPUS=16 PAPER_MAX_TOKENS=8192
  : "${LR:=5e-4}" "${WARMUP:=10000}" "${WEIGHT_DECAY:=0.01}" "${DROPOUT:=0.2}"
  : "${MAX_UPDATE:=30000}"
  : "${BEAM:=4}" "${LENPEN:=1.0}" "${MAX_LEN_B:=140}"
  MIN_LEN_FIXED="${MIN_LEN:-}"
  : "${MIN_LEN_GRID:=40 50 60}"
  METRIC=rouge
  DATA_CHECK="dict.$SRC.txt"
  : "${MAX_TOKENS:=$PAPER_MAX_TOKENS}"
  set_update_freq
}

# WikiText-103 (Table 5, Sec. 5.2 and A.1.3): the schedule of Baevski & Auli (2019) as in
# Welleck et al. (2020): nag, lr warmed up to 1.0 over 16k updates from 1e-7, then cosine
# annealing over 270k updates (t-mult 2, lr-shrink 0.75, min lr 1e-4), clip-norm 0.1, 286k
# updates; 8 GPUs x 1536 tokens x update-freq 3, blocks of 1536 tokens; adaptive input and
# adaptive softmax (cutoffs 20000,60000, factor 4, tied). Evaluation: fairseq-eval-lm on test,
# every token scored with 480 tokens of context (Table 5's context length).
sf_lm() {
  DATASET=wikitext103
  : "${DATA_BIN:=$DATA_ROOT/wikitext-103}"
  PAPER_GPUS=24 PAPER_MAX_TOKENS=1536
  : "${LR:=1.0}" "${WARMUP:=16000}" "${MAX_UPDATE:=286000}"
  : "${TOKENS_PER_SAMPLE:=1536}" "${CONTEXT_WINDOW:=480}" "${EVAL_TOKENS_PER_SAMPLE:=512}"
  METRIC=ppl
  DATA_CHECK=dict.txt
  : "${MAX_TOKENS:=$PAPER_MAX_TOKENS}"
  set_update_freq
}

# sf_device_flags: distributed / fp16 / cpu flags, --patience and EXTRA_TRAIN_ARGS, appended to
# TRAIN_FLAGS.
sf_device_flags() {
  device_flags
  if [[ -n "${PATIENCE:-}" ]]; then
    TRAIN_FLAGS+=(--patience "$PATIENCE")
  fi
  extra_train_flags
}

# sf_seq2seq_train_flags: the MT / CNN-DM optimisation flags (see above).
sf_seq2seq_train_flags() {
  TRAIN_FLAGS=(
    --task translation --source-lang "$SRC" --target-lang "$TGT"
    --optimizer adam --adam-betas '(0.9, 0.999)' --adam-eps 1e-06
    --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --dropout "$DROPOUT" --weight-decay "$WEIGHT_DECAY"
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
    --seed "$SEED" --log-format simple --log-interval 100 --no-epoch-checkpoints
    --subformer-init bert
  )
  if [[ "$DATASET" == cnndm ]]; then
    TRAIN_FLAGS+=(--truncate-source)
  fi
  sf_device_flags
}

# sf_lm_train_flags: the WikiText-103 flags (see above).
sf_lm_train_flags() {
  TRAIN_FLAGS=(
    --task language_modeling --tokens-per-sample "$TOKENS_PER_SAMPLE" --sample-break-mode none
    --optimizer nag --clip-norm 0.1
    --lr "$LR" --min-lr 0.0001 --stop-min-lr 1e-09 --lr-scheduler cosine
    --warmup-updates "$WARMUP" --warmup-init-lr 1e-07
    --lr-period-updates 270000 --t-mult 2 --lr-shrink 0.75
    --criterion adaptive_loss
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --max-update "$MAX_UPDATE"
    --seed "$SEED" --log-format simple --log-interval 100 --no-epoch-checkpoints
    --skip-invalid-size-inputs-valid-test --ddp-backend legacy_ddp
  )
  sf_device_flags
}

# ---------------------------------------------------------------------------------------------
# Steps (training: fit from ../../common/lib.sh, with the TRAIN_FLAGS a row sets and the
# dataset's DATA_CHECK)
# ---------------------------------------------------------------------------------------------

sf_gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

# sf_valid_bleu GEN_OUT: the tokenized BLEU of a fairseq-generate output, as evaluate() scores the
# test set (compound splitting on En-De).
sf_valid_bleu() {
  local gen="$1" hyp ref
  hyp_ref "$gen"
  hyp="$gen.hyp" ref="$gen.ref"
  if [[ "$COMPOUND_SPLIT" == 1 ]]; then
    perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' <"$hyp" >"$hyp.cs"
    perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' <"$ref" >"$ref.cs"
    hyp="$hyp.cs" ref="$ref.cs"
  fi
  fairseq-score --sys "$hyp" --ref "$ref" | sed -n 's/.*BLEU4 = \([0-9.]*\).*/\1/p' | tail -n 1
}

# sf_tune_lenpen SAVE_DIR CHECKPOINT: set LENPEN to the grid value with the best valid BLEU
# (or to LENPEN when it was given). Scores go to SAVE_DIR/tune/lenpen.txt.
sf_tune_lenpen() {
  local save_dir="$1" ckpt="$2" lp gen bleu best="" best_bleu=-1
  if [[ -n "$LENPEN_FIXED" ]]; then
    LENPEN="$LENPEN_FIXED"
    return 0
  fi
  [[ "$DRY_RUN" == 1 ]] || rm -f "$save_dir/tune/lenpen.txt"
  for lp in $LENPEN_GRID; do
    gen="$save_dir/tune/generate-valid-lenpen$lp.txt"
    run_to "$gen" fairseq-generate "$DATA_BIN" --user-dir "$(user_dir)" --path "$ckpt" \
      --task translation --source-lang "$SRC" --target-lang "$TGT" --gen-subset valid \
      --beam "$BEAM" --lenpen "$lp" --batch-size 128 --required-batch-size-multiple 1 \
      --remove-bpe
    [[ "$DRY_RUN" == 1 ]] && continue
    bleu="$(sf_valid_bleu "$gen")"
    [[ -n "$bleu" ]] || die "no BLEU in $gen"
    echo "lenpen $lp: valid BLEU $bleu" | tee -a "$save_dir/tune/lenpen.txt" >&2
    if sf_gt "$bleu" "$best_bleu"; then best="$lp" best_bleu="$bleu"; fi
  done
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "  (lenpen: the value of the grid with the best valid BLEU)"
    LENPEN="best-on-valid"
  else
    LENPEN="$best"
    echo "best: lenpen $best (valid BLEU $best_bleu)" >>"$save_dir/tune/lenpen.txt"
    log "length penalty $best (valid BLEU $best_bleu)"
  fi
}

# sf_mt_row NAME [model flags...]: train, tune the length penalty on valid, decode and score test.
sf_mt_row() {
  local name="$1"
  shift
  local save_dir="$SAVE_ROOT/$DATASET/$name"
  if [[ -n "$LENPEN_FIXED" ]]; then check_tools; else check_tools fairseq-score; fi
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/results.txt" ]]; then
    log "$save_dir: done before (results.txt)"
    return 0
  fi
  sf_seq2seq_train_flags
  fit "$save_dir" "$@"
  sf_tune_lenpen "$save_dir" "$save_dir/$CHECKPOINT"
  evaluate "$save_dir" "$save_dir/$CHECKPOINT"
}

# sf_summarize SAVE_DIR CHECKPOINT SUBSET MIN_LEN: decode SUBSET with trigram blocking and score it
# (ROUGE-1/2/L F1, rouge-score) against DATA_BIN/refs/SUBSET.target (the raw summaries); the
# scores are written to $ROUGE_OUT (and printed for the test set).
sf_summarize() {
  local save_dir="$1" ckpt="$2" subset="$3" min_len="$4"
  local gen="$save_dir/generate-$subset.txt"
  if [[ "$subset" != test ]]; then gen="$save_dir/tune/generate-$subset-minlen$min_len.txt"; fi
  run_to "$gen" fairseq-generate "$DATA_BIN" --user-dir "$(user_dir)" --path "$ckpt" \
    --task translation --source-lang "$SRC" --target-lang "$TGT" --gen-subset "$subset" \
    --truncate-source --beam "$BEAM" --lenpen "$LENPEN" --min-len "$min_len" \
    --max-len-a 0 --max-len-b "$MAX_LEN_B" --no-repeat-ngram-size 3 \
    --batch-size 32 --required-batch-size-multiple 1 --remove-bpe sentencepiece
  [[ "$DRY_RUN" == 1 ]] || hyp_ref "$gen"
  ROUGE_OUT="$gen.rouge"
  run_to "$ROUGE_OUT" "$PYTHON" "$ROUGE_SCRIPT" --hyp "$gen.hyp" \
    --ref "$DATA_BIN/refs/$subset.$TGT" --lsum
  if [[ "$DRY_RUN" != 1 && "$subset" == test ]]; then cat "$ROUGE_OUT"; fi
}

# sf_rouge_sum ROUGE_OUT: R-1 + R-2 + R-L of a score_rouge.py output line.
sf_rouge_sum() {
  awk '{ for (i = 1; i < NF; i++) if ($i ~ /^R-(1|2|L)$/) s += $(i + 1) } END { print s + 0 }' "$1"
}

# sf_summarization_row NAME [model flags...]: train, tune the minimum length on valid (sum of
# ROUGE-1/2/L), decode test with trigram blocking, write SAVE_DIR/results.txt.
sf_summarization_row() {
  local name="$1"
  shift
  local save_dir="$SAVE_ROOT/$DATASET/$name" ckpt min_len score best="" best_score=-1
  check_tools
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/results.txt" ]]; then
    log "$save_dir: done before (results.txt)"
    return 0
  fi
  sf_seq2seq_train_flags
  fit "$save_dir" "$@"
  ckpt="$save_dir/$CHECKPOINT"
  if [[ -n "$MIN_LEN_FIXED" ]]; then
    best="$MIN_LEN_FIXED"
  else
    for min_len in $MIN_LEN_GRID; do
      sf_summarize "$save_dir" "$ckpt" valid "$min_len"
      [[ "$DRY_RUN" == 1 ]] && continue
      score="$(sf_rouge_sum "$ROUGE_OUT")"
      echo "min-len $min_len: valid R-1 + R-2 + R-L $score" >&2
      if sf_gt "$score" "$best_score"; then best="$min_len" best_score="$score"; fi
    done
    if [[ "$DRY_RUN" == 1 ]]; then
      echo "  (min-len: the value of the grid with the best valid ROUGE-1 + ROUGE-2 + ROUGE-L)"
      best="best-on-valid"
    fi
  fi
  if [[ "$DRY_RUN" == 1 ]]; then
    sf_summarize "$save_dir" "$ckpt" test "$best"
    return 0
  fi
  {
    echo "checkpoint: $ckpt (min-len $best, beam $BEAM, trigram blocking)"
    grep -h -m1 'model params' "$save_dir/train.log" 2>/dev/null | sed 's/.*| //' || true
    sf_summarize "$save_dir" "$ckpt" test "$best"
  } | tee "$save_dir/results.txt"
}

# sf_lm_row NAME [model flags...]: train a WikiText-103 language model and report test perplexity
# with fairseq-eval-lm (SAVE_DIR/results.txt).
sf_lm_row() {
  local name="$1"
  shift
  local save_dir="$SAVE_ROOT/$DATASET/$name"
  check_tools
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/results.txt" ]]; then
    log "$save_dir: done before (results.txt)"
    return 0
  fi
  sf_lm_train_flags
  fit "$save_dir" "$@" \
    --adaptive-input --adaptive-input-cutoff 20000,60000 --adaptive-input-factor 4 \
    --adaptive-softmax-cutoff 20000,60000 --adaptive-softmax-factor 4 \
    --tie-adaptive-weights --tie-adaptive-proj
  local out="$save_dir/eval-lm-test.txt"
  [[ "$DRY_RUN" == 1 ]] || rm -f "$out"
  run_log "$out" fairseq-eval-lm "$DATA_BIN" --user-dir "$(user_dir)" \
    --path "$save_dir/$CHECKPOINT" --gen-subset test --sample-break-mode none \
    --tokens-per-sample "$EVAL_TOKENS_PER_SAMPLE" --context-window "$CONTEXT_WINDOW" \
    --max-tokens 3072 --softmax-batch 1024
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "  (results: the Perplexity of $out)"
    return 0
  fi
  {
    echo "checkpoint: $save_dir/$CHECKPOINT (context window $CONTEXT_WINDOW)"
    grep -h -m1 'model params' "$save_dir/train.log" 2>/dev/null | sed 's/.*| //' || true
    grep -h 'Perplexity' "$out" | tail -n 1 | sed 's/.*| //'
  } | tee "$save_dir/results.txt"
}
