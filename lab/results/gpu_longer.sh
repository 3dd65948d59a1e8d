#!/usr/bin/env bash
# The deployment benchmark's models (remeasure.sh's: the CPU plan's shapes, flags and data)
# trained for longer on one GPU, side by side, to bring back for deploy_bench.sh.
#
# After the CPU plan's 350-650 updates two of the table's compressed models do not translate
# (the Hypoformer repeats a word, the Subformer emits one token), so their deployment figures
# time degenerate outputs. This script runs remeasure.sh's own training commands (its dry run
# with OTHERS=1: the teacher, the SVD LightFormer 3-3 and 3-1, Hypoformer, Subformer and the
# fixed-rank Smartformer; every flag of the plan kept), with only two things changed: the
# update caps are raised to MAX_UPDATE and each training stops after a wall-clock budget
# (fairseq's own --stop-time-hours: it validates and saves before it stops), so that the run
# fits a GPU lease. Then each model's checkpoint_best.pt is packed for the trip back
# (half_checkpoint.py pack: no optimizer state, weights in float16), with the training logs.
#
#   bash lab/results/gpu_longer.sh           # on the GPU machine
#   python lab/results/half_checkpoint.py unpack OUT SAVE_ROOT   # back here
#   SAVE_ROOT=... MODELS="teacher lightformer_svd ..." bash lab/results/deploy_bench.sh
#
# Phase A: the teacher, Hypoformer, Subformer and Smartformer train side by side; the teacher
# stops after TEACHER_SECONDS. Phase B: the two SVD transfers from the teacher's best checkpoint,
# then the two LightFormers train for STUDENT_SECONDS while the others go on; those stop after
# TEACHER_SECONDS + STUDENT_SECONDS.
#
# Settings (environment): DATA_DIR (holding bin/ with train and valid; default the plan's
# corpus), SAVE_ROOT (default
# $TMPDIR/lightcompress-longer), OUT (packed checkpoints and logs;
# default SAVE_ROOT/out), WHEELS (a folder of wheels to install first, fetch-wheels.sh's, for a
# machine without fairseq or network), TEACHER_SECONDS (200), STUDENT_SECONDS (180), MAX_UPDATE
# (the cap of every training, 20000), VALIDATE_EVERY (500), THREADS (CPU threads per training,
# 2), MODELS (a subset of the six, space-separated; the LightFormers need the teacher),
# EXTRA_ARGS (fairseq flags appended to every training command, e.g. another --lr),
# ALLOW_CPU=1 (train on the CPU when no GPU is visible: a smoke test), DRY_RUN=1 (print the
# commands, run nothing).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/lightcompress"
DATA_DIR="${DATA_DIR:-$CACHE_ROOT/data/results}"
SAVE_ROOT="${SAVE_ROOT:-${TMPDIR:-/tmp}/lightcompress-longer}"
OUT="${OUT:-$SAVE_ROOT/out}"
DRY_RUN="${DRY_RUN:-0}"
TEACHER_SECONDS="${TEACHER_SECONDS:-200}"
STUDENT_SECONDS="${STUDENT_SECONDS:-180}"
CAP="${MAX_UPDATE:-20000}"
VALIDATE_EVERY="${VALIDATE_EVERY:-500}"
THREADS="${THREADS:-2}"
gl_log() { echo "[gpu_longer $(date -u +%H:%M:%S)] $*" >&2; }
gl_die() { echo "gpu_longer.sh: $*" >&2; exit 2; }
[[ "$CAP" =~ ^[1-9][0-9]*$ ]] || gl_die "MAX_UPDATE must be a positive integer, not '$CAP'"
for v in TEACHER_SECONDS STUDENT_SECONDS VALIDATE_EVERY THREADS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || gl_die "$v must be a positive integer, not '${!v}'"
done
[[ "$DRY_RUN" == 0 || "$DRY_RUN" == 1 ]] || gl_die "DRY_RUN must be 0 or 1, not '$DRY_RUN'"
[[ "$DRY_RUN" == 1 || -f "$DATA_DIR/bin/dict.de.txt" ]] || gl_die "$DATA_DIR/bin has no dict.de.txt (DATA_DIR: the corpus's folder)"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" PYTHONWARNINGS=ignore
if [[ -z "${PYTHON:-}" ]]; then
  if command -v python >/dev/null 2>&1; then PYTHON=python; else PYTHON=python3; fi
fi
export PYTHON
cd "$REPO_ROOT"

# fairseq from carried wheels (a GPU machine without network), as run.sh's WHEELS does
if [[ -n "${WHEELS:-}" && "$DRY_RUN" != 1 ]]; then
  compgen -G "$WHEELS/*.whl" >/dev/null || gl_die "WHEELS=$WHEELS holds no .whl file"
  SITE="$SAVE_ROOT/site"
  if [[ ! -f "$SITE/.installed" ]]; then
    gl_log "installing $(find "$WHEELS" -maxdepth 1 -name '*.whl' | wc -l) wheels into $SITE"
    rm -rf "$SITE"
    "$PYTHON" -m pip install --no-index --no-deps --no-compile --quiet --target "$SITE" "$WHEELS"/*.whl
    touch "$SITE/.installed"
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
fi
# the checkout's code for every command (the trainings' --user-dir is the checkout's too)
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [[ "$DRY_RUN" != 1 ]] && ! command -v lightcompress-convert >/dev/null 2>&1; then
  # a checkout without its console scripts: the converter's command as the dry run names it
  mkdir -p "$SAVE_ROOT/bin"
  printf '#!/bin/sh\nexec %s -m lightcompress.convert.cli "$@"\n' "$PYTHON" >"$SAVE_ROOT/bin/lightcompress-convert"
  chmod +x "$SAVE_ROOT/bin/lightcompress-convert"
  export PATH="$SAVE_ROOT/bin:$PATH"
fi
# remeasure.sh's commands (from run.sh's SMALL=1 dry run), the caps raised to MAX_UPDATE
plan="$(SAVE_ROOT="$SAVE_ROOT" DATA_DIR="$DATA_DIR" DRY_RUN=1 OTHERS=1 TEACHER_UPDATES="$CAP" \
  STUDENT_UPDATES="$CAP" MAX_UPDATE="$CAP" SHALLOW_UPDATES="$CAP" \
  VALIDATE_EVERY="$VALIDATE_EVERY" bash "$HERE/remeasure.sh" 2>&1)" ||
  { echo "$plan" >&2; gl_die "remeasure.sh's dry run failed"; }
gl_pick() {  # PATTERN: the one printed command matching PATTERN, without "+ "
  local line
  line="$(grep -E "$1" <<<"$plan" | head -n 1)"
  [[ -n "$line" ]] || gl_die "remeasure.sh's dry run has no command matching $1"
  printf '%s\n' "${line#+ }"
}
gl_train_cmd() {  # NAME SECONDS: NAME's training command, stopped by fairseq after SECONDS
  local cmd
  cmd="$(gl_pick "^\+ fairseq-train .*--save-dir $SAVE_ROOT/$1 ")"
  [[ "$cmd" == *"--max-update $CAP "* ]] || gl_die "$1's command has no --max-update $CAP: $cmd"
  [[ "$cmd" != *"--cpu"* || "${ALLOW_CPU:-0}" == 1 || "$DRY_RUN" == 1 ]] ||
    gl_die "$1's command trains on the CPU (no GPU visible to nvidia-smi; ALLOW_CPU=1 to go on anyway)"
  printf '%s --stop-time-hours %s%s\n' "$cmd" "$(awk -v s="$2" 'BEGIN { printf "%.6f", s / 3600 }')" \
    "$( ((${#EXTRA[@]} == 0)) || printf ' %q' "${EXTRA[@]}")"
}
declare -A CONVERT=(  # each LightFormer's SVD transfer from the teacher, and its log
  [lightformer_svd]="$(gl_pick "^\+ lightcompress-convert .*lightformer_init\.pt")"
  [lightformer_shallow]="$(gl_pick "^\+ lightcompress-convert .*lightformer_shallow_init\.pt")"
)
declare -A CONVERT_LOG=([lightformer_svd]=convert.log [lightformer_shallow]=convert-shallow.log)
ALL="teacher lightformer_svd lightformer_shallow hypoformer subformer smartformer"
read -r -a MODELS <<<"${MODELS:-$ALL}"
A_MODELS=() B_MODELS=() TEACHER=0
for m in "${MODELS[@]}"; do
  case "$m" in
    teacher) TEACHER=1 ;;
    lightformer_svd | lightformer_shallow) B_MODELS+=("$m") ;;
    hypoformer | subformer | smartformer) A_MODELS+=("$m") ;;
    *) gl_die "MODELS: '$m' is not one of: $ALL" ;;
  esac
done
((TEACHER == 1 || ${#B_MODELS[@]} == 0)) || gl_die "MODELS: ${B_MODELS[*]} start from the teacher: name teacher too"
read -r -a EXTRA <<<"${EXTRA_ARGS:-}"

# gl_run NAME COMMAND [HARD_LIMIT]: run COMMAND (a printed, shell-quoted line) into NAME/train.log
gl_run() {
  local name="$1" cmd="$2" limit=()
  if [[ -n "${3:-}" ]]; then limit=(timeout -s INT -k 30 "$3"); fi
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "+ ${limit[*]}${limit[*]:+ }$cmd > $SAVE_ROOT/$name/train.log"
    return 0
  fi
  mkdir -p "$SAVE_ROOT/$name"
  local rc=0
  eval "${limit[*]} $cmd" >>"$SAVE_ROOT/$name/train.log" 2>&1 || rc=$?
  gl_log "$name: exit $rc; $(grep -E '\| valid \|' "$SAVE_ROOT/$name/train.log" | tail -n 1 | cut -c1-160)"
  return "$rc"
}

AB=$((TEACHER_SECONDS + STUDENT_SECONDS))
# every command made (and checked) before anything starts
declare -A CMD SECS
for m in "${MODELS[@]}"; do
  case "$m" in
    teacher) SECS[$m]="$TEACHER_SECONDS" ;;
    lightformer_*) SECS[$m]="$STUDENT_SECONDS" ;;
    *) SECS[$m]="$AB" ;;
  esac
  CMD[$m]="$(gl_train_cmd "$m" "${SECS[$m]}")" || exit 2
done
# gl_start NAME: NAME's training in the background (printed in order by a dry run)
gl_start() {
  if [[ "$DRY_RUN" == 1 ]]; then
    gl_run "$1" "${CMD[$1]}" $((SECS[$1] + 120))
  else
    gl_run "$1" "${CMD[$1]}" $((SECS[$1] + 120)) &
    pids+=($!)
  fi
}
[[ "$DRY_RUN" == 1 ]] || { mkdir -p "$SAVE_ROOT" "$OUT"; nvidia-smi -L >"$SAVE_ROOT/machine.txt" 2>&1 || true; }
gl_log "phase A: $( ((TEACHER == 0)) || echo "the teacher ($TEACHER_SECONDS s) and ")${A_MODELS[*]} ($AB s) side by side, caps $CAP updates"
pids=()
for m in "${A_MODELS[@]}"; do gl_start "$m"; done
rc=0
if ((TEACHER == 1)); then
  gl_run teacher "${CMD[teacher]}" $((SECS[teacher] + 120)) || rc=$?
fi
if ((rc == 0 && ${#B_MODELS[@]} > 0)); then
  gl_log "phase B: SVD transfers from the teacher, then ${B_MODELS[*]} ($STUDENT_SECONDS s)"
  for m in "${B_MODELS[@]}"; do
    if [[ "$DRY_RUN" == 1 ]]; then
      echo "+ ${CONVERT[$m]}"
    else
      log="$SAVE_ROOT/${CONVERT_LOG[$m]}"
      eval "${CONVERT[$m]}" >"$log" 2>&1 || { tail -n 5 "$log" >&2; rc=1; }
    fi
  done
  if ((rc == 0)); then
    for m in "${B_MODELS[@]}"; do gl_start "$m"; done
  fi
fi
for p in "${pids[@]}"; do wait "$p" || rc=1; done
((rc == 0)) || gl_log "a training or transfer failed: packing what there is"

# pack: each model's best checkpoint without optimizer state, weights in float16; the logs
names=()
for m in "${MODELS[@]}"; do
  if [[ "$DRY_RUN" == 1 || -f "$SAVE_ROOT/$m/checkpoint_best.pt" ]]; then names+=("$m"); fi
done
if [[ "$DRY_RUN" == 1 ]]; then
  echo "+ $PYTHON $HERE/half_checkpoint.py pack $SAVE_ROOT $OUT ${names[*]}"
  exit 0
fi
((${#names[@]} > 0)) && "$PYTHON" "$HERE/half_checkpoint.py" pack "$SAVE_ROOT" "$OUT" "${names[@]}" || rc=1
logs=()
for m in "${MODELS[@]}"; do
  [[ -f "$SAVE_ROOT/$m/train.log" ]] && logs+=("$m/train.log")
done
for f in "${CONVERT_LOG[@]}"; do [[ -f "$SAVE_ROOT/$f" ]] && logs+=("$f"); done
tar czf "$OUT/logs.tgz" -C "$SAVE_ROOT" machine.txt "${logs[@]}" || rc=1
ls -la "$OUT" >&2
exit "$rc"
