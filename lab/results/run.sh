#!/usr/bin/env bash
# Results on real data (issue 17): every method trained with early stopping on the results
# corpus (examples/translation/l10n_corpus.py, 112k de-en pairs), evaluated the same way, one
# table. On a GPU when one is visible; SMALL=1 is the CPU-sized variant.
#
#   0. (WHEELS=DIR) install fairseq and its pure dependencies from carried wheels into
#      $SAVE_ROOT/site (a machine without network); build the corpus unless DATA_DIR has it
#   1. the models that do not need a teacher (LightFormer from random initialisation, Subformer,
#      Smartformer; in the background with PARALLEL=1, the GPU default) and the dense teacher
#      DA-WID's chain (independent of the teacher, in the background with PARALLEL=1): its own
#      post-LN teacher (DA-WID's compactors sit around the LayerNorms of a post-LN Transformer;
#      `teacher` is pre-LN), then DA-WID from it (masked training with the dawid criterion,
#      STUDENT_UPDATES updates, target sparsity DAWID_SPARSITY), fused by lightcompress-convert
#      dawid-fuse into an ordinary smaller model (dawid/fused.pt, counted by lightcompress-params
#      into dawid/params.json)
#   2. as soon as the teacher is trained: lightcompress-convert, SVD transfer teacher ->
#      LightFormer, fine-tuned for as many
#      updates as the random-init LightFormer (equal student updates, no early stop for either);
#      sequence-level KD data (the teacher's beam-search translation of the training set,
#      scripts/distill_data.sh) and Hypoformer trained on ground truth + KD data
#   3. each model's checkpoint_best.pt (lowest validation loss; DA-WID: its fused model, from
#      the last checkpoint, where the masks' schedule ends) translates the test split
#      (fairseq-generate, beam 5); scripts/measure_speed.sh times all of them side by side on
#      the CPU (one thread, batch 1, beam 5)
#   4. collect.py: results.md (params, sacreBLEU with signature, chrF, BLEU relative to the
#      teacher, tokens/s, updates, wall-clock) and results.json; plot_curves.py (loss curves)
#      and plot_frontier.py (BLEU vs size vs speed)
#
# Every step skips finished work (train.done, generate-test.txt, speed.json, ...) and an
# interrupted training resumes from its checkpoint_last.pt. TIME_BUDGET=S stops every training
# after S seconds of this invocation (exit status 3: run the same command again to go on), for
# machines that limit one command's time. DRY_RUN=1 prints the pipeline and runs nothing.
#
# Environment (all optional):
#   DATA_DIR       the corpus (l10n_corpus.py output: bin/, raw/test.en)  (default: data/results;
#                  SMALL=1: ~/.cache/lightcompress/data/results)
#   SAVE_ROOT      runs and results  (default: checkpoints/results; SMALL=1:
#                  ~/.cache/lightcompress/results-cpu, outside the checkout)
#   SMALL=1        the CPU plan (cpu_plan.sh, README.md of this folder): 3-3 256-wide models,
#                  fixed updates, two one-thread lanes, one JSON row per finished model in
#                  ROWS_DIR (default lab/results/cpu), greedy KD;
#                  MEASURE_COSTS=N measures every model's tokens/s over N updates instead
#   NUM_GPUS       default: the GPUs nvidia-smi lists (examples/common/lib.sh); 0 = CPU
#   PARALLEL       1: train independent models at the same time (default: 1 on a GPU and with
#                  SMALL=1, else 0)
#   TEACHER_UPDATES / STUDENT_UPDATES / MAX_UPDATE  update caps of the teacher / the two
#                  LightFormers / the other students       (GPU: 3000 / 2500 / 3000)
#   PATIENCE       early stopping: validations without a better loss (default 8)
#   DAWID_SPARSITY DA-WID's target: 1 - student / teacher non-embedding parameters (default: the
#                  LightFormers' non-embedding size: 0.8 with SMALL=1, 0.77 full)
#   DAWID_LR       DA-WID's learning rate (default 2e-4)
#   DAWID_GATE_SCALE  the masks and Lagrange multipliers train at this times DAWID_LR (default:
#                  50, the translation recipe's; SMALL=1: 150, for its 600 updates: at 50 a
#                  600-update run on a toy corpus fused at sparsity 0.63 of its 0.8, at 150 at
#                  0.86)
#   MAX_TOKENS, LR, WARMUP, DROPOUT, SEED  training settings (GPU: 8192, 7e-4, 1000, 0.3, 1)
#   SPEED_RUNS / SPEED_SENTENCES   speed protocol, shortened (default 3 / 20)
#   TIME_BUDGET    seconds for the trainings of this invocation (default: none); a training is
#                  not started with less than MIN_TRAIN_SECONDS (30) left
#   MEASURE_SPEED=0  no speed column (examples/common/lib.sh)
#   WHEELS         folder of wheels to install with pip --no-index --no-deps --target
#   PYTHON         python with torch (default: python, else python3)
#   FP16=1         train with --fp16 on GPUs (default: fp32)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../examples/common/lib.sh
source "$HERE/../../examples/common/lib.sh"
LOG_TAG=results
cd "$REPO_ROOT"

SRC=de TGT=en
[[ "$SMALL" == 0 || "$SMALL" == 1 ]] || die "SMALL must be 0 (the GPU plan) or 1 (the CPU plan), not '$SMALL'"
if [[ "$SMALL" == 1 ]]; then
  # The CPU plan keeps its state outside the checkout (a fresh clone on the same machine
  # resumes it) and writes each finished row into the repository (ROWS_DIR).
  CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/lightcompress"
  DATA_DIR="${DATA_DIR:-$CACHE_ROOT/data/results}"
  SAVE_ROOT="${SAVE_ROOT:-$CACHE_ROOT/results-cpu}"
  ROWS_DIR="${ROWS_DIR:-$HERE/cpu}"
  # sized from measurements on this 2-core machine (README.md of this folder): one thread per
  # training, two trainings at a time
  : "${TEACHER_UPDATES:=650}" "${STUDENT_UPDATES:=350}" "${MAX_UPDATE:=$STUDENT_UPDATES}"
  : "${DAWID_TEACHER_UPDATES:=600}" "${DAWID_TEACHER_LR:=1.5e-3}"
  : "${MAX_TOKENS:=4096}" "${LR:=3e-3}" "${WARMUP:=250}" "${DROPOUT:=0.1}"
  : "${VALIDATE_EVERY:=150}" "${KD_BEAM:=1}" "${DAWID_SPARSITY:=0.8}" "${DAWID_GATE_SCALE:=150}"
  : "${SEARCH_INTERVAL:=25}" "${SEARCH_SETTLE:=2}" "${SEARCH_VALID_BATCHES:=20}"
else
  DATA_DIR="${DATA_DIR:-data/results}"
  ROWS_DIR="${ROWS_DIR:-}"
  SAVE_ROOT="${SAVE_ROOT:-checkpoints/results}"
  : "${TEACHER_UPDATES:=3000}" "${STUDENT_UPDATES:=2500}" "${MAX_UPDATE:=3000}"
  : "${MAX_TOKENS:=8192}" "${LR:=7e-4}" "${WARMUP:=1000}" "${DROPOUT:=0.3}"
  : "${VALIDATE_EVERY:=250}" "${KD_BEAM:=5}" "${DAWID_SPARSITY:=0.77}" "${DAWID_GATE_SCALE:=50}"
fi
DATA_BIN="$DATA_DIR/bin"
: "${PATIENCE:=8}" "${SPEED_RUNS:=3}" "${SPEED_SENTENCES:=20}" "${FP16:=0}"
if ((NUM_GPUS > 0)) || [[ "$SMALL" == 1 ]]; then : "${PARALLEL:=1}"; else : "${PARALLEL:=0}"; fi
[[ "$PARALLEL" == 0 || "$PARALLEL" == 1 ]] || die "PARALLEL must be 0 or 1, not '$PARALLEL'"
TIME_BUDGET="${TIME_BUDGET:-}"
BEAM=5 LENPEN=1.0
START=$SECONDS
if [[ -n "$TIME_BUDGET" ]] && ! [[ "$TIME_BUDGET" =~ ^[1-9][0-9]*$ ]]; then
  die "TIME_BUDGET must be a number of seconds, not '$TIME_BUDGET'"
fi
for v in TEACHER_UPDATES STUDENT_UPDATES MAX_UPDATE PATIENCE MAX_TOKENS SPEED_RUNS SPEED_SENTENCES \
  DAWID_GATE_SCALE; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done
[[ "$DAWID_SPARSITY" =~ ^0?\.[0-9]+$|^0$ ]] ||
  die "DAWID_SPARSITY must be a number in [0, 1), not '$DAWID_SPARSITY'"
: "${DAWID_LR:=2e-4}" "${SEED:=1}"
# every setting is checked here, before hours of training
_positive_number='^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$'
: "${DAWID_TEACHER_UPDATES:=$TEACHER_UPDATES}" "${DAWID_TEACHER_LR:=$LR}"
[[ "$DAWID_TEACHER_UPDATES" =~ ^[1-9][0-9]*$ ]] ||
  die "DAWID_TEACHER_UPDATES must be a positive integer, not '$DAWID_TEACHER_UPDATES'"
for v in LR DAWID_LR DAWID_TEACHER_LR DROPOUT; do
  [[ "${!v}" =~ $_positive_number ]] || die "$v must be a number, not '${!v}'"
done
for v in LR DAWID_LR DAWID_TEACHER_LR; do
  awk -v x="${!v}" 'BEGIN { exit !(x > 0) }' || die "$v must be > 0, not '${!v}'"
done
awk -v x="$DROPOUT" 'BEGIN { exit !(x < 1) }' || die "DROPOUT must be in [0, 1), not '$DROPOUT'"
[[ "$SEED" =~ ^[0-9]+$ ]] || die "SEED must be a non-negative integer, not '$SEED'"
[[ "$NUM_GPUS" =~ ^[0-9]+$ ]] || die "NUM_GPUS must be a non-negative integer, not '$NUM_GPUS'"
for v in WARMUP VALIDATE_EVERY KD_BEAM; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done

# ---------------------------------------------------------------------------------------------
# 0. Tools (from carried wheels on a machine without network) and the corpus
# ---------------------------------------------------------------------------------------------
if [[ -n "${WHEELS:-}" ]]; then
  SITE="$SAVE_ROOT/site"
  if [[ "$SITE" != /* ]]; then SITE="$REPO_ROOT/$SITE"; fi
  if [[ "$DRY_RUN" != 1 && ! -f "$SITE/.installed" ]]; then
    compgen -G "$WHEELS/*.whl" >/dev/null || die "WHEELS=$WHEELS holds no .whl file"
    log "installing $(find "$WHEELS" -maxdepth 1 -name '*.whl' | wc -l) wheels from $WHEELS into $SITE"
    rm -rf "$SITE"
  fi
  if [[ "$DRY_RUN" == 1 || ! -f "$SITE/.installed" ]]; then
    run "$PYTHON" -m pip install --no-index --no-deps --no-compile --quiet --target "$SITE" "$WHEELS"/*.whl
    [[ "$DRY_RUN" == 1 ]] || touch "$SITE/.installed"
  fi
  export PYTHONPATH="$SITE:$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
  USER_DIR="$REPO_ROOT/lightcompress"
fi
if [[ "$DRY_RUN" == 1 ]]; then
  USER_DIR="${USER_DIR:-$REPO_ROOT/lightcompress}"
fi
need_python
need_cmd fairseq-train fairseq-generate
need_module sacrebleu sacrebleu
resolve_user_dir || MISSING+=("lightcompress (make install, or set USER_DIR)")
report_missing
if command -v lightcompress-convert >/dev/null 2>&1; then
  CONVERT=(lightcompress-convert)
else  # carried checkout without console scripts
  CONVERT=("$PYTHON" -m lightcompress.convert.cli)
fi
if command -v lightcompress-params >/dev/null 2>&1; then
  PARAMS=(lightcompress-params)
else
  PARAMS=("$PYTHON" -m lightcompress.measure.params)
fi

if [[ -f "$DATA_BIN/dict.$SRC.txt" && -f "$DATA_DIR/raw/test.$TGT" ]]; then
  log "corpus: $DATA_DIR"
else
  log "corpus: building $DATA_DIR (examples/translation/l10n_corpus.py; cached, rerunnable)"
  run "$PYTHON" examples/translation/l10n_corpus.py --out "$DATA_DIR"
fi

# ---------------------------------------------------------------------------------------------
# The models: one width for the teacher and the models transferred from it
# ---------------------------------------------------------------------------------------------
if [[ "$SMALL" == 1 ]]; then
  LAYERS=(--encoder-layers 3 --decoder-layers 3)
  WIDTH=(--encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024
    --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 --decoder-attention-heads 4)
  LF_RANKS=(--lc-rank 32 --lc-embed-rank 64)
  # pre-LN (no Admin) in the CPU plan: post-LN models barely leave the unigram plateau in its
  # few hundred updates (a post-LN LightFormer 3-3 from random init stood at validation NLL
  # 8.7 bits after 450 updates, 0.7 BLEU; the post-LN teacher at 7.7 after 300)
  HYPO=(--arch hypoformer_iwslt_de_en --encoder-layers 6 --decoder-layers 1 "${WIDTH[@]}"
    --hypo-ffn-rank 32 --admin-init none --encoder-normalize-before --decoder-normalize-before)
  SUB=(--arch subformer --encoder-layers 4 --decoder-layers 4 "${WIDTH[@]}"
    --subformer-sharing sandwich --safe-dim 64)
  SM_RANK=32
else
  LAYERS=(--encoder-layers 6 --decoder-layers 6)
  WIDTH=(--encoder-embed-dim 512 --decoder-embed-dim 512 --encoder-ffn-embed-dim 1024
    --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 --decoder-attention-heads 4)
  LF_RANKS=(--lc-rank 64 --lc-embed-rank 128)
  # the paper's IWSLT'14 Hypoformer (Table 5 row 1: 12-2, HTT embedding and self-attention,
  # rank-64 FFN, Admin) with its preset settings
  # (post-LN: lr 5e-4, as deep post-LN models stalled at 1e-3 on the GPU machine)
  HYPO=(--arch hypoformer_iwslt_de_en --lr 5e-4)
  SUB=(--arch subformer "${LAYERS[@]}" "${WIDTH[@]}" --subformer-sharing sandwich --safe-dim 128)
  SM_RANK=64
fi
PRELN=(--encoder-normalize-before --decoder-normalize-before)
# A pre-LN teacher (it learns several times faster than post-LN in the few hundred updates
# of the CPU plan), and DA-WID's own post-LN teacher (DA-WID's compactors sit around the
# LayerNorms of a post-LN Transformer)
TEACHER=(--arch transformer "${LAYERS[@]}" "${WIDTH[@]}" "${PRELN[@]}" --share-all-embeddings)
LIGHTFORMER=(--arch lightformer "${LAYERS[@]}" "${WIDTH[@]}" "${PRELN[@]}" --share-all-embeddings
  --lc-encoder-groups 0 "${LF_RANKS[@]}")
SMART=(--arch smartformer_iwslt_de_en "${LAYERS[@]}" "${WIDTH[@]}" "${PRELN[@]}"
  --sm-rank "$SM_RANK" --sm-attn all)
# Smartformer's rank search (CPU plan): from rank 2 x SM_RANK, the agent picks each layer's CP
# rank among SEARCH_RANKS every SEARCH_INTERVAL updates (shorter than the paper's, so that it
# takes real decisions within the budget; a layer settles after SEARCH_SETTLE equal actions);
# the fixed-rank row then trains at the rank that gives the searched model's size
SEARCH_RANKS="${SEARCH_RANKS:-$((SM_RANK / 2)),$SM_RANK,$((SM_RANK * 2))}"
SMART_SEARCH=(--arch smartformer_iwslt_de_en "${LAYERS[@]}" "${WIDTH[@]}" "${PRELN[@]}"
  --sm-rank $((SM_RANK * 2)) --sm-attn all --task translation_smartformer --sm-search
  --sm-search-ranks "$SEARCH_RANKS" --sm-search-interval "${SEARCH_INTERVAL:-200}"
  --sm-search-settle "${SEARCH_SETTLE:-5}" --sm-search-valid-batches "${SEARCH_VALID_BATCHES:-0}")
# DA-WID compresses a post-LN Transformer: its teacher is `teacher` in post-LN. The student
# trains as many updates as the LightFormers; its schedule is the translation recipe's
# (examples/translation/dawid/: distillation only for 2,200 of 30,000 updates, the target
# warmed up over 11,000, head and layer masks 6,600 after the dimension masks) scaled to them.
# The default target gives the LightFormers' non-embedding size (DA-WID keeps the embedding
# table, which the paper does not count): SMALL=1 1.11M of the teacher's 5.53M, full 7.17M of
# 31.5M at the corpus's 8,084 types.
DAWID_TEACHER=(--arch transformer "${LAYERS[@]}" "${WIDTH[@]}" --share-all-embeddings)
if [[ "$SMALL" == 1 ]]; then DAWID_TEACHER+=(--lr "$DAWID_TEACHER_LR"); fi
DAWID_FROM=dawid_teacher
DAWID=(--arch dawid --dawid-teacher "$SAVE_ROOT/$DAWID_FROM/checkpoint_best.pt"
  --criterion dawid --dawid-lambda 0.5 --dawid-init data-aware --dawid-calib-tokens 4096
  --dawid-target-sparsity "$DAWID_SPARSITY" --dawid-masks "dim,head,layer"
  --dawid-distill-updates $((STUDENT_UPDATES * 11 / 150))
  --dawid-sparsity-warmup $((STUDENT_UPDATES * 11 / 30))
  --dawid-structure-updates $((STUDENT_UPDATES * 11 / 50)) --dawid-gate-lr-scale "$DAWID_GATE_SCALE"
  --lr "$DAWID_LR")

DEVICE=()
if ((NUM_GPUS == 0)); then
  DEVICE=(--cpu)
fi
# res_train_flags UPDATES EARLY [DAWID]: the shared schedule; EARLY=1 adds early stopping
# (PATIENCE); DAWID=1 leaves out the criterion and the dropout (a DA-WID student has its own
# criterion and keeps its teacher's dropout: --arch dawid has no --dropout)
res_train_flags() {
  TRAIN_FLAGS=(
    "${DEVICE[@]}" --task translation --source-lang "$SRC" --target-lang "$TGT"
    --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0 --lr "$LR"
    --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --warmup-init-lr 1e-7
    --weight-decay 0.0001 --max-tokens "$MAX_TOKENS" --max-update "$1" --seed "$SEED"
    --validate-interval 1000000 --validate-interval-updates "$VALIDATE_EVERY"
    --save-interval 1000000 --save-interval-updates "$VALIDATE_EVERY" --keep-interval-updates 1
    --no-epoch-checkpoints --log-format simple --log-interval 50 --no-progress-bar
    --num-workers 0 --data-buffer-size 0
  )
  if [[ "$2" == 1 ]]; then TRAIN_FLAGS+=(--patience "$PATIENCE"); fi
  if [[ "${3:-0}" != 1 ]]; then
    TRAIN_FLAGS+=(--criterion label_smoothed_cross_entropy --label-smoothing 0.1 --dropout "$DROPOUT")
  fi
  # one GPU per training (fairseq would otherwise spread each over every visible GPU, and
  # trainings running side by side would contend for the same ports)
  if ((NUM_GPUS > 0)); then TRAIN_FLAGS+=(--distributed-world-size 1); fi
  if ((NUM_GPUS > 0)) && [[ "$FP16" == 1 ]]; then TRAIN_FLAGS+=(--fp16); fi
}

# ---------------------------------------------------------------------------------------------
# Steps: each skips what finished before
# ---------------------------------------------------------------------------------------------
INTERRUPTED=0
res_remaining() { echo $((TIME_BUDGET - (SECONDS - BUDGET_START))); }

# res_check_last DIR: an interrupted save can leave a damaged checkpoint_last.pt; resume from
# checkpoint_best.pt instead (or from scratch without one).
res_check_last() {
  local last="$1/checkpoint_last.pt"
  [[ -f "$last" ]] || return 0
  # torch.save writes a zip archive whose directory comes last: a cut file does not open
  if ! "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).close()' "$last" 2>/dev/null; then
    log "warning: $last cannot be loaded (interrupted while saving?): resuming from checkpoint_best.pt"
    rm -f "$last"
    if [[ -f "$1/checkpoint_best.pt" ]]; then cp "$1/checkpoint_best.pt" "$last"; fi
  fi
}

# res_train NAME UPDATES EARLY [fairseq-train flags...]: SAVE_ROOT/NAME, unless train.done is there;
# the model's flags come after the shared schedule (and win over it).
# The output goes to NAME/train.log (appended: a resumed run continues it); a run stopped by
# TIME_BUDGET leaves no train.done and resumes next time.
res_train() {
  local name="$1" updates="$2" early="$3" dir="$SAVE_ROOT/$1" rc=0 t0=$SECONDS limit=() dawid=0
  shift 3
  if [[ " $* " == *" --dawid-teacher "* ]]; then dawid=1; fi
  if [[ "$DRY_RUN" != 1 && -f "$dir/train.done" ]]; then
    log "$name: trained before (remove $dir/train.done to train again)"
    return 0
  fi
  res_train_flags "$updates" "$early" "$dawid"
  if [[ -n "$TIME_BUDGET" ]]; then
    if (($(res_remaining) < ${MIN_TRAIN_SECONDS:-30})); then
      log "$name: no time left in TIME_BUDGET; run again to train it"
      return 3
    fi
    limit=(timeout -s INT -k 60 "$(res_remaining)")
  fi
  if [[ "$DRY_RUN" == 1 ]]; then
    run "${limit[@]}" fairseq-train "$DATA_BIN" --user-dir "$USER_DIR" --save-dir "$dir" \
      "${TRAIN_FLAGS[@]}" "$@"
    echo "  (output appended to $dir/train.log)"
    return 0
  fi
  mkdir -p "$dir"
  res_check_last "$dir"
  log "$name: training (at most $updates updates$([[ "$early" == 1 ]] && echo ", early stopping after $PATIENCE validations without improvement"); log: $dir/train.log)"
  # (in the background and waited for: bash runs the INT/TERM trap, which ends the trainings,
  # only after a foreground child has ended, but at once during `wait`)
  "${limit[@]}" fairseq-train "$DATA_BIN" --user-dir "$USER_DIR" --save-dir "$dir" \
    "${TRAIN_FLAGS[@]}" "$@" >>"$dir/train.log" 2>&1 &
  wait $! || rc=$?
  echo $((SECONDS - t0)) >>"$dir/train.seconds"
  if ((rc == 0)); then
    touch "$dir/train.done"
    log "$name: done ($(grep -c '| valid |' "$dir/train.log" || true) validations; $(tail -n 1 "$dir/train.log" | cut -c1-150))"
    return 0
  fi
  if [[ -n "$TIME_BUDGET" ]] && ((rc == 124 || rc == 130 || rc == 137)); then
    log "$name: stopped by TIME_BUDGET; the next run resumes it from $dir/checkpoint_last.pt"
    return 3
  fi
  log "$name: fairseq-train failed (exit $rc); the end of $dir/train.log:"
  tail -n 20 "$dir/train.log" >&2
  return 1
}

# res_in_parallel CMD...: run CMD in the background when PARALLEL=1 (collected by res_wait_all)
PIDS=()
res_in_parallel() {
  if [[ "$PARALLEL" == 1 && "$DRY_RUN" != 1 ]]; then
    "$@" &
    PIDS+=($!)
  else
    "$@" || res_note_rc $?
  fi
}
res_note_rc() {
  if (($1 == 3)); then INTERRUPTED=1; else die "a step failed (exit $1)"; fi
}
res_wait_all() {
  local pid rc
  for pid in "${PIDS[@]}"; do
    rc=0
    wait "$pid" || rc=$?
    ((rc == 0)) || res_note_rc "$rc"
  done
  PIDS=()
}

# res_checkpoint NAME: the checkpoint of NAME that is evaluated and timed: checkpoint_best.pt
# (lowest validation loss), DA-WID's fused model (from its last checkpoint, see res_dawid)
res_checkpoint() {
  if [[ "$1" == dawid ]]; then echo "$SAVE_ROOT/dawid/fused.pt"; else echo "$SAVE_ROOT/$1/checkpoint_best.pt"; fi
}

# res_evaluate NAME: translate the test split with NAME's checkpoint (res_checkpoint; skipped
# when generate-test.txt exists; written atomically)
res_evaluate() {
  local dir="$SAVE_ROOT/$1"
  if [[ "$DRY_RUN" != 1 ]]; then
    [[ -f "$dir/generate-test.txt" ]] && return 0
    if [[ ! -f "$dir/train.done" ]]; then
      log "$1: not trained (no $dir/train.done): left out of the table"
      return 0
    fi
  fi
  log "$1: translating the test split"
  run_to "$dir/generate-test.txt" fairseq-generate "$DATA_BIN" --user-dir "$USER_DIR" \
    "${DEVICE[@]}" --path "$(res_checkpoint "$1")" --task translation --source-lang "$SRC" \
    --target-lang "$TGT" --gen-subset test --beam "$BEAM" --lenpen "$LENPEN" --batch-size 128 \
    --required-batch-size-multiple 1 --post-process sentencepiece
}

# res_dawid: DA-WID's chain: its post-LN teacher (early stopping, as `teacher`), the DA-WID
# student (fixed updates), fused from its last checkpoint (the masks' final structure: the
# lowest validation loss of a run whose sparsity rises is an early, barely pruned checkpoint)
# and counted. The fusion and the count are not redone once done, nor once the student's test
# translation exists (a SAVE_ROOT copied back without checkpoints).
res_dawid() {
  local dir="$SAVE_ROOT/dawid" rc=0
  if [[ "$SMALL" == 1 ]]; then  # (fixed updates, as every model of the CPU plan)
    res_train dawid_teacher "$DAWID_TEACHER_UPDATES" 0 "${DAWID_TEACHER[@]}" || return $?
    cpu_evaluate dawid_teacher || return 1
    cpu_row dawid_teacher || return 1
  else
    res_train dawid_teacher "$TEACHER_UPDATES" 1 "${DAWID_TEACHER[@]}" || return $?
  fi
  res_train dawid "$STUDENT_UPDATES" 0 "${DAWID[@]}" || return $?
  if [[ "$DRY_RUN" == 1 || (! -f "$dir/fused.pt" && ! -f "$dir/generate-test.txt") ]]; then
    log "dawid: fusing the masks and compactors into an ordinary smaller model ($dir/fused.pt)"
    run "${CONVERT[@]}" dawid-fuse -i "$dir/checkpoint_last.pt" -o "$dir/fused.pt" --quiet || rc=$?
    if ((rc != 0)); then
      log "dawid: lightcompress-convert dawid-fuse failed (exit $rc)"
      return 1
    fi
  fi
  if [[ "$DRY_RUN" == 1 || ! -s "$dir/params.json" ]]; then
    run_to "$dir/params.json" "${PARAMS[@]}" --path "$dir/fused.pt" || rc=$?
    if ((rc != 0)); then
      log "dawid: lightcompress-params --path $dir/fused.pt failed (exit $rc)"
      return 1
    fi
  fi
}

if [[ "$SMALL" == 1 ]]; then
  MODELS=(teacher lightformer_svd lightformer_random hypoformer_kd hypoformer subformer
    smartformer_search smartformer dawid_teacher dawid)
else
  MODELS=(teacher lightformer_svd lightformer_random hypoformer_kd subformer smartformer
    dawid_teacher dawid)
fi
log "plan: $([[ "$SMALL" == 1 ]] && echo "SMALL (CPU-sized)" || echo full), NUM_GPUS=$NUM_GPUS, PARALLEL=$PARALLEL, runs in $SAVE_ROOT"

# 1. the models that do not need the teacher (in the background with PARALLEL=1), then the
#    teacher (TIME_BUDGET counts from here)
BUDGET_START=$SECONDS
# one run per SAVE_ROOT: a second is refused while the first lives (its pid named); stopping
# run.sh (Ctrl-C, kill) ends its trainings, which run in its process group
if [[ "$DRY_RUN" != 1 ]]; then
  mkdir -p "$SAVE_ROOT"
  exec 9>>"$SAVE_ROOT/run.lock"
  if ! flock -n 9; then
    die "another run.sh (pid $(cat "$SAVE_ROOT/run.pid" 2>/dev/null || echo '?')) is working in $SAVE_ROOT; stop it first or wait for it"
  fi
  echo $$ >"$SAVE_ROOT/run.pid"
  # (lib.sh's lib_stop: its own descendants end, not its process group: a program that
  # started run.sh lives on)
  trap lib_stop INT TERM
fi
# where the models trained (the table names it, also when it is redone on another machine)
if [[ "$DRY_RUN" != 1 && ! -s "$SAVE_ROOT/machine.txt" ]]; then
  mkdir -p "$SAVE_ROOT"
  gpu="$(nvidia-smi -L 2>/dev/null | head -n 1 | sed -E 's/^GPU [0-9]+: //; s/ \(UUID.*//' || true)"
  cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || true)"
  echo "$(date -u +%Y-%m-%d), $(uname -n) ($(uname -m), $(nproc 2>/dev/null || echo '?') CPUs${cpu:+ $cpu}${gpu:+, $gpu}, NUM_GPUS=$NUM_GPUS)" >"$SAVE_ROOT/machine.txt"
fi
if [[ "$SMALL" == 1 ]]; then
  # shellcheck source-path=SCRIPTDIR source=cpu_plan.sh
  source "$HERE/cpu_plan.sh"
  if [[ -n "${MEASURE_COSTS:-}" ]]; then
    [[ "$MEASURE_COSTS" =~ ^[1-9][0-9]*$ ]] || die "MEASURE_COSTS must be a number of updates, not '$MEASURE_COSTS'"
    log "measuring: $MEASURE_COSTS updates of each model of the CPU plan (SAVE_ROOT/costs.json)"
    cpu_measure_costs "$MEASURE_COSTS"
    exit 0
  fi
  cpu_plan_main
  exit 0
fi
res_in_parallel res_train lightformer_random "$STUDENT_UPDATES" 0 "${LIGHTFORMER[@]}"
res_in_parallel res_train subformer "$MAX_UPDATE" 1 "${SUB[@]}" --share-all-embeddings
res_in_parallel res_train smartformer "$MAX_UPDATE" 1 "${SMART[@]}" --share-all-embeddings
res_in_parallel res_dawid
res_train teacher "$TEACHER_UPDATES" 1 "${TEACHER[@]}" || res_note_rc $?

# 2. what needs the trained teacher (while the others may still train), then wait for all
if [[ "$DRY_RUN" == 1 || -f "$SAVE_ROOT/teacher/train.done" ]]; then
  INIT="$SAVE_ROOT/lightformer_init.pt"
  # (not needed again once its student is trained: a SAVE_ROOT copied without *.pt or kd-bin
  # only redoes the table)
  if [[ "$DRY_RUN" == 1 || (! -f "$INIT" && ! -f "$SAVE_ROOT/lightformer_svd/train.done") ]]; then
    log "SVD transfer: teacher -> LightFormer ($INIT)"
    run "${CONVERT[@]}" -i "$SAVE_ROOT/teacher/checkpoint_best.pt" -o "$INIT" --force "${LIGHTFORMER[@]}"
  fi
  res_in_parallel res_train lightformer_svd "$STUDENT_UPDATES" 0 "${LIGHTFORMER[@]}" --finetune-from-model "$INIT"
  KD_BIN="$SAVE_ROOT/kd-bin"
  # (errors are returned explicitly: set -e does not act inside a function called with ||)
  res_distill_then_train() {
    if [[ "$DRY_RUN" == 1 || (! -f "$KD_BIN/.done" && ! -f "$SAVE_ROOT/hypoformer_kd/train.done") ]]; then
      log "KD data: the teacher translates the training set (beam $KD_BEAM) -> $KD_BIN"
      run "$REPO_ROOT/scripts/distill_data.sh" "$DATA_BIN" --path "$SAVE_ROOT/teacher/checkpoint_best.pt" \
        --out-dir "$KD_BIN" --user-dir "$USER_DIR" --beam "$KD_BEAM" --lenpen "$LENPEN" \
        --max-tokens $((MAX_TOKENS * 2)) --num-shards 0 \
        --generate-args "--max-len-a 1.2 --max-len-b 10" "${DEVICE[@]}" || {
        log "KD data: scripts/distill_data.sh failed (exit $?)"
        return 1
      }
      [[ "$DRY_RUN" == 1 ]] || touch "$KD_BIN/.done"
    fi
    res_train hypoformer_kd "$MAX_UPDATE" 1 "${HYPO[@]}" --task translation_seqkd \
      --kd-data-mode both --kd-distilled-data "$KD_BIN"
  }
  res_in_parallel res_distill_then_train
else
  log "the teacher has not finished: SVD transfer and KD wait for the next run"
fi
res_wait_all
if ((INTERRUPTED)); then
  log "TIME_BUDGET spent after $((SECONDS - START)) s: run the same command again to go on"
  exit 3
fi

# 3. test translations and the speed column
for m in "${MODELS[@]}"; do res_evaluate "$m"; done
SPEED="$SAVE_ROOT/speed.json"
if [[ "$MEASURE_SPEED" != 1 ]]; then
  log "MEASURE_SPEED=$MEASURE_SPEED: no speed column"
elif [[ "$DRY_RUN" == 1 || ! -f "$SPEED" ]]; then
  paths=""
  for m in "${MODELS[@]}"; do paths+="${paths:+,}$m=$(res_checkpoint "$m")"; done
  log "speed: tokens/s of every model on the CPU (one thread, batch 1, beam $BEAM)"
  run_log "$SAVE_ROOT/speed.txt" bash scripts/measure_speed.sh --data "$DATA_BIN" --user-dir "$USER_DIR" \
    --path "$paths" --src-len 12 --num-sentences "$SPEED_SENTENCES" --runs "$SPEED_RUNS" \
    --threads 1 --beam "$BEAM" --lenpen "$LENPEN" --max-len-a 1.2 --max-len-b 10 \
    --json "$SPEED" --quiet
fi

# 4. the table and the plots (redone when a plot is missing or a translation, log or speed is newer)
RESULTS="$SAVE_ROOT/results.md"
if [[ "$DRY_RUN" != 1 && -f "$RESULTS" && -f "$SAVE_ROOT/curves.png" && -f "$SAVE_ROOT/frontier.png" &&
  -z "$(find "$SAVE_ROOT" -maxdepth 2 \( -name generate-test.txt \
  -o -name train.log -o -name speed.json -o -name params.json \) -newer "$RESULTS" 2>/dev/null | head -n 1)" ]]; then
  log "$RESULTS is up to date"
else
  run "$PYTHON" "$HERE/collect.py" --save-root "$SAVE_ROOT" --ref "$DATA_DIR/raw/test.$TGT" \
    --speed "$SPEED" --corpus-stats "$DATA_DIR/stats.json" \
    --plan "$([[ "$SMALL" == 1 ]] && echo small || echo full)" \
    --out "$SAVE_ROOT/results.tmp.md" --json "$SAVE_ROOT/results.json"
  logs=() labels=""
  for m in "${MODELS[@]}"; do
    # (not DA-WID's student: its loss is its own criterion's, on another scale)
    if [[ "$m" != dawid ]] && [[ "$DRY_RUN" == 1 || -s "$SAVE_ROOT/$m/train.log" ]]; then
      logs+=("$SAVE_ROOT/$m/train.log") labels+="${labels:+,}$m"
    fi
  done
  if [[ "$DRY_RUN" == 1 ]] || "$PYTHON" -c 'import importlib.util, sys
sys.exit(importlib.util.find_spec("matplotlib") is None)' 2>/dev/null; then
    run "$PYTHON" scripts/plot_curves.py "${logs[@]}" --labels "$labels" \
      --title "results corpus: loss curves" --out "$SAVE_ROOT/curves.png"
    run "$PYTHON" scripts/plot_frontier.py "$SAVE_ROOT/results.json" \
      --title "results corpus: BLEU vs size vs speed" --out "$SAVE_ROOT/frontier.png"
  else
    log "matplotlib not installed: no plots (run this script again where it is, with SAVE_ROOT copied there: finished steps are skipped)"
  fi
  # written last: its date says the table and plots are complete
  run mv "$SAVE_ROOT/results.tmp.md" "$RESULTS"
fi
log "done in $((SECONDS - START)) s: $SAVE_ROOT/results.md"
