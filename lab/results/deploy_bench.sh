#!/usr/bin/env bash
# The deployment benchmark on the results run's trained models (the teacher and the SVD
# LightFormer that remeasure.sh retrains with the plan's own commands, and its deep-encoder /
# shallow-decoder LightFormer, SVD-transferred and fine-tuned the same way): engine x model x
# precision x shortlist, batch 1 and batch 32, on the test split's sentences at their natural
# lengths (--natural), one thread, beam 5; model-only and raw text to raw text (--text:
# sentencepiece inside the timed path); BLEU, size on disk and peak memory.
#
#   bash lab/results/remeasure.sh      # the models, once (about an hour)
#   bash lab/results/deploy_bench.sh   # about 30 minutes on 2 cores; resumes
#
# Writes OUT/deploy-b1.json and OUT/deploy-b32.json (measure_speed --json; the two runs go side
# by side, one core each), then OUT/deploy-b32-sorted.json (batch 32, batches longest first,
# alone), and copies them to ROWS_DIR (their report: python lab/bench/deploy_report.py
# ROWS_DIR/deploy-b1.json ROWS_DIR/deploy-b32.json). Settings (environment): SAVE_ROOT (the
# models, default ~/.cache/lightcompress/remeasure), DATA_DIR (the plan's corpus), OUT (default
# ~/.cache/lightcompress/deploy-bench), ROWS_DIR (default: the committed rows), B1_SENTENCES
# (150), B32_SENTENCES (640), RUNS (3), SEQUENTIAL=1 (batch 1, then batch 32, each alone on
# the machine), MODELS / TAG (below), SHORTLIST_ARGS (lightcompress-shortlist's list sizes,
# default "--k 100 --frequent 100", e.g. "--k 20 --frequent 30"), DRY_RUN=1 (print the commands,
# run nothing). The shortlist is used by the ONNX Runtime and fast-path rows and, as its
# vocabulary map (vmap), by CTranslate2's: the same candidates on every engine.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/lightcompress"
SAVE_ROOT="${SAVE_ROOT:-$CACHE_ROOT/remeasure}"
DATA_DIR="${DATA_DIR:-$CACHE_ROOT/data/results}"
OUT="${OUT:-$CACHE_ROOT/deploy-bench}"
ROWS_DIR="${ROWS_DIR:-$HERE/cpu}"
B1_SENTENCES="${B1_SENTENCES:-150}"
B32_SENTENCES="${B32_SENTENCES:-640}"
RUNS="${RUNS:-3}"
SEQUENTIAL="${SEQUENTIAL:-0}"
DRY_RUN="${DRY_RUN:-0}"
PYTHON="${PYTHON:-python}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONWARNINGS=ignore
cd "$REPO_ROOT"
db_log() { echo "[deploy_bench $(date -u +%H:%M:%S)] $*" >&2; }

# MODELS (names of SAVE_ROOT/NAME/checkpoint_best.pt, DA-WID's SAVE_ROOT/dawid/fused.pt as the
# plan scores it; space-separated; the dense teacher first, CTranslate2 exports the dense ones)
# and TAG (appended to the copied files' names), e.g. the other rows of remeasure.sh OTHERS=1
# and DAWID=1:
#   MODELS="teacher hypoformer subformer smartformer" TAG=-others OUT=... deploy_bench.sh
#   MODELS="dawid_teacher dawid" TAG=-dawid OUT=... deploy_bench.sh
# SORTED=0 skips the run with sorted batches.
read -r -a MODELS <<<"${MODELS:-teacher lightformer_svd lightformer_shallow}"
TAG="${TAG:-}"
((${#MODELS[@]} > 0)) || { echo "deploy_bench.sh: MODELS names no model" >&2; exit 2; }
for m in "${MODELS[@]}"; do
  [[ "$m" =~ ^[A-Za-z0-9_]+$ ]] || { echo "deploy_bench.sh: MODELS: '$m' is not a model name (letters, digits, _)" >&2; exit 2; }
done
[[ "$TAG" =~ ^[A-Za-z0-9_-]*$ ]] || { echo "deploy_bench.sh: TAG '$TAG' may hold only letters, digits, _ and -" >&2; exit 2; }
SORTED="${SORTED:-1}"
SHORTLIST_ARGS="${SHORTLIST_ARGS:---k 100 --frequent 100}"
[[ "$SHORTLIST_ARGS" =~ ^(--(k|frequent)\ [1-9][0-9]*\ ?)+$ ]] || {
  echo "deploy_bench.sh: SHORTLIST_ARGS must be --k N and/or --frequent N, not '$SHORTLIST_ARGS'" >&2
  exit 2
}
[[ "$SORTED" == 0 || "$SORTED" == 1 ]] || { echo "deploy_bench.sh: SORTED must be 0 or 1, not '$SORTED'" >&2; exit 2; }
db_ckpt() { if [[ "$1" == dawid ]]; then echo "$SAVE_ROOT/dawid/fused.pt"; else echo "$SAVE_ROOT/$1/checkpoint_best.pt"; fi; }
models=""
for m in "${MODELS[@]}"; do models+="${models:+,}$m=$(db_ckpt "$m")"; done
if [[ "$DRY_RUN" != 1 ]]; then
  for m in "${MODELS[@]}"; do
    [[ -f "$(db_ckpt "$m")" ]] || {
      echo "deploy_bench.sh: $(db_ckpt "$m") is missing: run remeasure.sh first" >&2
      exit 2
    }
  done
  mkdir -p "$OUT"
fi

# db_step NAME COMMAND: run a command once (its output in OUT/NAME.txt); DRY_RUN prints it
db_step() {
  local name="$1" cmd="$2"
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "+ $cmd"
    return 0
  fi
  [[ -f "$OUT/$name.done" ]] && return 0
  db_log "$name"
  eval "$cmd" >"$OUT/$name.txt" 2>"$OUT/$name.log"
  touch "$OUT/$name.done"
}

db_step shortlist "$PYTHON -c 'from lightcompress.deploy.shortlist_build import cli_main; cli_main()' --data $DATA_DIR/bin $SHORTLIST_ARGS -o $OUT/vocab-shortlist.txt"
# the lab's measure_speed (lab/measure/measure_speed.py: the product's, with --text and --memory),
# one thread as scripts/measure_speed.sh sets it
measure="OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1} $PYTHON lab/measure/measure_speed.py"
common="--data $DATA_DIR/bin --user-dir $REPO_ROOT/lightcompress --path $models --natural --threads 1 --beam 5 --lenpen 1.0 --max-len-a 1.2 --max-len-b 10 --runs $RUNS --onnx --ct2 --int8-large --compare-int8 --shortlist $OUT/vocab-shortlist.txt --text $DATA_DIR/spm/spm.model --quiet"
b1="$measure $common --num-sentences $B1_SENTENCES --timing-batch-size 1 --bleu --post-process sentencepiece --memory --json $OUT/deploy-b1.json"
b32="$measure $common --num-sentences $B32_SENTENCES --timing-batch-size 32 --json $OUT/deploy-b32.json"
# batch 32 again with the batches longest first (as the translators and fairseq-generate batch
# a file; every engine gets the same batches), after the other two
b32s="$measure $common --num-sentences $B32_SENTENCES --timing-batch-size 32 --sort-batches --json $OUT/deploy-b32-sorted.json"
if [[ "$DRY_RUN" == 1 ]]; then
  db_step b1 "$b1"
  db_step b32 "$b32"
  [[ "$SORTED" == 0 ]] || db_step b32-sorted "$b32s"
  exit 0
fi
if [[ "$SEQUENTIAL" == 1 ]]; then  # one run at a time: the other core stays idle
  db_step b1 "$b1"
  db_step b32 "$b32"
else
  db_step b1 "$b1" & p1=$!
  db_step b32 "$b32" & p2=$!
  wait "$p1"
  wait "$p2"
fi
[[ "$SORTED" == 0 ]] || db_step b32-sorted "$b32s"
suffix=""
[[ "$SEQUENTIAL" == 1 ]] && suffix="-alone"
suffix+="$TAG"
cp "$OUT/deploy-b1.json" "$ROWS_DIR/deploy-b1$suffix.json"
cp "$OUT/deploy-b32.json" "$ROWS_DIR/deploy-b32$suffix.json"
[[ "$SORTED" == 0 ]] || cp "$OUT/deploy-b32-sorted.json" "$ROWS_DIR/deploy-b32-sorted$suffix.json"
db_log "done: $ROWS_DIR/deploy-b1$suffix.json, deploy-b32$suffix.json$([[ "$SORTED" == 0 ]] || echo ", deploy-b32-sorted$suffix.json")"
